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
//     amax (Backend::delayed_update), and its amax starts again from 0.
// A stack's layers do the same per layer on their slices of the stacked
// state leaves (exec/stack_runner.hpp).
#include <array>
#include <cstddef>
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
// (Reports a mistake itself and returns true, so the caller adds no error.)
template <class Q, class First>
consteval bool check_same_scaling() {
  static_assert(std::is_same_v<typename Q::scaling, typename First::scaling> &&
                    std::is_same_v<typename Q::dtype, typename First::dtype>,
                "ctg: one fp8 scaling state, two meanings: quantizers that name the same state (Q and First in "
                "the note above) must use the same format and recipe");
  return true;
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
    return (detail::check_same_scaling<tl::at_t<table.quantizer_node[K], nodes>,
                                       tl::at_t<table.quantizer_node[table.first[table.quantizer_state[K]]], nodes>>() &&
            ...);
  }(std::make_index_sequence<count>{}));

  // This run's amaxes, by quantizer.
  std::array<float, count + 1> pending{};
  // By state: the max of its quantizers' amaxes over the runs folded since its last update.
  std::array<float, states + 1> combined{};

  // Where quantizer k records its amax, or null when it records nothing (a recompute).
  float* amax_slot(std::size_t k, bool recording) { return recording ? &pending[k] : nullptr; }

  // After a successful run: its amaxes (by quantizer) into the states' (max).
  static void fold(const float* run_amax, float* state_amax) {
    for (std::size_t k = 0; k < count; ++k) {
      float& a = state_amax[table.quantizer_state[k]];
      a = fp8_scaling::amax_combine(a, run_amax[k]);
    }
  }
  void fold() { fold(pending.data(), combined.data()); }

  // When the step is complete: state s, whose scale and history (one
  // layer's slice, in a stack) start at `scale` and `history`, updated once
  // from its amax, which then starts again from 0.
  template <class Backend>
  static void update(typename Backend::workspace& ws, std::size_t s, float* history, float* scale, float& amax) {
    const scaling_state& st = table.state[s];
    Backend::delayed_update(ws, history, st.history_length, scale, &amax, st.fp8_max, st.margin, st.algo);
    amax = 0.0f;
  }
};

}  // namespace ctg
