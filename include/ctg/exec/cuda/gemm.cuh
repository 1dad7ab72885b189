#pragma once
// A GEMM plan (exec/cuda/gemm_plan.hpp) run through cuBLASLt on a device's
// stream: the library calls of the CUDA backend's matmul and fp8_matmul.
//
//   ctg::cuda::gemm_runner lt(dev);                       // one cuBLASLt handle and workspace
//   lt.run(plan, {a, b, d, a_t, b_t, a_scale_inv, b_scale_inv});
//
// Each distinct call's descriptors and cuBLASLt's chosen algorithm are made
// once and kept (the heuristic query costs tens of microseconds), so a
// step's products after the first cost one cublasLtMatmul each.
//
// The plan says everything (column-major calls, transposes, leading dims,
// batch strides, fp8 scale pointers); this file only translates it into
// descriptors, so what can be checked without a GPU is checked on the plan
// (tests/unit/cuda_gemm_plan.cpp) and tests/cuda/gemm.cu runs plans of every
// kind on a GPU against host loops.
//
// FP8: cuBLASLt multiplies op(first) op(second) by its A and B scale
// pointers, which are ctg's scale_inv of B and of A (the first operand is
// ctg's B). It needs compute capability 8.9 or newer, the TN layout (the
// plan's transpose steps copy an operand there: kernels::transpose, in
// exec/cuda/data_kernels.cuh), and
// 16-byte multiples of the leading dims; a shape it cannot run is a
// ctg::error naming the call.
//
// Every failed cuBLASLt call is a ctg::error naming the call and cuBLAS's
// status ("ctg: cuBLASLt call cublasLtMatmul(...) failed: CUBLAS_STATUS_NOT_SUPPORTED (15)").
#include <cublasLt.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include <ctg/exec/cuda/data_kernels.cuh>
#include <ctg/exec/cuda/gemm_plan.hpp>
#include <ctg/exec/cuda/runtime.cuh>

namespace ctg::cuda {

// cuBLAS's name of a status (libcublasLt alone has no function for it).
inline const char* lt_status_name(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
  }
  return "an unknown cuBLAS status";
}

// Throws ctg::error for a failed cuBLASLt call; `call` is its source text.
inline void check_lt(cublasStatus_t status, const char* call) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  throw error(std::string("ctg: cuBLASLt call ") + call + " failed: " + lt_status_name(status) + " (" +
              std::to_string(static_cast<int>(status)) + ")");
}
#define CTG_LT_CHECK(call) ::ctg::cuda::check_lt((call), #call)

namespace detail {
inline cudaDataType_t lt_type(gemm_type t) {
  switch (t) {
    case gemm_type::f32: return CUDA_R_32F;
    case gemm_type::f64: return CUDA_R_64F;
    case gemm_type::bf16: return CUDA_R_16BF;
    case gemm_type::f16: return CUDA_R_16F;
    case gemm_type::e4m3: return CUDA_R_8F_E4M3;
    case gemm_type::e5m2: return CUDA_R_8F_E5M2;
  }
  return CUDA_R_32F;
}
inline std::size_t lt_bytes(gemm_type t) {
  switch (t) {
    case gemm_type::f64: return 8;
    case gemm_type::f32: return 4;
    case gemm_type::bf16:
    case gemm_type::f16: return 2;
    case gemm_type::e4m3:
    case gemm_type::e5m2: return 1;
  }
  return 4;
}
inline cublasOperation_t lt_op(gemm_op o) { return o == gemm_op::n ? CUBLAS_OP_N : CUBLAS_OP_T; }

// The descriptors of one call, released with it.
struct lt_layout {
  cublasLtMatrixLayout_t h = nullptr;
  explicit lt_layout(const lt_matrix& x) {
    CTG_LT_CHECK(cublasLtMatrixLayoutCreate(&h, lt_type(x.type), static_cast<std::uint64_t>(x.rows),
                                            static_cast<std::uint64_t>(x.cols), static_cast<std::int64_t>(x.ld)));
    if (x.batches > 1) {
      const std::int32_t count = static_cast<std::int32_t>(x.batches);
      const std::int64_t offset = x.stride;
      CTG_LT_CHECK(cublasLtMatrixLayoutSetAttribute(h, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count));
      CTG_LT_CHECK(cublasLtMatrixLayoutSetAttribute(h, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &offset,
                                                    sizeof offset));
    }
  }
  ~lt_layout() {
    if (h) (void)cublasLtMatrixLayoutDestroy(h);
  }
  lt_layout(const lt_layout&) = delete;
  lt_layout& operator=(const lt_layout&) = delete;
};
struct lt_desc {
  cublasLtMatmulDesc_t h = nullptr;
  lt_desc(cublasComputeType_t compute, cudaDataType_t scale) {
    CTG_LT_CHECK(cublasLtMatmulDescCreate(&h, compute, scale));
  }
  ~lt_desc() {
    if (h) (void)cublasLtMatmulDescDestroy(h);
  }
  template <class V>
  void set(cublasLtMatmulDescAttributes_t a, const V& v) {
    CTG_LT_CHECK(cublasLtMatmulDescSetAttribute(h, a, &v, sizeof v));
  }
  lt_desc(const lt_desc&) = delete;
  lt_desc& operator=(const lt_desc&) = delete;
};
struct lt_preference {
  cublasLtMatmulPreference_t h = nullptr;
  explicit lt_preference(std::size_t workspace_bytes) {
    CTG_LT_CHECK(cublasLtMatmulPreferenceCreate(&h));
    const std::uint64_t bytes = workspace_bytes;
    CTG_LT_CHECK(
        cublasLtMatmulPreferenceSetAttribute(h, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &bytes, sizeof bytes));
  }
  ~lt_preference() {
    if (h) (void)cublasLtMatmulPreferenceDestroy(h);
  }
  lt_preference(const lt_preference&) = delete;
  lt_preference& operator=(const lt_preference&) = delete;
};

}  // namespace detail

