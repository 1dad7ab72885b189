#pragma once
// CPU matrix multiply for the CPU backend: C[M,N] = A[M,K] B[K,N], row-major,
// leading dims K, N, N.
//
//   ctg::cpu::gemm_workspace ws;          // keep it: scratch is reused
//   ctg::cpu::gemm(M, N, K, a, b, c, ws); // a: TA*, b: TB*, c: TC*
//
// Numerics. Every output is one f32 fused multiply-add chain in k order,
//   acc = +0; for k = 0..K-1: acc = fma(A[i,k], B[k,j], acc); C[i,j] = TC(acc),
// with bf16/f16 operands converted to f32 exactly. The kernels below only
// change how many such chains run side by side, never the operations of one,
// so the bits depend on (M, N, K, inputs) alone: not on alignment, on the
// workspace's history, on the blocking, nor on which kernel the CPU selects
// (the portable path uses std::fma, the same correctly rounded operation), so
// they agree across machines too. f64 results accumulate in f64 in a plain
// loop (finite-difference tests): deterministic, but whether the compiler
// fuses its multiply-add depends on the build flags.
//
// Speed. B is packed once per call into panels of NR columns (converted to
// f32, zero-padded), and a register-blocked micro-kernel computes MR x NR
// tiles with A broadcast from its rows. The kernels are compiled for
// AVX-512 / AVX2+FMA with target attributes and selected once per process
// with __builtin_cpu_supports, so the default (non -march=native) build gets
// them too; other compilers and nvcc's host pass see the portable kernel.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <memory>
#include <type_traits>
#include <vector>

#include <ctg/core/config.hpp>
#include <ctg/core/shape.hpp>
#include <ctg/core/dtype_rules.hpp>

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__)) && !defined(__CUDACC__)
#define CTG_GEMM_X86 1
#include <immintrin.h>

CTG_HOT_BEGIN
#else
#define CTG_GEMM_X86 0
#endif

namespace ctg::cpu {

// Reusable scratch of gemm: packed B panels and A converted to f32. Grows to
// the largest call seen and is never shrunk, so calls allocate nothing after
// warm-up. Its contents never influence results (everything read is written
// first by the same call). Not shared between threads.
class gemm_workspace {
 public:
  // 64-byte aligned room for n floats, valid until the next call of the same function.
  float* packed_b(std::size_t n) { return room(b_, n); }
  float* a_f32(std::size_t n) { return room(a_, n); }

 private:
  static constexpr std::size_t align_floats = 16;
  static float* room(std::vector<float>& v, std::size_t n) {
    if (v.size() < n + align_floats) v.resize(n + align_floats);
    void* p = v.data();
    std::size_t space = v.size() * sizeof(float);
    return static_cast<float*>(std::align(64, n * sizeof(float), p, space));
  }
  std::vector<float> a_, b_;
};

}  // namespace ctg::cpu

// The internals live in ctg::detail: a ctg::cpu::detail would hide ctg::detail
// from the unqualified detail:: names in the rest of the CPU backend.
namespace ctg::detail {

// One micro-kernel call: the tile C[0:mr, 0:nr] (ldc apart) from K steps of
// rows a[0..MR-1] (f32, k contiguous; rows past mr repeat a valid row) and a
// packed panel b (K rows of NR floats). Rows >= mr and columns >= nr are
// computed on padding and not stored.
using gemm_tile_fn = void (*)(dim_t K, const float* const* a, const float* b, float* c, dim_t ldc, int mr, int nr);

// The kernels of one instruction set: MR rows; panels nr_wide columns wide,
// the last one nr_narrow wide when the remainder fits (N = 16 would waste half
// of a 32-wide panel).
struct gemm_kernels {
  int mr;
  int nr_wide, nr_narrow;
  gemm_tile_fn wide, narrow;
};
inline constexpr int gemm_max_mr = 8, gemm_max_tile = 8 * 32;  // largest mr, mr * nr_wide below

enum class gemm_isa { portable, avx2, avx512 };

template <int MR, int NR>
void gemm_tile_portable(dim_t K, const float* const* a, const float* b, float* c, dim_t ldc, int mr, int nr) {
  float acc[MR][NR] = {};
  for (dim_t k = 0; k < K; ++k, b += NR)
    for (int r = 0; r < MR; ++r) {
      const float av = a[r][k];
      for (int j = 0; j < NR; ++j) acc[r][j] = std::fma(av, b[j], acc[r][j]);
    }
  for (int r = 0; r < mr; ++r)
    for (int j = 0; j < nr; ++j) c[r * ldc + j] = acc[r][j];
}

#if CTG_GEMM_X86
// The loops over r and v are unrolled so the accumulators stay in registers
// (an array indexed at run time would live in memory).
template <int MR, int NV>
__attribute__((target("avx512f,fma"))) void gemm_tile_avx512(dim_t K, const float* const* a, const float* b, float* c,
                                                              dim_t ldc, int mr, int nr) {
  const float* ar[MR];
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r) ar[r] = a[r];
  __m512 acc[MR][NV];
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_ps();
  for (dim_t k = 0; k < K; ++k, b += 16 * NV) {
    __m512 bv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) bv[v] = _mm512_loadu_ps(b + 16 * v);
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r) {
      const __m512 av = _mm512_set1_ps(ar[r][k]);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_fmadd_ps(av, bv[v], acc[r][v]);
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r) {
    if (r >= mr) break;
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      const int lanes = std::min(nr - 16 * v, 16);
      if (lanes == 16) _mm512_storeu_ps(c + r * ldc + 16 * v, acc[r][v]);
      else if (lanes > 0) _mm512_mask_storeu_ps(c + r * ldc + 16 * v, __mmask16((1u << lanes) - 1), acc[r][v]);
    }
  }
}

