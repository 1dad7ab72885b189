#pragma once
// CPU matrix multiply for the CPU backend: C[M,N] = op(A) op(B), row-major,
// op(A) M x K and op(B) K x N; op is the identity or (a gemm_layout flag) the
// transpose, read where the operand lies: A is stored [M,K] or [K,M], B [K,N]
// or [N,K].
//
//   ctg::cpu::gemm_workspace ws;                // keep it: scratch is reused
//   ctg::cpu::gemm(M, N, K, a, b, c, ws);       // a: TA*, b: TB*, c: TC*
//   ctg::cpu::gemm(M, N, K, a, b, c, ws, pool); // the same bits, on a thread_pool
//   ctg::cpu::gemm(M, N, K, a, b, c, ws, pool, {.transpose_a = true});  // A^T B
//   ctg::cpu::gemm(M, N, K, a, b, c, ws, pool, {.add_to_c = true});      // C += A B (f32 or f64 C)
//   ctg::cpu::gemm_sharing_b(M, N, K, a, b, c, {a_offsets, c_offsets, n}, ws);  // n products, one B
//
// Numerics. Every output is one f32 fused multiply-add chain in k order,
//   acc = +0; for k = 0..K-1: acc = fma(A[i,k], B[k,j], acc); C[i,j] = TC(acc),
// with bf16/f16 operands converted to f32 exactly. The kernels below only
// change how many such chains run side by side, never the operations of one,
// so the bits depend on (M, N, K, inputs) alone: not on alignment, on the
// workspace's history, on the blocking, on the number of threads (they split
// C's rows and columns, never k), nor on which kernel the CPU selects (the
// portable path uses std::fma, the same correctly rounded operation), so they
// agree across machines too.
//
// One exception, for speed: when both operands are bf16 and the CPU has
// AVX512-BF16, the product runs on vdpbf16ps, which takes k in pairs. Its
// chain, per output (as Intel's SDM specifies the instruction; measured
// bit for bit on AMD Zen 4 too):
//   acc = +0; for p = 0..ceil(K/2)-1:
//     acc = ftz(fma(A[i,2p+1], B[2p+1,j], acc)); acc = ftz(fma(A[i,2p], B[2p,j], acc));
//   C[i,j] = TC(acc)
// (the odd k of a pair first; an odd K pads with a zero pair; bf16 subnormal
// operands read as zero and subnormal partial sums flush to zero, whatever
// MXCSR says). The same f32 roundings as the chain above, in another order,
// so the same error bound; but the bits of a bf16 x bf16 product then depend
// on the CPU having AVX512-BF16 (detail::gemm_bf16_pairs_reference writes
// that chain out; tests compare the kernel with it bit for bit). Still
// independent of threads, alignment and blocking.
//
// f64 results accumulate in f64 in a plain loop (finite-difference tests):
// deterministic, but whether the compiler fuses its multiply-add depends on
// the build flags.
//
// Transposed operands change only where values are read, so A^T B gives the
// bits of transposing A first.
//
// Speed. B is packed once per call into panels of NR columns (converted to
// f32, zero-padded; for vdpbf16ps, pairs of bf16 rows interleaved), and a
// register-blocked micro-kernel computes MR x NR tiles with A broadcast from
// its rows: row r's value k at a[r][k * a_step]. A's rows are read in place
// (f32) or converted to f32 rows first; a transposed A is copied first, its
// columns packed by tile of MR rows (value k of the tile's rows side by side:
// a_step MR), so a tile's K steps are one run of memory where in place they
// lay M apart, a cache line each (x^T g, the weight gradients' products, ran
// 1.6x slower that way); for vdpbf16ps the same, each row's pairs together.
// With a pool, the tiles are cut into blocks of rows and columns (tasks)
// that the threads share. The kernels are compiled for AVX-512 /
// AVX512-BF16 / AVX2+FMA with target attributes and selected once per process
// with __builtin_cpu_supports, so the default (non -march=native) build gets
// them too; other compilers and nvcc's host pass see the portable kernel.
// A product of few rows against a transposed B is computed transposed
// (gemm_computed_transposed below), so that only the small operand is packed.
// Products that share B (a batched matmul whose B broadcasts over some batch
// dims: x @ W over a batch, or one head's weight over the batch) pack it
// once for all of them (gemm_sharing_b); each output is still the chain
// above.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <type_traits>
#include <vector>

#include <ctg/core/config.hpp>
#include <ctg/core/shape.hpp>
#include <ctg/core/dtype_rules.hpp>
#include <ctg/core/dtypes.hpp>
#include <ctg/core/error.hpp>
#include <ctg/exec/cpu/thread_pool.hpp>
#include <ctg/exec/cpu/transpose.hpp>

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__)) && !defined(__CUDACC__)
#define CTG_GEMM_X86 1
#include <immintrin.h>

CTG_HOT_BEGIN
#else
#define CTG_GEMM_X86 0
#endif

