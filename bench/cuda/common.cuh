#pragma once
// What the GPU benchmarks share: their main's frame, the timing of calls
// that enqueue work (CUDA events over 20 calls after 3 warm-ups), and
// device memory.
#include <cstdio>

#include <ctg/core/error.hpp>
#include <ctg/exec/cuda/runtime.cuh>

namespace bench_cuda {

// A benchmark's main: without a GPU it says so and returns 77 (skipped);
// else it prints the device, runs body(device) and returns 0, or prints a
// ctg::error and returns 1.
template <class Body>
int run_on_gpu(Body&& body) {
  if (ctg::cuda::device_count() == 0) {
    std::printf("no CUDA device: skipped\n");
    return 77;
  }
  try {
    ctg::cuda::device dev;
    std::printf("%s, compute capability %d\n", dev.name().c_str(), dev.compute_capability());
    body(dev);
    return 0;
  } catch (const ctg::error& e) {
    std::printf("%s\n", e.what());
    return 1;
  }
}

// Milliseconds per call of f, which enqueues work on the device's stream.
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
