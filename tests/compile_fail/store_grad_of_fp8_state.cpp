// Compile-fail pair: reading the gradient of an FP8 scaling state leaf (a
// scale) from a store. The step updates the state once per step; it is never
// differentiated, so it has no gradient buffer, and the message says so
// rather than only that the leaf is not in wrt<...>. The corrected twin reads
// the weight's gradient (and the scale's value, which is readable).
// expect-error: ctg: no gradient path: an FP8 scaling state leaf
// expect-error-count: 1
#include <span>

#include <ctg/ctg.hpp>

using X = ctg::input<"x", ctg::f32, ctg::dyn, 16>;
using W = ctg::param<"w", ctg::f32, 16, 16>;
using SX = ctg::scaling::delayed<"x", ctg::precision::delayed<4>>;
using SW = ctg::scaling::delayed<"w", ctg::precision::delayed<4>>;
using SG = ctg::scaling::delayed<"g", ctg::precision::delayed<4>>;

int main() {
  auto y = ctg::fp8_matmul<ctg::f32, SG>(ctg::quantize<ctg::e4m3, SX>(X{}), ctg::quantize<ctg::e4m3, SW>(W{}));
  auto step = ctg::value_and_grad(ctg::mean(ctg::square(y)));
  ctg::cpu::device dev;
  auto store = ctg::make_store(dev, step);
  std::span<float> scale = store.param<SW::scale_leaf>();  // its value is readable
  (void)scale;
#ifndef CTG_CORRECTED
  auto g = store.grad<SW::scale_leaf>();
#else
  auto g = store.grad<W>();
#endif
  (void)g;
}
