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
// B[batch_b..., ., .]: calls f(b, batch offset of A, batch offset of B) for
// each batch b of C, the offsets counted in matrices.
template <class F>
void for_each_batch(const rt_shape& sa, const rt_shape& sb, const rt_shape& sc, F&& f) {
  rt_shape batch = sc, ba = sa, bb = sb;
  batch.rank -= 2;
  ba.rank -= 2;
  bb.rank -= 2;
  dim_t stride_a[max_rank]{}, stride_b[max_rank]{};
  kernel::broadcast_strides(ba.rank, ba.d, batch.rank, stride_a);
  kernel::broadcast_strides(bb.rank, bb.d, batch.rank, stride_b);
  for (dim_t b = 0, n = batch.numel(); b < n; ++b) {
    dim_t oa = 0, ob = 0, rest = b;
    for (std::size_t d = batch.rank; d-- > 0;) {
      const dim_t idx = rest % batch.d[d];
      rest /= batch.d[d];
      oa += idx * stride_a[d];
      ob += idx * stride_b[d];
    }
    f(b, oa, ob);
  }
}
}  // namespace ctg::detail

namespace ctg::cpu {
// Batched C[M,N] = A[M,K] B[K,N].
template <class TA, class TB, class TC>
void run_matmul(const group_call& g, const bindings_view& b, workspace& ws, float*) {
  const std::size_t ia = g.child[0], ib = g.child[1], R = g.root;
  const rt_shape &sa = b.shape[ia], &sc = b.shape[R];
  const dim_t M = sc.d[sc.rank - 2], N = sc.d[sc.rank - 1], K = sa.d[sa.rank - 1];
  const TA* A = b.template as<const TA>(ia);
  const TB* B = b.template as<const TB>(ib);
  TC* C = b.template as<TC>(R);
  detail::for_each_batch(sa, b.shape[ib], sc, [&](dim_t batch, dim_t oa, dim_t ob) {
    gemm(M, N, K, A + oa * M * K, B + ob * K * N, C + batch * M * N, ws.gemm);
  });
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
  const float scale = fp8_side(b, ia)[2] * fp8_side(b, ib)[2];  // scale_inv(A) * scale_inv(B)
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
    gemm(M, N, K, ws.fp8_a.data(), ws.fp8_b.data(), ws.fp8_c.data(), ws.gemm);
    TC* cm = C + batch * M * N;
    for (dim_t i = 0, n = M * N; i < n; ++i) cm[i] = store_as<TC>(ws.fp8_c[i] * scale);
  });
}

}  // namespace ctg::cpu

CTG_HOT_END
