#pragma once
// The frame of a device test: without a GPU it prints why and returns 77
// (ctest: skipped); otherwise it opens device 0, prints what it is, runs the
// test and returns 0 when the test reports success, 1 when it does not or
// when a ctg::error (a failed CUDA call) escapes.
#include <cstdio>

#include <ctg/exec/cuda/runtime.cuh>

template <class Test>
int run_device_test(Test test) {
  if (ctg::cuda::device_count() == 0) {
    std::printf("no CUDA device: skipped\n");
    return 77;
  }
  try {
    ctg::cuda::device dev;
    std::printf("device %d: %s, compute capability %d, %d SMs, fp8 GEMM %s\n", dev.index(), dev.name().c_str(),
                dev.compute_capability(), dev.sm_count(), dev.has_fp8_gemm() ? "yes" : "no");
    const bool ok = test(dev);
    std::printf("%s\n", ok ? "all checks passed" : "FAILED (see above)");
    return ok ? 0 : 1;
  } catch (const ctg::error& e) {
    std::printf("%s\n", e.what());
    return 1;
  }
}
