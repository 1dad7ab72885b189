#pragma once
// Sharding as a type transform on leaves (FSDP2-style: each rank holds a
// dim-0 shard of a leaf; DESIGN.md §4.5). In the graph a sharded value is the
// whole tensor, so the math is that of the unsharded model; what the type
// decides is the order of quantization and sharding (seed B3):
//   shard(w)              sharded_leaf<W>: W held in shards.
//   shard(quantize(w))    a quantize node whose fp8 payload is sharded: the
//                         quantized tensor owns the scale (the amax of the
//                         whole tensor, over every rank's shard), and only
//                         fp8 bytes need to travel to rebuild it.
//   quantize(shard(w))    does not compile (ctg: quantize before shard): a
//                         quantizer of a sharded leaf sees one rank's slice,
//                         so its scale differs per rank (the seed's illegal
//                         memory access was the run-time form of this).
// dist::shard (dist/shard.hpp) is what users call.
#include <ctg/graph/node.hpp>

namespace ctg {

template <class L>
struct sharded_leaf : L {
  static_assert(L::kind == node_kind::leaf, "ctg: internal: sharded_leaf takes a leaf");
  static constexpr bool sharded = true;
  template <dim_t... D>  // (nn::stack re-dims its leaves: a stacked shard is a shard)
  using with_dims = sharded_leaf<typename L::template with_dims<D...>>;
};

// Is N sharded: a sharded leaf, or a quantized tensor whose payload is.
template <class N>
inline constexpr bool is_sharded_v = requires { requires N::sharded; };

namespace detail {
// Does a quantizer of X see a sharded leaf's values: X is one, or is made
// element by element (of any arity: a cast, a scale, a sum with another
// tensor), or by moving elements (a transpose, a view, rows gathered) from
// a value that does? A product or a reduction mixes every element of its
// operands: the quantizer then sees whole values.
template <class X>
consteval bool sees_a_shard() {
  if constexpr (X::kind == node_kind::leaf) return is_sharded_v<X>;
  else if constexpr (X::kind == node_kind::elementwise || X::kind == node_kind::transpose ||
                     X::kind == node_kind::view || X::kind == node_kind::gather)
    return []<class... C>(tl::list<C...>) { return (false || ... || sees_a_shard<C>()); }(typename X::children{});
  else return false;
}
}  // namespace detail

}  // namespace ctg
