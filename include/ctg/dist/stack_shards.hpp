#pragma once
// dist::fsdp's parameter memory (dist/data_parallel.hpp uses it): the
// parameters of every nn::stack held in shards only, each layer's rows on
// each rank (shard_layout.hpp), and gathered layer by layer as the store
// runs the stack (exec/replica_group.hpp: gather_layer, layer_slice,
// layer_provided).
//
// A layer's gather is one all-gather: each rank sends its rows of that layer
// of every trainable and frozen leaf of the stack, padded to the shard size. A weight
// whose one use in the block is shard(quantize<Fmt, S>(w)) with delayed
// scaling travels as fp8 bytes instead, cast by each rank with the layer's
// scale, followed by its rows' amax: the block's quantize node takes the
// gathered payload, the amax folded in rank order, and that scale as its
// value, bit for bit the cast of the whole slice.
//
// One process playing every rank (emulate{W}) packs and places every rank's
// block in rank order, as if received: the same bytes in the same order.
#include <array>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <span>
#include <type_traits>
#include <vector>

#include <ctg/core/fp8_scaling.hpp>
#include <ctg/dist/communicator.hpp>
#include <ctg/dist/shard_layout.hpp>
#include <ctg/exec/buffers.hpp>
#include <ctg/exec/replica_group.hpp>
#include <ctg/graph/sharding.hpp>
#include <ctg/graph/stack.hpp>

namespace ctg::dist {

// Parameters sharded as FSDP2 shards them (dist::data_parallel(store, comm, fsdp{})).
struct fsdp {
  // Drop a layer's gathered slices after its forward and gather them again
  // for its backward (FSDP2's default); false: keep them until the backward.
  bool reshard_after_forward = true;
};

namespace detail {
// Is every parameter of a stack (trainable or frozen) read by that stack
// alone? dist::fsdp frees the store's whole copy and gathers each layer's
// slices inside the stack that reads them: a second stack of the same block
// (shared weights), or a node outside the stack, read the freed copy (a crash).
template <class... Ns>
consteval bool stack_params_read_by_their_stack_only(tl::list<Ns...>) {
  bool ok = true;
  auto check = [&]<class L>(std::type_identity<L>) {
    if constexpr (is_leaf_v<L>) {
      if constexpr (L::role == leaf_role::param || L::role == leaf_role::frozen) {
        std::size_t uses = 0, stacks = 0;
        ((tl::contains<L, typename Ns::children>::value ? (++uses, stacks += Ns::kind == node_kind::stack) : 0), ...);
        ok = ok && (stacks == 0 || uses == 1);
      }
    }
  };
  (check(std::type_identity<Ns>{}), ...);
  (void)check;
  return ok;
}

// The node index of leaf L's one use when that use is shard(quantize<Fmt,
// S>(L)) with delayed scaling, else `none` (then L travels in its dtype).
template <class L, class... Ns>
consteval std::size_t sole_sharded_quantizer(tl::list<Ns...>) {
  std::size_t found = none, uses = 0, i = 0;
  auto one = [&]<class N>(std::type_identity<N>) {
    if (tl::contains<L, typename N::children>::value) {
      ++uses;
      if constexpr (N::kind == node_kind::quantize)
        if constexpr (is_sharded_v<N> && N::scaling::is_delayed) found = i;
    }
    ++i;
  };
  (one(std::type_identity<Ns>{}), ...);
  (void)one;
  return uses == 1 ? found : none;
}
// The frozen leaves of a stack node N (none for another node).
template <class L>
consteval bool frozen_leaf() {
  if constexpr (ctg::detail::stored_leaf<L>()) return L::role == leaf_role::frozen;
  else return false;
}
template <class N>
struct frozen_children {
  using type = tl::list<>;
};
template <class N>
  requires(N::kind == node_kind::stack)
struct frozen_children<N> {
  using type = decltype([]<class... Cs>(tl::list<Cs...>) {
    return tl::concat_t<std::conditional_t<frozen_leaf<Cs>(), tl::list<Cs>, tl::list<>>...>{};
  }(typename N::children{}));
};
// Every stack's frozen leaves, in the step's node order.
template <class... Ns>
auto frozen_of_stacks(tl::list<Ns...>) -> tl::concat_t<typename frozen_children<Ns>::type...>;

// n values cast to Fmt with `scale` into `out` (1 byte each); returns their
// amax (folded from 0 in order).
template <class Fmt, class T>
float quantize_rows(const T* rows, std::size_t n, float scale, std::byte* out) {
  float amax = 0.0f;
  for (std::size_t i = 0; i < n; ++i) {
    const float v = static_cast<float>(load_as<T>(rows[i]));
    amax = fp8_scaling::amax_combine(amax, std::fabs(v));
    const Fmt q = fp8_scaling::quantize<Fmt>(v, scale);
    std::memcpy(out + i, &q, 1);
  }
  return amax;
}
}  // namespace detail

template <step_store Store>
class stack_shards {
 public:
  using step_type = typename Store::step_type;
  // The leaves it may hold: the step's trainable leaves (in wrt order, so a
  // trainable leaf's index K is the same here), then the stacks' frozen ones.
  using leaves = tl::concat_t<typename step_type::wrt, decltype(detail::frozen_of_stacks(typename step_type::nodes{}))>;
  using layout_type = block_layout<step_type, leaves>;
  using quantized = replica_group::quantized;

