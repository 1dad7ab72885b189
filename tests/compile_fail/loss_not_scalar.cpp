// Compile-fail pair: differentiating a loss that is not a scalar. A per-example loss
// ([N,1] after a kept-axis reduction) must be reduced first; value_and_grad rejects it.
// The corrected twin takes the mean over the batch.
// expect-error: ctg: loss must be a scalar
// expect-error-count: 1
#include <ctg/ctg.hpp>

using X = ctg::input<"x", ctg::f32, ctg::dyn, 8>;
using W = ctg::param<"w", ctg::f32, 8, 4>;

int main() {
  auto per_example = ctg::sum<-1>(ctg::square(ctg::matmul(X{}, W{})));  // [N, 1]
#ifndef CTG_CORRECTED
  auto loss = per_example;
#else
  auto loss = ctg::mean(per_example);
#endif
  auto step = ctg::value_and_grad(loss, ctg::wrt<W>);
  ctg::cpu::device dev;
  auto store = ctg::make_store(dev, step);
  (void)store;
}
