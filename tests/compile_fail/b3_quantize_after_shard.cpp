// Seed B3: a model quantized after a sharding wrapper took its weights. Each
// rank's quantizer would see only its own slice of the weight (its own amax,
// its own scale) must not compile. The corrected twin quantizes the whole
// weight and shards the quantized tensor (one scale; fp8 bytes travel).
// The usual data-parallel lines after the mistake add no error of their own
// (a mistake's store, its data_parallel and sharded_adamw take every use).
// expect-error: ctg: quantize before shard
// expect-error-count: 1
#include <ctg/ctg.hpp>
#include <ctg/dist/checkpoint.hpp>

using X = ctg::input<"x", ctg::f32, ctg::dyn, 8>;
using W = ctg::param<"w", ctg::f32, 8, 4>;
template <ctg::fixed_string Name>
using S = ctg::scaling::delayed<Name, ctg::precision::delayed<>>;

int main() {
  auto xq = ctg::quantize<ctg::e4m3, S<"x">>(X{});
#ifndef CTG_CORRECTED
  auto wq = ctg::quantize<ctg::e4m3, S<"w">>(ctg::dist::shard(W{}));
#else
  auto wq = ctg::dist::shard(ctg::quantize<ctg::e4m3, S<"w">>(W{}));
#endif
  auto step = ctg::value_and_grad(ctg::sum(ctg::fp8_matmul<ctg::f32, S<"g">>(xq, wq)));
  ctg::cpu::device dev;
  auto store = ctg::make_store(dev, step);
  ctg::dist::data_parallel dp(store, ctg::dist::emulate{2});
  dp.accumulate(2);
  ctg::dist::sharded_adamw opt(dp, {.lr = 1e-3f});
  std::vector<float> x(16);
  step(store, ctg::feed<X>(x, 2));
  opt.step();
  opt.gather_whole_parameters();
  const std::size_t resident = dp.resident_bytes() + dp.gathered_bytes();
  (void)resident;
  ctg::dist::save("b3_quantize_after_shard.ctg", dp, opt);
  return 0;
}
