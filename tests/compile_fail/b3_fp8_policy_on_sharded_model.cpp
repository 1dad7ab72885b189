// Seed B3 at the policy level: the FP8 policy applied to a model whose weight
// is already sharded (in PyTorch: converting to float8 after fully_shard).
// The policy would quantize a sharded leaf: must not compile, with the same
// message. The corrected twin quantizes the whole weight first and shards
// the quantized tensor, as the policy's product does for an unsharded leaf.
// expect-error: ctg: quantize before shard
// expect-error-count: 1
#include <ctg/ctg.hpp>

using X = ctg::input<"x", ctg::f32, ctg::dyn, 8>;
using W = ctg::param<"w", ctg::f32, 8, 4>;
using R = ctg::precision::delayed<>;
using P = ctg::precision::fp8<R>;
template <ctg::fixed_string Name>
using S = ctg::scaling::delayed<Name, R>;

int main() {
#ifndef CTG_CORRECTED
  auto y = ctg::precision::weight_matmul<P>(X{}, ctg::dist::shard(W{}));
#else
  auto xq = ctg::quantize<ctg::e4m3, S<"w.fp8_input">>(ctg::cast<ctg::bf16>(X{}));
  auto wq = ctg::dist::shard(ctg::quantize<ctg::e4m3, S<"w.fp8_weight">>(W{}));
  auto y = ctg::fp8_matmul<ctg::bf16, S<"w.fp8_grad">>(xq, wq);
#endif
  auto step = ctg::value_and_grad(ctg::sum(ctg::cast<ctg::f32>(y)));
  ctg::cpu::device dev;
  auto store = ctg::make_store(dev, step);
  (void)store;
  return 0;
}
