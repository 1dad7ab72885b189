// Compile-cost probe: CTG_BLOCKS residual blocks x = x + f(x), forward + backward.
#include <ctg/ctg.hpp>

#ifndef CTG_BLOCKS
#define CTG_BLOCKS 2
#endif

using X = ctg::input<"x", ctg::f32, ctg::dyn, 64>;
template <int I>
using W = ctg::param<"w", ctg::f32, 64, 64>;  // one shared weight: the probe measures graph depth

template <class In>
auto block(In x) {
  return x + ctg::tanh(ctg::matmul(x, W<0>{})) * ctg::lit<0.5>;
}
template <int N, class In>
auto blocks(In x) {
  if constexpr (N == 0) return x;
  else return blocks<N - 1>(block(x));
}

int main() {
  auto loss = ctg::mean(ctg::square(blocks<CTG_BLOCKS>(X{})));
  auto step = ctg::value_and_grad(loss, ctg::wrt<W<0>>);
  ctg::cpu::device dev;
  auto store = ctg::make_store(dev, step);
  static float x[4 * 64];
  return step(store, ctg::feed<X>(x, 4)) > 0;
}
