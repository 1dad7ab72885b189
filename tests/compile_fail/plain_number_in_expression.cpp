// Compile-fail pair: a plain C++ number in an expression (x * 0.5f, h + 1e-6f).
// Constants are compile-time literals in ctg, and the bare "no match for
// operator*" did not say so; the error names the fix. The corrected twin
// writes ctg::lit<...>.
// expect-error: ctg: a plain number in an expression: .*write ctg::lit<0.5>
// expect-error-count: 1
#include <ctg/ctg.hpp>

using X = ctg::input<"x", ctg::f32, ctg::dyn, 8>;
using W = ctg::param<"w", ctg::f32, 8, 8>;

int main() {
  auto h = ctg::matmul(X{}, W{});
#ifndef CTG_CORRECTED
  auto y = h * 0.5f;  // the mistake
#else
  auto y = h * ctg::lit<0.5>;
#endif
  auto loss = ctg::mean(ctg::square(y));
  auto step = ctg::value_and_grad(loss);
  ctg::cpu::device dev;
  auto store = ctg::make_store(dev, step);
  (void)store;
}
