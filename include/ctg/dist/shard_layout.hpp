#pragma once
// Dim-0 shards, as FSDP2 cuts them: a leaf of R rows on W ranks gives each
// rank ceil(R / W) rows, padded to that size on every rank (so every block
// of a collective has one size); rank r holds rows [r * s, min(R, (r+1) * s)),
// which may be empty (1 row on 3 ranks: ranks 1 and 2 hold none).
//
// A stacked leaf of nn::stack ([layers, R, ...]) is cut per layer, on each
// layer's own dim 0, as FSDP2 cuts each block it wraps: rank r holds rows
// [r * s, ...) of every layer, so any one layer can be gathered from every
// rank's piece of it (dist::fsdp gathers layer by layer).
//
// A rank's block packs its shard of every trainable leaf, in the step's wrt
// order, each padded to its shard size; within a leaf's part, the rank's
// rows of layer 0, then of layer 1, ... (held rows only, the padding last).
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>

#include <ctg/graph/step.hpp>

namespace ctg::dist {

struct shard_rows {
  std::int64_t per_rank = 0;  // ceil(rows / world): every rank's padded shard
  std::int64_t rows = 0;

  static constexpr shard_rows of(std::int64_t rows, int world) {
    return {world > 0 ? (rows + world - 1) / world : 0, rows};
  }
  constexpr std::int64_t begin(int rank) const { return std::min(rows, rank * per_rank); }
  constexpr std::int64_t end(int rank) const { return std::min(rows, (rank + 1) * per_rank); }
  constexpr std::int64_t held(int rank) const { return end(rank) - begin(rank); }
};

namespace detail {
inline constexpr std::size_t none = ~std::size_t(0);
// The node index of the stack whose stacked leaf L is (a child of a stack
// node of the step with nodes Ns...), else `none`.
template <class L, class... Ns>
consteval std::size_t stack_of_leaf(tl::list<Ns...>) {
  std::size_t found = none, i = 0;
  auto one = [&]<class N>(std::type_identity<N>) {
    if constexpr (N::kind == node_kind::stack)
      if (tl::contains<L, typename N::children>::value) found = i;
    ++i;
  };
  (one(std::type_identity<Ns>{}), ...);
  (void)one;
  return found;
}
// The layer count of the stack whose stacked leaf L is, else 0.
template <class L, class Nodes>
consteval std::size_t stacked_layers() {
  constexpr std::size_t stack = stack_of_leaf<L>(Nodes{});
  if constexpr (stack == none) return 0;
  else return tl::at_t<stack, Nodes>::layers;
}
}  // namespace detail

// Where each trainable leaf of Step (in Step::wrt order; or each of Leaves)
// sits in a rank's block, for a world of W ranks.
template <class Step, class Leaves = typename Step::wrt>
struct block_layout {
  using trainable = Leaves;
  static constexpr std::size_t leaves = trainable::size;
  // One contiguous piece of a rank's shard: `n` elements at `whole` in the
  // leaf, at `packed` in the rank's part of the block (and of any state kept
  // per shard element, such as AdamW's moments).
  struct run {
    std::size_t whole = 0, packed = 0, n = 0;
  };
  struct leaf_slot {
    shard_rows shard;              // the rows of one piece (a layer's, for a stacked leaf)
    std::size_t row_elements = 0;  // elements per row
    std::size_t pieces = 1;        // layers of a stacked leaf, else 1
    std::size_t piece_elements = 0;
    std::size_t offset = 0;        // in the block, in elements

    // Elements rank r holds, and its part of every block (padding included).
    constexpr std::size_t held_elements(int r) const { return pieces * static_cast<std::size_t>(shard.held(r)) * row_elements; }
    constexpr std::size_t part_elements() const { return pieces * static_cast<std::size_t>(shard.per_rank) * row_elements; }
    // Rank r's rows of piece p.
    constexpr run run_of(int r, std::size_t p) const {
      const std::size_t n = static_cast<std::size_t>(shard.held(r)) * row_elements;
      return {p * piece_elements + static_cast<std::size_t>(shard.begin(r)) * row_elements, p * n, n};
    }
    // f(run) for each piece of rank r's shard, in order.
    template <class F>
    constexpr void for_each_run(int r, F&& f) const {
      for (std::size_t p = 0; p < pieces; ++p) f(run_of(r, p));
    }
  };
  std::array<leaf_slot, leaves + 1> leaf{};
  std::size_t elements = 0;  // one rank's block, padding included

  static block_layout of(int world) {
    block_layout b;
    [&]<class... Ls>(tl::list<Ls...>) {
      std::size_t k = 0;
      auto one = [&]<class L>(std::type_identity<L>) {
        constexpr std::size_t layers = detail::stacked_layers<L, typename Step::nodes>();
        constexpr std::int64_t pieces = layers ? static_cast<std::int64_t>(layers) : 1;
        constexpr std::int64_t rows = [] {
          constexpr std::size_t row_dim = layers ? 1 : 0;
          if constexpr (L::dims::rank <= row_dim) return std::int64_t(1);  // (a scalar piece: one row)
          else return L::dims::dims[row_dim];
        }();
        leaf_slot& s = b.leaf[k++];
        s.shard = shard_rows::of(rows, world);
        s.pieces = static_cast<std::size_t>(pieces);
        s.piece_elements = static_cast<std::size_t>(L::dims::static_numel / pieces);
        s.row_elements = static_cast<std::size_t>(L::dims::static_numel / (pieces * rows));
        s.offset = b.elements;
        b.elements += s.part_elements();
      };
      (one(std::type_identity<Ls>{}), ...);
      (void)one;
    }(trainable{});
    return b;
  }
};

}  // namespace ctg::dist