  // Leaf K's stack node, or detail::none outside any stack.
  static constexpr std::array<std::size_t, leaves::size + 1> stack_of =
      []<std::size_t... K>(std::index_sequence<K...>) {
        return std::array<std::size_t, leaves::size + 1>{
            detail::stack_of_leaf<tl::at_t<K, leaves>>(typename step_type::nodes{})..., detail::none};
      }(std::make_index_sequence<leaves::size>{});
  template <std::size_t K>
  static constexpr bool stacked = stack_of[K] != detail::none;
  // Stacked leaf K's quantize node in its stack's block when its one use
  // there is shard(quantize<Fmt, S>(w)) with delayed scaling (its layers
  // gather as fp8 bytes), else detail::none.
  template <std::size_t K>
  static consteval std::size_t layer_quantizer_of() {
    if constexpr (!stacked<K>) {
      return detail::none;
    } else {
      using S = tl::at_t<stack_of[K], typename step_type::nodes>;
      using B = tl::at_t<tl::index_of<tl::at_t<K, leaves>, typename S::children>::value - 1, typename S::leaves>;
      return detail::sole_sharded_quantizer<B>(typename S::backward_step::nodes{});
    }
  }
  static constexpr std::array<std::size_t, leaves::size + 1> layer_quantizer =
      []<std::size_t... K>(std::index_sequence<K...>) {
        return std::array<std::size_t, leaves::size + 1>{layer_quantizer_of<K>()..., detail::none};
      }(std::make_index_sequence<leaves::size>{});
  template <std::size_t K>
  static constexpr bool layer_fp8 = layer_quantizer[K] != detail::none;

  // Shards [first, first + held) of a world of `world` ranks, taken from the
  // store's whole copy, which is then freed.
  stack_shards(Store& s, fsdp options, int world, int first, int held)
      : store_(s), layout_(layout_type::of(world)), options_(options), world_(world), first_(first), held_(held) {
    const bool keep = !options_.reshard_after_forward;
    std::size_t gathered = 0, fp8_values = 0;
    for_each_stacked([&]<std::size_t K, class L>() {
      const auto& leaf = layout_.leaf[K];
      const std::size_t copies = keep ? leaf.pieces : 1;
      resident_offset_[K] = resident_block_;
      resident_block_ += (leaf.part_elements() * sizeof(typename L::dtype) + 63) / 64 * 64;
      gathered_offset_[K] = gathered;
      gathered += (copies * this->template slice_bytes<K, L>() + 63) / 64 * 64;
      if constexpr (layer_fp8<K>) {
        fp8_value_index_[K] = fp8_values;
        fp8_values += copies;
      }
    });
    resident_.assign(resident_block_ * static_cast<std::size_t>(held_), std::byte{0});
    gathered_.assign(gathered, std::byte{0});
    fp8_values_.resize(fp8_values);
    reshard();
  }

  // Are there stacked parameters to hold?
  bool holds() const { return resident_block_ > 0; }
  // The rows of stacked leaf K in held shard h, packed as the shard's runs
  // (shard_layout.hpp), in the leaf's dtype.
  template <std::size_t K, class L>
  typename L::dtype* resident_rows(int h) {
    return reinterpret_cast<typename L::dtype*>(resident_.data() + static_cast<std::size_t>(h) * resident_block_ +
                                                resident_offset_[K]);
  }
  std::size_t resident_bytes() const { return resident_.size(); }
  std::size_t gathered_bytes() const { return gathered_.size(); }

