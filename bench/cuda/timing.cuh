#pragma once
// Timing for the GPU benchmarks: milliseconds per call of f, which enqueues
// work on the device's stream, by CUDA events over 20 calls after 3 warm-ups.
#include <ctg/exec/cuda/runtime.cuh>

namespace bench_cuda {

template <class F>
float time_ms(const ctg::cuda::device& dev, F&& f) {
  for (int i = 0; i < 3; ++i) f();
  cudaEvent_t start, stop;
  CTG_CUDA_CHECK(cudaEventCreate(&start));
  CTG_CUDA_CHECK(cudaEventCreate(&stop));
  constexpr int iterations = 20;
  CTG_CUDA_CHECK(cudaEventRecord(start, dev.stream()));
  for (int i = 0; i < iterations; ++i) f();
  CTG_CUDA_CHECK(cudaEventRecord(stop, dev.stream()));
  CTG_CUDA_CHECK(cudaEventSynchronize(stop));
  float ms = 0;
  CTG_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
  (void)cudaEventDestroy(start);
  (void)cudaEventDestroy(stop);
  return ms / iterations;
}

// Device memory of n bytes (zero-filled), with room to spare for offsets.
struct device_bytes {
  ctg::cuda::arena mem;
  explicit device_bytes(std::size_t n) { mem.reserve(n + 256); }
};

}  // namespace bench_cuda
