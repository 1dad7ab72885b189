#pragma once
// Fused causal attention on the CPU (graph/attention.hpp), a head per thread
// task. A head's operands are first copied as dense [T, Dh] matrices, in the
// type products take (P: 16-bit heads stay 16-bit, so bf16 products run on
// the bf16 pair kernels; wider ones in their compute type C); then its
// queries go in blocks of `block_rows`, each block against the keys up to
// its last query, every product of a block through cpu::gemm (the scores,
// the probabilities times v; in backward dp, dq and the block's parts of dk
// and dv), each accumulating in C. Probabilities and ds are computed in C
// and rounded to P before their products, as the GPU's tensor-core kernels
// (exec/cuda/attention_mma.hpp) and the composed attention's bf16 product
// with v round them. The [block, T] scores and probabilities are scratch
// for one block: nothing of [T, T] is stored.
//   run_attention_lse   lse_i = m + log(sum_j exp(s_ij - m)), m = max_j s_ij
//   run_attention       o_i = sum_j p_ij v_j / sum_j p_ij, p_ij = exp(s_ij - lse_i)
//   run_attention_grad  dq, dk, dv (three values of q's shape in one buffer)
// (call.child: the node's children in graph/attention.hpp's order.)
#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include <ctg/core/config.hpp>
#include <ctg/core/dtype_rules.hpp>
#include <ctg/core/math.hpp>
#include <ctg/exec/attention_heads.hpp>
#include <ctg/exec/bindings.hpp>
#include <ctg/exec/cpu/gemm.hpp>
#include <ctg/exec/cpu/vector_blocks.hpp>
#include <ctg/exec/cpu/workspace.hpp>
#include <ctg/lower/group.hpp>

CTG_HOT_BEGIN

namespace ctg::cpu {

namespace attention_loops {
using ctg::detail::attention_heads;

// Queries a block takes (the scores' scratch: block_rows x T values).
inline constexpr dim_t block_rows = 64;

// The type a head's products take: its own when 16-bit, else C.
template <class T, class C>
using operand_t = std::conditional_t<(sizeof(T) < sizeof(float)), T, C>;

// A head's scratch, from the worker's buffer: parts of given types and
// counts, each 64-byte aligned. Sized first (size_t{} + ... of bytes<X>),
// then taken in the same order.
class head_scratch {
 public:
  template <class X>
  static constexpr std::size_t bytes(dim_t count) {
    return (static_cast<std::size_t>(count) * sizeof(X) + 63) / 64 * 64;
  }
  head_scratch(workspace& ws, unsigned worker, std::size_t total) {
    auto& v = ws.attention[worker];
    const std::size_t doubles = (total + 64) / sizeof(double);
    if (v.size() < doubles) v.resize(doubles);
    const auto base = reinterpret_cast<std::uintptr_t>(v.data());
    at_ = reinterpret_cast<std::byte*>((base + 63) / 64 * 64);
  }
  template <class X>
  X* take(dim_t count) {
    X* p = reinterpret_cast<X*>(at_);
    at_ += bytes<X>(count);
    return p;
  }