// Where a plan's buffers are (device pointers): ctg's A and B, the result D,
// the transposed copies of fp8 operands (plan.scratch_a / scratch_b
// elements), and for fp8 the scale_inv of A and of B (device floats).
struct gemm_buffers {
  const void* a = nullptr;
  const void* b = nullptr;
  void* d = nullptr;
  void* a_transposed = nullptr;
  void* b_transposed = nullptr;
  const float* a_scale_inv = nullptr;
  const float* b_scale_inv = nullptr;
};

class gemm_runner {
 public:
  // 32 MiB of workspace: what cuBLASLt's heuristics ask for on Hopper at most.
  explicit gemm_runner(const device& dev, std::size_t workspace_bytes = std::size_t(32) << 20)
      : dev_(dev), workspace_bytes_(workspace_bytes) {
    CTG_LT_CHECK(cublasLtCreate(&handle_));
    workspace_.reserve(workspace_bytes_);
  }
  ~gemm_runner() {
    if (handle_) (void)cublasLtDestroy(handle_);
  }
  gemm_runner(const gemm_runner&) = delete;
  gemm_runner& operator=(const gemm_runner&) = delete;

  // Every step of the plan, in order, on the device's stream.
  void run(const gemm_plan& p, const gemm_buffers& m) {
    if (p.fp8 && !dev_.has_fp8_gemm())
      throw error("ctg: fp8_matmul needs a GPU of compute capability 8.9 or newer (cuBLASLt FP8); this one is " +
                  std::to_string(dev_.compute_capability()));
    // (cuBLASLt answers CUBLAS_STATUS_NOT_SUPPORTED for a scale pointer
    // aligned to 4 bytes only: seen on an H100, cuBLASLt 13.1.)
    if (p.fp8 && !fp8_dims_supported(p))
      throw error("ctg: fp8_matmul on a GPU needs every dim of the product a multiple of 16 (cuBLASLt FP8): this "
                  "one multiplies " + std::to_string(p.calls[0].n) + " x " + std::to_string(p.calls[0].k) + " by " +
                  std::to_string(p.calls[0].k) + " x " + std::to_string(p.calls[0].m));
    if (p.fp8 && (reinterpret_cast<std::uintptr_t>(m.a_scale_inv) % 16 != 0 ||
                  reinterpret_cast<std::uintptr_t>(m.b_scale_inv) % 16 != 0))
      throw error("ctg: cuBLASLt FP8 scale pointers must be 16-byte aligned (a_scale_inv " +
                  std::to_string(reinterpret_cast<std::uintptr_t>(m.a_scale_inv) % 16) + ", b_scale_inv " +
                  std::to_string(reinterpret_cast<std::uintptr_t>(m.b_scale_inv) % 16) + " bytes past a multiple of 16)");
    if (p.zeros > 0) {
      CTG_CUDA_CHECK(cudaMemsetAsync(m.d, 0, static_cast<std::size_t>(p.zeros) * detail::lt_bytes(p.type_d), dev_.stream()));
      return;
    }
    for (const transpose_step& t : p.transposes) {
      const auto* in = static_cast<const std::uint8_t*>(t.from == gemm_buffer::a ? m.a : m.b);
      auto* out = static_cast<std::uint8_t*>(t.to == gemm_buffer::a_transposed ? m.a_transposed : m.b_transposed);
      launch_transpose(dev_, in, out, t.rows, t.cols, t.batches);
    }
    for (const gemm_call& c : p.calls) call(p, c, m);
  }

 private:
  static const void* buffer(const gemm_buffers& m, gemm_buffer which) {
    switch (which) {
      case gemm_buffer::a: return m.a;
      case gemm_buffer::b: return m.b;
      case gemm_buffer::d: return m.d;
      case gemm_buffer::a_transposed: return m.a_transposed;
      case gemm_buffer::b_transposed: return m.b_transposed;
    }
    return nullptr;
  }
  static const std::byte* address(const gemm_buffers& m, const lt_matrix& x) {
    return static_cast<const std::byte*>(buffer(m, x.buffer)) + x.offset * detail::lt_bytes(x.type);
  }

