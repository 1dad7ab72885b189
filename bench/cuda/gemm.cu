// cuda::gemm_runner against bare cuBLASLt on the same products (issue 13's
// goal: within 3 %), and FP8 against bf16 throughput, on one GPU: square
// products of 4096 and 8192, bf16 x bf16 -> bf16 and FP8 e4m3 x e4m3 ->
// bf16 (B stored [N, K]: the TN layout, no transposed copy). Bare: the same
// descriptors and cuBLASLt's first heuristic algorithm, one cublasLtMatmul
// per product. Times with CUDA events over 20 products after 3 warm-ups
// (common.cuh).
// Prints a table; without a GPU it says so and returns 77.
//   build/default/bench/bench_cuda_gemm
#include <cstdio>
#include <vector>

#include <ctg/exec/cuda/gemm.cuh>

#include "common.cuh"

namespace {
using ctg::dim_t;
namespace cu = ctg::cuda;

using bench_cuda::device_bytes;
using bench_cuda::time_ms;

// One product: the runner's time and the bare call's, in ms.
struct figures {
  float runner = 0, bare = 0;
};
figures measure(const cu::device& dev, cu::gemm_runner& lt, dim_t n, bool fp8) {
  const cu::gemm_type in = fp8 ? cu::gemm_type::e4m3 : cu::gemm_type::bf16;
  const std::size_t in_bytes = fp8 ? 1 : 2;
  ctg::rt_shape a, b, c;
  a.rank = b.rank = c.rank = 2;
  a.d[0] = a.d[1] = b.d[0] = b.d[1] = c.d[0] = c.d[1] = n;
  const cu::gemm_plan p = cu::plan_gemm(a, b, c, in, in, cu::gemm_type::bf16, fp8, false, fp8);
  const std::size_t elems = static_cast<std::size_t>(n * n);
  device_bytes da(elems * in_bytes), db(elems * in_bytes), dd(elems * 2), scales(32);
  CTG_CUDA_CHECK(cudaMemset(da.mem.data(), 0x3C, elems * in_bytes));  // (0x3C3C: 0.0115 in bf16; 0x3C: 1.5 in e4m3)
  CTG_CUDA_CHECK(cudaMemset(db.mem.data(), 0x3C, elems * in_bytes));
  const float one[8] = {1.0f, 0, 0, 0, 1.0f};  // (scale pointers 16-byte aligned, as cuBLASLt FP8 needs)
  CTG_CUDA_CHECK(cudaMemcpy(scales.mem.data(), one, sizeof one, cudaMemcpyHostToDevice));
  const auto* s = reinterpret_cast<const float*>(scales.mem.data());
  const cu::gemm_buffers m{da.mem.data(), db.mem.data(), dd.mem.data(), nullptr, nullptr, s, s + 4};
  figures f;
  f.runner = time_ms(dev, [&] { lt.run(p, m); });

  // Bare: the plan's one call with its own descriptors, chosen once.
  const cu::lt_operands o = cu::lt_operands_of(p, p.calls.at(0));
  cu::detail::lt_desc desc(CUBLAS_COMPUTE_32F, CUDA_R_32F);
  desc.set(CUBLASLT_MATMUL_DESC_TRANSA, cu::detail::lt_op(o.a.op));
  desc.set(CUBLASLT_MATMUL_DESC_TRANSB, cu::detail::lt_op(o.b.op));
  if (fp8) {
    desc.set(CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, s + 4);
    desc.set(CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, s);
  }
  cu::detail::lt_layout la(o.a), lb(o.b), ld(o.d);
  cublasLtHandle_t handle;
  CTG_LT_CHECK(cublasLtCreate(&handle));
  const std::size_t ws_bytes = std::size_t(32) << 20;
  device_bytes ws(ws_bytes);
  cu::detail::lt_preference pref(ws_bytes);
  cublasLtMatmulHeuristicResult_t found{};
  int count = 0;
  CTG_LT_CHECK(cublasLtMatmulAlgoGetHeuristic(handle, desc.h, la.h, lb.h, ld.h, ld.h, pref.h, 1, &found, &count));
  const float alpha = 1.0f, beta = 0.0f;
  const void* first = o.a.buffer == cu::gemm_buffer::b ? db.mem.data() : da.mem.data();
  const void* second = o.b.buffer == cu::gemm_buffer::a ? da.mem.data() : db.mem.data();
  f.bare = time_ms(dev, [&] {
    CTG_LT_CHECK(cublasLtMatmul(handle, desc.h, &alpha, first, la.h, second, lb.h, &beta, dd.mem.data(), ld.h,
                                dd.mem.data(), ld.h, &found.algo, ws.mem.data(), ws_bytes, dev.stream()));
  });
  (void)cublasLtDestroy(handle);
  return f;
}
}  // namespace

int main() {
  return bench_cuda::run_on_gpu([](const cu::device& dev) {
    cu::gemm_runner lt(dev);
    std::printf("\n| product | gemm_runner ms | bare cuBLASLt ms | runner / bare | TFLOP/s (runner) |\n|---|---|---|---|---|\n");
    for (dim_t n : {dim_t{4096}, dim_t{8192}})
      for (bool fp8 : {false, true}) {
        if (fp8 && !dev.has_fp8_gemm()) continue;
        const figures f = measure(dev, lt, n, fp8);
        const double flop = 2.0 * double(n) * double(n) * double(n);
        std::printf("| %s %lld^3 | %.3f | %.3f | %.3f | %.1f |\n", fp8 ? "fp8 e4m3 (TN) -> bf16" : "bf16 -> bf16",
                    static_cast<long long>(n), f.runner, f.bare, f.runner / f.bare, flop / (f.runner * 1e-3) / 1e12);
      }
  });
}
