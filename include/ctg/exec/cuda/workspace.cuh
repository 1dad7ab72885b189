#pragma once
// What a CUDA store's runners share (exec/cuda/store.cuh): the device and its
// stream, the cuBLASLt runner with its workspace and chosen algorithms, and
// the scratch of products (fp8 operands' transposed copies, a narrower
// operand widened), of reductions and of scatter_add's sort. Made from a device, or
// following another store's (a stack's block, the other steps of a shared
// store: one stream, one cuBLASLt handle). Each store's own: its step
// graphs (exec/cuda/step_graphs.cuh).
//
// A workspace not yet made for a device (a stack's block store before its
// first plan) copies on the current device and waits for each copy.
#include <memory>

#include <ctg/exec/cuda/axis_reduce_map.hpp>
#include <ctg/exec/cuda/gemm.cuh>
#include <ctg/exec/cuda/runtime.cuh>
#include <ctg/exec/cuda/step_graphs.cuh>

namespace ctg::cuda {

class workspace {
 public:
  workspace() = default;
  explicit workspace(const device& dev) : shared_(std::make_shared<shared>(dev)) {}

  // Run on the same device, stream and cuBLASLt runner as `parent`.
  void follow(workspace& parent) { shared_ = parent.shared_; }

  bool on_device() const { return shared_ != nullptr; }
  const device& dev() const {
    if (!shared_) throw error("ctg: internal: a CUDA store ran before it was given a device");
    return shared_->dev;
  }
  // The stream everything is ordered on (the legacy default stream before a device is given).
  cudaStream_t stream() const { return shared_ ? shared_->dev.stream() : cudaStreamLegacy; }
  gemm_runner& gemm() {
    (void)dev();
    return shared_->gemm;
  }
  // A product's scratch for its operand A (0) or B (1). This and the sort's
  // are reserved before a step for its shapes (backend::scratch_for), taken
  // during it (take_reserved), never shrunk.
  arena& operand_scratch(int which) {
    (void)dev();
    return shared_->operand[which];
  }
  // The partial sums of reductions over other axes (exec/cuda/axis_reduce_map.hpp).
  arena& reduce_partials() {
    (void)dev();
    return shared_->partials;
  }
  // The sort of scatter_add's ids (exec/cuda/scatter_runs.hpp).
  arena& index_sort() {
    (void)dev();
    return shared_->index_sort;
  }
  // This store's steps as CUDA graphs (on by default).
  step_graphs& graphs() { return graphs_; }

 private:
  struct shared {
    const device& dev;
    gemm_runner gemm;
    arena operand[2];
    arena partials;
    arena index_sort;
    // Made at their most (axis_reduce_max_partials: 16 MiB), so no step allocates them.
    explicit shared(const device& d) : dev(d), gemm(d) {
      partials.reserve(static_cast<std::size_t>(axis_reduce_max_partials) * sizeof(double));
    }
  };
  std::shared_ptr<shared> shared_;
  step_graphs graphs_;
};

}  // namespace ctg::cuda
