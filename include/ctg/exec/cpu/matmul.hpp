#pragma once
// Matrix products on the CPU, batched over leading dims that broadcast
// (numpy's rule), the batches that read one B through one cpu::gemm_sharing_b
// (one FMA chain per output, in k order, accumulated in f32; f64 for f64):
//
//   ctg::cpu::run_matmul<TA, TB, TC>(call, bindings, workspace, nullptr);  // C = A B
//   ctg::cpu::run_summed_matmul<TA, TB, TC, TransposeA, TransposeB>(...);  // C = the sum of the batches' op(A) op(B)
//   ctg::cpu::run_fp8_matmul<QA, QB, TC, TransposeA, TransposeB, SumBatches>(...);  // of fp8 payloads, scaled once
// (call.child: A and B; call.root: C.)
#include <algorithm>

#include <ctg/core/config.hpp>
#include <ctg/core/shape.hpp>
#include <ctg/exec/bindings.hpp>
#include <ctg/exec/buffers.hpp>
#include <ctg/exec/cpu/matmul_batches.hpp>
#include <ctg/exec/cpu/workspace.hpp>
#include <ctg/lower/loop_layout.hpp>
#include <ctg/lower/group.hpp>

CTG_HOT_BEGIN

namespace ctg::cpu {
// Batched C[M,N] = op(A) op(B), op the transpose where TransposeA /
// TransposeB (the operand is read where it lies: cpu::gemm_layout). Batches
// that read the same B (B broadcast over a batch dim: x @ W, or a head's
// weight over the batch) are one group, B packed once for it
// (gemm_sharing_b). With threads, several groups run side by side (each on
// one thread), or one group's tiles are shared; either way every output is
// the same chain (exec/cpu/gemm.hpp), so the bits depend neither on the
// thread count nor on the grouping.
template <class TA, class TB, class TC, bool TransposeA, bool TransposeB>
void run_matmul(const group_call& g, const bindings_view& b, workspace& ws, float*) {
  const std::size_t ia = g.child[0], ib = g.child[1], R = g.root;
  const rt_shape &sa = b.shape[ia], &sc = b.shape[R];
  const dim_t M = sc.d[sc.rank - 2], N = sc.d[sc.rank - 1];
  const dim_t K = TransposeA ? sa.d[sa.rank - 2] : sa.d[sa.rank - 1];
  constexpr gemm_layout layout{TransposeA, TransposeB};
  const TA* A = b.template as<const TA>(ia);
  const TB* B = b.template as<const TB>(ib);
  TC* C = b.template as<TC>(R);
  const detail::matmul_groups& mg = ws.matmul_groups.group(detail::matmul_batches(sa, b.shape[ib], sc), M, N, K);
  const dim_t groups = mg.count();
  auto run_group = [&](dim_t k, gemm_workspace& gws, thread_pool* pool) {
    gemm_sharing_b(M, N, K, A, B + mg.b_offset(k), C, mg.products(k), gws, pool, layout);
  };
  thread_pool* pool = ws.pool();
  if (pool && groups >= 2 * static_cast<dim_t>(pool->size()) && M * N * K * mg.batches() >= (dim_t(1) << 20)) {
    if (ws.batch_gemm.size() < pool->size()) ws.batch_gemm.resize(pool->size());
    auto one = [&](std::size_t k, unsigned worker) { run_group(static_cast<dim_t>(k), ws.batch_gemm[worker], nullptr); };
    pool->for_each(static_cast<std::size_t>(groups), one);
    return;
  }
  for (dim_t k = 0; k < groups; ++k) run_group(k, ws.gemm, pool);
}

// C[M, N] (f32, or f64) = the sum over the product's batches of op(A) op(B)
// (matmul_node's SumBatches): the batches in order, each one's chains
// starting where the last one's ended (gemm's add_to_c), so each output is
// one chain over every batch's k; a product of no batch or no k is zeros.
// Where the batches lie end to end along K (A read transposed, B not, and
// neither broadcast: a linear layer's weight gradient x^T dy), those chains
// are one product over K * batches: one call.
template <class TA, class TB, class TC, bool TransposeA, bool TransposeB>
void run_summed_matmul(const group_call& g, const bindings_view& b, workspace& ws, float*) {
  const std::size_t ia = g.child[0], ib = g.child[1], R = g.root;
  const rt_shape &sa = b.shape[ia], &sb = b.shape[ib];
  const dim_t M = b.shape[R].d[0], N = b.shape[R].d[1];
  const dim_t K = TransposeA ? sa.d[sa.rank - 2] : sa.d[sa.rank - 1];
  const rt_shape batches = product_batch_dims(sa, sb);
  const TA* A = b.template as<const TA>(ia);
  const TB* B = b.template as<const TB>(ib);
  TC* C = b.template as<TC>(R);
  std::fill(C, C + M * N, TC(0));  // (what a product of no batch or no k is; the first batch adds to it)
  auto has_every_batch = [&](const rt_shape& s) {
    return s.rank == batches.rank + 2 && std::equal(batches.d, batches.d + batches.rank, s.d);
  };
  if (TransposeA && !TransposeB && has_every_batch(sa) && has_every_batch(sb)) {
    gemm(M, N, K * batches.numel(), A, B, C, ws.gemm, ws.pool(),
         {.transpose_a = true, .transpose_b = false, .add_to_c = true});
    return;
  }
  detail::for_each_batch(sa, sb, detail::unsummed_product(batches, M, N), [&](dim_t, dim_t oa, dim_t ob) {
    gemm(M, N, K, A + oa * M * K, B + ob * K * N, C, ws.gemm, ws.pool(),
         {.transpose_a = TransposeA, .transpose_b = TransposeB, .add_to_c = true});
  });
}

// Each batch: the payloads widened to f32 (exactly), multiplied by cpu::gemm,
// times scale_inv(A) * scale_inv(B), rounded once to the result type.
// SumBatches: C [M, N] (f32) is the sum of the batches' products, each
// output one chain over every batch's k (gemm's add_to_c), then scaled.
template <class QA, class QB, class TC, bool TransposeA, bool TransposeB, bool SumBatches>
void run_fp8_matmul(const group_call& g, const bindings_view& b, workspace& ws, float*) {
  const std::size_t ia = g.child[0], ib = g.child[1], R = g.root;
  const rt_shape &sa = b.shape[ia], &sb = b.shape[ib], &sc = b.shape[R];
  const dim_t M = sc.d[sc.rank - 2], N = sc.d[sc.rank - 1];
  const dim_t K = TransposeA ? sa.d[sa.rank - 2] : sa.d[sa.rank - 1];
  const QA* A = b.template as<const QA>(ia);
  const QB* B = b.template as<const QB>(ib);
  TC* C = b.template as<TC>(R);
  const float scale = fp8_side(b, ia)->scale_inv * fp8_side(b, ib)->scale_inv;  // scale_inv(A) * scale_inv(B)
  ws.fp8_a.resize(std::max<std::size_t>(ws.fp8_a.size(), static_cast<std::size_t>(M * K)));
  ws.fp8_b.resize(std::max<std::size_t>(ws.fp8_b.size(), static_cast<std::size_t>(K * N)));
  ws.fp8_c.resize(std::max<std::size_t>(ws.fp8_c.size(), static_cast<std::size_t>(M * N)));
  auto scaled = [&](TC* out) {
    for (dim_t i = 0, n = M * N; i < n; ++i) out[i] = store_as<TC>(ws.fp8_c[i] * scale);
  };
  if (SumBatches) std::fill(ws.fp8_c.begin(), ws.fp8_c.begin() + M * N, 0.0f);
  const rt_shape product = SumBatches ? detail::unsummed_product(product_batch_dims(sa, sb), M, N) : sc;
  detail::for_each_batch(sa, sb, product, [&](dim_t batch, dim_t oa, dim_t ob) {
    const QA* a = A + oa * M * K;
    const QB* bm = B + ob * K * N;
    for (dim_t i = 0; i < M; ++i)  // a_f32[i][k]
      for (dim_t k = 0; k < K; ++k) ws.fp8_a[i * K + k] = to_float(TransposeA ? a[k * M + i] : a[i * K + k]);
    for (dim_t k = 0; k < K; ++k)  // b_f32[k][j]
      for (dim_t j = 0; j < N; ++j) ws.fp8_b[k * N + j] = to_float(TransposeB ? bm[j * K + k] : bm[k * N + j]);
    gemm(M, N, K, ws.fp8_a.data(), ws.fp8_b.data(), ws.fp8_c.data(), ws.gemm, ws.pool(), {.add_to_c = SumBatches});
    if (!SumBatches) scaled(C + batch * M * N);
  });
  if (SumBatches) scaled(C);
}

}  // namespace ctg::cpu

CTG_HOT_END