namespace ctg::cpu {

// Which operands a gemm reads transposed (A stored [K,M], B stored [N,K]);
// add_to_c: C += op(A) op(B), each output's chain starting from C's value
// instead of +0 (an f32 or f64 C: a sum of products, as the products of a
// batch summed into one result continue one chain over the batches).
struct gemm_layout {
  bool transpose_a = false, transpose_b = false;
  bool add_to_c = false;
};

// Products that read one B: product p reads op(A) at A + a_offset[p] and
// writes C + c_offset[p] (offsets in elements). The default: one, at A and C.
struct gemm_products {
  const dim_t* a_offset = nullptr;
  const dim_t* c_offset = nullptr;
  dim_t count = 1;
  dim_t a_at(dim_t p) const { return a_offset ? a_offset[p] : 0; }
  dim_t c_at(dim_t p) const { return c_offset ? c_offset[p] : 0; }
};

// Reusable scratch of gemm: packed B panels, and per thread A's rows
// converted to f32 (or padded, or paired). Grows to the largest call seen and
// is never shrunk, so calls allocate nothing after warm-up. Its contents never
// influence results (everything read is written first by the same call). One
// gemm at a time uses it (its threads each take their own rows).
class gemm_workspace {
 public:
  // 64-byte aligned room for n floats, valid until the next call of the same function.
  float* packed_b(std::size_t n) { return room(b_, n); }
  // The same for thread `worker` (< the count given to workers()).
  float* a_f32(std::size_t n, unsigned worker = 0) { return room(a_[worker], n); }
  // A narrow C's f32 accumulators, for thread `worker`.
  float* c_f32(std::size_t n, unsigned worker = 0) { return room(c_[worker], n); }
  // Room for n values of C's type: a product computed transposed (C^T).
  template <class TC>
  TC* transposed_c(std::size_t n) {
    return reinterpret_cast<TC*>(room(ct_, (n * sizeof(TC) + sizeof(float) - 1) / sizeof(float)));
  }
  // Make room for that many threads' scratch (before they start).
  void workers(unsigned n) {
    if (a_.size() < n) a_.resize(n);
    if (c_.size() < n) c_.resize(n);
  }

 private:
  static constexpr std::size_t align_floats = 16;
  static float* room(std::vector<float>& v, std::size_t n) {
    if (v.size() < n + align_floats) v.resize(n + align_floats);
    void* p = v.data();
    std::size_t space = v.size() * sizeof(float);
    return static_cast<float*>(std::align(64, n * sizeof(float), p, space));
  }
  std::vector<std::vector<float>> a_ = std::vector<std::vector<float>>(1), c_ = std::vector<std::vector<float>>(1);
  std::vector<float> b_, ct_;
};

}  // namespace ctg::cpu

// The internals live in ctg::detail: a ctg::cpu::detail would hide ctg::detail
// from the unqualified detail:: names in the rest of the CPU backend.
namespace ctg::detail {

// One micro-kernel call: the tile C[0:mr, 0:nr] (ldc apart) from K steps of
// rows a[0..MR-1] (f32, value k at a[r][k * a_step]; rows past mr repeat a
// valid row) and a packed panel b (K rows of NR floats). Rows >= mr and
// columns >= nr are computed on padding and not stored. With `carry`, the
// chains start from the tile's f32 values in c (a previous block of k's
// sums: stored and loaded exactly, so the chain is the one over all k) instead of +0.
using gemm_tile_fn = void (*)(dim_t K, const float* const* a, dim_t a_step, const float* b, float* c, dim_t ldc, int mr,
                              int nr, bool carry);

// The kernels of one instruction set: MR rows; panels nr_wide columns wide,
// the last one nr_narrow wide when the remainder fits (N = 16 would waste half
// of a 32-wide panel).
struct gemm_kernels {
  using out_type = float;
  int mr;
  int nr_wide, nr_narrow;
  gemm_tile_fn wide, narrow;
};
inline constexpr int gemm_max_mr = 8;  // the largest mr below

// avx512_bf16: the avx512 kernels, and vdpbf16ps for bf16 x bf16 products.
enum class gemm_isa { portable, avx2, avx512, avx512_bf16 };

template <int MR, int NR>
void gemm_tile_portable(dim_t K, const float* const* a, dim_t a_step, const float* b, float* c, dim_t ldc, int mr,
                        int nr, bool carry) {
  float acc[MR][NR] = {};
  if (carry)
    for (int r = 0; r < mr; ++r)
      for (int j = 0; j < nr; ++j) acc[r][j] = c[r * ldc + j];
  for (dim_t k = 0, at = 0; k < K; ++k, at += a_step, b += NR)
    for (int r = 0; r < MR; ++r) {
      const float av = a[r][at];
      for (int j = 0; j < NR; ++j) acc[r][j] = std::fma(av, b[j], acc[r][j]);
    }
  for (int r = 0; r < mr; ++r)
    for (int j = 0; j < nr; ++j) c[r * ldc + j] = acc[r][j];
}

#if CTG_GEMM_X86
// The loops over r and v are unrolled so the accumulators stay in registers
// (an array indexed at run time would live in memory).
template <int MR, int NV>
__attribute__((target("avx512f,fma"))) void gemm_tile_avx512(dim_t K, const float* const* a, dim_t a_step,
                                                             const float* b, float* c, dim_t ldc, int mr, int nr,
                                                             bool carry) {
  const float* ar[MR];
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r) ar[r] = a[r];
  __m512 acc[MR][NV];
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      const int lanes = std::min(nr - 16 * v, 16);
      acc[r][v] =
          carry && r < mr && lanes > 0
              ? _mm512_maskz_loadu_ps(__mmask16(lanes == 16 ? 0xFFFFu : (1u << lanes) - 1), c + r * ldc + 16 * v)
              : _mm512_setzero_ps();
    }
  for (dim_t k = 0, at = 0; k < K; ++k, at += a_step, b += 16 * NV) {
    __m512 bv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) bv[v] = _mm512_loadu_ps(b + 16 * v);
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r) {
      const __m512 av = _mm512_set1_ps(ar[r][at]);
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
__attribute__((target("avx2,fma"))) void gemm_tile_avx2(dim_t K, const float* const* a, dim_t a_step, const float* b,
                                                         float* c, dim_t ldc, int mr, int nr, bool carry) {
  const float* ar[MR];
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r) ar[r] = a[r];
  __m256 acc[MR][NV];
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      const int lanes = std::min(nr - 8 * v, 8);
      acc[r][v] = carry && r < mr && lanes > 0
                      ? _mm256_maskload_ps(c + r * ldc + 8 * v, _mm256_cmpgt_epi32(_mm256_set1_epi32(lanes), lane))
                      : _mm256_setzero_ps();
    }
  for (dim_t k = 0, at = 0; k < K; ++k, at += a_step, b += 8 * NV) {
    __m256 bv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) bv[v] = _mm256_loadu_ps(b + 8 * v);
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r) {
      const __m256 av = _mm256_set1_ps(ar[r][at]);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm256_fmadd_ps(av, bv[v], acc[r][v]);
    }
  }
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

