// Seed B3 at the policy level, the other way round: precision::sharded<fp8>
// shards each weight it quantizes (shard(quantize(w))), so a weight the
// model already sharded would be quantized after its sharding: must not
// compile, with the message quantize gives. (It compiled, as
// shard(quantize(shard(w))).) The corrected twin hands the policy the
// whole weight.
// expect-error: ctg: quantize before shard
// expect-error-count: 1
#include <ctg/ctg.hpp>

using X = ctg::input<"x", ctg::f32, ctg::dyn, 8>;
using W = ctg::param<"w", ctg::f32, 8, 4>;
using P = ctg::precision::sharded<ctg::precision::fp8<ctg::precision::delayed<>>>;

int main() {
#ifndef CTG_CORRECTED
  auto y = ctg::precision::weight_matmul<P>(X{}, ctg::dist::shard(W{}));
#else
  auto y = ctg::precision::weight_matmul<P>(X{}, W{});
#endif
  auto step = ctg::value_and_grad(ctg::sum(ctg::cast<ctg::f32>(y)));
  ctg::cpu::device dev;
  auto store = ctg::make_store(dev, step);
  (void)store;
  return 0;
}
