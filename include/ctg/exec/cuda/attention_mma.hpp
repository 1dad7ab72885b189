#pragma once
// Fused causal attention on tensor cores (graph/attention.hpp): the bodies
// of the four kernels (lse, output, dq, dk with dv) for bf16 and f16 heads,
// written for any thread context so that the CPU runs them too. On the
// device the context is a CUDA thread (exec/cuda/attention_mma_kernels.cuh:
// __syncthreads, mma.sync, shuffles); in tests/unit/cuda_mma_attention.cpp
// it is one of 128 host threads of an emulated block, so every line here
// but the instructions is tested on the CPU. A context gives
//   thread() (0..127), block(), sync(), shfl_xor(v, mask) within a warp,
//   mma<E>(d, a, b): d += a b, one m16n8k16 product (mma_fragments.hpp).
//
// Work: a block of 4 warps takes 64 rows of one head (queries; for dk and dv
// keys), 16 a warp. The other side's tokens come 64 at a time into shared
// memory as 16-bit elements (the inputs' own bits), and each warp goes over
// them 16 at a time: q k^T is two 16 x 8 products per 16 features, p v one
// 16 x 8 product per 8 features with p as the A operand straight from the
// scores' registers. Products accumulate in f32; p and ds are rounded to
// the input type before their products (as cuBLASLt's bf16 products of the
// composed attention round the probabilities). Each sum runs in a fixed
// order and no two threads add to one value, so two runs are bitwise equal.
//
// Shared tiles are token-major [64][Dh + 8] or feature-major [Dh][64 + 8];
// every B operand is read from a tile whose rows run along B's n (K for
// q k^T, a feature-major V for p v), so every register is one 32-bit load.
#include <cstdint>
#include <type_traits>

#include <ctg/core/bf16.hpp>
#include <ctg/core/dtype_traits.hpp>
#include <ctg/core/f16.hpp>
#include <ctg/core/math.hpp>
#include <ctg/exec/attention_heads.hpp>
#include <ctg/exec/cuda/attention_tiles.hpp>
#include <ctg/exec/cuda/mma_fragments.hpp>
#include <ctg/lower/read_ahead.hpp>

namespace ctg::cuda {

struct attention_mma_tiles {
  static constexpr int threads = 128, warp_rows = 16, block_rows = 64, tile_tokens = 64, chunk = 16;