// vdpbf16ps tiles: K2 = ceil(K/2) steps; a[r] points at row r's bf16 pairs
// (pair p at a[r] + p * a_step, in bf16 values: 2 for a row of A, an odd K
// padded), b at a panel of K2 rows of NV*16 dwords (bf16 pairs, the even k
// in the low half). See the top of this file for the chain each output runs.
// TC: float, or bf16 (each sum rounded in registers as f32_to_bf16_bits does:
// to nearest even, any NaN to 0x7FFF). With `carry` (float only) the chains
// start from c's values, as gemm_tile_fn's do.
// (g++ 12's intrinsics start some results from a self-initialized
// "undefined" register, which -Wmaybe-uninitialized reports once inlined.)
#pragma GCC diagnostic push
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
template <int MR, int NV, class TC>
__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) void gemm_tile_bf16(
    dim_t K2, const std::uint16_t* const* a, dim_t a_step, const std::uint32_t* b, TC* c, dim_t ldc, int mr, int nr,
    bool carry) {
  const std::uint16_t* ar[MR];
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r) ar[r] = a[r];
  __m512 acc[MR][NV];
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      acc[r][v] = _mm512_setzero_ps();
      if constexpr (std::is_same_v<TC, float>) {
        const int lanes = std::min(nr - 16 * v, 16);
        if (carry && r < mr && lanes > 0)
          acc[r][v] =
              _mm512_maskz_loadu_ps(__mmask16(lanes == 16 ? 0xFFFFu : (1u << lanes) - 1), c + r * ldc + 16 * v);
      }
    }
  for (dim_t p = 0, at = 0; p < K2; ++p, at += a_step, b += 16 * NV) {
    __m512bh bv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) bv[v] = __builtin_bit_cast(__m512bh, _mm512_loadu_si512(b + 16 * v));
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r) {
      std::int32_t pair;
      std::memcpy(&pair, ar[r] + at, sizeof pair);
      const __m512bh av = __builtin_bit_cast(__m512bh, _mm512_set1_epi32(pair));
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], av, bv[v]);
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r) {
    if (r >= mr) break;
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      const int lanes = std::min(nr - 16 * v, 16);
      if (lanes <= 0) continue;
      const __mmask16 m = lanes == 16 ? __mmask16(0xFFFF) : __mmask16((1u << lanes) - 1);
      if constexpr (std::is_same_v<TC, float>) {
        _mm512_mask_storeu_ps(c + r * ldc + 16 * v, m, acc[r][v]);
      } else {
        const __m512i u = _mm512_castps_si512(acc[r][v]);
        const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
        __m512i h = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7FFF)), lsb), 16);
        const __mmask16 nan =
            _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7FFFFFFF)), _mm512_set1_epi32(0x7F800000));
        h = _mm512_mask_mov_epi32(h, nan, _mm512_set1_epi32(0x7FFF));
        _mm256_mask_storeu_epi16(c + r * ldc + 16 * v, m, _mm512_cvtepi32_epi16(h));
      }
    }
  }
}
#pragma GCC diagnostic pop
#endif

inline gemm_kernels gemm_kernels_for(gemm_isa isa) {
  switch (isa) {
#if CTG_GEMM_X86
    case gemm_isa::avx512_bf16:
    case gemm_isa::avx512: return {8, 32, 16, gemm_tile_avx512<8, 2>, gemm_tile_avx512<8, 1>};
    case gemm_isa::avx2: return {6, 16, 8, gemm_tile_avx2<6, 2>, gemm_tile_avx2<6, 1>};
#endif
    default: return {4, 8, 8, gemm_tile_portable<4, 8>, gemm_tile_portable<4, 8>};
  }
}

// The vdpbf16ps tiles (8 x 32 and 8 x 16), with f32 or bf16 results.
template <class TC>
using gemm_tile_bf16_fn = void (*)(dim_t K2, const std::uint16_t* const* a, dim_t a_step, const std::uint32_t* b,
                                   TC* c, dim_t ldc, int mr, int nr, bool carry);
template <class TC>
struct gemm_bf16_kernels {
  using out_type = TC;
  int mr = 8, nr_wide = 32, nr_narrow = 16;
  gemm_tile_bf16_fn<TC> wide = nullptr, narrow = nullptr;
};
template <class TC>
gemm_bf16_kernels<TC> gemm_bf16_kernels_for() {
#if CTG_GEMM_X86
  return {8, 32, 16, gemm_tile_bf16<8, 2, TC>, gemm_tile_bf16<8, 1, TC>};
#else
  return {};
#endif
}

inline bool gemm_isa_available(gemm_isa isa) {
#if CTG_GEMM_X86
  __builtin_cpu_init();
  if (isa == gemm_isa::avx512_bf16)
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("fma") &&
           __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
           __builtin_cpu_supports("avx512bf16");
  if (isa == gemm_isa::avx512) return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("fma");
  if (isa == gemm_isa::avx2) return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#endif
  return isa == gemm_isa::portable;
}

// The widest available kernel set, chosen once per process.
inline gemm_isa gemm_best_isa() {
  static const gemm_isa best = gemm_isa_available(gemm_isa::avx512_bf16) ? gemm_isa::avx512_bf16
                               : gemm_isa_available(gemm_isa::avx512)    ? gemm_isa::avx512
                               : gemm_isa_available(gemm_isa::avx2)      ? gemm_isa::avx2
                                                                         : gemm_isa::portable;
  return best;
}