template <int MR, int NV>
__attribute__((target("avx2,fma"))) void gemm_tile_avx2(dim_t K, const float* const* a, const float* b, float* c,
                                                         dim_t ldc, int mr, int nr) {
  const float* ar[MR];
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r) ar[r] = a[r];
  __m256 acc[MR][NV];
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm256_setzero_ps();
  for (dim_t k = 0; k < K; ++k, b += 8 * NV) {
    __m256 bv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) bv[v] = _mm256_loadu_ps(b + 8 * v);
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r) {
      const __m256 av = _mm256_set1_ps(ar[r][k]);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm256_fmadd_ps(av, bv[v], acc[r][v]);
    }
  }
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r) {
    if (r >= mr) break;
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      const int lanes = std::min(nr - 8 * v, 8);
      if (lanes == 8) _mm256_storeu_ps(c + r * ldc + 8 * v, acc[r][v]);
      else if (lanes > 0)
        _mm256_maskstore_ps(c + r * ldc + 8 * v, _mm256_cmpgt_epi32(_mm256_set1_epi32(lanes), lane), acc[r][v]);
    }
  }
}
#endif

inline gemm_kernels gemm_kernels_for(gemm_isa isa) {
  switch (isa) {
#if CTG_GEMM_X86
    case gemm_isa::avx512: return {8, 32, 16, gemm_tile_avx512<8, 2>, gemm_tile_avx512<8, 1>};
    case gemm_isa::avx2: return {6, 16, 8, gemm_tile_avx2<6, 2>, gemm_tile_avx2<6, 1>};
#endif
    default: return {4, 8, 8, gemm_tile_portable<4, 8>, gemm_tile_portable<4, 8>};
  }
}

inline bool gemm_isa_available(gemm_isa isa) {
#if CTG_GEMM_X86
  __builtin_cpu_init();
  if (isa == gemm_isa::avx512) return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("fma");
  if (isa == gemm_isa::avx2) return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#endif
  return isa == gemm_isa::portable;
}

// The widest available kernel set, chosen once per process.
inline gemm_isa gemm_best_isa() {
  static const gemm_isa best = gemm_isa_available(gemm_isa::avx512) ? gemm_isa::avx512
                               : gemm_isa_available(gemm_isa::avx2) ? gemm_isa::avx2
                                                                    : gemm_isa::portable;
  return best;
}

// Width of the panel starting at column j0.
inline int gemm_panel_width(const gemm_kernels& ks, dim_t N, dim_t j0) {
  return N - j0 > ks.nr_narrow ? ks.nr_wide : ks.nr_narrow;
}

