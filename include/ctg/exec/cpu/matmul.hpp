#pragma once
// Matrix products on the CPU, batched over leading dims that broadcast
// (numpy's rule), each batch through cpu::gemm (one FMA chain per output, in
// k order, accumulated in f32; f64 for f64):
//
//   ctg::cpu::run_matmul<TA, TB, TC>(call, bindings, workspace, nullptr);  // C = A B
//   ctg::cpu::run_fp8_matmul<QA, QB, TC, TransposeA, TransposeB>(...);   // op(A) op(B) of fp8 payloads, scaled once
// (call.child: A and B; call.root: C.)
#include <algorithm>

#include <ctg/core/config.hpp>
#include <ctg/exec/bindings.hpp>
#include <ctg/exec/buffers.hpp>
#include <ctg/exec/cpu/workspace.hpp>
#include <ctg/lower/loop_layout.hpp>
#include <ctg/lower/group.hpp>

CTG_HOT_BEGIN

namespace ctg::detail {
// The batches of a product C[batch..., M, N] of A[batch_a..., ., .] and
// B[batch_b..., ., .]: batch b of C reads A's and B's matrices at offsets(b)
// (counted in matrices).
struct matmul_batches {
  rt_shape batch;
  dim_t stride_a[max_rank]{}, stride_b[max_rank]{};
  dim_t count = 1;

  matmul_batches(const rt_shape& sa, const rt_shape& sb, const rt_shape& sc) : batch(sc) {
    rt_shape ba = sa, bb = sb;
    batch.rank -= 2;
    ba.rank -= 2;
    bb.rank -= 2;
    kernel::broadcast_strides(ba.rank, ba.d, batch.rank, stride_a);
    kernel::broadcast_strides(bb.rank, bb.d, batch.rank, stride_b);
    count = batch.numel();
  }
  void offsets(dim_t b, dim_t& oa, dim_t& ob) const {
    oa = 0;
    ob = 0;
    for (std::size_t d = batch.rank; d-- > 0;) {
      const dim_t idx = b % batch.d[d];
      b /= batch.d[d];
      oa += idx * stride_a[d];
      ob += idx * stride_b[d];
    }
  }
};

// Calls f(b, batch offset of A, batch offset of B) for each batch b of C, in order.
template <class F>
void for_each_batch(const rt_shape& sa, const rt_shape& sb, const rt_shape& sc, F&& f) {
  const matmul_batches mb(sa, sb, sc);
  for (dim_t b = 0; b < mb.count; ++b) {
    dim_t oa, ob;
    mb.offsets(b, oa, ob);
    f(b, oa, ob);
  }
}
}  // namespace ctg::detail

namespace ctg::cpu {
// Batched C[M,N] = op(A) op(B), op the transpose where TransposeA /
// TransposeB (the operand is read where it lies: cpu::gemm_layout). With
// threads, several batches run side by side (each on one thread), or one
// batch's tiles are shared; either way every output is the same chain
// (exec/cpu/gemm.hpp), so the bits do not depend on the thread count.
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
  const detail::matmul_batches mb(sa, b.shape[ib], sc);
  thread_pool* pool = ws.pool();
  if (pool && mb.count >= 2 * static_cast<dim_t>(pool->size()) && M * N * K * mb.count >= (dim_t(1) << 20)) {
    if (ws.batch_gemm.size() < pool->size()) ws.batch_gemm.resize(pool->size());
    auto one = [&](std::size_t batch, unsigned worker) {
      dim_t oa, ob;
      mb.offsets(static_cast<dim_t>(batch), oa, ob);
      gemm(M, N, K, A + oa * M * K, B + ob * K * N, C + static_cast<dim_t>(batch) * M * N, ws.batch_gemm[worker],
           nullptr, layout);
    };
    pool->for_each(static_cast<std::size_t>(mb.count), one);
    return;
  }
  for (dim_t batch = 0; batch < mb.count; ++batch) {
    dim_t oa, ob;
    mb.offsets(batch, oa, ob);
    gemm(M, N, K, A + oa * M * K, B + ob * K * N, C + batch * M * N, ws.gemm, pool, layout);
  }
}

// Each batch: the payloads widened to f32 (exactly), multiplied by cpu::gemm,
// times scale_inv(A) * scale_inv(B), rounded once to the result type.
template <class QA, class QB, class TC, bool TransposeA, bool TransposeB>
void run_fp8_matmul(const group_call& g, const bindings_view& b, workspace& ws, float*) {
  const std::size_t ia = g.child[0], ib = g.child[1], R = g.root;
  const rt_shape &sa = b.shape[ia], &sc = b.shape[R];
  const dim_t M = sc.d[sc.rank - 2], N = sc.d[sc.rank - 1];
  const dim_t K = TransposeA ? sa.d[sa.rank - 2] : sa.d[sa.rank - 1];
  const QA* A = b.template as<const QA>(ia);
  const QB* B = b.template as<const QB>(ib);
  TC* C = b.template as<TC>(R);
  const float scale = fp8_side(b, ia)->scale_inv * fp8_side(b, ib)->scale_inv;  // scale_inv(A) * scale_inv(B)
  ws.fp8_a.resize(std::max<std::size_t>(ws.fp8_a.size(), static_cast<std::size_t>(M * K)));
  ws.fp8_b.resize(std::max<std::size_t>(ws.fp8_b.size(), static_cast<std::size_t>(K * N)));
  ws.fp8_c.resize(std::max<std::size_t>(ws.fp8_c.size(), static_cast<std::size_t>(M * N)));
  detail::for_each_batch(sa, b.shape[ib], sc, [&](dim_t batch, dim_t oa, dim_t ob) {
    const QA* a = A + oa * M * K;
    const QB* bm = B + ob * K * N;
    for (dim_t i = 0; i < M; ++i)  // a_f32[i][k]
      for (dim_t k = 0; k < K; ++k) ws.fp8_a[i * K + k] = to_float(TransposeA ? a[k * M + i] : a[i * K + k]);
    for (dim_t k = 0; k < K; ++k)  // b_f32[k][j]
      for (dim_t j = 0; j < N; ++j) ws.fp8_b[k * N + j] = to_float(TransposeB ? bm[j * K + k] : bm[k * N + j]);
    gemm(M, N, K, ws.fp8_a.data(), ws.fp8_b.data(), ws.fp8_c.data(), ws.gemm, ws.pool());
    TC* cm = C + batch * M * N;
    for (dim_t i = 0, n = M * N; i < n; ++i) cm[i] = store_as<TC>(ws.fp8_c[i] * scale);
  });
}

}  // namespace ctg::cpu

CTG_HOT_END