// Width of the panel starting at column j0 (every panel but the last is wide).
inline int gemm_panel_width(int nr_wide, int nr_narrow, dim_t N, dim_t j0) {
  return N - j0 > nr_narrow ? nr_wide : nr_narrow;
}
inline dim_t gemm_panels(int nr_wide, int nr_narrow, dim_t N) {
  dim_t panels = 0;
  for (dim_t j0 = 0; j0 < N; j0 += gemm_panel_width(nr_wide, nr_narrow, N, j0)) ++panels;
  return panels;
}

// Where K is long (over gemm_long_k steps), a task's work is cut in three
// levels so that what is read again stays in L2 (2 MB a core on the Xeons
// measured): chunks of gemm_chunk_panels panels; in each, k by gemm_k_block
// steps (a panel's slice of them: 512 x 32 floats, 64 KB; the chunk's, 1
// MB); in each, rows by gemm_row_block (A's slice: 128 x 512 floats, 256
// KB), every panel of the chunk over them. (A whole panel of the LM head's
// backward, K = 50304, is 6.4 MB: it streamed from memory once per tile of 8
// rows.) Between blocks of k the accumulators wait in C (an f32 C) or in an
// f32 block, exactly, so each output is still one chain in k order. Shorter
// K keeps one block of each: panel by panel, every tile over all of K (the
// blocks measured slower there: 0.86x at 8192 x 2048 x 768). vdpbf16ps
// steps are pairs of k, a panel's row as many bytes as an f32 step's: the
// same blocks, in pairs (the LM head's backward 1.1x faster on two threads).
inline constexpr dim_t gemm_long_k = 2048, gemm_k_block = 512, gemm_row_block = 128, gemm_chunk_panels = 16;

// Room gemm_tiles' f32 block takes for a task's rows over `panels` panels.
template <class Kernels>
std::size_t gemm_block_floats(const Kernels& ks, dim_t rows, dim_t panels) {
  return static_cast<std::size_t>(rows * std::min(panels, gemm_chunk_panels) * ks.nr_wide);
}

// How products are cut for threads: each product, blocks of rows (a
// multiple of mr) times groups of panels. Tasks never split k, so they change
// no result.
struct gemm_split {
  dim_t row_block = 0, row_blocks = 1, panel_group = 0, panel_groups = 1, products = 1;
  std::size_t per_product() const { return static_cast<std::size_t>(row_blocks * panel_groups); }
  std::size_t tasks() const { return static_cast<std::size_t>(products) * per_product(); }
};
inline gemm_split gemm_split_for(dim_t M, dim_t N, dim_t K, int mr, dim_t panels, dim_t products,
                                 const cpu::thread_pool* pool) {
  gemm_split s;
  s.row_block = M;
  s.panel_group = panels;
  s.products = products;
  const unsigned threads = pool ? pool->size() : 1;
  // Below ~a million multiply-adds, waking threads costs more than it saves.
  if (threads <= 1 || M * N * K * products < (dim_t(1) << 20)) return s;
  // A few tasks per thread (the shared machine balances them), counting the products'.
  const dim_t want = (4 * static_cast<dim_t>(threads) + products - 1) / products;
  const dim_t tiles_m = (M + mr - 1) / mr;
  const dim_t rb = std::min(tiles_m, want);
  s.row_block = (tiles_m + rb - 1) / rb * mr;
  s.row_blocks = (M + s.row_block - 1) / s.row_block;
  if (s.row_blocks < want) {
    const dim_t pg = std::min(panels, (want + s.row_blocks - 1) / s.row_blocks);
    s.panel_group = (panels + pg - 1) / pg;
    s.panel_groups = (panels + s.panel_group - 1) / s.panel_group;
  }
  return s;
}

// Rows of k (or pairs) a transposed B is packed by at a time: the block's
// reads (one run per column) and writes (one row per k) stay in L1.
inline constexpr dim_t gemm_transpose_block = 16;

// A bf16 pair as vdpbf16ps reads it: the even k in the low half.
inline std::uint32_t bf16_pair(bf16 lo, bf16 hi) { return std::uint32_t(lo.bits) | std::uint32_t(hi.bits) << 16; }

// Panels [p0, p1) of op(B) (K x N; B stored [K,N], or [N,K] transposed) ->
// K x width floats each, columns past N zero.
template <class TB>
void gemm_pack_b(const gemm_kernels& ks, dim_t N, dim_t K, const TB* B, bool transposed, float* out, dim_t p0,
                 dim_t p1) {
  for (dim_t p = p0; p < p1; ++p) {
    const dim_t j0 = p * ks.nr_wide;
    const int w = gemm_panel_width(ks.nr_wide, ks.nr_narrow, N, j0);
    const int valid = static_cast<int>(std::min<dim_t>(w, N - j0));
    float* o = out + j0 * K;
    if (transposed) {  // op(B)'s column j is contiguous in k; blocks of k keep reads and writes in cache
      for (dim_t k0 = 0; k0 < K; k0 += gemm_transpose_block) {
        const dim_t k1 = std::min(K, k0 + gemm_transpose_block);
        for (int j = 0; j < valid; ++j) {
          const TB* col = B + (j0 + j) * K;
          for (dim_t k = k0; k < k1; ++k) o[k * w + j] = load_as<TB>(col[k]);
        }
        for (dim_t k = k0; k < k1; ++k)
          for (int j = valid; j < w; ++j) o[k * w + j] = 0.0f;
      }
      continue;
    }
    for (dim_t k = 0; k < K; ++k, o += w) {
      const TB* row = B + k * N + j0;
      for (int j = 0; j < valid; ++j) o[j] = load_as<TB>(row[j]);
      for (int j = valid; j < w; ++j) o[j] = 0.0f;
    }
  }
}

