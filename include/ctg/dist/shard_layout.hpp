#pragma once
// Dim-0 shards, as FSDP2 cuts them: a leaf of R rows on W ranks gives each
// rank ceil(R / W) rows, padded to that size on every rank (so every block
// of a collective has one size); rank r holds rows [r * s, min(R, (r+1) * s)),
// which may be empty (1 row on 3 ranks: ranks 1 and 2 hold none).
// A rank's block packs its shard of every trainable leaf, in the step's
// wrt order, each padded to its shard size.
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

// Where each trainable leaf of Step (in Step::wrt order) sits in a rank's
// block, for a world of W ranks.
template <class Step>
struct block_layout {
  using trainable = typename Step::wrt;
  static constexpr std::size_t leaves = trainable::size;
  struct leaf_slot {
    shard_rows shard;
    std::size_t row_elements = 0;  // elements per row (numel / rows)
    std::size_t offset = 0;        // in the block, in elements
  };
  std::array<leaf_slot, leaves + 1> leaf{};
  std::size_t elements = 0;  // one rank's block, padding included

  static block_layout of(int world) {
    block_layout b;
    [&]<class... Ls>(tl::list<Ls...>) {
      std::size_t k = 0;
      auto one = [&]<class L>(std::type_identity<L>) {
        constexpr std::int64_t rows = [] {
          if constexpr (L::dims::rank == 0) return std::int64_t(1);  // (a scalar: one row)
          else return L::dims::dims[0];
        }();
        leaf_slot& s = b.leaf[k++];
        s.shard = shard_rows::of(rows, world);
        s.row_elements = static_cast<std::size_t>(L::dims::static_numel / rows);
        s.offset = b.elements;
        b.elements += static_cast<std::size_t>(s.shard.per_rank) * s.row_elements;
      };
      (one(std::type_identity<Ls>{}), ...);
      (void)one;
    }(trainable{});
    return b;
  }
};

}  // namespace ctg::dist
