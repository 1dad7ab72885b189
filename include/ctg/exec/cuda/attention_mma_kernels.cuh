#pragma once
// The tensor-core kernels of fused attention: each is its body from
// exec/cuda/attention_mma.hpp run by a CUDA thread, with its shared tiles.
// mma.sync.m16n8k16 needs compute capability 8.0 or newer (as bf16 does).
#include <cstdint>

#include <ctg/exec/cuda/attention_mma.hpp>
#include <ctg/exec/cuda/data_kernels.cuh>

namespace ctg::cuda::kernels {

namespace tensor_cores {
// The thread context of attention_mma.hpp's bodies on the device. (Each
// member is host-device with an empty host side, so the bodies, which are
// host-device for the CPU's emulated warps, compile for both.)
struct device_thread {
  CTG_HD int thread() const {
#ifdef __CUDA_ARCH__
    return static_cast<int>(threadIdx.x);
#else
    return 0;
#endif
  }
  CTG_HD dim_t block() const {
#ifdef __CUDA_ARCH__
    return static_cast<dim_t>(blockIdx.x);
#else
    return 0;
#endif
  }
  CTG_HD void sync() const {
#ifdef __CUDA_ARCH__
    __syncthreads();
#endif
  }
  CTG_HD float shfl_xor(float v, int mask) const {
#ifdef __CUDA_ARCH__
    return __shfl_xor_sync(0xffffffffu, v, mask);
#else
    (void)mask;
    return v;
#endif
  }
  // d += a b: bf16 or f16 inputs, f32 accumulators.
  template <class E>
  CTG_HD void mma(float (&d)[4], const std::uint32_t (&a)[4], const std::uint32_t (&b)[2]) const {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    if constexpr (std::is_same_v<E, bf16>)
      asm volatile(
          "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
          "{%0, %1, %2, %3};\n"
          : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
          : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    else
      asm volatile(
          "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
          "{%0, %1, %2, %3};\n"
          : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
          : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#elif defined(__CUDA_ARCH__)
    (void)d, (void)a, (void)b;
    __trap();  // (no mma.sync m16n8k16 before compute capability 8.0: the launch fails, a ctg::error)
#else
    (void)d, (void)a, (void)b;
#endif
  }
};
using tiles = attention_mma_tiles;
}  // namespace tensor_cores

// Each kernel's tiles in its dynamic shared memory, as attention_mma_tiles::shared_bytes lays them out (over 48 KB
// for heads of 128 features: the launch allows it, exec/cuda/store.cuh).
template <class Ts, int F>  // <T, C>: C is f32
__global__ void __launch_bounds__(attention_mma_tiles::threads)
    attention_lse_tc(const type_at<Ts, 0>* q, const type_at<Ts, 0>* k, type_at<Ts, 1>* lse,
                     ctg::detail::attention_heads a) {
  extern __shared__ __align__(16) std::uint16_t shared_tiles[];
  cuda::attention_lse_mma<type_at<Ts, 0>, F>(tensor_cores::device_thread{}, shared_tiles, q, k, lse, a);
}

template <class Ts, int F>  // <T, C>: C is f32
__global__ void __launch_bounds__(attention_mma_tiles::threads)
    attention_out_tc(const type_at<Ts, 0>* q, const type_at<Ts, 0>* k, const type_at<Ts, 0>* v,
                     const type_at<Ts, 1>* lse, type_at<Ts, 0>* out, ctg::detail::attention_heads a) {
  extern __shared__ __align__(16) std::uint16_t shared_tiles[];
  std::uint16_t* tile = shared_tiles;
  std::uint16_t* vt = tile + tensor_cores::tiles::token_major_size(F);
  cuda::attention_out_mma<type_at<Ts, 0>, F>(tensor_cores::device_thread{}, tile, vt, q, k, v, lse, out, a);
}

template <class Ts, int F>  // <T, C>: C is f32
__global__ void __launch_bounds__(attention_mma_tiles::threads)
    attention_dq_tc(const type_at<Ts, 0>* q, const type_at<Ts, 0>* k, const type_at<Ts, 0>* v,
                    const type_at<Ts, 1>* lse, const type_at<Ts, 0>* g, const type_at<Ts, 1>* delta, type_at<Ts, 0>* dq,
                    ctg::detail::attention_heads a) {
  extern __shared__ __align__(16) std::uint16_t shared_tiles[];
  std::uint16_t* tile = shared_tiles;
  std::uint16_t* vs = tile + tensor_cores::tiles::token_major_size(F);
  std::uint16_t* kt = vs + tensor_cores::tiles::token_major_size(F);
  cuda::attention_dq_mma<type_at<Ts, 0>, F>(tensor_cores::device_thread{}, tile, vs, kt, q, k, v, lse, g, delta, dq, a);
}

template <class Ts, int F>  // <T, C>: C is f32
__global__ void __launch_bounds__(attention_mma_tiles::threads)
    attention_dkv_tc(const type_at<Ts, 0>* q, const type_at<Ts, 0>* k, const type_at<Ts, 0>* v,
                     const type_at<Ts, 1>* lse, const type_at<Ts, 0>* g, const type_at<Ts, 1>* delta,
                     type_at<Ts, 0>* dk, type_at<Ts, 0>* dv, ctg::detail::attention_heads a) {
  extern __shared__ __align__(16) std::uint16_t shared_tiles[];
  std::uint16_t* qs = shared_tiles;
  std::uint16_t* gs = qs + tensor_cores::tiles::token_major_size(F);
  std::uint16_t* qt = gs + tensor_cores::tiles::token_major_size(F);
  std::uint16_t* gt = qt + tensor_cores::tiles::feature_major_size(F);
  float* stats = reinterpret_cast<float*>(gt + tensor_cores::tiles::feature_major_size(F));
  cuda::attention_dkv_mma<type_at<Ts, 0>, F>(tensor_cores::device_thread{}, qs, gs, qt, gt, stats, q, k, v, lse, g,
                                             delta, dk, dv, a);
}

}  // namespace ctg::cuda::kernels