  // The heads these kernels take: 16-bit inputs, Dh a multiple of 16 up to 128 (the CUDA-core kernels take the rest).
  template <class T>
  static constexpr bool takes(dim_t features) {
    return (std::is_same_v<T, bf16> || std::is_same_v<T, f16>) && features > 0 && features % 16 == 0 && features <= 128;
  }
  // Elements a row of a staged tile. The 8 more put the 8 row groups of a fragment load in distinct banks.
  CTG_HD static constexpr int token_major_ld(int features) { return features + 8; }
  static constexpr int feature_major_ld = tile_tokens + 8;
  CTG_HD static constexpr int token_major_size(int features) { return tile_tokens * token_major_ld(features); }
  CTG_HD static constexpr int feature_major_size(int features) { return features * feature_major_ld; }
  // Staging goes by chunks of 8 elements along x's contiguous axis: 8 tokens
  // of one feature (tokens contiguous) or 8 features of one token. Chunk c's
  // first element. In order `along`, consecutive chunks are consecutive in x
  // (coalesced loads, each chunk one 16-byte store into a tile whose rows
  // run along x); in order `across`, consecutive chunks are side by side, on
  // consecutive lines of x (loads of 16 bytes a line; but where a tile's
  // rows run across x and each chunk is 8 stores of 2 bytes, a warp's stores
  // land in distinct banks, not 8 to a bank).
  CTG_HD static constexpr int chunks(int features) { return tile_tokens * features / 8; }
  CTG_HD static constexpr attention_tiles::slot chunk_start(int c, int features, bool tokens_contiguous, bool across) {
    if (tokens_contiguous)
      return across ? attention_tiles::slot{c / features * 8, c % features}
                    : attention_tiles::slot{c % (tile_tokens / 8) * 8, c / (tile_tokens / 8)};
    return across ? attention_tiles::slot{c % tile_tokens, c / tile_tokens * 8}
                  : attention_tiles::slot{c / (features / 8), c % (features / 8) * 8};
  }
  // Is every chunk whole (all its tokens on one side of the last) and 16-byte aligned, so one load each?
  // (Heads start at multiples of 16 elements; a chunk of tokens at t * Dh + d for d a multiple of 8, or at
  // d * T + t for t a multiple of 8.)
  CTG_HD static bool wide_chunks(bool tokens_contiguous, dim_t tokens, const void* x) {
    return (!tokens_contiguous || tokens % 8 == 0) && reinterpret_cast<std::uintptr_t>(x) % 16 == 0;
  }
  CTG_HD static constexpr int token_major_at(int row, int feature, int features) {
    return row * token_major_ld(features) + feature;
  }
  CTG_HD static constexpr int feature_major_at(int row, int feature) { return feature * feature_major_ld + row; }
  // The shared tiles of each kernel, one after another in its dynamic shared
  // memory: token-major tiles, then feature-major ones, then 2 x 64 floats
  // of per-token stats (dk and dv's lse and delta).
  struct kernel_tiles {
    int token_major, feature_major;
    bool stats;
  };
  static constexpr kernel_tiles lse_tiles{1, 0, false}, out_tiles{1, 1, false}, dq_tiles{2, 1, false},
      dkv_tiles{2, 2, true};
  CTG_HD static constexpr std::size_t shared_bytes(kernel_tiles k, int features) {
    return 2 * (std::size_t(k.token_major) * std::size_t(token_major_size(features)) +
                std::size_t(k.feature_major) * std::size_t(feature_major_size(features))) +
           (k.stats ? 2 * tile_tokens * sizeof(float) : 0);
  }
  CTG_HD static constexpr dim_t blocks_per_head(dim_t tokens) {
    return attention_tiles::blocks_per_head(tokens, block_rows);
  }
  // Does some key of the 16 from first_key reach some query of the 16 from first_query (key <= query)?
  CTG_HD static constexpr bool chunk_seen(dim_t first_query, dim_t first_key) {
    return first_key <= first_query + warp_rows - 1;
  }
};

namespace attention_mma {
using ctg::detail::attention_heads;
using tiles = attention_mma_tiles;

// Tokens [first, first + 64) of head `base` of x into a token-major tile, a
// feature-major one or both (nullptr: not wanted), zeros past the last token:
// each thread a chunk at a time (attention_mma_tiles::chunk_start: across x's
// lines where a wanted tile's rows run across them), in one 16-byte load
// where the chunks allow, stored 16 bytes at once where the tile's rows run
// along the chunk.
template <int F, class T, class Thread>
CTG_HD void stage(const Thread& th, std::uint16_t* token_major, std::uint16_t* feature_major, const T* x,
                  const attention_heads& a, dim_t base, dim_t first) {
  const bool along_tokens = a.token_stride == 1;
  const bool wide = tiles::wide_chunks(along_tokens, a.tokens, x);
  const bool across = along_tokens ? token_major != nullptr : feature_major != nullptr;
  for (int c = th.thread(); c < tiles::chunks(F); c += tiles::threads) {
    const auto s = tiles::chunk_start(c, F, along_tokens, across);
    alignas(16) std::uint16_t e[8];
    if (wide && first + s.row < a.tokens) {
      kernel::copy_wide<16>(e, x + base + a.at(first + s.row, s.feature));
    } else {
      CTG_UNROLL
      for (int i = 0; i < 8; ++i) {
        const dim_t t = first + s.row + (along_tokens ? i : 0);
        e[i] = t < a.tokens ? x[base + a.at(t, s.feature + (along_tokens ? 0 : i))].bits : std::uint16_t(0);
      }
    }
    if (token_major && !along_tokens)
      kernel::copy_wide<16>(token_major + tiles::token_major_at(s.row, s.feature, F), e);
    if (feature_major && along_tokens)
      kernel::copy_wide<16>(feature_major + tiles::feature_major_at(s.row, s.feature), e);
    CTG_UNROLL
    for (int i = 0; i < 8; ++i) {
      const int row = s.row + (along_tokens ? i : 0), feature = s.feature + (along_tokens ? 0 : i);
      if (token_major && along_tokens) token_major[tiles::token_major_at(row, feature, F)] = e[i];
      if (feature_major && !along_tokens) feature_major[tiles::feature_major_at(row, feature)] = e[i];
    }
  }
}
// A head's per-token stat (lse, delta) for tokens [first, first + 64), 0 past the last.
template <class Thread>
CTG_HD void stage_stat(const Thread& th, float* to, const float* stat, const attention_heads& a, dim_t head,
                       dim_t first) {
  for (int e = th.thread(); e < tiles::tile_tokens; e += tiles::threads)
    to[e] = first + e < a.tokens ? stat[head * a.tokens + first + e] : 0.f;
}

// The warp's 16 rows from row0 of a token-major tile as A fragments, one per 16 features.
template <int F>
CTG_HD void load_rows(std::uint32_t (&rows)[F / 16][4], const std::uint16_t* tile, int lane, int row0) {
  CTG_UNROLL
  for (int kc = 0; kc < F / 16; ++kc) CTG_UNROLL
  for (int r = 0; r < 4; ++r)
    rows[kc][r] = mma::register_of(tile, mma::a_register_at(lane, r, tiles::token_major_ld(F), row0, 16 * kc));
}
// s += rows . tokens^T for the 16 tokens from `first` of a token-major tile: two 16 x 8 fragments.
template <class E, int F, class Thread>
CTG_HD void products_with_tokens(const Thread& th, float (&s)[2][4], const std::uint32_t (&rows)[F / 16][4],
                                 const std::uint16_t* tile, int lane, int first) {
  CTG_UNROLL
  for (int nt = 0; nt < 2; ++nt) CTG_UNROLL
  for (int kc = 0; kc < F / 16; ++kc) {
    const std::uint32_t b[2] = {
        mma::register_of(tile, mma::b_register_at(lane, 0, tiles::token_major_ld(F), first + 8 * nt, 16 * kc)),
        mma::register_of(tile, mma::b_register_at(lane, 1, tiles::token_major_ld(F), first + 8 * nt, 16 * kc))};
    th.template mma<E>(s[nt], rows[kc], b);
  }
}
// acc += p . tokens for the 16 tokens from `first` of a feature-major tile: F / 8 fragments of 16 x 8.
template <class E, int F, class Thread>
CTG_HD void accumulate_features(const Thread& th, float (&acc)[F / 8][4], const std::uint32_t (&p)[4],
                                const std::uint16_t* tile, int lane, int first) {
  CTG_UNROLL
  for (int nt = 0; nt < F / 8; ++nt) {
    const std::uint32_t b[2] = {
        mma::register_of(tile, mma::b_register_at(lane, 0, tiles::feature_major_ld, 8 * nt, first)),
        mma::register_of(tile, mma::b_register_at(lane, 1, tiles::feature_major_ld, 8 * nt, first))};
    th.template mma<E>(acc[nt], p, b);
  }
}

// Element i of fragment nt of a 16 x 16 block whose rows start at row0 and columns at col0.
struct block_element {
  dim_t row, col;
};
CTG_HD CTG_FORCEINLINE block_element element_of(int lane, int nt, int i, dim_t row0, dim_t col0) {
  const mma::coord c = mma::c_element(lane, i);
  return {row0 + c.row, col0 + 8 * nt + c.col};
}

// Scores of 16 queries from q0 (rows) and 16 keys from k0 (columns) to
// probabilities exp(s scale - lse_row), 0 where the key is past the query.
CTG_HD CTG_FORCEINLINE void probs_by_query(float (&s)[2][4], int lane, dim_t q0, dim_t k0, float scale,
                                           const float (&lse)[2]) {
  CTG_UNROLL
  for (int nt = 0; nt < 2; ++nt) CTG_UNROLL
  for (int i = 0; i < 4; ++i) {
    const auto e = element_of(lane, nt, i, q0, k0);
    s[nt][i] = e.col <= e.row ? math::exp(s[nt][i] * scale - lse[i >> 1]) : 0.f;
  }
}
// The same transposed: rows are 16 keys from k0, columns 16 queries from q0
// whose lse come from `lse` (of those queries), 0 past the last query too.
CTG_HD CTG_FORCEINLINE void probs_by_key(float (&s)[2][4], int lane, dim_t k0, dim_t q0, dim_t tokens, float scale,
                                         const float* lse) {
  CTG_UNROLL
  for (int nt = 0; nt < 2; ++nt) CTG_UNROLL
  for (int i = 0; i < 4; ++i) {
    const auto e = element_of(lane, nt, i, k0, q0);
    s[nt][i] = e.row <= e.col && e.col < tokens ? math::exp(s[nt][i] * scale - lse[e.col - q0]) : 0.f;
  }
}
// ds = p (dp - delta), delta of each row (by query) or of each column (by key).
CTG_HD CTG_FORCEINLINE void grads_by_query(float (&p)[2][4], const float (&dp)[2][4], const float (&delta)[2]) {
  CTG_UNROLL
  for (int nt = 0; nt < 2; ++nt) CTG_UNROLL
  for (int i = 0; i < 4; ++i) p[nt][i] *= dp[nt][i] - delta[i >> 1];
}
CTG_HD CTG_FORCEINLINE void grads_by_key(float (&p)[2][4], const float (&dp)[2][4], int lane, const float* delta) {
  CTG_UNROLL
  for (int nt = 0; nt < 2; ++nt) CTG_UNROLL
  for (int i = 0; i < 4; ++i) p[nt][i] *= dp[nt][i] - delta[8 * nt + mma::c_element(lane, i).col];
}

// sums[h] += the lane's probabilities of row g + 8 h (of 16 x 16 fragments s).
CTG_HD CTG_FORCEINLINE void add_row_sums(float (&sums)[2], const float (&s)[2][4]) {
  CTG_UNROLL
  for (int nt = 0; nt < 2; ++nt) CTG_UNROLL
  for (int i = 0; i < 4; ++i) sums[i >> 1] += s[nt][i];
}
// acc's rows g and g + 8 over sums[0] and sums[1].
template <int F>
CTG_HD CTG_FORCEINLINE void divide_rows(float (&acc)[F / 8][4], const float (&sums)[2]) {
  CTG_UNROLL
  for (int nt = 0; nt < F / 8; ++nt) CTG_UNROLL
  for (int i = 0; i < 4; ++i) acc[nt][i] /= sums[i >> 1];
}

// A lane's running max and sum of exp over its columns of rows g and g + 8.
struct running_lse {
  float m[2] = {dtype_traits<float>::lowest, dtype_traits<float>::lowest}, l[2] = {0.f, 0.f};

