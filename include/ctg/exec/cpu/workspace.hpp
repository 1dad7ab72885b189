#pragma once
// Scratch the CPU group runners reuse from step to step (grown, never shrunk):
// the f64 accumulators of reductions over other axes, the f32 operands and
// result of an fp8 matmul, and the GEMM's packing buffers.
#include <cstddef>
#include <vector>

#include <ctg/exec/cpu/gemm.hpp>

namespace ctg::cpu {

struct workspace {
  std::vector<double> axis_acc;          // one per output element of an axis reduction
  std::vector<float> fp8_a, fp8_b, fp8_c;  // an fp8 matmul's widened operands and its f32 product
  gemm_workspace gemm;

  // Before a run (the store calls it with the run's shapes), so the step
  // itself allocates nothing for its axis reductions.
  void reserve_for(std::size_t axis_reduce_elements) {
    if (axis_acc.size() < axis_reduce_elements) axis_acc.resize(axis_reduce_elements);
  }
};

}  // namespace ctg::cpu
