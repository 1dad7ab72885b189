// Compile-fail pair: the same input fed twice in one step: which of the two
// would the step read? The corrected twin feeds each input once.
// expect-error: ctg: an input is fed twice
// expect-error-count: 1
#include <ctg/ctg.hpp>
#include <vector>

using X = ctg::input<"x", ctg::f32, ctg::dyn, 8>;
using Y = ctg::input<"y", ctg::f32, ctg::dyn, 8>;
using W = ctg::param<"w", ctg::f32, 8, 4>;

int main() {
  auto step = ctg::value_and_grad(ctg::mean(ctg::square(ctg::matmul(X{} - Y{}, W{}))), ctg::wrt<W>);
  ctg::cpu::device dev;
  auto store = ctg::make_store(dev, step);
  std::vector<float> x(2 * 8, 0.5f), y(2 * 8, 0.25f);
#ifndef CTG_CORRECTED
  float l = step(store, ctg::feed<X>(x, 2), ctg::feed<Y>(y, 2), ctg::feed<X>(x, 2));  // the mistake
#else
  float l = step(store, ctg::feed<X>(x, 2), ctg::feed<Y>(y, 2));
#endif
  (void)l;
}