// Panels [p0, p1) of bf16 op(B) -> ceil(K/2) x width dwords each: row q of
// a panel holds (op(B)[2q, j], op(B)[2q+1, j]) in the low and high half;
// op(B)[K, j] and columns past N are zero.
template <class Kernels>
void gemm_pack_b_pairs(const Kernels& ks, dim_t N, dim_t K, const bf16* B, bool transposed, std::uint32_t* out,
                       dim_t p0, dim_t p1) {
  const dim_t K2 = (K + 1) / 2;
  for (dim_t p = p0; p < p1; ++p) {
    const dim_t j0 = p * ks.nr_wide;
    const int w = gemm_panel_width(ks.nr_wide, ks.nr_narrow, N, j0);
    const int valid = static_cast<int>(std::min<dim_t>(w, N - j0));
    std::uint32_t* o = out + j0 * K2;
    if (transposed) {  // op(B)'s column j is contiguous in k: its pairs are adjacent
      const dim_t whole = K / 2;  // pairs with both halves in B
      for (dim_t q0 = 0; q0 < K2; q0 += gemm_transpose_block) {
        const dim_t q1 = std::min(K2, q0 + gemm_transpose_block);
        for (int j = 0; j < valid; ++j) {
          const bf16* col = B + (j0 + j) * K;
          for (dim_t q = q0; q < q1; ++q)
            o[q * w + j] = q < whole ? bf16_pair(col[2 * q], col[2 * q + 1]) : bf16_pair(col[2 * q], bf16{});
        }
        for (dim_t q = q0; q < q1; ++q)
          for (int j = valid; j < w; ++j) o[q * w + j] = 0u;
      }
      continue;
    }
    for (dim_t q = 0; q < K2; ++q, o += w) {
      const bf16* lo = B + 2 * q * N + j0;
      const bf16* hi = 2 * q + 1 < K ? lo + N : nullptr;
      for (int j = 0; j < valid; ++j) o[j] = bf16_pair(lo[j], hi ? hi[j] : bf16{});
      for (int j = valid; j < w; ++j) o[j] = 0u;
    }
  }
}

// Where a micro-kernel finds op(A)'s rows: row t0 + r of the tile whose
// first row is t0 rows past the task's first lies at base + t0 * tile_step +
// r * row_step, its next value (or pair) k_step further on. Rows in place
// or converted: tile_step = row_step = a row's length, k_step 1 (2 for
// pairs); tiles packed k-major: tile_step = a row's length, row_step 1
// (2 for pairs), k_step MR (2 MR).
template <class T>
struct gemm_rows {
  const T* base;
  dim_t tile_step, row_step, k_step;
};

// Tiles of rows [i_begin, i_end) and panels [p0, p1) of C from rows of
// op(A) and packed B, blocked as above: K steps of f32 values (gemm_kernels)
// or of bf16 pairs (gemm_bf16_kernels), the chains starting from C's values
// with add_to_c (C f32, its kernels writing it). Kernels that write TC write C; f32
// kernels for a narrow C accumulate in `block` (room for the rows times a
// chunk's columns: gemm_block_floats), rounded once. Kernels that round to
// a narrow C themselves take each tile over all of K, unblocked (between
// blocks of k a sum can wait only in f32).
template <class Kernels, class TRow, class TPanel, class TC>
void gemm_tiles(const Kernels& ks, dim_t N, dim_t K, gemm_rows<TRow> A, const TPanel* bp, TC* C, dim_t i_begin,
                dim_t i_end, dim_t p0, dim_t p1, float* block, bool add_to_c) {
  using Out = typename Kernels::out_type;
  static_assert(std::is_same_v<Out, TC> || std::is_same_v<Out, float>);
  const TRow* rows[gemm_max_mr];
  const bool blocked = K > gemm_long_k && std::is_same_v<Out, float>;
  // (Blocks of whole tiles: a packed A's tiles start at multiples of mr.)
  const dim_t rows_at_once = blocked ? gemm_row_block / ks.mr * ks.mr : i_end - i_begin;
  const dim_t chunk = blocked ? gemm_chunk_panels : 1, k_block = blocked ? gemm_k_block : std::max<dim_t>(K, 1);
  for (dim_t c0 = p0; c0 < p1; c0 += chunk) {
    const dim_t c1 = std::min(p1, c0 + chunk), first_col = c0 * ks.nr_wide;
    const dim_t ldb = std::min(N, c1 * ks.nr_wide) - first_col;  // a row of the block: the chunk's columns
    for (dim_t k0 = 0; k0 < K || k0 == 0; k0 += k_block) {
      const dim_t steps = std::min(k_block, K - k0);
      for (dim_t r0 = i_begin; r0 < i_end; r0 += rows_at_once) {
        const dim_t r1 = std::min(i_end, r0 + rows_at_once);
        for (dim_t p = c0; p < c1; ++p) {
          const dim_t j0 = p * ks.nr_wide;
          const int w = gemm_panel_width(ks.nr_wide, ks.nr_narrow, N, j0);
          const int nr = static_cast<int>(std::min<dim_t>(w, N - j0));
          const auto fn = w == ks.nr_wide ? ks.wide : ks.narrow;
          const TPanel* slice = bp + j0 * K + k0 * w;
          for (dim_t i0 = r0; i0 < r1; i0 += ks.mr) {
            const int mr = static_cast<int>(std::min<dim_t>(ks.mr, r1 - i0));
            for (int r = 0; r < ks.mr; ++r)
              rows[r] = A.base + (i0 - i_begin) * A.tile_step + std::min(r, mr - 1) * A.row_step + k0 * A.k_step;
            if constexpr (std::is_same_v<Out, TC>)
              fn(steps, rows, A.k_step, slice, C + i0 * N + j0, N, mr, nr, add_to_c || k0 > 0);
            else
              fn(steps, rows, A.k_step, slice, block + (i0 - i_begin) * ldb + (j0 - first_col), ldb, mr, nr, k0 > 0);
          }
        }
      }
    }
    if constexpr (!std::is_same_v<Out, TC>)
      for (dim_t i = i_begin; i < i_end; ++i)
        for (dim_t j = 0; j < ldb; ++j) C[i * N + first_col + j] = store_as<TC>(block[(i - i_begin) * ldb + j]);
  }
}

