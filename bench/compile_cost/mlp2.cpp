// Compile-cost probe: a 2-layer MLP, forward + backward, stepped on the CPU.
#include <ctg/ctg.hpp>

using X = ctg::input<"x", ctg::f32, ctg::dyn, 256>;
using W1 = ctg::param<"mlp.w1", ctg::f32, 256, 1024>;
using B1 = ctg::param<"mlp.b1", ctg::f32, 1024>;
using W2 = ctg::param<"mlp.w2", ctg::f32, 1024, 256>;
using B2 = ctg::param<"mlp.b2", ctg::f32, 256>;

template <class In>
auto mlp(In x) {
  auto h = ctg::silu(ctg::matmul(x, ctg::cast<ctg::bf16>(W1{})) + ctg::cast<ctg::bf16>(B1{}));
  return ctg::matmul(h, ctg::cast<ctg::bf16>(W2{})) + ctg::cast<ctg::bf16>(B2{});
}

int main() {
  auto loss = ctg::mean(ctg::square(ctg::cast<ctg::f32>(mlp(ctg::cast<ctg::bf16>(X{})))));
  auto step = ctg::value_and_grad(loss, ctg::wrt<W1, B1, W2, B2>);
  ctg::cpu::device dev;
  auto store = ctg::make_store(dev, step);
  static float x[4 * 256];
  return step(store, ctg::feed<X>(x, 4)) > 0;
}
