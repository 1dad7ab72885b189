// Compile-fail pair: softmax along an axis the tensor does not have is one
// error (its max, sum and exp each reported it: three). The corrected twin
// names an axis the tensor has.
// expect-error: ctg: axis out of range for this tensor's rank
// expect-error-count: 1
#include <ctg/ctg.hpp>
#include <vector>

using X = ctg::input<"x", ctg::f32, ctg::dyn, 8>;
using W = ctg::param<"w", ctg::f32, 8, 8>;

int main() {
#ifndef CTG_CORRECTED
  auto loss = ctg::sum(ctg::softmax<2>(ctg::matmul(X{}, W{})) * X{});
#else
  auto loss = ctg::sum(ctg::softmax<1>(ctg::matmul(X{}, W{})) * X{});
#endif
  auto step = ctg::value_and_grad(loss);
  ctg::cpu::device dev;
  auto store = ctg::make_store(dev, step);
  std::vector<float> x(16);
  step(store, ctg::feed<X>(x, 2));
}
