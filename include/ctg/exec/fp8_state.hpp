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
#include <ctg/graph/node.hpp>
#include <ctg/graph/step.hpp>

namespace ctg {

namespace detail {
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
  static constexpr std::size_t N = nodes::size;

  struct table_t {
    std::size_t node[N + 1]{};   // the k-th delayed quantizer's node index
    std::size_t slot[N + 1]{};   // node index -> its k
    std::size_t state[N + 1]{};  // k -> the index of the state it updates
    std::size_t first[N + 1]{};  // state -> its first quantizer (whose scaling names the state's leaves)
    std::size_t count = 0;       // quantizers
    std::size_t states = 0;
  };
  static constexpr table_t quantizers = []<class... Ns>(tl::list<Ns...>) {
    table_t d;
    std::size_t scale_leaf[N + 1]{};  // state -> node index of its scale leaf
    std::size_t i = 0;
    auto one = [&]<class Q>(std::type_identity<Q>) {
      if constexpr (Q::kind == node_kind::quantize)
        if constexpr (Q::scaling::is_delayed) {
          const std::size_t leaf = tl::index_of_v<typename Q::scaling::scale_leaf, tl::list<Ns...>>;
          std::size_t s = 0;
          while (s < d.states && scale_leaf[s] != leaf) ++s;
          if (s == d.states) {
            scale_leaf[d.states] = leaf;
            d.first[d.states++] = d.count;
          }
          d.slot[i] = d.count;
          d.state[d.count] = s;
          d.node[d.count++] = i;
        }
      ++i;
    };
    (one(std::type_identity<Ns>{}), ...);
    return d;
  }(nodes{});
  static constexpr std::size_t count = quantizers.count;
  static constexpr std::size_t states = quantizers.states;

  // The quantize node of the k-th delayed quantizer.
  template <std::size_t K>
  using quantizer = tl::at_t<quantizers.node[K], nodes>;

  static_assert([]<std::size_t... K>(std::index_sequence<K...>) {
    return (detail::check_same_scaling<quantizer<K>, quantizer<quantizers.first[quantizers.state[K]]>>() && ...);
  }(std::make_index_sequence<count>{}));

  template <std::size_t R>
  static constexpr bool is_delayed_quantizer = [] {
    using Q = tl::at_t<R, nodes>;
    if constexpr (Q::kind == node_kind::quantize) return Q::scaling::is_delayed;
    else return false;
  }();

  // This run's amaxes, by quantizer.
  std::array<float, count + 1> pending{};
  // By state: the max of its quantizers' amaxes over the runs folded since its last update.
  std::array<float, states + 1> combined{};

  // Where quantize node R records its amax, or null when it records nothing
  // (current scaling, or a recompute).
  template <std::size_t R>
  float* amax_slot(bool recording) {
    if constexpr (is_delayed_quantizer<R>) return recording ? &pending[quantizers.slot[R]] : nullptr;
    else return nullptr;
  }

  // After a successful run: its amaxes (by quantizer) into the states' (max).
  static void fold(const float* run_amax, float* state_amax) {
    for (std::size_t k = 0; k < count; ++k) {
      float& a = state_amax[quantizers.state[k]];
      a = fp8_scaling::amax_combine(a, run_amax[k]);
    }
  }
  void fold() { fold(pending.data(), combined.data()); }

  // When the step is complete: every state's update from its amax, once;
  // then its amax starts again from 0. at(std::type_identity<Leaf>{}) gives
  // where the state leaf's values are (a layer's slice, in a stack).
  template <class Backend, class At>
  static void update(float* state_amax, At&& at) {
    [&]<std::size_t... S>(std::index_sequence<S...>) {
      (update_one<Backend, S>(state_amax[S], at), ...);
    }(std::make_index_sequence<states>{});
  }
  template <class Backend, class At>
  void update(At&& at) {
    update<Backend>(combined.data(), at);
  }

 private:
  template <class Backend, std::size_t S, class At>
  static void update_one(float& amax, At& at) {
    using Q = quantizer<quantizers.first[S]>;
    using Sc = typename Q::scaling;  // (a small type: names and a recipe)
    Backend::delayed_update(at(std::type_identity<typename Sc::history_leaf>{}), Sc::recipe::history,
                            at(std::type_identity<typename Sc::scale_leaf>{}), &amax, Q::fp8_max, Sc::margin,
                            Sc::recipe::algo);
    amax = 0.0f;
  }
};

}  // namespace ctg
