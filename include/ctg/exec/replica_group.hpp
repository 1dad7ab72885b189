#pragma once
// What a store sees of the other data-parallel replicas of its step: stores
// on other ranks (or, emulated, other runs of this one) whose batches make
// one global batch. dist/data_parallel.hpp implements it; a store joins one
// with store.join(group). While in a group, a store
//   * starts each run's backward from 1/(k * replicas()) (k micro-batches):
//     its gradients are its batch's share of the global mean's;
//   * ends every run, failed or not, in agree(), on every replica, so a
//     mistake on one rank is an error on all of them, never a hang, and
//     commits nothing unless every replica succeeded;
//   * keeps each run's own gradients (never adds them up: the group sums
//     them, in f32, in a fixed order) and calls committed() after each run;
//   * makes each FP8 amax the max over the replicas, before its scaling
//     state updates, so every replica's scales stay the same;
//   * takes a quantize node's value from the group when it has one
//     (provided()): a weight's fp8 payload gathered from its shards, so
//     only fp8 bytes travel (dist::data_parallel for shard(quantize(w)));
//   * when the group holds every stack's parameters (trainable and frozen)
//     in shards (holds_stacked_params(): dist::fsdp), keeps no copy of them and runs
//     each layer on that layer's slices as the group gathers them, for its
//     forward and again for its backward. Those gathers are collectives, so
//     every replica first agrees that its feeds are good (agree() before the
//     run as well as after it): a bad feed on one rank never leaves the
//     others waiting in a gather.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include <ctg/core/shape.hpp>

namespace ctg {

class replica_group {
 public:
  // The stores whose runs make one global batch, this one included.
  virtual std::uint32_t replicas() const = 0;
  // Every run ends here: `failure` is this run's error (null if it
  // succeeded), `fed_dims` the sizes of its fed inputs' dyn dims, in feed
  // order. Throws ctg::error, on every replica, if any failed or fed other
  // sizes than the others.
  virtual void agree(const std::string* failure, std::span<const dim_t> fed_dims) = 0;
  // Each amax made the max over the replicas, in place.
  virtual void max_over_replicas(std::span<float> amax) = 0;
  // A run committed: its gradients are in the store.
  virtual void committed() = 0;
  // A load replaced the store's values between steps: the group's summed
  // gradient, taken at the values replaced, is spent (no optimizer may
  // apply it), as an update spends it.
  virtual void drop_gradient() = 0;

  // The value of quantize node `node` (its fp8 payload in host memory, the
  // whole tensor's amax and the scale it was cast with), or null: the store
  // then runs the node itself.
  struct quantized {
    const std::byte* payload = nullptr;
    float amax = 0.0f, scale = 1.0f;
  };
  virtual const quantized* provided(std::size_t node) const = 0;

  // Called as every run starts, before anything else.
  virtual void before_run() = 0;
  // Does the group hold the values of every stack's trainable and frozen
  // leaves (in shards), so that the store keeps none?
  virtual bool holds_stacked_params() const = 0;
  // Layer `layer` of stack node `stack` is about to run (its forward part,
  // or its backward part with any recompute): gather its slices. Then
  // layer_slice(leaf) is that layer's slice of stacked leaf node `leaf`, or
  // null for a leaf the group does not hold (FP8 state).
  virtual void gather_layer(std::size_t stack, std::size_t layer, bool backward) = 0;
  virtual const std::byte* layer_slice(std::size_t leaf) const = 0;
  // The value of quantize node `node` of that stack's block (a node index in
  // the block's step) for the layer gathered last, or null: as provided().
  virtual const quantized* layer_provided(std::size_t stack, std::size_t node) const = 0;
  // The store is being destroyed while it is in the group: the group must
  // not reach it again (its own end leaves it alone).
  virtual void store_ended() = 0;

 protected:
  ~replica_group() = default;
};

}  // namespace ctg
