#pragma once
// Fused causal attention on the GPU (graph/attention.hpp): what the CPU's
// loops compute (exec/cpu/attention.hpp), a thread per query (per key for dk
// and dv), the other side's tokens a tile at a time in shared memory
// (exec/cuda/attention_tiles.hpp), in the compute type C. No [T, T] value is
// ever written; every sum runs in a fixed order, so two runs are bitwise
// equal (no atomics). Sums run in another order than the CPU's: results
// agree within rounding, not bitwise.
//
// These are first versions on CUDA cores, written without a GPU to run
// them; tensor-core tiles (mma) are the next step once they can be measured.
#include <ctg/core/dtype_rules.hpp>
#include <ctg/core/dtype_traits.hpp>
#include <ctg/core/math.hpp>
#include <ctg/exec/attention_heads.hpp>
#include <ctg/exec/cuda/attention_tiles.hpp>
#include <ctg/exec/cuda/data_kernels.cuh>

namespace ctg::cuda::kernels {

namespace attention {
using ctg::detail::attention_heads;

// Tokens [first, first + R) of head `base` of x into tile[R][F + 1] as C
// (zeros past the last token), read along the layout's contiguous axis.
template <int R, int F, class T, class C>
__device__ CTG_FORCEINLINE void load_tile(C (*tile)[F + 1], const T* x, const attention_heads& a, dim_t base,
                                          dim_t first) {
  const bool tokens_contiguous = a.token_stride == 1;
  for (int e = static_cast<int>(threadIdx.x); e < R * F; e += R) {
    const auto s = attention_tiles::slot_of(e, R, F, tokens_contiguous);
    const dim_t t = first + s.row;
    tile[s.row][s.feature] = t < a.tokens ? load_as<T>(x[base + a.at(t, s.feature)]) : C(0);
  }
}
// Values [first, first + R) of a head's per-token stat (lse, delta) into row[R].
template <int R, class C>
__device__ CTG_FORCEINLINE void load_stats(C* row, const C* stat, const attention_heads& a, dim_t head, dim_t first) {
  const dim_t t = first + threadIdx.x;
  row[threadIdx.x] = t < a.tokens ? stat[head * a.tokens + t] : C(0);
}
// a b + c in one rounding (nvcc's --fmad=false keeps a * b + c two; these
// sums need not match the CPU's bits, so they take the fused instruction).
__device__ CTG_FORCEINLINE float fma_c(float a, float b, float c) { return __fmaf_rn(a, b, c); }
__device__ CTG_FORCEINLINE double fma_c(double a, double b, double c) { return __fma_rn(a, b, c); }
template <int F, class C>
__device__ CTG_FORCEINLINE C dot(const C (&x)[F], const C* y) {
  C s = 0;
  CTG_UNROLL
  for (int d = 0; d < F; ++d) s = fma_c(x[d], y[d], s);
  return s;
}
template <int F, class T, class C>
__device__ CTG_FORCEINLINE void load_row(C (&to)[F], const T* x, const attention_heads& a, dim_t base, dim_t t) {
  CTG_UNROLL
  for (int d = 0; d < F; ++d) to[d] = load_as<T>(x[base + a.at(t, d)]);
}

// Which head and which rows a block takes.
struct block_rows {
  dim_t head, first, row, base;
  bool active;
};
template <int R>
__device__ CTG_FORCEINLINE block_rows rows_of(const attention_heads& a) {
  const dim_t blocks = attention_tiles::blocks_per_head(a.tokens, R);
  block_rows b;
  b.head = static_cast<dim_t>(blockIdx.x) / blocks;
  b.first = static_cast<dim_t>(blockIdx.x) % blocks * R;
  b.row = b.first + threadIdx.x;
  b.base = b.head * a.head_elements();
  b.active = b.row < a.tokens;
  return b;
}

// body(jj) for each key j0 + jj <= the thread's query, over tiles of R keys
// up to the block's last query, each tile's k (and v, where given) in shared
// memory by then. Every thread of the block runs the loop (it waits at each
// tile); rows past the last token run no body.
template <int R, int F, class T, class C, class Body>
__device__ CTG_FORCEINLINE void over_causal_keys(C (*ks)[F + 1], C (*vs)[F + 1], const T* k, const T* v,
                                                 const attention_heads& a, const block_rows& b, Body&& body) {
  const dim_t last = b.first + R < a.tokens ? b.first + R : a.tokens;
  for (dim_t j0 = 0; j0 < last; j0 += R) {
    __syncthreads();
    load_tile<R, F>(ks, k, a, b.base, j0);
    if (v) load_tile<R, F>(vs, v, a, b.base, j0);
    __syncthreads();
    if (!b.active) continue;
    for (int jj = 0; jj < R && j0 + jj <= b.row; ++jj) body(jj);
  }
}
}  // namespace attention

// lse_i = m + log(sum_{j <= i} exp(s_ij - m)), by a running max and sum.
template <class Ts, int F>  // <T, C>
__global__ void attention_lse(const type_at<Ts, 0>* q, const type_at<Ts, 0>* k, type_at<Ts, 1>* lse,
                              attention::attention_heads a) {
  using T = type_at<Ts, 0>;
  using C = type_at<Ts, 1>;
  constexpr int R = attention_tiles::rows_for(F, sizeof(C));
  __shared__ C ks[R][F + 1];
  const auto b = attention::rows_of<R>(a);
  C qi[F];
  if (b.active) attention::load_row(qi, q, a, b.base, b.row);
  const C scale = a.template scale<C>();
  C m = dtype_traits<C>::lowest, l = 0;  // (a finite start: exp(m - s) is 0, no inf - inf)
  attention::over_causal_keys<R, F>(ks, ks, k, static_cast<const T*>(nullptr), a, b, [&](int jj) {
    const C s = attention::dot(qi, ks[jj]) * scale;
    const C m_new = s > m ? s : m;
    l = l * math::exp(m - m_new) + math::exp(s - m_new);
    m = m_new;
  });
  if (b.active) lse[b.head * a.tokens + b.row] = m + math::log(l);
}

// o_i = sum_{j <= i} p_ij v_j / sum_{j <= i} p_ij, p_ij = exp(s_ij - lse_i), rounded once to T.
template <class Ts, int F>  // <T, C>
__global__ void attention_out(const type_at<Ts, 0>* q, const type_at<Ts, 0>* k, const type_at<Ts, 0>* v,
                              const type_at<Ts, 1>* lse, type_at<Ts, 0>* out, attention::attention_heads a) {
  using T = type_at<Ts, 0>;
  using C = type_at<Ts, 1>;
  constexpr int R = attention_tiles::rows_for(F, sizeof(C));
  __shared__ C ks[R][F + 1];
  __shared__ C vs[R][F + 1];
  const auto b = attention::rows_of<R>(a);
  C qi[F], acc[F];
  CTG_UNROLL
  for (int d = 0; d < F; ++d) acc[d] = 0;
  if (b.active) attention::load_row(qi, q, a, b.base, b.row);
  const C scale = a.template scale<C>(), l = b.active ? lse[b.head * a.tokens + b.row] : C(0);
  C sum = 0;
  attention::over_causal_keys<R, F>(ks, vs, k, v, a, b, [&](int jj) {
    const C p = math::exp(attention::dot(qi, ks[jj]) * scale - l);
    sum += p;
    CTG_UNROLL
    for (int d = 0; d < F; ++d) acc[d] = attention::fma_c(p, vs[jj][d], acc[d]);
  });
  if (!b.active) return;
  CTG_UNROLL
  for (int d = 0; d < F; ++d) out[b.base + a.at(b.row, d)] = store_as<T>(acc[d] / sum);
}

// dq_i = scale sum_{j <= i} ds_ij k_j, ds_ij = p_ij (g_i . v_j - delta_i).
template <class Ts, int F>  // <T, C>
__global__ void attention_dq(const type_at<Ts, 0>* q, const type_at<Ts, 0>* k, const type_at<Ts, 0>* v,
                             const type_at<Ts, 1>* lse, const type_at<Ts, 0>* g, const type_at<Ts, 1>* delta,
                             type_at<Ts, 0>* dq, attention::attention_heads a) {
  using T = type_at<Ts, 0>;
  using C = type_at<Ts, 1>;
  constexpr int R = attention_tiles::rows_for(F, sizeof(C));
  __shared__ C ks[R][F + 1];
  __shared__ C vs[R][F + 1];
  const auto b = attention::rows_of<R>(a);
  C qi[F], gi[F], acc[F];
  CTG_UNROLL
  for (int d = 0; d < F; ++d) acc[d] = 0;
  if (b.active) {
    attention::load_row(qi, q, a, b.base, b.row);
    attention::load_row(gi, g, a, b.base, b.row);
  }
  const C scale = a.template scale<C>();
  const C l = b.active ? lse[b.head * a.tokens + b.row] : C(0), di = b.active ? delta[b.head * a.tokens + b.row] : C(0);
  attention::over_causal_keys<R, F>(ks, vs, k, v, a, b, [&](int jj) {
    const C p = math::exp(attention::dot(qi, ks[jj]) * scale - l);
    const C ds = p * (attention::dot(gi, vs[jj]) - di);
    CTG_UNROLL
    for (int d = 0; d < F; ++d) acc[d] = attention::fma_c(ds, ks[jj][d], acc[d]);
  });
  if (!b.active) return;
  CTG_UNROLL
  for (int d = 0; d < F; ++d) dq[b.base + a.at(b.row, d)] = store_as<T>(acc[d] * scale);
}

// For key j: dk_j = scale sum_{i >= j} ds_ij q_i, dv_j = sum_{i >= j} p_ij g_i.
template <class Ts, int F>  // <T, C>
__global__ void attention_dkv(const type_at<Ts, 0>* q, const type_at<Ts, 0>* k, const type_at<Ts, 0>* v,
                              const type_at<Ts, 1>* lse, const type_at<Ts, 0>* g, const type_at<Ts, 1>* delta,
                              type_at<Ts, 0>* dk, type_at<Ts, 0>* dv, attention::attention_heads a) {
  using T = type_at<Ts, 0>;
  using C = type_at<Ts, 1>;
  constexpr int R = attention_tiles::rows_for(F, sizeof(C));
  __shared__ C own_k[R][F + 1];
  __shared__ C own_v[R][F + 1];
  __shared__ C qs[R][F + 1];
  __shared__ C gs[R][F + 1];
  __shared__ C ls[R];
  __shared__ C deltas[R];
  const auto b = attention::rows_of<R>(a);
  attention::load_tile<R, F>(own_k, k, a, b.base, b.first);
  attention::load_tile<R, F>(own_v, v, a, b.base, b.first);
  C dk_acc[F], dv_acc[F];
  CTG_UNROLL
  for (int d = 0; d < F; ++d) dk_acc[d] = dv_acc[d] = 0;
  const C scale = a.template scale<C>();
  const C* kj = own_k[threadIdx.x];
  const C* vj = own_v[threadIdx.x];
  for (dim_t i0 = b.first; i0 < a.tokens; i0 += R) {
    __syncthreads();
    attention::load_tile<R, F>(qs, q, a, b.base, i0);
    attention::load_tile<R, F>(gs, g, a, b.base, i0);
    attention::load_stats<R>(ls, lse, a, b.head, i0);
    attention::load_stats<R>(deltas, delta, a, b.head, i0);
    __syncthreads();
    if (!b.active) continue;
    for (int ii = 0; ii < R && i0 + ii < a.tokens; ++ii) {
      if (i0 + ii < b.row) continue;  // causal: queries before key j do not see it
      C s = 0, dp = 0;
      CTG_UNROLL
      for (int d = 0; d < F; ++d) {
        s = attention::fma_c(qs[ii][d], kj[d], s);
        dp = attention::fma_c(gs[ii][d], vj[d], dp);
      }
      const C p = math::exp(s * scale - ls[ii]);
      const C ds = p * (dp - deltas[ii]);
      CTG_UNROLL
      for (int d = 0; d < F; ++d) {
        dk_acc[d] = attention::fma_c(ds, qs[ii][d], dk_acc[d]);
        dv_acc[d] = attention::fma_c(p, gs[ii][d], dv_acc[d]);
      }
    }
  }
  if (!b.active) return;
  CTG_UNROLL
  for (int d = 0; d < F; ++d) {
    dk[b.base + a.at(b.row, d)] = store_as<T>(dk_acc[d] * scale);
    dv[b.base + a.at(b.row, d)] = store_as<T>(dv_acc[d]);
  }
}

}  // namespace ctg::cuda::kernels