// f64 results: a plain i-k-j loop accumulating in C.
template <class TA, class TB>
void gemm_f64(dim_t M, dim_t N, dim_t K, const TA* A, const TB* B, f64* C, cpu::gemm_layout layout) {
  for (dim_t i = 0; i < M; ++i) {
    f64* c = C + i * N;
    if (!layout.add_to_c) std::fill(c, c + N, 0.0);
    for (dim_t k = 0; k < K; ++k) {
      const f64 av = load_as<TA>(layout.transpose_a ? A[k * M + i] : A[i * K + k]);
      for (dim_t j = 0; j < N; ++j)
        c[j] += av * static_cast<f64>(load_as<TB>(layout.transpose_b ? B[j * K + k] : B[k * N + j]));
    }
  }
}

// Rows [i0, i1) of op(A) packed by tile of MR rows, k-major in a tile: the
// tile of rows i0 + t MR .. holds row r's step k at out[(t steps + k) MR + r]
// (rows past i1 zero), so a micro-kernel reads a tile's steps as one run of
// memory; value(k, i) gives row i's step k. (MR a constant: a full tile's
// MR values of a step convert and move as one vector.)
template <int MR, class Out, class Value>
void gemm_pack_tiles(dim_t steps, dim_t i0, dim_t i1, Out* out, Value value) {
  const dim_t full = (i1 - i0) / MR;
  for (dim_t k = 0; k < steps; ++k)
    for (dim_t t = 0; t < full; ++t)
      for (int r = 0; r < MR; ++r) out[(t * steps + k) * MR + r] = value(k, i0 + t * MR + r);
  if (const int rest = static_cast<int>((i1 - i0) - full * MR)) {
    Out* tile = out + full * steps * MR;
    for (dim_t k = 0; k < steps; ++k)
      for (int r = 0; r < MR; ++r) tile[k * MR + r] = r < rest ? value(k, i0 + full * MR + r) : Out{};
  }
}
template <class Out, class Value>
void gemm_pack_tiles(int mr, dim_t steps, dim_t i0, dim_t i1, Out* out, Value value) {
  switch (mr) {
    case 8: return gemm_pack_tiles<8>(steps, i0, i1, out, value);
    case 6: return gemm_pack_tiles<6>(steps, i0, i1, out, value);
    default: return gemm_pack_tiles<4>(steps, i0, i1, out, value);
  }
}
// Elements of out that gemm_pack_tiles fills for `rows` rows of `steps` steps.
inline std::size_t gemm_packed_size(int mr, dim_t rows, dim_t steps) {
  return static_cast<std::size_t>((rows + mr - 1) / mr * mr * steps);
}

// Rows [i0, i1) of op(A) = A^T (A stored [K, M]) in f32, packed by row tile
// (gemm_pack_tiles). Returns where the kernels read them.
template <class TA>
gemm_rows<float> gemm_pack_transposed_a(int mr, dim_t M, dim_t K, const TA* A, dim_t i0, dim_t i1, float* out) {
  gemm_pack_tiles(mr, K, i0, i1, out, [&](dim_t k, dim_t i) { return load_as<TA>(A[k * M + i]); });
  return {out, K, 1, mr};
}

// The same for vdpbf16ps: step p of row i is the pair (op(A)[i, 2p],
// op(A)[i, 2p + 1]), op(A)[i, K] zero; K2 = ceil(K / 2) steps.
inline gemm_rows<std::uint16_t> gemm_pair_transposed_a(int mr, dim_t M, dim_t K, const bf16* A, dim_t i0, dim_t i1,
                                                       std::uint32_t* out) {
  const dim_t K2 = (K + 1) / 2;
  gemm_pack_tiles(mr, K2, i0, i1, out, [&](dim_t p, dim_t i) {
    return bf16_pair(A[2 * p * M + i], 2 * p + 1 < K ? A[(2 * p + 1) * M + i] : bf16{});
  });
  return {reinterpret_cast<const std::uint16_t*>(out), 2 * K2, 2, 2 * dim_t{mr}};
}

// Runs f(task, worker) for every task, on the pool when there is one.
template <class F>
void gemm_for_tasks(cpu::thread_pool* pool, std::size_t tasks, F&& f) {
  cpu::run_tasks(tasks > 1 ? pool : nullptr, tasks, f);
}

