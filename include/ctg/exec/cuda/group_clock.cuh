#pragma once
// Group profiling's clock on a GPU (exec/group_profile.hpp): a mark is an
// event recorded on the workspace's stream; the time between two is read
// once the second has happened. Events are made as needed and reused run
// after run.
#include <cuda_runtime.h>

#include <cstddef>
#include <vector>

#include <ctg/exec/cuda/runtime.cuh>
#include <ctg/exec/cuda/workspace.cuh>

namespace ctg::cuda {

class group_clock {
 public:
  using mark = cudaEvent_t;
  group_clock() = default;
  group_clock(const group_clock&) = delete;
  group_clock& operator=(const group_clock&) = delete;
  ~group_clock() {
    for (cudaEvent_t e : events_) cudaEventDestroy(e);  // (no throw from a destructor)
  }

  mark now(workspace& ws) {
    if (used_ == events_.size()) {
      cudaEvent_t e = nullptr;
      CTG_CUDA_CHECK(cudaEventCreate(&e));
      events_.push_back(e);
    }
    cudaEvent_t e = events_[used_++];
    CTG_CUDA_CHECK(cudaEventRecord(e, ws.stream()));
    return e;
  }
  double seconds(mark from, mark to) {
    CTG_CUDA_CHECK(cudaEventSynchronize(to));
    float ms = 0.0f;
    CTG_CUDA_CHECK(cudaEventElapsedTime(&ms, from, to));
    return static_cast<double>(ms) / 1e3;
  }
  void reuse() { used_ = 0; }

 private:
  std::vector<cudaEvent_t> events_;
  std::size_t used_ = 0;
};

}  // namespace ctg::cuda