  // This process's rows taken from the store's whole copy (a load, or a
  // write after make_whole()), and the copy freed.
  void reshard() {
    if (!holds() || !store_.holds_stacked_params()) return;
    for_each_stacked([&]<std::size_t K, class L>() {
      using T = typename L::dtype;
      const T* whole = store_.template param<L>().data();
      for (int h = 0; h < held_; ++h) {
        T* packed = this->template resident_rows<K, L>(h);
        layout_.leaf[K].for_each_run(first_ + h, [&](const auto& run) {
          if (run.n) std::memcpy(packed + run.packed, whole + run.whole, run.n * sizeof(T));
        });
      }
    });
    store_.release_stacked_params();
  }
  // The store's whole copy made again from every rank's shards (comm: null
  // when this process holds them all). Every rank calls it.
  void make_whole(communicator* comm) {
    if (!holds()) return;
    store_.hold_stacked_params();
    for_each_stacked([&]<std::size_t K, class L>() {
      using T = typename L::dtype;
      const auto& leaf = layout_.leaf[K];
      T* whole = store_.template param<L>().data();
      auto place = [&](int r, const T* packed) {
        leaf.for_each_run(r, [&](const auto& run) {
          if (run.n) std::memcpy(whole + run.whole, packed + run.packed, run.n * sizeof(T));
        });
      };
      if (!comm) {
        for (int r = 0; r < world_; ++r) place(r, this->template resident_rows<K, L>(r));
        return;
      }
      const std::size_t part = leaf.part_elements();
      std::vector<T> every(part * static_cast<std::size_t>(world_));
      comm->all_gather(std::span<const T>(this->template resident_rows<K, L>(0), part), std::span(every));
      for (int r = 0; r < world_; ++r) place(r, every.data() + static_cast<std::size_t>(r) * part);
    });
  }

  // Layer `layer` of stack node `stack`: every leaf's slice (comm:
  // null when this process holds every shard). Kept from the forward when
  // the options say so.
  void gather_layer(std::size_t stack, std::size_t layer, bool backward, communicator* comm) {
    const bool keep = !options_.reshard_after_forward;
    const std::size_t slot = keep ? layer : 0;
    std::size_t block = 0;  // this stack's part of a rank's block, in bytes
    for_each_stacked([&]<std::size_t K, class L>() {
      if (stack_of[K] != stack) return;
      current_[K] = gathered_.data() + gathered_offset_[K] + slot * this->template slice_bytes<K, L>();
      if constexpr (layer_fp8<K>) current_value_[K] = &fp8_values_[fp8_value_index_[K] + slot];
      block += this->template wire_bytes<K, L>();
    });
    if (backward && keep) return;  // (the forward gathered it)
    for_each_stacked([&]<std::size_t K, class L>() {
      if constexpr (layer_fp8<K>)
        if (stack_of[K] == stack) *current_value_[K] = {current_[K], 0.0f, this->template layer_scale<K>(layer)};
    });
    send_.resize(block);
    if (!comm) {
      for (int r = 0; r < world_; ++r) {
        pack(stack, layer, r, r, send_.data());
        unpack(stack, layer, r, send_.data());
      }
      return;
    }
    recv_.resize(block * static_cast<std::size_t>(world_));
    pack(stack, layer, first_, 0, send_.data());
    comm->all_gather(std::span<const std::byte>(send_), std::span(recv_));
    for (int r = 0; r < world_; ++r) unpack(stack, layer, r, recv_.data() + static_cast<std::size_t>(r) * block);
  }
  // The gathered layer's slice of stacked leaf node `leaf` (an fp8 weight's:
  // its payload, which only its quantize node reads, through layer_value), or null.
  const std::byte* layer_slice(std::size_t leaf) const {
    for (std::size_t k = 0; k < leaves::size; ++k)
      if (leaf_node[k] == leaf && stack_of[k] != detail::none) return current_[k];
    return nullptr;
  }
  // The gathered layer's value of quantize node `node` of stack `stack`'s block, or null.
  const quantized* layer_value(std::size_t stack, std::size_t node) const {
    for (std::size_t k = 0; k < leaves::size; ++k)
      if (stack_of[k] == stack && layer_quantizer[k] == node) return current_value_[k];
    return nullptr;
  }

 private:
  static constexpr std::array<std::size_t, leaves::size + 1> leaf_node =
      []<std::size_t... K>(std::index_sequence<K...>) {
        return std::array<std::size_t, leaves::size + 1>{
            tl::index_of<tl::at_t<K, leaves>, typename step_type::nodes>::value..., detail::none};
      }(std::make_index_sequence<leaves::size>{});

  // f.template operator()<K, L>() for every stacked leaf L it holds, K its index.
  template <class F>
  static void for_each_stacked(F&& f) {
    tl::for_each_indexed<leaves>([&]<std::size_t K, class L>() {
      if constexpr (stacked<K>) f.template operator()<K, L>();
    });
  }

