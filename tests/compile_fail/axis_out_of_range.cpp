// Compile-fail pair: a reduction over an axis the tensor does not have is
// one error (the failed node stops the cascade: no "loss must be a scalar"
// after it). The corrected twin names an axis it has, then sums the rest.
// expect-error: ctg: axis out of range for this tensor's rank
// expect-error-count: 1
#include <ctg/ctg.hpp>

using W = ctg::param<"w", ctg::f32, 4, 3>;

int main() {
#ifndef CTG_CORRECTED
  auto y = ctg::sum<2>(W{});
#else
  auto y = ctg::sum(ctg::sum<1>(W{}));
#endif
  auto step = ctg::value_and_grad(y);
  ctg::cpu::device dev;
  auto store = ctg::make_store(dev, step);
  (void)store;
}