// The f32 FMA chains (every kernel set).
template <class TA, class TB, class TC>
void gemm_f32_chains(gemm_isa isa, dim_t M, dim_t N, dim_t K, const TA* A0, const TB* B, TC* C, cpu::gemm_products ps,
                     cpu::gemm_workspace& ws, cpu::thread_pool* pool, cpu::gemm_layout layout) {
  const gemm_kernels ks = gemm_kernels_for(isa);
  const dim_t panels = gemm_panels(ks.nr_wide, ks.nr_narrow, N);
  const gemm_split s = gemm_split_for(M, N, K, ks.mr, panels, ps.count, pool);
  if (s.tasks() == 1) pool = nullptr;
  ws.workers(pool ? pool->size() : 1);
  float* bp = ws.packed_b(static_cast<std::size_t>((N + ks.nr_wide) * K));
  const dim_t pack_tasks = pool ? std::min<dim_t>(panels, 4 * pool->size()) : 1;
  const dim_t per_pack = (panels + pack_tasks - 1) / pack_tasks;
  gemm_for_tasks(pool, static_cast<std::size_t>(pack_tasks), [&](std::size_t t, unsigned) {
    const dim_t p0 = static_cast<dim_t>(t) * per_pack;
    gemm_pack_b(ks, N, K, B, layout.transpose_b, bp, p0, std::min(panels, p0 + per_pack));
  });
  gemm_for_tasks(pool, s.tasks(), [&](std::size_t task, unsigned worker) {
    const dim_t product = static_cast<dim_t>(task / s.per_product()), t = static_cast<dim_t>(task % s.per_product());
    const dim_t rb = t / s.panel_groups, pg = t % s.panel_groups;
    const dim_t i0 = rb * s.row_block, i1 = std::min(M, i0 + s.row_block);
    const dim_t p0 = pg * s.panel_group, p1 = std::min(panels, p0 + s.panel_group);
    const TA* A = A0 + ps.a_at(product);
    // Rows i0.. of op(A): A's rows read in place where A is f32, else
    // converted; a transposed A's columns packed by row tile (read in place,
    // a tile's K values lie M apart, one cache line each: the weight
    // gradients' products, x^T g, ran at 0.6x the speed of the others).
    gemm_rows<float> a{nullptr, K, K, 1};
    if (layout.transpose_a) {
      float* packed = ws.a_f32(gemm_packed_size(ks.mr, i1 - i0, K), worker);
      a = gemm_pack_transposed_a(ks.mr, M, K, A, i0, i1, packed);
    } else if constexpr (std::is_same_v<TA, f32>) {
      a.base = A + i0 * K;
    } else {
      float* a32 = ws.a_f32(static_cast<std::size_t>((i1 - i0) * K), worker);
      for (dim_t e = 0, n = (i1 - i0) * K; e < n; ++e) a32[e] = load_as<TA>(A[i0 * K + e]);
      a.base = a32;
    }
    float* block = nullptr;
    if constexpr (!std::is_same_v<TC, f32>)
      block = ws.c_f32(gemm_block_floats(ks, i1 - i0, p1 - p0), worker);
    gemm_tiles(ks, N, K, a, bp, C + ps.c_at(product), i0, i1, p0, p1, block, layout.add_to_c);
  });
}

// The vdpbf16ps chains (bf16 x bf16 on a CPU with AVX512-BF16).
template <class TC>
void gemm_bf16_pairs(dim_t M, dim_t N, dim_t K, const bf16* A0, const bf16* B, TC* C, cpu::gemm_products ps,
                     cpu::gemm_workspace& ws, cpu::thread_pool* pool, cpu::gemm_layout layout) {
  const gemm_bf16_kernels<TC> ks = gemm_bf16_kernels_for<TC>();
  const dim_t K2 = (K + 1) / 2, lda = 2 * K2;
  const dim_t panels = gemm_panels(ks.nr_wide, ks.nr_narrow, N);
  const gemm_split s = gemm_split_for(M, N, K, ks.mr, panels, ps.count, pool);
  if (s.tasks() == 1) pool = nullptr;
  ws.workers(pool ? pool->size() : 1);
  auto* bp = reinterpret_cast<std::uint32_t*>(ws.packed_b(static_cast<std::size_t>((N + ks.nr_wide) * K2)));
  const dim_t pack_tasks = pool ? std::min<dim_t>(panels, 4 * pool->size()) : 1;
  const dim_t per_pack = (panels + pack_tasks - 1) / pack_tasks;
  gemm_for_tasks(pool, static_cast<std::size_t>(pack_tasks), [&](std::size_t t, unsigned) {
    const dim_t p0 = static_cast<dim_t>(t) * per_pack;
    gemm_pack_b_pairs(ks, N, K, B, layout.transpose_b, bp, p0, std::min(panels, p0 + per_pack));
  });
  gemm_for_tasks(pool, s.tasks(), [&](std::size_t task, unsigned worker) {
    const dim_t product = static_cast<dim_t>(task / s.per_product()), t = static_cast<dim_t>(task % s.per_product());
    const dim_t rb = t / s.panel_groups, pg = t % s.panel_groups;
    const dim_t i0 = rb * s.row_block, i1 = std::min(M, i0 + s.row_block);
    const dim_t p0 = pg * s.panel_group, p1 = std::min(panels, p0 + s.panel_group);
    const bf16* A = A0 + ps.a_at(product);
    // A's rows hold their pairs side by side (an odd K padded with a zero);
    // a transposed A's pairs are brought together first.
    gemm_rows<std::uint16_t> a{reinterpret_cast<const std::uint16_t*>(A) + i0 * K, K, K, 2};
    if (layout.transpose_a) {
      auto* pairs = reinterpret_cast<std::uint32_t*>(ws.a_f32(gemm_packed_size(ks.mr, i1 - i0, K2), worker));
      a = gemm_pair_transposed_a(ks.mr, M, K, A, i0, i1, pairs);
    } else if (K % 2) {
      auto* pad = reinterpret_cast<std::uint16_t*>(ws.a_f32(static_cast<std::size_t>((i1 - i0) * K2), worker));
      for (dim_t i = i0; i < i1; ++i) {
        std::memcpy(pad + (i - i0) * lda, reinterpret_cast<const std::uint16_t*>(A) + i * K, K * sizeof(std::uint16_t));
        pad[(i - i0) * lda + K] = 0;
      }
      a = {pad, lda, lda, 2};
    }
    // Pair steps are as long in bytes as f32 steps: the same blocks. A long
    // K2 takes the kernels that write f32, a bf16 C's sums waiting in a block.
    if (K2 <= gemm_long_k)
      return gemm_tiles(ks, N, K2, a, bp, C + ps.c_at(product), i0, i1, p0, p1, nullptr, layout.add_to_c);
    float* block = nullptr;
    if constexpr (!std::is_same_v<TC, f32>)
      block = ws.c_f32(gemm_block_floats(ks, i1 - i0, p1 - p0), worker);
    gemm_tiles(gemm_bf16_kernels_for<float>(), N, K2, a, bp, C + ps.c_at(product), i0, i1, p0, p1, block,
               layout.add_to_c);
  });
}

