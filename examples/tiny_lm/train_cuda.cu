// tiny_lm --device cuda: the same training and sampling (train.hpp) on GPU 0,
// for every policy: a CUDA store (ctg/exec/cuda/store.cuh) and AdamW on the
// GPU (ctg/optim/cuda/adamw.cuh). Compiled by nvcc when it is found.
#include <ctg/exec/cuda/store.cuh>
#include <ctg/optim/cuda/adamw.cuh>

#include "train.hpp"

int tiny_lm::train_cuda(const options& o, const corpus& c) {
  const ctg::cuda::device gpu;
  std::printf("device: %s (compute capability %d, %d SMs)\n", gpu.name().c_str(), gpu.compute_capability(),
              gpu.sm_count());
  if (o.policy == "bf16")
    return run_policy<ctg::precision::autocast<ctg::bf16>>(
        o, c, "bf16 (autocast<bf16>: f32 master parameters, bf16 matmuls, f32 statistics)", gpu);
#if TINY_LM_FP8
  if (o.policy == "fp8")
    return run_policy<ctg::precision::fp8<ctg::precision::delayed<>>>(
        o, c, "fp8 (fp8<delayed<>>: weight products in e4m3 / e5m2 with delayed scaling, bf16 elsewhere)", gpu);
#endif
  return run_policy<ctg::precision::full<ctg::f32>>(o, c, "f32 (full<f32>)", gpu);
}