  // A layer's slice of leaf K as gathered: its values, or its fp8 payload.
  template <std::size_t K, class L>
  std::size_t slice_bytes() const {
    return layout_.leaf[K].piece_elements * (layer_fp8<K> ? 1 : sizeof(typename L::dtype));
  }
  // Leaf K's part of a rank's block in a layer's gather: its padded rows of
  // the layer, in its dtype, or in fp8 followed by their amax.
  template <std::size_t K, class L>
  std::size_t wire_bytes() const {
    const std::size_t rows = static_cast<std::size_t>(layout_.leaf[K].shard.per_rank) * layout_.leaf[K].row_elements;
    if constexpr (layer_fp8<K>) return rows + sizeof(float);
    else return rows * sizeof(typename L::dtype);
  }
  template <std::size_t K>
  using stack_node = tl::at_t<stack_of[K], typename step_type::nodes>;
  template <std::size_t K>
  using quantizer_node = tl::at_t<layer_quantizer[K], typename stack_node<K>::backward_step::nodes>;
  // The scale layer `layer`'s quantize node of leaf K casts with: its
  // delayed scaling state's, one per layer in the stacked state leaf.
  template <std::size_t K>
  float layer_scale(std::size_t layer) {
    using S = stack_node<K>;
    using scale = typename ctg::detail::stacked_leaf<S::layers, typename quantizer_node<K>::scaling::scale_leaf>::type;
    const auto all = store_.template param<scale>();
    return all[layer * (all.size() / S::layers)];
  }

  // Rank r's block of a layer's gather of stack `stack`, from held shard h.
  void pack(std::size_t stack, std::size_t layer, int r, int h, std::byte* out) {
    std::size_t at = 0;
    for_each_stacked([&]<std::size_t K, class L>() {
      if (stack_of[K] != stack) return;
      using T = typename L::dtype;
      const auto run = layout_.leaf[K].run_of(r, layer);
      const T* rows = this->template resident_rows<K, L>(h) + run.packed;
      if constexpr (layer_fp8<K>) {
        const float amax =
            detail::quantize_rows<typename quantizer_node<K>::dtype>(rows, run.n, current_value_[K]->scale, out + at);
        std::memcpy(out + at + this->template wire_bytes<K, L>() - sizeof(float), &amax, sizeof(float));
      } else if (run.n) {
        std::memcpy(out + at, rows, run.n * sizeof(T));
      }
      at += this->template wire_bytes<K, L>();
    });
  }
  // Rank r's block of that gather, placed into the layer's slices (an fp8
  // weight's amax folded in rank order, from 0, as a store folds its runs).
  void unpack(std::size_t stack, std::size_t layer, int r, const std::byte* in) {
    std::size_t at = 0;
    for_each_stacked([&]<std::size_t K, class L>() {
      if (stack_of[K] != stack) return;
      const auto run = layout_.leaf[K].run_of(r, layer);
      const std::size_t in_slice = run.whole - layer * layout_.leaf[K].piece_elements;
      constexpr std::size_t t = layer_fp8<K> ? 1 : sizeof(typename L::dtype);
      if (run.n) std::memcpy(current_[K] + in_slice * t, in + at, run.n * t);
      if constexpr (layer_fp8<K>) {
        float a;
        std::memcpy(&a, in + at + this->template wire_bytes<K, L>() - sizeof(float), sizeof(float));
        current_value_[K]->amax = fp8_scaling::amax_combine(current_value_[K]->amax, a);
      }
      at += this->template wire_bytes<K, L>();
    });
  }

  Store& store_;
  layout_type layout_;
  fsdp options_;
  int world_ = 1, first_ = 0, held_ = 1;
  std::vector<std::byte> resident_;  // [held shard][stacked leaf]: this process's rows
  std::size_t resident_block_ = 0;   // bytes of one held shard's block
  std::array<std::size_t, leaves::size + 1> resident_offset_{};  // by trainable leaf, in a block
  std::vector<std::byte> gathered_;  // [stacked leaf][slot]: the layers' gathered slices
  std::array<std::size_t, leaves::size + 1> gathered_offset_{};
  std::array<std::byte*, leaves::size + 1> current_{};  // each stacked leaf's slice of the layer running
  std::vector<quantized> fp8_values_;                      // [fp8 stacked leaf][slot]: a gathered layer's quantize value
  std::array<std::size_t, leaves::size + 1> fp8_value_index_{};
  std::array<quantized*, leaves::size + 1> current_value_{};  // (fp8 stacked leaves) the layer running
  std::vector<std::byte> send_, recv_;                           // a layer's all-gather
};

}  // namespace ctg::dist
