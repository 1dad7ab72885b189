#pragma once
// The FP8 delayed-scaling protocol of a step, in one place, for any backend
// (DESIGN.md, "Numerics"; graph/fp8.hpp for the nodes):
//   * a table of the step's quantize nodes with delayed scaling, and of the
//     scaling states they update: quantizers that name the same state (a
//     weight used twice under the FP8 policy: its input and gradient
//     quantizers) share it;
//   * a forward or backward run records each quantizer's amax in its slot;
//     a recompute records nothing (it reads the same scale and replays the
//     forward, B4);
//   * after a successful run, and only then, the run's amaxes are folded
//     into one amax per state: the max over its quantizers (and over the
//     runs since the last update, for gradient accumulation);
//   * when the step is complete, each state is updated once, from that
//     amax, and its amax starts again from 0.
// The amaxes live in the backend's memory (amax_record), where a GPU's
// quantize kernels write them: recording, folding and updating never wait
// for the device. A stack keeps one record for all its layers (its states
// are slices of the stacked state leaves: exec/stack_runner.hpp), folded and
// updated by one call per state for every layer.
#include <array>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include <ctg/core/fp8_scaling.hpp>
#include <ctg/graph/fp8.hpp>
#include <ctg/graph/step.hpp>

namespace ctg {

// One scaling state: its leaves (by node index) and its recipe.
struct scaling_state {
  std::size_t scale = 0, history = 0;
  std::size_t history_length = 0;
  float fp8_max = 0;
  int margin = 0;
  fp8_scaling::amax_algo algo{};
};

namespace detail {
template <class Q>
consteval bool is_delayed() {
  if constexpr (Q::kind == node_kind::quantize) return Q::scaling::is_delayed;
  else return false;
}
// Quantizers that share a scaling state must agree on what it means.
// (Reports a mistake itself and returns true, so the caller adds no error;
// templated on the formats and scalings, not the quantizer nodes, which are
// opaque node_refs, so that the compiler's note spells them.)
template <class Format, class Scaling, class FirstFormat, class FirstScaling>
consteval bool check_same_scaling() {
  static_assert(std::is_same_v<Scaling, FirstScaling> && std::is_same_v<Format, FirstFormat>,
                "ctg: one fp8 scaling state, two meanings: quantizers that name the same state must use the same "
                "format and recipe (the note above names both: [with Format = ...; Scaling = ...; FirstFormat = "
                "...; FirstScaling = ...])");
  return true;
}
template <class Q, class First>
consteval bool check_same_scaling_of() {
  return check_same_scaling<typename Q::dtype, typename Q::scaling, typename First::dtype, typename First::scaling>();
}
}  // namespace detail

// Key: the step's key (graph/step.hpp).
template <class Key>
struct fp8_state {
  using nodes = typename step_of<Key>::nodes;

  // The k-th quantizer with delayed scaling is the k-th in node order
  // (group_call::fp8_slot counts them the same way); each updates one state,
  // named by its scale leaf.
  struct tables {
    std::size_t quantizer_node[nodes::size + 1]{};
    std::size_t quantizer_state[nodes::size + 1]{};  // k -> its state
    std::size_t count = 0;                            // quantizers
    scaling_state state[nodes::size + 1]{};
    std::size_t first[nodes::size + 1]{};  // state -> its first quantizer
    std::size_t states = 0;
  };
  static constexpr tables table = []<class... Ns>(tl::list<Ns...>) {
    tables t;
    std::size_t i = 0;
    auto one = [&]<class Q>(std::type_identity<Q>) {
      if constexpr (detail::is_delayed<Q>()) {
        using S = typename Q::scaling;
        const std::size_t scale = tl::index_of<typename S::scale_leaf, nodes>::value;
        std::size_t s = 0;
        while (s < t.states && t.state[s].scale != scale) ++s;
        if (s == t.states) {
          t.state[t.states] = {scale, tl::index_of<typename S::history_leaf, nodes>::value, S::recipe::history,
                               Q::fp8_max, S::margin, S::recipe::algo};
          t.first[t.states++] = t.count;
        }
        t.quantizer_state[t.count] = s;
        t.quantizer_node[t.count++] = i;
      }
      ++i;
    };
    (one(std::type_identity<Ns>{}), ...);
    return t;
  }(nodes{});
  static constexpr std::size_t count = table.count;
  static constexpr std::size_t states = table.states;
  static_assert([]<std::size_t... K>(std::index_sequence<K...>) {
    return (detail::check_same_scaling_of<tl::at_t<table.quantizer_node[K], nodes>,
                                          tl::at_t<table.quantizer_node[table.first[table.quantizer_state[K]]], nodes>>() &&
            ...);
  }(std::make_index_sequence<count>{}));