// B[K,N] -> panels of K x width floats, one after the other, columns past N zero.
template <class TB>
void gemm_pack_b(const gemm_kernels& ks, dim_t N, dim_t K, const TB* B, float* out) {
  for (dim_t j0 = 0; j0 < N; j0 += gemm_panel_width(ks, N, j0)) {
    const int w = gemm_panel_width(ks, N, j0);
    const int valid = static_cast<int>(std::min<dim_t>(w, N - j0));
    for (dim_t k = 0; k < K; ++k, out += w) {
      const TB* row = B + k * N + j0;
      for (int j = 0; j < valid; ++j) out[j] = load_as<TB>(row[j]);
      for (int j = valid; j < w; ++j) out[j] = 0.0f;
    }
  }
}

// Every tile of C from f32 rows of A (lda apart) and packed B. Tiles of a
// narrow C go through an f32 buffer and are rounded once.
template <class TC>
void gemm_tiles(const gemm_kernels& ks, dim_t M, dim_t N, dim_t K, const float* A, dim_t lda, const float* bp, TC* C) {
  float tile[gemm_max_tile];
  const float* rows[gemm_max_mr];
  for (dim_t j0 = 0; j0 < N; j0 += gemm_panel_width(ks, N, j0)) {
    const int w = gemm_panel_width(ks, N, j0);
    const int nr = static_cast<int>(std::min<dim_t>(w, N - j0));
    const gemm_tile_fn fn = w == ks.nr_wide ? ks.wide : ks.narrow;
    for (dim_t i0 = 0; i0 < M; i0 += ks.mr) {
      const int mr = static_cast<int>(std::min<dim_t>(ks.mr, M - i0));
      for (int r = 0; r < ks.mr; ++r) rows[r] = A + (i0 + std::min(r, mr - 1)) * lda;
      if constexpr (std::is_same_v<TC, f32>) {
        fn(K, rows, bp, C + i0 * N + j0, N, mr, nr);
      } else {
        fn(K, rows, bp, tile, nr, mr, nr);
        for (int r = 0; r < mr; ++r)
          for (int j = 0; j < nr; ++j) C[(i0 + r) * N + j0 + j] = store_as<TC>(tile[r * nr + j]);
      }
    }
    bp += K * w;
  }
}

// f64 results: a plain i-k-j loop accumulating in C.
template <class TA, class TB>
void gemm_f64(dim_t M, dim_t N, dim_t K, const TA* A, const TB* B, f64* C) {
  for (dim_t i = 0; i < M; ++i) {
    f64* c = C + i * N;
    std::fill(c, c + N, 0.0);
    for (dim_t k = 0; k < K; ++k) {
      const f64 av = load_as<TA>(A[i * K + k]);
      const TB* b = B + k * N;
      for (dim_t j = 0; j < N; ++j) c[j] += av * static_cast<f64>(load_as<TB>(b[j]));
    }
  }
}

// gemm with a given kernel set (tests compare the sets; gemm picks the best).
template <class TA, class TB, class TC>
void gemm_with(gemm_isa isa, dim_t M, dim_t N, dim_t K, const TA* A, const TB* B, TC* C, cpu::gemm_workspace& ws) {
  if constexpr (std::is_same_v<TC, f64>) {
    gemm_f64(M, N, K, A, B, C);
  } else {
    static_assert(std::is_same_v<compute_t<TC>, f32>);
    if (M <= 0 || N <= 0) return;
    const gemm_kernels ks = gemm_kernels_for(isa);
    float* bp = ws.packed_b(static_cast<std::size_t>((N + ks.nr_wide) * K));
    gemm_pack_b(ks, N, K, B, bp);
    const float* a = nullptr;
    if constexpr (std::is_same_v<TA, f32>) {
      a = A;
    } else {
      float* a32 = ws.a_f32(static_cast<std::size_t>(M * K));
      for (dim_t e = 0; e < M * K; ++e) a32[e] = load_as<TA>(A[e]);
      a = a32;
    }
    gemm_tiles(ks, M, N, K, a, K, bp, C);
  }
}

}  // namespace ctg::detail

namespace ctg::cpu {

// C[M,N] = A[M,K] * B[K,N] (row-major, leading dims K, N, N), accumulated in
// compute_t<TC>, each output rounded once to TC (see the top of this file).
template <class TA, class TB, class TC>
void gemm(dim_t M, dim_t N, dim_t K, const TA* A, const TB* B, TC* C, gemm_workspace& ws) {
  detail::gemm_with(detail::gemm_best_isa(), M, N, K, A, B, C, ws);
}

}  // namespace ctg::cpu

#undef CTG_GEMM_X86

CTG_HOT_END