  // The scores of 16 queries from q0 and 16 keys from k0, keys past the query left out.
  CTG_HD void add(const float (&s)[2][4], int lane, dim_t q0, dim_t k0, float scale) {
    float v[2][4], top[2] = {m[0], m[1]};
    CTG_UNROLL
    for (int nt = 0; nt < 2; ++nt) CTG_UNROLL
    for (int i = 0; i < 4; ++i) {
      const auto e = element_of(lane, nt, i, q0, k0);
      v[nt][i] = e.col <= e.row ? s[nt][i] * scale : dtype_traits<float>::lowest;
      top[i >> 1] = v[nt][i] > top[i >> 1] ? v[nt][i] : top[i >> 1];
    }
    float sum[2] = {l[0] * math::exp(m[0] - top[0]), l[1] * math::exp(m[1] - top[1])};
    CTG_UNROLL
    for (int nt = 0; nt < 2; ++nt) CTG_UNROLL
    for (int i = 0; i < 4; ++i)
      if (v[nt][i] != dtype_traits<float>::lowest) sum[i >> 1] += math::exp(v[nt][i] - top[i >> 1]);
    m[0] = top[0], m[1] = top[1], l[0] = sum[0], l[1] = sum[1];
  }
  // Another lane's (m, l) of the same row into this one's (the same sum either way round).
  CTG_HD static void merge(float& m, float& l, float m2, float l2) {
    const float top = m > m2 ? m : m2;
    l = l * math::exp(m - top) + l2 * math::exp(m2 - top);
    m = top;
  }
};

// Which head, which 64 rows and which warp's 16 of them a thread works on.
struct block_place {
  int warp, lane;
  dim_t head, first, base, warp_first;
};
template <class Thread>
CTG_HD block_place place_of(const Thread& th, const attention_heads& a) {
  const dim_t per_head = tiles::blocks_per_head(a.tokens);
  block_place p;
  p.warp = th.thread() / 32;
  p.lane = th.thread() % 32;
  p.head = th.block() / per_head;
  p.first = th.block() % per_head * tiles::block_rows;
  p.base = p.head * a.head_elements();
  p.warp_first = p.first + p.warp * tiles::warp_rows;
  return p;
}
// The block's 64 rows of x (tokens from p.first) through the shared tile
// `staging`, the warp's 16 of them as A fragments.
template <int F, class T, class Thread>
CTG_HD void load_block_rows(const Thread& th, std::uint32_t (&rows)[F / 16][4], const T* x, std::uint16_t* staging,
                            const attention_heads& a, const block_place& p) {
  stage<F>(th, staging, nullptr, x, a, p.base, p.first);
  th.sync();
  load_rows<F>(rows, staging, p.lane, p.warp * tiles::warp_rows);
}
// The keys a block of queries sees end with its last query.
CTG_HD CTG_FORCEINLINE dim_t keys_end(const attention_heads& a, const block_place& p) {
  return p.first + tiles::block_rows < a.tokens ? p.first + tiles::block_rows : a.tokens;
}
// A head's per-token stat for rows g and g + 8 of the lane's warp, 0 past the last token.
CTG_HD CTG_FORCEINLINE void row_stats(float (&to)[2], const float* stat, const attention_heads& a,
                                      const block_place& p) {
  for (int h = 0; h < 2; ++h) {
    const dim_t t = p.warp_first + p.lane / 4 + 8 * h;
    to[h] = t < a.tokens ? stat[p.head * a.tokens + t] : 0.f;
  }
}
// acc's rows (tokens from the warp's first) to x, times `scale`, rounded to T.
template <int F, class T>
CTG_HD void write_rows(const float (&acc)[F / 8][4], float scale, T* x, const attention_heads& a,
                       const block_place& p) {
  CTG_UNROLL
  for (int nt = 0; nt < F / 8; ++nt) CTG_UNROLL
  for (int i = 0; i < 4; ++i) {
    const auto e = element_of(p.lane, nt, i, p.warp_first, 0);
    if (e.row < a.tokens) x[p.base + a.at(e.row, e.col)] = T(acc[nt][i] * scale);
  }
}
}  // namespace attention_mma

// lse_i = log sum_{j <= i} exp(s_ij): shared memory `tile` of token_major_size(F).
template <class T, int F, class Thread>
CTG_HD void attention_lse_mma(const Thread& th, std::uint16_t* tile, const T* q, const T* k, float* lse,
                              const attention_mma::attention_heads& a) {
  namespace am = attention_mma;
  using tiles = attention_mma_tiles;
  const auto p = am::place_of(th, a);
  const float scale = a.template scale<float>();
  std::uint32_t qf[F / 16][4];
  am::load_block_rows<F>(th, qf, q, tile, a, p);
  am::running_lse st;
  for (dim_t j0 = 0; j0 < am::keys_end(a, p); j0 += tiles::tile_tokens) {
    th.sync();
    am::stage<F>(th, tile, nullptr, k, a, p.base, j0);
    th.sync();
    for (int c = 0; c < tiles::tile_tokens && tiles::chunk_seen(p.warp_first, j0 + c); c += tiles::chunk) {
      float s[2][4] = {};
      am::products_with_tokens<T, F>(th, s, qf, tile, p.lane, c);
      st.add(s, p.lane, p.warp_first, j0 + c, scale);
    }
  }
  for (int mask = 1; mask <= 2; mask <<= 1)  // the 4 lanes of a row group
    for (int h = 0; h < 2; ++h) {
      const float m2 = th.shfl_xor(st.m[h], mask), l2 = th.shfl_xor(st.l[h], mask);
      am::running_lse::merge(st.m[h], st.l[h], m2, l2);
    }
  if (p.lane % 4 != 0) return;
  for (int h = 0; h < 2; ++h) {
    const dim_t t = p.warp_first + p.lane / 4 + 8 * h;
    if (t < a.tokens) lse[p.head * a.tokens + t] = st.m[h] + math::log(st.l[h]);
  }
}

// o_i = sum_{j <= i} p_ij v_j / sum_{j <= i} p_ij, p_ij = exp(s_ij - lse_i): shared `tile` (token-major)
// and `vt` (feature-major). The sums are of p in f32, before its rounding to T for the product.
template <class T, int F, class Thread>
CTG_HD void attention_out_mma(const Thread& th, std::uint16_t* tile, std::uint16_t* vt, const T* q, const T* k,
                              const T* v, const float* lse, T* out, const attention_mma::attention_heads& a) {
  namespace am = attention_mma;
  using tiles = attention_mma_tiles;
  const auto p = am::place_of(th, a);
  const float scale = a.template scale<float>();
  std::uint32_t qf[F / 16][4];
  am::load_block_rows<F>(th, qf, q, tile, a, p);
  float lse_rows[2];
  am::row_stats(lse_rows, lse, a, p);
  float acc[F / 8][4] = {}, sums[2] = {};
  for (dim_t j0 = 0; j0 < am::keys_end(a, p); j0 += tiles::tile_tokens) {
    th.sync();
    am::stage<F>(th, tile, nullptr, k, a, p.base, j0);
    am::stage<F>(th, nullptr, vt, v, a, p.base, j0);
    th.sync();
    for (int c = 0; c < tiles::tile_tokens && tiles::chunk_seen(p.warp_first, j0 + c); c += tiles::chunk) {
      float s[2][4] = {};
      am::products_with_tokens<T, F>(th, s, qf, tile, p.lane, c);
      am::probs_by_query(s, p.lane, p.warp_first, j0 + c, scale, lse_rows);
      am::add_row_sums(sums, s);
      std::uint32_t pf[4];
      mma::a_from_d<T>(s, pf);
      am::accumulate_features<T, F>(th, acc, pf, vt, p.lane, c);
    }
  }
  for (int mask = 1; mask <= 2; mask <<= 1)  // the 4 lanes of a row group
    for (int h = 0; h < 2; ++h) sums[h] += th.shfl_xor(sums[h], mask);
  am::divide_rows<F>(acc, sums);
  am::write_rows<F>(acc, 1.f, out, a, p);
}

// dq_i = scale sum_{j <= i} ds_ij k_j, ds_ij = p_ij (g_i . v_j - delta_i):
// shared `tile` and `vs` (token-major), `kt` (feature-major).
template <class T, int F, class Thread>
CTG_HD void attention_dq_mma(const Thread& th, std::uint16_t* tile, std::uint16_t* vs, std::uint16_t* kt, const T* q,
                             const T* k, const T* v, const float* lse, const T* g, const float* delta, T* dq,
                             const attention_mma::attention_heads& a) {
  namespace am = attention_mma;
  using tiles = attention_mma_tiles;
  const auto p = am::place_of(th, a);
  const float scale = a.template scale<float>();
  std::uint32_t qf[F / 16][4], gf[F / 16][4];
  am::load_block_rows<F>(th, qf, q, tile, a, p);
  am::load_block_rows<F>(th, gf, g, vs, a, p);
  float lse_rows[2], delta_rows[2];
  am::row_stats(lse_rows, lse, a, p);
  am::row_stats(delta_rows, delta, a, p);
  float acc[F / 8][4] = {};
  for (dim_t j0 = 0; j0 < am::keys_end(a, p); j0 += tiles::tile_tokens) {
    th.sync();
    am::stage<F>(th, tile, kt, k, a, p.base, j0);
    am::stage<F>(th, vs, nullptr, v, a, p.base, j0);
    th.sync();
    for (int c = 0; c < tiles::tile_tokens && tiles::chunk_seen(p.warp_first, j0 + c); c += tiles::chunk) {
      float s[2][4] = {}, dp[2][4] = {};
      am::products_with_tokens<T, F>(th, s, qf, tile, p.lane, c);
      am::products_with_tokens<T, F>(th, dp, gf, vs, p.lane, c);
      am::probs_by_query(s, p.lane, p.warp_first, j0 + c, scale, lse_rows);
      am::grads_by_query(s, dp, delta_rows);
      std::uint32_t dsf[4];
      mma::a_from_d<T>(s, dsf);
      am::accumulate_features<T, F>(th, acc, dsf, kt, p.lane, c);
    }
  }
  am::write_rows<F>(acc, scale, dq, a, p);
}

// For key j: dk_j = scale sum_{i >= j} ds_ij q_i, dv_j = sum_{i >= j} p_ij g_i,
// with the scores transposed (rows are the block's keys): shared `qs`, `gs`
// (token-major), `qt`, `gt` (feature-major), `stats` (2 x 64 floats).
template <class T, int F, class Thread>
CTG_HD void attention_dkv_mma(const Thread& th, std::uint16_t* qs, std::uint16_t* gs, std::uint16_t* qt,
                              std::uint16_t* gt, float* stats, const T* q, const T* k, const T* v, const float* lse,
                              const T* g, const float* delta, T* dk, T* dv, const attention_mma::attention_heads& a) {
  namespace am = attention_mma;
  using tiles = attention_mma_tiles;
  const auto p = am::place_of(th, a);
  const float scale = a.template scale<float>();
  std::uint32_t kf[F / 16][4], vf[F / 16][4];
  am::load_block_rows<F>(th, kf, k, qs, a, p);
  am::load_block_rows<F>(th, vf, v, gs, a, p);
  float dk_acc[F / 8][4] = {}, dv_acc[F / 8][4] = {};
  float *lse_tile = stats, *delta_tile = stats + tiles::tile_tokens;
  for (dim_t i0 = p.first; i0 < a.tokens; i0 += tiles::tile_tokens) {  // (p.first is a multiple of 64)
    th.sync();
    am::stage<F>(th, qs, qt, q, a, p.base, i0);
    am::stage<F>(th, gs, gt, g, a, p.base, i0);
    am::stage_stat(th, lse_tile, lse, a, p.head, i0);
    am::stage_stat(th, delta_tile, delta, a, p.head, i0);
    th.sync();
    for (int c = 0; c < tiles::tile_tokens && i0 + c < a.tokens; c += tiles::chunk) {
      if (!tiles::chunk_seen(i0 + c, p.warp_first)) continue;  // these queries all come before the warp's keys
      float s[2][4] = {}, dp[2][4] = {};
      am::products_with_tokens<T, F>(th, s, kf, qs, p.lane, c);
      am::products_with_tokens<T, F>(th, dp, vf, gs, p.lane, c);
      am::probs_by_key(s, p.lane, p.warp_first, i0 + c, a.tokens, scale, lse_tile + c);
      std::uint32_t pf[4];
      mma::a_from_d<T>(s, pf);
      am::accumulate_features<T, F>(th, dv_acc, pf, gt, p.lane, c);
      am::grads_by_key(s, dp, p.lane, delta_tile + c);
      std::uint32_t dsf[4];
      mma::a_from_d<T>(s, dsf);
      am::accumulate_features<T, F>(th, dk_acc, dsf, qt, p.lane, c);
    }
  }
  am::write_rows<F>(dk_acc, scale, dk, a, p);
  am::write_rows<F>(dv_acc, 1.f, dv, a, p);
}

}  // namespace ctg::cuda
