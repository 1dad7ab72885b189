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

// A head's scratch in the compute type, from the worker's buffer.
template <class C>
C* scratch(workspace& ws, unsigned worker, std::size_t count) {
  auto& v = ws.attention[worker];
  const std::size_t doubles = (count * sizeof(C) + sizeof(double) - 1) / sizeof(double);
  if (v.size() < doubles) v.resize(doubles);
  return reinterpret_cast<C*>(v.data());
}

// Head h of x widened to C, by tokens ([T, Dh]) or by features ([Dh, T]).
template <class T, class C>
void widen_by_tokens(const T* x, const attention_heads& a, C* out) {
  for (dim_t t = 0; t < a.tokens; ++t)
    for (dim_t d = 0; d < a.features; ++d) out[t * a.features + d] = load_as<T>(x[a.at(t, d)]);
}
template <class T, class C>
void widen_by_features(const T* x, const attention_heads& a, C* out) {
  for (dim_t d = 0; d < a.features; ++d)
    for (dim_t t = 0; t < a.tokens; ++t) out[d * a.tokens + t] = load_as<T>(x[a.at(t, d)]);
}

// s[j] = scale * q . k_j for the keys j <= i (k by features).
template <class C>
void causal_scores(const C* q, const C* k_by_features, const attention_heads& a, dim_t i, C scale, C* s) {
  const dim_t n = i + 1;
  std::fill(s, s + n, C(0));
  for (dim_t d = 0; d < a.features; ++d) {
    const C qd = q[d];
    const C* kd = k_by_features + d * a.tokens;
    for (dim_t j = 0; j < n; ++j) s[j] += qd * kd[j];
  }
  for (dim_t j = 0; j < n; ++j) s[j] *= scale;
}

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
  const auto a = ctg::detail::attention_heads_of(b.shape[g.child[0]], L);
  const T* q = b.template as<const T>(g.child[0]);
  const T* k = b.template as<const T>(g.child[1]);
  C* lse = b.template as<C>(g.root);
  attention_loops::each_head(ws, a, [&](dim_t h, unsigned worker) {
    C* kf = attention_loops::scratch<C>(ws, worker, static_cast<std::size_t>(2 * a.head_elements() + a.tokens));
    C* qt = kf + a.head_elements();
    C* s = qt + a.head_elements();
    const dim_t base = h * a.head_elements();
    attention_loops::widen_by_features(k + base, a, kf);
    attention_loops::widen_by_tokens(q + base, a, qt);
    for (dim_t i = 0; i < a.tokens; ++i) {
      attention_loops::causal_scores(qt + i * a.features, kf, a, i, a.template scale<C>(), s);
      C m = s[0];
      for (dim_t j = 1; j <= i; ++j) m = std::max(m, s[j]);
      C sum = 0;
      for (dim_t j = 0; j <= i; ++j) sum += math::exp(s[j] - m);
      lse[h * a.tokens + i] = m + math::log(sum);
    }
  });
}

// o_i = sum_{j <= i} exp(s_ij - lse_i) v_j, rounded once to T.
template <class T, class C, attention_layout L>
void run_attention(const group_call& g, const bindings_view& b, workspace& ws, float*) {
  const auto a = ctg::detail::attention_heads_of(b.shape[g.child[0]], L);
  const T* q = b.template as<const T>(g.child[0]);
  const T* k = b.template as<const T>(g.child[1]);
  const T* v = b.template as<const T>(g.child[2]);
  const C* lse = b.template as<const C>(g.child[3]);
  T* out = b.template as<T>(g.root);
  attention_loops::each_head(ws, a, [&](dim_t h, unsigned worker) {
    const dim_t n = a.head_elements();
    C* kf = attention_loops::scratch<C>(ws, worker, static_cast<std::size_t>(3 * n + a.tokens + a.features));
    C *qt = kf + n, *vt = qt + n, *s = vt + n, *o = s + a.tokens;
    const dim_t base = h * n;
    attention_loops::widen_by_features(k + base, a, kf);
    attention_loops::widen_by_tokens(q + base, a, qt);
    attention_loops::widen_by_tokens(v + base, a, vt);
    for (dim_t i = 0; i < a.tokens; ++i) {
      attention_loops::causal_scores(qt + i * a.features, kf, a, i, a.template scale<C>(), s);
      const C l = lse[h * a.tokens + i];
      std::fill(o, o + a.features, C(0));
      for (dim_t j = 0; j <= i; ++j) {
        const C p = math::exp(s[j] - l);
        const C* vj = vt + j * a.features;
        for (dim_t d = 0; d < a.features; ++d) o[d] += p * vj[d];
      }
      for (dim_t d = 0; d < a.features; ++d) out[base + a.at(i, d)] = store_as<T>(o[d]);
    }
  });
}