// The chain the vdpbf16ps kernels compute (see the top of this file), in
// plain code: what the tests compare them with.
inline float gemm_bf16_ftz(float v) { return std::fpclassify(v) == FP_SUBNORMAL ? std::copysign(0.0f, v) : v; }
template <class TC>
void gemm_bf16_pairs_reference(dim_t M, dim_t N, dim_t K, const bf16* A, const bf16* B, TC* C,
                               cpu::gemm_layout layout = {}) {
  // op(A)[i, k] and op(B)[k, j], zero past K.
  auto a = [&](dim_t i, dim_t k) {
    return k < K ? gemm_bf16_ftz(load_as<bf16>(layout.transpose_a ? A[k * M + i] : A[i * K + k])) : 0.0f;
  };
  auto b = [&](dim_t k, dim_t j) {
    return k < K ? gemm_bf16_ftz(load_as<bf16>(layout.transpose_b ? B[j * K + k] : B[k * N + j])) : 0.0f;
  };
  for (dim_t i = 0; i < M; ++i)
    for (dim_t j = 0; j < N; ++j) {
      float acc = 0.0f;
      for (dim_t p = 0; 2 * p < K; ++p) {
        acc = gemm_bf16_ftz(std::fma(a(i, 2 * p + 1), b(2 * p + 1, j), acc));
        acc = gemm_bf16_ftz(std::fma(a(i, 2 * p), b(2 * p, j), acc));
      }
      C[i * N + j] = store_as<TC>(acc);
    }
}

// A product of few rows against a transposed B (attention's heads: 64 rows
// of q^T against 1024 x 1024 values of k) is computed transposed, C^T = B
// A^T: B's rows are then the product's rows, read in place, and only A, the
// small operand, is packed. Packing a transposed B (its columns gathered)
// costs about as much as such a product: [64, 1024] x [1024, 1024]^T took
// 1.4x (bf16 pairs) to 1.6x (f32) as long that way (bench_gemm_cpu
// heads/*). Each output is the same chain (fma's two factors commute; a
// vdpbf16ps pair's too), rounded once to TC, then moved into place. Below
// 32 rows C^T's few columns would fill too little of a panel.
inline bool gemm_computed_transposed(dim_t M, dim_t N, cpu::gemm_layout layout, const cpu::gemm_products& ps) {
  return layout.transpose_b && !layout.transpose_a && ps.count == 1 && M >= 32 && 4 * M <= N;
}

// gemm with a given kernel set (tests compare the sets; gemm picks the best).
template <class TA, class TB, class TC>
void gemm_with(gemm_isa isa, dim_t M, dim_t N, dim_t K, const TA* A, const TB* B, TC* C, cpu::gemm_workspace& ws,
               cpu::thread_pool* pool = nullptr, cpu::gemm_layout layout = {}, cpu::gemm_products ps = {}) {
  if constexpr (std::is_same_v<TC, f64>) {
    for (dim_t p = 0; p < ps.count; ++p) gemm_f64(M, N, K, A + ps.a_at(p), B, C + ps.c_at(p), layout);
  } else {
    static_assert(std::is_same_v<compute_t<TC>, f32>);
    if (M <= 0 || N <= 0 || ps.count <= 0) return;
    if constexpr (!std::is_same_v<TC, f32>)  // (a narrow C's sums wait in f32 scratch, not in C)
      if (layout.add_to_c)
        throw error("ctg: gemm: add_to_c needs an f32 or f64 C (a narrow C does not hold the sums it rounds)");
    if constexpr (std::is_same_v<TA, TB>) {
      if (!layout.add_to_c && gemm_computed_transposed(M, N, layout, ps)) {  // (the one product: A and C at its offsets)
        TC* ct = ws.transposed_c<TC>(static_cast<std::size_t>(N * M));
        gemm_with(isa, N, M, K, B, A + ps.a_at(0), ct, ws, pool, {.transpose_a = false, .transpose_b = true});
        for (dim_t j0 = 0; j0 < N; j0 += cpu::transpose_tile)  // C^T's rows in tiles
          cpu::transpose_rows(ct, N, M, C + ps.c_at(0), j0, std::min(N, j0 + cpu::transpose_tile));
        return;
      }
    }
    if constexpr (std::is_same_v<TA, bf16> && std::is_same_v<TB, bf16> &&
                  (std::is_same_v<TC, f32> || std::is_same_v<TC, bf16>)) {
      if (isa == gemm_isa::avx512_bf16 && K > 0) return gemm_bf16_pairs(M, N, K, A, B, C, ps, ws, pool, layout);
    }
    gemm_f32_chains(isa, M, N, K, A, B, C, ps, ws, pool, layout);
  }
}

}  // namespace ctg::detail

namespace ctg::cpu {

// C[M,N] = op(A) op(B) (row-major; see gemm_layout), accumulated in
// compute_t<TC>, each output rounded once to TC (see the top of this file).
// With a pool, its threads share the tiles (the same bits).
template <class TA, class TB, class TC>
void gemm(dim_t M, dim_t N, dim_t K, const TA* A, const TB* B, TC* C, gemm_workspace& ws,
          thread_pool* pool = nullptr, gemm_layout layout = {}) {
  detail::gemm_with(detail::gemm_best_isa(), M, N, K, A, B, C, ws, pool, layout);
}

// The products of gemm_products, each C + c_offset[p] = op(A + a_offset[p])
// op(B): B packed once for all of them, each output the bits gemm gives it.
template <class TA, class TB, class TC>
void gemm_sharing_b(dim_t M, dim_t N, dim_t K, const TA* A, const TB* B, TC* C, gemm_products products,
                    gemm_workspace& ws, thread_pool* pool = nullptr, gemm_layout layout = {}) {
  detail::gemm_with(detail::gemm_best_isa(), M, N, K, A, B, C, ws, pool, layout, products);
}

}  // namespace ctg::cpu

#undef CTG_GEMM_X86

CTG_HOT_END