  // cuBLASLt's A is ctg's B: its scale is B's scale_inv, and its B's A's.
  static void set_scale_pointers(detail::lt_desc& desc, const gemm_buffers& m) {
    desc.set(CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, m.b_scale_inv);
    desc.set(CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, m.a_scale_inv);
  }

  // A call's descriptors and the algorithm cuBLASLt chose for them, made
  // once per distinct call (the key: everything the descriptors say), so a
  // step's calls after its first cost only cublasLtMatmul.
  struct prepared {
    detail::lt_desc desc;
    detail::lt_layout a, b, d;
    cublasLtMatmulAlgo_t algo{};
    prepared(bool f64, const lt_operands& o)
        : desc(f64 ? CUBLAS_COMPUTE_64F : CUBLAS_COMPUTE_32F, f64 ? CUDA_R_64F : CUDA_R_32F), a(o.a), b(o.b), d(o.d) {}
  };
  using call_key = std::array<std::int64_t, 24>;
  static call_key key_of(const gemm_plan& p, const lt_operands& o) {
    call_key k{};
    std::size_t i = 0;
    for (const lt_matrix* x : {&o.a, &o.b, &o.d})
      for (std::int64_t v :
           {std::int64_t(x->type), x->rows, x->cols, x->ld, x->batches, x->stride, std::int64_t(x->op)})
        k[i++] = v;
    k[i++] = std::int64_t(p.compute);
    k[i++] = p.fp8;
    return k;
  }
  prepared& prepare(const gemm_plan& p, const gemm_call& c, const lt_operands& o, const gemm_buffers& m) {
    std::unique_ptr<prepared>& slot = prepared_[key_of(p, o)];
    if (slot) return *slot;
    auto made = std::make_unique<prepared>(p.compute == gemm_type::f64, o);
    made->desc.set(CUBLASLT_MATMUL_DESC_TRANSA, detail::lt_op(o.a.op));
    made->desc.set(CUBLASLT_MATMUL_DESC_TRANSB, detail::lt_op(o.b.op));
    // FP8: the algorithm is chosen for the descriptor it runs with, scale
    // pointers included (their alignment is checked in run()).
    if (p.fp8) set_scale_pointers(made->desc, m);
    detail::lt_preference pref(workspace_bytes_);
    cublasLtMatmulHeuristicResult_t found{};
    int count = 0;
    CTG_LT_CHECK(cublasLtMatmulAlgoGetHeuristic(handle_, made->desc.h, made->a.h, made->b.h, made->d.h, made->d.h,
                                                pref.h, 1, &found, &count));
    if (count == 0)
      throw error("ctg: cuBLASLt has no algorithm for this product (m " + std::to_string(c.m) + ", n " +
                  std::to_string(c.n) + ", k " + std::to_string(c.k) + (p.fp8 ? ", fp8: leading dims must be "
                                                                                "multiples of 16" : "") + ")");
    made->algo = found.algo;
    slot = std::move(made);
    return *slot;
  }

  void call(const gemm_plan& p, const gemm_call& c, const gemm_buffers& m) {
    const lt_operands o = lt_operands_of(p, c);  // (tests/unit/cuda_gemm_plan.cpp interprets these)
    prepared& x = prepare(p, c, o, m);
    if (p.fp8) set_scale_pointers(x.desc, m);  // (they may differ from the last run's)
    const bool f64 = p.compute == gemm_type::f64;
    auto* out = const_cast<std::byte*>(address(m, o.d));
    const double one64 = 1.0, zero64 = 0.0;
    const float one32 = 1.0f, zero32 = 0.0f;
    const void* alpha = f64 ? static_cast<const void*>(&one64) : static_cast<const void*>(&one32);
    const void* beta = f64 ? static_cast<const void*>(c.accumulate ? &one64 : &zero64)
                           : static_cast<const void*>(c.accumulate ? &one32 : &zero32);
    CTG_LT_CHECK(cublasLtMatmul(handle_, x.desc.h, alpha, address(m, o.a), x.a.h, address(m, o.b), x.b.h, beta, out,
                                x.d.h, out, x.d.h, &x.algo, workspace_.data(), workspace_bytes_, dev_.stream()));
    // cuBLASLt's status is what counts: a runtime error its own calls left
    // behind would otherwise be reported by the next kernel launch's check.
    (void)cudaGetLastError();
  }

  const device& dev_;
  std::size_t workspace_bytes_;
  cublasLtHandle_t handle_ = nullptr;
  arena workspace_;
  std::map<call_key, std::unique_ptr<prepared>> prepared_;
};

}  // namespace ctg::cuda
