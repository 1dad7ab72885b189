// -ffast-math (-Ofast, -ffinite-math-only) folded every NaN and inf check
// to "finite" and broke exp's range reduction: a non-finite step wrote its
// gradients, AdamW wrote NaN, exp(-0.3) was 1, all without an error. Built
// with such a flag (the test's options), ctg's first header says so, and
// nothing more. The corrected twin is built without it.
// expect-error: ctg: -ffast-math \(and -Ofast, -ffinite-math-only, -fassociative-math, -freciprocal-math\) would fold ctg's NaN and inf checks away
// expect-error-count: 1
#include <ctg/ctg.hpp>

using X = ctg::input<"x", ctg::f32, ctg::dyn, 4>;

int main() {
  auto step = ctg::forward(ctg::sum(X{} * ctg::lit<0.5>));
  (void)step;
}
