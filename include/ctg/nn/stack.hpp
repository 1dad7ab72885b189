#pragma once
// nn::stack<N, Block>(x): N layers of one block as ONE graph node whose type
// does not depend on N (graph/stack.hpp defines the node and how it runs);
// nn::unrolled<N, Block>(x): the same layers as separate nodes, the reference
// a stack is tested against.
#include <ctg/graph/stack.hpp>

namespace ctg {

namespace nn {
using ctg::checkpointing;

// stack<N, Block>(x): Block<"layers.{i}">{}(carry) repeated N times.
// Block is a class template over a name prefix with a call operator over an
// expression, returning the same shape and dtype. Each layer is recomputed
// in backward (checkpointing::every_layer) unless Ckpt says none (or
// attention_scores: every layer's values kept, as with none, but for what
// the block's own checkpoint regions compute again).
template <std::size_t N, template <fixed_string> class Block, checkpointing Ckpt = checkpointing::every_layer,
          expr X>
constexpr auto stack(X) {
  using out = decltype(Block<"layers.{i}">{}(stack_carry_t<X>{}));
  if constexpr (detail::check_block<N, node_t<X>, out, Ckpt>())
    return node_t<stack_node<N, node_t<X>, out, Ckpt>>{};
  else
    return node_t<failed_node<typename X::dims, typename X::dtype, node_t<X>>>{};  // (reported)
}

}  // namespace nn

namespace detail {
template <std::size_t I>
consteval auto layer_prefix() {
  constexpr std::size_t digits = [] {
    std::size_t d = 1;
    for (std::size_t v = I; v >= 10; v /= 10) ++d;
    return d;
  }();
  fixed_string<7 + digits + 1> s;
  const char* head = "layers.";
  for (std::size_t i = 0; i < 7; ++i) s.chars[i] = head[i];
  std::size_t v = I;
  for (std::size_t i = digits; i-- > 0; v /= 10) s.chars[7 + i] = static_cast<char>('0' + v % 10);
  return s;
}
template <template <fixed_string> class Block, std::size_t I, std::size_t N, class X>
constexpr auto unrolled_from(X x) {
  if constexpr (I == N) return x;
  else return unrolled_from<Block, I + 1, N>(Block<layer_prefix<I>()>{}(x));
}
}  // namespace detail

namespace nn {
// unrolled<N, Block>(x): the same N layers as separate nodes named "layers.0",
// "layers.1", ...: the reference a stack is tested against (its type, and its
// compile time, grow with N).
template <std::size_t N, template <fixed_string> class Block, expr X>
constexpr auto unrolled(X x) {
  return detail::unrolled_from<Block, 0, N>(x);
}
}  // namespace nn

}  // namespace ctg