 private:
  std::byte* at_ = nullptr;
};

// Head h's values of x (at x) as P, dense [T, Dh] (widened where P is wider).
template <class T, class P>
void gather(const T* x, const attention_heads& a, P* out) {
  for (dim_t t = 0; t < a.tokens; ++t)
    for (dim_t d = 0; d < a.features; ++d) {
      if constexpr (std::is_same_v<T, P>) out[t * a.features + d] = x[a.at(t, d)];
      else out[t * a.features + d] = load_as<T>(x[a.at(t, d)]);
    }
}
// v rounded to P (none where P is C).
template <class P, class C>
const P* rounded(const C* v, dim_t count, P* out) {
  if constexpr (std::is_same_v<P, C>) {
    return v;
  } else {
    each_in_blocks_of_16(0, count, [&](dim_t e) CTG_INLINE_LAMBDA { out[e] = store_as<P>(v[e]); });
    return out;
  }
}
// ... and back, rounded once to T, times `scale`.
template <class T, class C>
void narrow(const C* in, C scale, const attention_heads& a, T* x) {
  for (dim_t t = 0; t < a.tokens; ++t)
    for (dim_t d = 0; d < a.features; ++d) x[a.at(t, d)] = store_as<T>(in[t * a.features + d] * scale);
}

// x[0..n) / d: a row of the output over the sum of its probabilities.
template <class C>
void divide_row(C* x, dim_t n, C d) {
  for (dim_t e = 0; e < n; ++e) x[e] /= d;
}

// A block of queries [first, first + rows) and the keys they see, [0, keys).
struct query_block {
  dim_t first, rows, keys;
};
template <class F>
void each_block(const attention_heads& a, F f) {
  for (dim_t i0 = 0; i0 < a.tokens; i0 += block_rows) {
    const dim_t rows = std::min(block_rows, a.tokens - i0);
    f(query_block{i0, rows, i0 + rows});
  }
}

// p = exp(scale s - shift) for the keys j <= i of a row of n, 0 past i.
// The exps run through i rounded up to a whole block of 16 where the row
// has it (the extra ones are overwritten by the zeros), so no row ends in
// up to 15 exps one by one.
template <class C>
void causal_probs(const C* s, dim_t n, dim_t i, C scale, C shift, C* p) {
  each_in_blocks_of_16(0, std::min(n, (i + 16) / 16 * 16),
                       [&](dim_t j) CTG_INLINE_LAMBDA { p[j] = math::exp(s[j] * scale - shift); });
  std::fill(p + i + 1, p + n, C(0));
}

// The max of x[0..n) and the sum of x[0..n) (in f64), each in 16 lanes: a
// chain of n compares or adds, one after another, was most of the lse
// pass's time. (The max is the same in any order but for NaN and signed
// zeros, which only shift the exps: lse is the same value.)
template <class C>
C row_max(const C* x, dim_t n) {
  max_lanes<C> lanes(x[0]);
  dim_t j = 0;
  for (; j + 16 <= n; j += 16) lanes.add(*reinterpret_cast<const C(*)[16]>(x + j));
  C lane[16];
  lanes.store(lane);
  C m = x[0];
  for (const C v : lane) m = std::max(m, v);
  for (; j < n; ++j) m = std::max(m, x[j]);
  return m;
}
template <class C>
double row_sum(const C* x, dim_t n) {
  f64_sum_lanes sums(0.0);
  dim_t j = 0;
  for (; j + 16 <= n; j += 16) sums.add(*reinterpret_cast<const C(*)[16]>(x + j));
  double lane[16];
  sums.store(lane);
  double sum = 0;
  for (const double v : lane) sum += v;
  for (; j < n; ++j) sum += static_cast<double>(x[j]);
  return sum;
}

// A node's operands, its children in graph/attention.hpp's order (q, k, v,
// lse, g, delta: those it has), and where its heads lie.
template <class T, class C>
struct operands {
  attention_heads a;
  const T *q, *k, *v = nullptr, *g = nullptr;
  const C *lse = nullptr, *delta = nullptr;
  operands(const group_call& call, const bindings_view& b, attention_layout layout, std::size_t children)
      : a(ctg::detail::attention_heads_of(b.shape[call.child[0]], layout)),
        q(b.template as<const T>(call.child[0])),
        k(b.template as<const T>(call.child[1])) {
    if (children > 2) v = b.template as<const T>(call.child[2]), lse = b.template as<const C>(call.child[3]);
    if (children > 4) g = b.template as<const T>(call.child[4]), delta = b.template as<const C>(call.child[5]);
  }
};

// Runs f(h, worker, gemm scratch) for every head, on the pool when the work is worth it.
template <class F>
void each_head(workspace& ws, const attention_heads& a, F f) {
  const std::size_t workers = ws.pool() ? ws.pool()->size() : 1;
  if (ws.attention.size() < workers) ws.attention.resize(workers);
  if (ws.batch_gemm.size() < workers) ws.batch_gemm.resize(workers);
  auto task = [&](std::size_t h, unsigned worker) { f(static_cast<dim_t>(h), worker, ws.batch_gemm[worker]); };
  const bool parallel = a.heads > 1 && a.heads * a.tokens * a.tokens * a.features >= (dim_t{1} << 16);
  run_tasks(parallel ? ws.pool() : nullptr, static_cast<std::size_t>(a.heads), task);
}
}  // namespace attention_loops

// lse_i of every query (C: the compute type, lse's dtype).
template <class T, class C, attention_layout L>
void run_attention_lse(const group_call& g, const bindings_view& b, workspace& ws, float*) {
  namespace al = attention_loops;
  using P = al::operand_t<T, C>;
  using scratch = al::head_scratch;
  const al::operands<T, C> in(g, b, L, 2);
  const auto& a = in.a;
  C* lse = b.template as<C>(g.root);
  const dim_t n = a.head_elements(), F = a.features, bt = al::block_rows * a.tokens;
  const C scale = a.template scale<C>();
  const std::size_t bytes = 2 * scratch::bytes<P>(n) + 2 * scratch::bytes<C>(bt);
  al::each_head(ws, a, [&](dim_t h, unsigned worker, gemm_workspace& gw) {
    scratch at(ws, worker, bytes);
    P *q = at.take<P>(n), *k = at.take<P>(n);
    C *s = at.take<C>(bt), *p = at.take<C>(bt);
    al::gather(in.q + h * n, a, q);
    al::gather(in.k + h * n, a, k);
    al::each_block(a, [&](al::query_block blk) {
      gemm(blk.rows, blk.keys, F, q + blk.first * F, k, s, gw, nullptr, {.transpose_b = true});
      for (dim_t r = 0; r < blk.rows; ++r) {
        const dim_t i = blk.first + r;
        const C* sr = s + r * blk.keys;
        const C m = al::row_max(sr, i + 1);
        al::causal_probs(sr, blk.keys, i, scale, m * scale, p);
        lse[h * a.tokens + i] = m * scale + math::log(static_cast<C>(al::row_sum(p, i + 1)));
      }
    });
  });
}

// o_i = sum_{j <= i} p_ij v_j / sum_{j <= i} p_ij, p_ij = exp(s_ij - lse_i), rounded once to T.
template <class T, class C, attention_layout L>
void run_attention(const group_call& g, const bindings_view& b, workspace& ws, float*) {
  namespace al = attention_loops;
  using P = al::operand_t<T, C>;
  using scratch = al::head_scratch;
  const al::operands<T, C> in(g, b, L, 4);
  const auto& a = in.a;
  T* out = b.template as<T>(g.root);
  const dim_t n = a.head_elements(), F = a.features, bt = al::block_rows * a.tokens;
  const C scale = a.template scale<C>();
  const std::size_t bytes = 3 * scratch::bytes<P>(n) + scratch::bytes<C>(n) + scratch::bytes<C>(bt) +
                            scratch::bytes<P>(bt);
  al::each_head(ws, a, [&](dim_t h, unsigned worker, gemm_workspace& gw) {
    scratch at(ws, worker, bytes);
    P *q = at.take<P>(n), *k = at.take<P>(n), *v = at.take<P>(n);
    C *o = at.take<C>(n), *s = at.take<C>(bt);
    P* pp = at.take<P>(bt);
    al::gather(in.q + h * n, a, q);
    al::gather(in.k + h * n, a, k);
    al::gather(in.v + h * n, a, v);
    al::each_block(a, [&](al::query_block blk) {
      gemm(blk.rows, blk.keys, F, q + blk.first * F, k, s, gw, nullptr, {.transpose_b = true});
      double sums[al::block_rows];
      for (dim_t r = 0; r < blk.rows; ++r) {
        C* sr = s + r * blk.keys;  // the scores, then in place their probabilities
        al::causal_probs(sr, blk.keys, blk.first + r, scale, in.lse[h * a.tokens + blk.first + r], sr);
        sums[r] = al::row_sum(sr, blk.first + r + 1);
      }
      gemm(blk.rows, F, blk.keys, al::rounded(s, blk.rows * blk.keys, pp), v, o + blk.first * F, gw);
      for (dim_t r = 0; r < blk.rows; ++r) al::divide_row(o + (blk.first + r) * F, F, static_cast<C>(sums[r]));
    });
    al::narrow(o, C(1), a, out + h * n);
  });
}

// dq, dk and dv: ds_ij = p_ij (g_i . v_j - delta_i); dq_i = scale sum_j ds_ij k_j,
// dk_j = scale sum_i ds_ij q_i, dv_j = sum_i p_ij g_i (each block's part of dk
// and dv a product of its own, added to the head's).
template <class T, class C, attention_layout L>
void run_attention_grad(const group_call& g, const bindings_view& b, workspace& ws, float*) {
  namespace al = attention_loops;
  using P = al::operand_t<T, C>;
  using scratch = al::head_scratch;
  const al::operands<T, C> in(g, b, L, 6);
  const auto& a = in.a;
  T* out = b.template as<T>(g.root);
  const dim_t total = b.shape[g.child[0]].numel();  // (q's: each of dq, dk, dv)
  T *dq_out = out, *dk_out = out + total, *dv_out = out + 2 * total;
  const dim_t n = a.head_elements(), F = a.features, bt = al::block_rows * a.tokens;
  const std::size_t bytes = 4 * scratch::bytes<P>(n) + 4 * scratch::bytes<C>(n) + 3 * scratch::bytes<C>(bt) +
                            2 * scratch::bytes<P>(bt);
  al::each_head(ws, a, [&](dim_t h, unsigned worker, gemm_workspace& gw) {
    scratch at(ws, worker, bytes);
    P *q = at.take<P>(n), *k = at.take<P>(n), *v = at.take<P>(n), *go = at.take<P>(n);
    C *dq = at.take<C>(n), *dk = at.take<C>(n), *dv = at.take<C>(n), *part = at.take<C>(n);
    C *p = at.take<C>(bt), *dp = at.take<C>(bt), *s = at.take<C>(bt);
    P *pp = at.take<P>(bt), *dsp = at.take<P>(bt);
    al::gather(in.q + h * n, a, q);
    al::gather(in.k + h * n, a, k);
    al::gather(in.v + h * n, a, v);
    al::gather(in.g + h * n, a, go);
    std::fill(dk, dk + n, C(0));
    std::fill(dv, dv + n, C(0));
    const C scale = a.template scale<C>();
    al::each_block(a, [&](al::query_block blk) {
      const dim_t rows = blk.rows, keys = blk.keys;
      const P* qb = q + blk.first * F;
      const P* gb = go + blk.first * F;
      gemm(rows, keys, F, qb, k, s, gw, nullptr, {.transpose_b = true});
      gemm(rows, keys, F, gb, v, dp, gw, nullptr, {.transpose_b = true});  // dp_ij = g_i . v_j
      for (dim_t r = 0; r < rows; ++r) {
        const dim_t i = blk.first + r;
        C* pr = p + r * keys;
        C* dsr = dp + r * keys;  // dp, then in place ds
        al::causal_probs(s + r * keys, keys, i, scale, in.lse[h * a.tokens + i], pr);
        const C di = in.delta[h * a.tokens + i];
        each_in_blocks_of_16(0, keys, [&](dim_t j) CTG_INLINE_LAMBDA { dsr[j] = pr[j] * (dsr[j] - di); });
      }
      const P* ds = al::rounded(dp, rows * keys, dsp);
      gemm(rows, F, keys, ds, k, dq + blk.first * F, gw);                     // ds k
      gemm(keys, F, rows, ds, qb, part, gw, nullptr, {.transpose_a = true});  // ds^T q
      each_in_blocks_of_16(0, keys * F, [&](dim_t e) CTG_INLINE_LAMBDA { dk[e] += part[e]; });
      gemm(keys, F, rows, al::rounded(p, rows * keys, pp), gb, part, gw, nullptr, {.transpose_a = true});  // p^T g
      each_in_blocks_of_16(0, keys * F, [&](dim_t e) CTG_INLINE_LAMBDA { dv[e] += part[e]; });
    });
    al::narrow(dq, scale, a, dq_out + h * n);
    al::narrow(dk, scale, a, dk_out + h * n);
    al::narrow(dv, C(1), a, dv_out + h * n);
  });
}

}  // namespace ctg::cpu

CTG_HOT_END
