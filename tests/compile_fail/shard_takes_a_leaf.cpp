// dist::shard splits a leaf (or a leaf quantized whole) over the ranks; a
// computed value is not held anywhere to be split: must not compile. The
// corrected twin shards the leaf and computes from it.
// expect-error: ctg: shard takes a trainable or frozen leaf, or one quantized whole
// expect-error-count: 1
#include <ctg/ctg.hpp>

using X = ctg::input<"x", ctg::f32, ctg::dyn, 8>;
using W = ctg::param<"w", ctg::f32, 8, 4>;

int main() {
#ifndef CTG_CORRECTED
  auto w = ctg::dist::shard(W{} * W{});
#else
  auto ws = ctg::dist::shard(W{});
  auto w = ws * ws;
#endif
  auto step = ctg::value_and_grad(ctg::sum(ctg::matmul(X{}, w)));
  ctg::cpu::device dev;
  auto store = ctg::make_store(dev, step);
  (void)store;
  return 0;
}
