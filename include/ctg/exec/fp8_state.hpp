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

#include <ctg/graph/fp8.hpp>
#include <ctg/graph/node.hpp>
#include <ctg/graph/step.hpp>

namespace ctg {

// Key: the step's key (graph/step.hpp).
template <class Key>
struct fp8_state {
  using nodes = typename step_of<Key>::nodes;
  static constexpr std::size_t N = nodes::size;

  struct table_t {
    std::size_t node[N + 1]{};  // the k-th delayed quantizer's node index
    std::size_t slot[N + 1]{};  // node index -> its k
    std::size_t count = 0;
  };
  static constexpr table_t quantizers = []<class... Ns>(tl::list<Ns...>) {
    table_t d;
    std::size_t i = 0;
    auto one = [&]<class Q>(std::type_identity<Q>) {
      if constexpr (Q::kind == node_kind::quantize)
        if constexpr (Q::scaling::is_delayed) {
          d.slot[i] = d.count;
          d.node[d.count++] = i;
        }
      ++i;
    };
    (one(std::type_identity<Ns>{}), ...);
    return d;
  }(nodes{});
  static constexpr std::size_t count = quantizers.count;

  // The quantize node of the k-th delayed quantizer.
  template <std::size_t K>
  using quantizer = tl::at_t<quantizers.node[K], nodes>;

  template <std::size_t R>
  static constexpr bool is_delayed_quantizer = [] {
    using Q = tl::at_t<R, nodes>;
    if constexpr (Q::kind == node_kind::quantize) return Q::scaling::is_delayed;
    else return false;
  }();

  // This step's amaxes, by quantizer (what the next update applies).
  std::array<float, count + 1> pending{};

  // Where quantize node R records its amax, or null when it records nothing
  // (current scaling, or a recompute).
  template <std::size_t R>
  float* amax_slot(bool recording) {
    if constexpr (is_delayed_quantizer<R>) return recording ? &pending[quantizers.slot[R]] : nullptr;
    else return nullptr;
  }

  // After a successful step: the update of quantizer K's state, whose scale
  // and history (one layer's slice) start at `scale` and `history`.
  template <class Backend, std::size_t K>
  static void update(float* history, float* scale, const float* amax) {
    using S = typename quantizer<K>::scaling;  // (a small type: names and a recipe)
    Backend::delayed_update(history, S::recipe::history, scale, amax, quantizer<K>::fp8_max, S::margin,
                            S::recipe::algo);
  }
};

}  // namespace ctg
