#pragma once
// Fused causal attention on the CPU (graph/attention.hpp), a head per thread
// task. A head's operands are first widened to the compute type C in the
// layouts its loops read contiguously: k by features ([Dh, T], so a query's
// scores are Dh passes of s_j += q_d k_dj over its keys j, in d's order),
// the others by tokens ([T, Dh]). Each query's scores live in one row of T
// values; nothing of [T, T] is kept.
//   run_attention_lse   lse_i = m + log(sum_j exp(s_ij - m)), m = max_j s_ij
//   run_attention       o_i = sum_j exp(s_ij - lse_i) v_j
//   run_attention_grad  dq, dk, dv (three values of q's shape in one buffer)
// (call.child: the node's children in graph/attention.hpp's order.)
#include <algorithm>
#include <vector>

#include <ctg/core/config.hpp>
#include <ctg/core/dtype_rules.hpp>
#include <ctg/core/math.hpp>
#include <ctg/exec/attention_heads.hpp>
#include <ctg/exec/bindings.hpp>
#include <ctg/exec/cpu/workspace.hpp>
#include <ctg/lower/group.hpp>

CTG_HOT_BEGIN

namespace ctg::cpu {

namespace attention_loops {
using ctg::detail::attention_heads;

// Every loop runs over whole chunks of `lanes` values (rows padded with
// zeros to a multiple of it) through __restrict pointers: fixed-width loops
// the compiler vectorizes without run-time alias checks, at -O2 too.
inline constexpr dim_t lanes = 16;
constexpr dim_t chunks(dim_t n) { return (n + lanes - 1) / lanes; }
constexpr dim_t padded(dim_t n) { return chunks(n) * lanes; }

// y += a x over `count` chunks.
template <class C>
CTG_FORCEINLINE void add_scaled(C* __restrict y, C a, const C* __restrict x, dim_t count) {
  for (dim_t c = 0; c < count; ++c)
    for (dim_t k = 0; k < lanes; ++k) y[c * lanes + k] += a * x[c * lanes + k];
}

// A head's scratch in the compute type, from the worker's buffer.
template <class C>
C* scratch(workspace& ws, unsigned worker, std::size_t count) {
  auto& v = ws.attention[worker];
  const std::size_t doubles = (count * sizeof(C) + sizeof(double) - 1) / sizeof(double);
  if (v.size() < doubles) v.resize(doubles);
  return reinterpret_cast<C*>(v.data());
}

// The padded sizes of a head's scratch: tokens by features ([T][Fp]) and
// features by tokens ([F][Tp]).
struct head_layout {
  dim_t tp, fp;  // T and Dh padded to whole chunks
  explicit head_layout(const attention_heads& a) : tp(padded(a.tokens)), fp(padded(a.features)) {}
  dim_t by_tokens(const attention_heads& a) const { return a.tokens * fp; }
  dim_t by_features(const attention_heads& a) const { return a.features * tp; }
};

// Head h of x widened to C, by tokens ([T][Fp]) or by features ([F][Tp]), the padding zero.
template <class T, class C>
void widen_by_tokens(const T* x, const attention_heads& a, const head_layout& l, C* out) {
  std::fill(out, out + l.by_tokens(a), C(0));
  for (dim_t t = 0; t < a.tokens; ++t)
    for (dim_t d = 0; d < a.features; ++d) out[t * l.fp + d] = load_as<T>(x[a.at(t, d)]);
}
template <class T, class C>
void widen_by_features(const T* x, const attention_heads& a, const head_layout& l, C* out) {
  std::fill(out, out + l.by_features(a), C(0));
  for (dim_t d = 0; d < a.features; ++d)
    for (dim_t t = 0; t < a.tokens; ++t) out[d * l.tp + t] = load_as<T>(x[a.at(t, d)]);
}

// s[j] = scale * q . k_j for the keys j <= i (k by features), in whole chunks
// (the lanes past i hold later keys' scores or zeros: causal_exp drops them).
template <class C>
void causal_scores(const C* q, const C* k_by_features, const attention_heads& a, const head_layout& l, dim_t i,
                   C scale, C* __restrict s) {
  const dim_t n = chunks(i + 1);
  std::fill(s, s + n * lanes, C(0));
  for (dim_t d = 0; d < a.features; ++d) add_scaled(s, q[d], k_by_features + d * l.tp, n);
  for (dim_t j = 0; j < n * lanes; ++j) s[j] *= scale;
}

// p[j] = exp(s[j] - shift) for j <= i, 0 past it, in whole chunks (exp of
// every lane, then the lanes past i zeroed: a select in the loop kept it scalar).
template <class C>
void causal_exp(const C* __restrict s, C shift, dim_t i, C* __restrict p) {
  const dim_t n = chunks(i + 1);
  for (dim_t c = 0; c < n; ++c)
    for (dim_t k = 0; k < lanes; ++k) p[c * lanes + k] = math::exp(s[c * lanes + k] - shift);
  std::fill(p + i + 1, p + n * lanes, C(0));
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

// Runs f(h, worker) for every head, on the pool when the work is worth it.
template <class F>
void each_head(workspace& ws, const attention_heads& a, F f) {
  const std::size_t workers = ws.pool() ? ws.pool()->size() : 1;
  if (ws.attention.size() < workers) ws.attention.resize(workers);
  auto task = [&](std::size_t h, unsigned worker) { f(static_cast<dim_t>(h), worker); };
  const bool parallel = a.heads > 1 && a.heads * a.tokens * a.tokens * a.features >= (dim_t{1} << 16);
  run_tasks(parallel ? ws.pool() : nullptr, static_cast<std::size_t>(a.heads), task);
}
}  // namespace attention_loops

// lse_i of every query (C: the compute type, lse's dtype).
template <class T, class C, attention_layout L>
void run_attention_lse(const group_call& g, const bindings_view& b, workspace& ws, float*) {
  namespace al = attention_loops;
  const al::operands<T, C> in(g, b, L, 2);
  const auto& a = in.a;
  C* lse = b.template as<C>(g.root);
  const al::head_layout l(a);
  al::each_head(ws, a, [&](dim_t h, unsigned worker) {
    C* kf = al::scratch<C>(ws, worker, static_cast<std::size_t>(l.by_features(a) + l.by_tokens(a) + 2 * l.tp));
    C *qt = kf + l.by_features(a), *s = qt + l.by_tokens(a), *p = s + l.tp;
    const dim_t base = h * a.head_elements();
    al::widen_by_features(in.k + base, a, l, kf);
    al::widen_by_tokens(in.q + base, a, l, qt);
    for (dim_t i = 0; i < a.tokens; ++i) {
      al::causal_scores(qt + i * l.fp, kf, a, l, i, a.template scale<C>(), s);
      C m = s[0];
      for (dim_t j = 1; j <= i; ++j) m = std::max(m, s[j]);
      al::causal_exp(s, m, i, p);
      C sum = 0;
      for (dim_t j = 0; j <= i; ++j) sum += p[j];
      lse[h * a.tokens + i] = m + math::log(sum);
    }
  });
}

// o_i = sum_{j <= i} exp(s_ij - lse_i) v_j, rounded once to T.
template <class T, class C, attention_layout L>
void run_attention(const group_call& g, const bindings_view& b, workspace& ws, float*) {
  namespace al = attention_loops;
  const al::operands<T, C> in(g, b, L, 4);
  const auto& a = in.a;
  T* out = b.template as<T>(g.root);
  const al::head_layout l(a);
  const dim_t fc = al::chunks(a.features);
  al::each_head(ws, a, [&](dim_t h, unsigned worker) {
    C* kf = al::scratch<C>(ws, worker, static_cast<std::size_t>(l.by_features(a) + 2 * l.by_tokens(a) + 2 * l.tp + l.fp));
    C *qt = kf + l.by_features(a), *vt = qt + l.by_tokens(a), *s = vt + l.by_tokens(a), *p = s + l.tp, *o = p + l.tp;
    const dim_t base = h * a.head_elements();
    al::widen_by_features(in.k + base, a, l, kf);
    al::widen_by_tokens(in.q + base, a, l, qt);
    al::widen_by_tokens(in.v + base, a, l, vt);
    for (dim_t i = 0; i < a.tokens; ++i) {
      al::causal_scores(qt + i * l.fp, kf, a, l, i, a.template scale<C>(), s);
      al::causal_exp(s, in.lse[h * a.tokens + i], i, p);
      std::fill(o, o + l.fp, C(0));
      for (dim_t j = 0; j <= i; ++j) al::add_scaled(o, p[j], vt + j * l.fp, fc);
      for (dim_t d = 0; d < a.features; ++d) out[base + a.at(i, d)] = store_as<T>(o[d]);
    }
  });
}

// dq, dk and dv: ds_ij = p_ij (g_i . v_j - delta_i); dq_i = scale sum_j ds_ij k_j,
// dk_j = scale sum_i ds_ij q_i, dv_j = sum_i p_ij g_i.
template <class T, class C, attention_layout L>
void run_attention_grad(const group_call& g, const bindings_view& b, workspace& ws, float*) {
  namespace al = attention_loops;
  const al::operands<T, C> in(g, b, L, 6);
  const auto& a = in.a;
  T* out = b.template as<T>(g.root);
  const dim_t total = b.shape[g.child[0]].numel();  // (q's: each of dq, dk, dv)
  T *dq = out, *dk = out + total, *dv = out + 2 * total;
  const al::head_layout l(a);
  const dim_t fc = al::chunks(a.features), by_t = l.by_tokens(a), by_f = l.by_features(a);
  al::each_head(ws, a, [&](dim_t h, unsigned worker) {
    C* qt = al::scratch<C>(ws, worker, static_cast<std::size_t>(5 * by_t + 2 * by_f + 4 * l.tp + l.fp));
    C *kt = qt + by_t, *gt = kt + by_t, *dk_acc = gt + by_t, *dv_acc = dk_acc + by_t;
    C *kf = dv_acc + by_t, *vf = kf + by_f;
    C *s = vf + by_f, *dp = s + l.tp, *p = dp + l.tp, *ds = p + l.tp, *dq_row = ds + l.tp;
    const dim_t base = h * a.head_elements();
    al::widen_by_tokens(in.q + base, a, l, qt);
    al::widen_by_tokens(in.k + base, a, l, kt);
    al::widen_by_tokens(in.g + base, a, l, gt);
    al::widen_by_features(in.k + base, a, l, kf);
    al::widen_by_features(in.v + base, a, l, vf);
    std::fill(dk_acc, dk_acc + 2 * by_t, C(0));
    for (dim_t i = 0; i < a.tokens; ++i) {
      const C* qi = qt + i * l.fp;
      const C* gi = gt + i * l.fp;
      al::causal_scores(qi, kf, a, l, i, a.template scale<C>(), s);
      al::causal_scores(gi, vf, a, l, i, C(1), dp);  // dp_j = g_i . v_j
      al::causal_exp(s, in.lse[h * a.tokens + i], i, p);
      const C di = in.delta[h * a.tokens + i];
      for (dim_t j = 0; j < al::chunks(i + 1) * al::lanes; ++j) ds[j] = p[j] * (dp[j] - di);
      std::fill(dq_row, dq_row + l.fp, C(0));
      for (dim_t j = 0; j <= i; ++j) {
        al::add_scaled(dq_row, ds[j], kt + j * l.fp, fc);
        al::add_scaled(dk_acc + j * l.fp, ds[j], qi, fc);
        al::add_scaled(dv_acc + j * l.fp, p[j], gi, fc);
      }
      for (dim_t d = 0; d < a.features; ++d) dq[base + a.at(i, d)] = store_as<T>(dq_row[d] * a.template scale<C>());
    }
    for (dim_t t = 0; t < a.tokens; ++t)
      for (dim_t d = 0; d < a.features; ++d) {
        dk[base + a.at(t, d)] = store_as<T>(dk_acc[t * l.fp + d] * a.template scale<C>());
        dv[base + a.at(t, d)] = store_as<T>(dv_acc[t * l.fp + d]);
      }
  });
}

}  // namespace ctg::cpu

CTG_HOT_END