  // Quantizer k's state, as the fold reads it (from the backend's memory).
  static constexpr auto state_of = [] {
    std::array<std::uint32_t, count + 1> m{};
    for (std::size_t k = 0; k < count; ++k) m[k] = static_cast<std::uint32_t>(table.quantizer_state[k]);
    return m;
  }();
};

// The fold of one run's amaxes into the states' (the max over each state's
// quantizers and over the runs since its last update), layer by layer:
// pending is [layer][quantizer], combined [layer][state].
struct amax_fold {
  const float* pending = nullptr;
  float* combined = nullptr;
  const std::uint32_t* state_of = nullptr;  // quantizer -> state
  std::size_t quantizers = 0, states = 0, layers = 0;

  CTG_HD void run_layer(std::size_t layer) const {
    for (std::size_t k = 0; k < quantizers; ++k) {
      float& a = combined[layer * states + state_of[k]];
      a = fp8_scaling::amax_combine(a, pending[layer * quantizers + k]);
    }
  }
};

// One scaling state's update, for each of `layers` slices of its leaves
// (layer i: history + i * length, scale + i, its amax at amax + i * amax_stride).
struct fp8_update {
  float* history = nullptr;
  std::size_t length = 0;
  float* scale = nullptr;
  float* amax = nullptr;
  std::size_t amax_stride = 0, layers = 0;
  float fp8_max = 0;
  int margin = 0;
  fp8_scaling::amax_algo algo{};

  // Layer i's amax into its history slot 0, TransformerEngine's update of
  // scale and history, and the amax back to 0 for the next set of runs.
  CTG_HD void run_layer(std::size_t i) const {
    float* h = history + i * length;
    float& a = amax[i * amax_stride];
    if (length > 0) {
      h[0] = a;
      fp8_scaling::delayed_update(h, length, scale[i], fp8_max, margin, algo);
    }
    a = 0.0f;
  }
};

// A step's (or a stack's) amaxes in the backend's memory: one run's
// [layer][quantizer], each state's since its last update [layer][state],
// and the quantizer -> state map the fold reads. Nothing is allocated for
// a step without delayed scaling.
template <class Backend, class Key>
class amax_record {
 public:
  using fp8 = fp8_state<Key>;
  static constexpr std::size_t quantizers = fp8::count, states = fp8::states;

  void make(typename Backend::workspace& ws, std::size_t layers) {
    layers_ = layers;
    if (quantizers == 0) return;
    mem_.reserve(map_offset() + sizeof fp8::state_of);  // (zero-filled)
    Backend::upload(ws, mem_.data() + map_offset(), fp8::state_of.data(), sizeof fp8::state_of);
  }

  // Where layer l's quantizers record this run's amaxes.
  float* pending(std::size_t layer) { return floats() + layer * quantizers; }
  // Each state's amax since its last update, [layer][state].
  float* combined() { return floats() + layers_ * quantizers; }
  std::size_t combined_count() const { return layers_ * states; }

  // After a successful run: its amaxes into the states'.
  void fold(typename Backend::workspace& ws) {
    if (quantizers == 0) return;
    Backend::fold_amaxes(ws, amax_fold{pending(0), combined(),
                                       reinterpret_cast<const std::uint32_t*>(mem_.data() + map_offset()),
                                       quantizers, states, layers_});
  }
  // When the step is complete: state s updated on every layer's slice of
  // its leaves (history, scale), from its amax, which starts again from 0.
  void update(typename Backend::workspace& ws, std::size_t s, float* history, float* scale) {
    const scaling_state& st = fp8::table.state[s];
    Backend::update_fp8(ws, fp8_update{history, st.history_length, scale, combined() + s, states, layers_, st.fp8_max,
                                       st.margin, st.algo});
  }

 private:
  float* floats() { return reinterpret_cast<float*>(mem_.data()); }
  std::size_t map_offset() const { return layers_ * (quantizers + states) * sizeof(float); }  // (u32 after f32: aligned)

  typename Backend::arena mem_;
  std::size_t layers_ = 0;
};

}  // namespace ctg
