#pragma once
// Scratch the CPU group runners reuse from step to step (grown, never shrunk):
// the f64 accumulators of reductions over other axes, the f32 operands and
// result of an fp8 matmul, and the GEMM's packing buffers.
#include <vector>

#include <ctg/exec/cpu/gemm.hpp>

namespace ctg::cpu {

struct workspace {
  std::vector<double> axis_acc;          // one per output element of an axis reduction
  std::vector<float> fp8_a, fp8_b, fp8_c;  // an fp8 matmul's widened operands and its f32 product
  gemm_workspace gemm;
};

}  // namespace ctg::cpu
