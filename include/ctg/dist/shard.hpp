#pragma once
// dist::shard: sharding as a type transform on leaves (graph/sharding.hpp says
// what the types mean and why the order matters).
//   auto w  = ctg::dist::shard(W{});                               // W in dim-0 shards
//   auto wq = ctg::dist::shard(ctg::quantize<ctg::e4m3, S>(W{}));  // quantized, then sharded
//   ctg::quantize<ctg::e4m3, S>(ctg::dist::shard(W{}));            // ctg: quantize before shard
// A store runs a sharded model as one rank holding every shard: the values,
// gradients and optimizer state are the unsharded model's.
#include <ctg/graph/fp8.hpp>
#include <ctg/graph/sharding.hpp>

namespace ctg::dist {

namespace detail {
template <class L>
inline constexpr bool shardable_leaf = L::kind == node_kind::leaf && !is_sharded_v<L> &&
                                       (L::role == leaf_role::param || L::role == leaf_role::frozen);
template <class X>
consteval bool shardable() {
  if constexpr (X::kind == node_kind::leaf) return shardable_leaf<X>;
  else if constexpr (X::kind == node_kind::quantize) return !is_sharded_v<X> && shardable_leaf<tl::at_t<0, typename X::children>>;
  else return false;
}
}  // namespace detail

// shard(w) for a trainable or frozen leaf w; shard(quantize<Fmt, S>(w)) for
// one quantized whole (its fp8 payload is what is sharded).
template <expr X>
constexpr auto shard(X) {
  constexpr bool ok = detail::shardable<X>();
  static_assert(ok, "ctg: shard takes a trainable or frozen leaf, or one quantized whole (shard(quantize<Fmt, "
                    "S>(w))), not yet sharded");
  if constexpr (!ok) return X{};
  else if constexpr (X::kind == node_kind::leaf) return sharded_leaf<X>{};
  else
    return node_t<quantize_node<typename X::dtype, tl::at_t<0, typename X::children>, typename X::scaling, true>>{};
}

}  // namespace ctg::dist
