// unsqueeze<axis> of a rank-2 tensor takes an axis in [-3, 2]: 5 must not
// compile, with one error (a zero static dim and a reshape mismatch
// followed). The corrected twin appends the new dim.
// expect-error: ctg: axis out of range for unsqueeze
// expect-error-count: 1
#include <ctg/ctg.hpp>

using X = ctg::input<"x", ctg::f32, ctg::dyn, 4>;
using W = ctg::param<"w", ctg::f32, 4, 3>;

int main() {
#ifndef CTG_CORRECTED
  auto y = ctg::unsqueeze<5>(ctg::matmul(X{}, W{}));  // the mistake
#else
  auto y = ctg::unsqueeze<2>(ctg::matmul(X{}, W{}));
#endif
  auto step = ctg::value_and_grad(ctg::mean(ctg::square(y)));
  ctg::cpu::device dev;
  auto store = ctg::make_store(dev, step);
  (void)store;
}
