// ctg reports errors as exceptions (ctg::error). Built with -fno-exceptions
// (the test's option), the first error is ctg's, not "exception handling
// disabled" deep in a header. The corrected twin is built with exceptions.
// expect-error: ctg: reports errors as exceptions \(ctg::error\)
#include <ctg/ctg.hpp>

using X = ctg::input<"x", ctg::f32, ctg::dyn, 4>;

int main() {
  auto step = ctg::forward(ctg::sum(X{} * ctg::lit<0.5>));
  (void)step;
}