// dq, dk and dv: ds_ij = p_ij (g_i . v_j - delta_i); dq_i = scale sum_j ds_ij k_j,
// dk_j = scale sum_i ds_ij q_i, dv_j = sum_i p_ij g_i.
template <class T, class C, attention_layout L>
void run_attention_grad(const group_call& g, const bindings_view& b, workspace& ws, float*) {
  const auto a = ctg::detail::attention_heads_of(b.shape[g.child[0]], L);
  const T* q = b.template as<const T>(g.child[0]);
  const T* k = b.template as<const T>(g.child[1]);
  const T* v = b.template as<const T>(g.child[2]);
  const C* lse = b.template as<const C>(g.child[3]);
  const T* go = b.template as<const T>(g.child[4]);
  const C* delta = b.template as<const C>(g.child[5]);
  T* out = b.template as<T>(g.root);
  const dim_t total = b.shape[g.child[0]].numel();
  T *dq = out, *dk = out + total, *dv = out + 2 * total;
  attention_loops::each_head(ws, a, [&](dim_t h, unsigned worker) {
    const dim_t n = a.head_elements(), F = a.features;
    C* qt = attention_loops::scratch<C>(ws, worker, static_cast<std::size_t>(7 * n + 2 * a.tokens + F));
    C *kt = qt + n, *kf = kt + n, *vf = kf + n, *gt = vf + n, *dk_acc = gt + n, *dv_acc = dk_acc + n;
    C *s = dv_acc + n, *dp = s + a.tokens, *dq_row = dp + a.tokens;
    const dim_t base = h * n;
    attention_loops::widen_by_tokens(q + base, a, qt);
    attention_loops::widen_by_tokens(k + base, a, kt);
    attention_loops::widen_by_features(k + base, a, kf);
    attention_loops::widen_by_features(v + base, a, vf);
    attention_loops::widen_by_tokens(go + base, a, gt);
    std::fill(dk_acc, dk_acc + 2 * n, C(0));
    for (dim_t i = 0; i < a.tokens; ++i) {
      const C* qi = qt + i * F;
      const C* gi = gt + i * F;
      attention_loops::causal_scores(qi, kf, a, i, a.template scale<C>(), s);
      attention_loops::causal_scores(gi, vf, a, i, C(1), dp);  // dp_j = g_i . v_j
      const C l = lse[h * a.tokens + i], di = delta[h * a.tokens + i];
      std::fill(dq_row, dq_row + F, C(0));
      for (dim_t j = 0; j <= i; ++j) {
        const C p = math::exp(s[j] - l);
        const C ds = p * (dp[j] - di);
        const C* kj = kt + j * F;
        C* dkj = dk_acc + j * F;
        C* dvj = dv_acc + j * F;
        for (dim_t d = 0; d < F; ++d) {
          dq_row[d] += ds * kj[d];
          dkj[d] += ds * qi[d];
          dvj[d] += p * gi[d];
        }
      }
      for (dim_t d = 0; d < F; ++d) dq[base + a.at(i, d)] = store_as<T>(dq_row[d] * a.template scale<C>());
    }
    for (dim_t t = 0; t < a.tokens; ++t)
      for (dim_t d = 0; d < F; ++d) {
        dk[base + a.at(t, d)] = store_as<T>(dk_acc[t * F + d] * a.template scale<C>());
        dv[base + a.at(t, d)] = store_as<T>(dv_acc[t * F + d]);
      }
  });
}

}  // namespace ctg::cpu

CTG_HOT_END
