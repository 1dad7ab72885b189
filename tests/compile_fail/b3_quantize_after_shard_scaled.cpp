// Seed B3 through arithmetic: a sharded weight scaled (or transposed, or
// added to another tensor) before its quantizer still gives each rank the
// amax of its own slice: must not compile. (The check followed one-child
// elementwise nodes only, so `shard(w) * lit<0.5>`, a two-child product
// with a literal, compiled.) The corrected twin quantizes the whole weight,
// then shards the quantized tensor (dist::shard takes a leaf or its
// quantizer: a scale belongs in the weight's values).
// expect-error: ctg: quantize before shard
// expect-error-count: 1
#include <ctg/ctg.hpp>

using X = ctg::input<"x", ctg::f32, ctg::dyn, 8>;
using W = ctg::param<"w", ctg::f32, 8, 4>;
template <ctg::fixed_string Name>
using S = ctg::scaling::delayed<Name, ctg::precision::delayed<>>;

int main() {
  auto xq = ctg::quantize<ctg::e4m3, S<"x">>(X{});
#ifndef CTG_CORRECTED
  auto wq = ctg::quantize<ctg::e4m3, S<"w">>(ctg::dist::shard(W{}) * ctg::lit<0.5>);
#else
  auto wq = ctg::dist::shard(ctg::quantize<ctg::e4m3, S<"w">>(W{}));
#endif
  auto step = ctg::value_and_grad(ctg::sum(ctg::fp8_matmul<ctg::f32, S<"g">>(xq, wq)));
  ctg::cpu::device dev;
  auto store = ctg::make_store(dev, step);
  (void)store;
  return 0;
}
