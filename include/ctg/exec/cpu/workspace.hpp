#pragma once
// Scratch the CPU group runners reuse from step to step (grown, never shrunk):
// the f64 accumulators of reductions over other axes, the f32 operands and
// result of an fp8 matmul, the GEMMs' packing buffers (one set per thread
// that runs a group of batches of its own), the batches' grouping, and the
// store's threads.
#include <cstddef>
#include <string>
#include <vector>

#include <ctg/core/error.hpp>
#include <ctg/exec/cpu/gemm.hpp>
#include <ctg/exec/cpu/matmul_batches.hpp>
#include <ctg/exec/cpu/thread_pool.hpp>

namespace ctg::cpu {

struct workspace {
  std::vector<double> axis_acc;          // one per output element of an axis reduction
  std::vector<dim_t> axis_rows, axis_start;  // its input rows grouped by output row (run_axis_reduce)
  std::vector<float> fp8_a, fp8_b, fp8_c;  // an fp8 matmul's widened operands and its f32 product
  gemm_workspace gemm;
  std::vector<gemm_workspace> batch_gemm;  // [worker]: a batched matmul's groups, one per thread at a time
  std::vector<std::vector<double>> attention;  // [worker]: a head's operands and blocks (cpu/attention.hpp)
  detail::matmul_groups matmul_groups;     // a batched matmul's batches, grouped by the B they read
  cpu::threads threads;                    // (cpu::device{n}; default: the hardware's)

  // A reduction over other axes' accumulators: reserved before a step
  // (backend::scratch_for), so the step allocates none; taken by its runner.
  void reserve_axis_accumulators(std::size_t n) {
    if (axis_acc.size() < n) axis_acc.resize(n);
  }
  double* axis_accumulators(std::size_t n) {
    if (axis_acc.size() < n)
      throw error("ctg: internal: a reduction over other axes ran before its " + std::to_string(n) +
                  " accumulators were reserved (backend::scratch_for)");
    return axis_acc.data();
  }
  // What the device asks for (cpu::device: its thread count).
  template <class Device>
  void use(const Device& dev) {
    threads.set(dev.thread_count());
  }
  // The pool the runners share work on (null: one thread).
  thread_pool* pool() { return threads.pool(); }
  // A store this store drives (a stack's block, an evaluation step) runs on its threads.
  void follow(workspace& parent) { threads.follow(parent.threads); }
};

}  // namespace ctg::cpu
