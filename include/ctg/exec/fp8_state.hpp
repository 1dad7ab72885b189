#pragma once
// The FP8 delayed-scaling protocol of a step, in one place, for any backend
// (DESIGN.md, "Numerics"; graph/fp8.hpp for the nodes):
//   * a table of the step's quantize nodes with delayed scaling, each with a
//     slot for the amax its quantize took in this step;
//   * a forward or backward run records the amax in that slot; a recompute
//     records nothing (it reads the same scale and replays the forward, B4);
//   * after a successful step, and only then, each quantizer's amax goes
//     into its history's slot 0 and its scale and history are updated
//     (Backend::delayed_update), once. A stack's layers do the same per
//     layer on their slices of the stacked state leaves (exec/stack_runner.hpp).
#include <array>
#include <cstddef>

#include <ctg/core/fp8_scaling.hpp>
#include <ctg/graph/fp8.hpp>
#include <ctg/graph/step.hpp>

namespace ctg {

// One delayed quantizer: its node, its state leaves (by node index) and its recipe.
struct delayed_quantizer {
  std::size_t node = 0, scale = 0, history = 0;
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
}  // namespace detail

// Key: the step's key (graph/step.hpp).
template <class Key>
struct fp8_state {
  using nodes = typename step_of<Key>::nodes;

  // The k-th quantizer with delayed scaling is the k-th in node order
  // (group_call::fp8_slot counts them the same way).
  static constexpr auto quantizers = []<class... Ns>(tl::list<Ns...>) {
    constexpr std::size_t n = (std::size_t(0) + ... + detail::is_delayed<Ns>());
    std::array<delayed_quantizer, n> q{};
    std::size_t i = 0, k = 0;
    auto one = [&]<class Q>(std::type_identity<Q>) {
      if constexpr (detail::is_delayed<Q>()) {
        using S = typename Q::scaling;
        q[k++] = {i,
                  tl::index_of_v<typename S::scale_leaf, nodes>,
                  tl::index_of_v<typename S::history_leaf, nodes>,
                  S::recipe::history,
                  Q::fp8_max,
                  S::margin,
                  S::recipe::algo};
      }
      ++i;
    };
    (one(std::type_identity<Ns>{}), ...);
    return q;
  }(nodes{});
  static constexpr std::size_t count = quantizers.size();

  // This step's amaxes, by quantizer (what the next update applies).
  std::array<float, count + 1> pending{};

  // Where quantizer k records its amax, or null when it records nothing (a recompute).
  float* amax_slot(std::size_t k, bool recording) { return recording ? &pending[k] : nullptr; }

  // After a successful step: quantizer q's state, whose scale and history
  // (one layer's slice) start at `scale` and `history`, from its amax.
  template <class Backend>
  static void update(const delayed_quantizer& q, float* history, float* scale, const float* amax) {
    Backend::delayed_update(history, q.history_length, scale, amax, q.fp8_max, q.margin, q.algo);
  }
};

}  // namespace ctg
