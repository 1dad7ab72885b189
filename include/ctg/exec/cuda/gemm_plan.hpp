#pragma once
// How a matmul or fp8_matmul node maps onto cuBLASLt: a pure host function
// (no CUDA header) from the node's run-time shapes, dtypes and transposes to
// the library calls, so the mapping (the usual bug) is tested on the CPU
// (tests/unit/cuda_gemm_plan.cpp executes every plan of the tiny
// transformer's step with an interpreter of cuBLASLt's semantics).
//
// ctg's tensors are row-major; cuBLASLt's matrices column-major. A row-major
// X[r, c] read as column-major is X^T (c x r, leading dimension c), so
// C[M, N] = op(A) op(B) is computed as C^T = op(B)^T op(A)^T: cuBLASLt's
// first operand is ctg's B, its second ctg's A, and its m, n = N, M.
//
// FP8 (cuBLASLt on compute capability 8.9 and 9.x) takes only the "TN"
// layout: the first operand transposed, the second not. An fp8 operand in
// another layout is first copied transposed into scratch (a transpose
// step); the plan says which, and its scratch size.
//
// Batches: numpy broadcasting over the leading dims. When ctg's B is one
// matrix for every batch and A's batches are contiguous and not
// transposed, the batches fold into one product of M * batches rows;
// batches that one stride per operand describes are one strided-batched
// call. Otherwise C's batch dims split into leading and trailing ones, the
// trailing as many as one stride per operand describes (the last one at
// least): one strided-batched call per index of the leading dims.
//
// A product summed over its batches (matmul_node's and fp8_matmul_node's
// SumBatches: C [M, N], f32) is one call per batch, in batch order, the
// calls after the first adding to D (beta 1): each output the f32 sum of
// the batches' products.
// Where both operands' batches are contiguous and stored K-major (A read
// transposed, B not: a linear layer's weight gradient x^T dy), the batches
// lie end to end along K and the sum is one call of K * batches (fp8: the
// operands copied transposed as one matrix each, [K * batches, ...]).
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <vector>

#include <ctg/core/dtypes.hpp>
#include <ctg/core/error.hpp>
#include <ctg/core/shape.hpp>
#include <ctg/lower/loop_layout.hpp>

namespace ctg::cuda {

enum class gemm_op : std::uint8_t { n, t };  // CUBLAS_OP_N, CUBLAS_OP_T
enum class gemm_type : std::uint8_t { f32, f64, bf16, f16, e4m3, e5m2 };

// The gemm_type of an element type.
template <class T>
constexpr gemm_type gemm_type_of() {
  if constexpr (std::is_same_v<T, f32>) return gemm_type::f32;
  else if constexpr (std::is_same_v<T, f64>) return gemm_type::f64;
  else if constexpr (std::is_same_v<T, bf16>) return gemm_type::bf16;
  else if constexpr (std::is_same_v<T, f16>) return gemm_type::f16;
  else if constexpr (std::is_same_v<T, e4m3>) return gemm_type::e4m3;
  else {
    static_assert(std::is_same_v<T, e5m2>, "ctg: internal: no GEMM type for this element type");
    return gemm_type::e5m2;
  }
}

// Where a call reads or writes: the product's operands, its result, or a
// transposed copy of an fp8 operand.
enum class gemm_buffer : std::uint8_t { a, b, d, a_transposed, b_transposed };

// One transposed copy of an fp8 operand: `batches` row-major matrices of
// rows x cols, each written as cols x rows (row-major) into scratch.
struct transpose_step {
  gemm_buffer from = gemm_buffer::a, to = gemm_buffer::a_transposed;
  dim_t rows = 0, cols = 0, batches = 1;
};

// One cublasLtMatmul, column-major: D = alpha * op1(first) op2(second),
// alpha = scale_inv(ctg's A) * scale_inv(ctg's B) for fp8 (the scale
// pointers), 1 otherwise; accumulation in f32 (f64 for f64).
struct gemm_call {
  gemm_op op_first = gemm_op::n, op_second = gemm_op::n;
  dim_t m = 0, n = 0, k = 0;  // op1(first) is m x k, op2(second) k x n, D m x n
  gemm_buffer first = gemm_buffer::b, second = gemm_buffer::a;
  dim_t first_offset = 0, second_offset = 0, d_offset = 0;  // elements
  dim_t ld_first = 0, ld_second = 0, ld_d = 0;
  dim_t batches = 1;
  dim_t stride_first = 0, stride_second = 0, stride_d = 0;  // elements between batches (0: the same matrix)
  bool accumulate = false;  // D += the product (beta 1): a summed product's batches after its first
};

struct gemm_plan {
  gemm_type type_a{}, type_b{}, type_d{};
  gemm_type compute = gemm_type::f32;
  bool fp8 = false;  // scale pointers: ctg's A's and B's scale_inv
  std::vector<transpose_step> transposes;
  dim_t scratch_a = 0, scratch_b = 0;  // elements of the transposed copies
  std::vector<gemm_call> calls;
  // K is 0 (an empty batch's weight gradient): D is this many zeros, set
  // without a call (cuBLASLt takes no empty inner dim: its leading dims
  // must be at least 1).
  dim_t zeros = 0;
};


// One matrix of a call as cuBLASLt's layout describes it
// (cublasLtMatrixLayoutCreate, its batch attributes) and where it lies:
// stored rows x cols, column-major, leading dimension ld; op applies on top.
struct lt_matrix {
  gemm_type type = gemm_type::f32;
  gemm_buffer buffer = gemm_buffer::a;
  dim_t offset = 0;  // elements into the buffer
  dim_t rows = 0, cols = 0, ld = 0;
  dim_t batches = 1, stride = 0;  // elements between batches
  gemm_op op = gemm_op::n;
};
// cuBLASLt's A (the call's first operand), B (its second) and D of a call:
// op(A) is m x k, op(B) k x n, D m x n.
struct lt_operands {
  lt_matrix a, b, d;
};
inline lt_operands lt_operands_of(const gemm_plan& p, const gemm_call& c) {
  auto type_of = [&](gemm_buffer w) {
    return w == gemm_buffer::b || w == gemm_buffer::b_transposed ? p.type_b : p.type_a;
  };
  lt_operands o;
  // Stored shapes: op n stores op(X) as is, op t its transpose.
  const bool ft = c.op_first == gemm_op::t, st = c.op_second == gemm_op::t;
  o.a = {type_of(c.first), c.first, c.first_offset, ft ? c.k : c.m, ft ? c.m : c.k, c.ld_first,
         c.batches, c.stride_first, c.op_first};
  o.b = {type_of(c.second), c.second, c.second_offset, st ? c.n : c.k, st ? c.k : c.n, c.ld_second,
         c.batches, c.stride_second, c.op_second};
  o.d = {p.type_d, gemm_buffer::d, c.d_offset, c.m, c.n, c.ld_d, c.batches, c.stride_d, gemm_op::n};
  return o;
}

// Does every call of an fp8 plan have the dims cuBLASLt FP8 runs: m, n
// and k multiples of 16 (and so every leading dim)?
inline bool fp8_dims_supported(const gemm_plan& p) {
  for (const gemm_call& c : p.calls)
    if (c.m % 16 != 0 || c.n % 16 != 0 || c.k % 16 != 0) return false;
  return true;
}

// The plan of C = op(A) op(B): a, b, c the run-time shapes (rank >= 2;
// A's last two dims [M, K], or [K, M] when transpose_a), the dtypes, and
// whether the product is an fp8_matmul; sum_batches: C [M, N] is the sum of
// the batches' products. Throws ctg::error for shapes that do not multiply
// (the graph's checks make that an internal error).
inline gemm_plan plan_gemm(const rt_shape& a, const rt_shape& b, const rt_shape& c, gemm_type ta, gemm_type tb,
                           gemm_type td, bool fp8, bool transpose_a, bool transpose_b, bool sum_batches = false) {
  if (a.rank < 2 || b.rank < 2 || c.rank < 2 || (sum_batches && c.rank != 2))
    throw error("ctg: gemm plan: operands of rank 2 or more expected, a summed product's result of rank 2 (internal)");
  const dim_t M = c.d[c.rank - 2], N = c.d[c.rank - 1];
  const dim_t K = transpose_a ? a.d[a.rank - 2] : a.d[a.rank - 1];
  const dim_t kb = transpose_b ? b.d[b.rank - 1] : b.d[b.rank - 2];
  if (kb != K || (transpose_a ? a.d[a.rank - 1] : a.d[a.rank - 2]) != M ||
      (transpose_b ? b.d[b.rank - 2] : b.d[b.rank - 1]) != N)
    throw error("ctg: gemm plan: shapes do not multiply (internal)");
  gemm_plan p;
  p.type_a = ta;
  p.type_b = tb;
  p.type_d = td;
  p.compute = (ta == gemm_type::f64) ? gemm_type::f64 : gemm_type::f32;
  p.fp8 = fp8;

  // Batches of C (of the product before its sum), and each operand's stride over them (in matrices; 0: broadcast).
  rt_shape batch = sum_batches ? product_batch_dims(a, b) : c, ba = a, bb = b;
  if (!sum_batches) batch.rank -= 2;
  ba.rank -= 2;
  bb.rank -= 2;
  dim_t sa[max_rank]{}, sb[max_rank]{};
  kernel::broadcast_strides(ba.rank, ba.d, batch.rank, sa);
  kernel::broadcast_strides(bb.rank, bb.d, batch.rank, sb);
  const dim_t count = batch.numel();
  if (M == 0 || N == 0 || (count == 0 && !sum_batches)) return p;  // (an empty result: no call)
  if (K == 0 || count == 0) {  // (a sum of no products)
    p.zeros = M * N * (sum_batches ? 1 : count);
    return p;
  }

  // Operand matrix offsets of C's batch t over dims [s, rank) (t indexes those dims only).
  auto offsets = [&](std::size_t s, dim_t t, dim_t& oa, dim_t& ob) {
    oa = ob = 0;
    for (std::size_t d = batch.rank; d-- > s;) {
      const dim_t idx = t % batch.d[d];
      t /= batch.d[d];
      oa += idx * sa[d];
      ob += idx * sb[d];
    }
  };
  // Over the `inner` batches of dims [s, rank), is each operand's offset u * stride (one strided batch)?
  auto uniform = [&](std::size_t s, dim_t inner, dim_t& stride_a, dim_t& stride_b) {
    stride_a = stride_b = 0;
    for (dim_t u = 0; u < inner; ++u) {
      dim_t oa, ob;
      offsets(s, u, oa, ob);
      if (u == 1) stride_a = oa, stride_b = ob;
      if (oa != u * stride_a || ob != u * stride_b) return false;
    }
    return true;
  };
  dim_t stride_a = 0, stride_b = 0;
  const bool all_uniform = uniform(0, count, stride_a, stride_b);
  // A summed product whose operands' batches lie end to end along K (each
  // operand has every batch, contiguous, and is stored K-major: A [K, M]
  // read transposed, B [K, N] not) is one product of K * count.
  const bool end_to_end =
      sum_batches && count > 1 && all_uniform && stride_a == 1 && stride_b == 1 && transpose_a && !transpose_b;
  const dim_t kk = end_to_end ? K * count : K;  // (the calls' k)

  // ctg's B is cuBLASLt's first operand (B^T column-major: N x K, ld N), its
  // A the second (A^T: K x M, ld K); a transposed operand flips its op. An
  // fp8 operand in the wrong layout for TN is copied transposed, matrix by
  // matrix: the copy keeps the operand's batch layout (batches end to end
  // along K: one matrix of K * count rows).
  bool first_t = transpose_b, second_t = transpose_a;
  gemm_buffer first = gemm_buffer::b, second = gemm_buffer::a;
  if (fp8 && !first_t) {
    p.transposes.push_back({gemm_buffer::b, gemm_buffer::b_transposed, kk, N, end_to_end ? 1 : bb.numel()});
    p.scratch_b = K * N * bb.numel();
    first = gemm_buffer::b_transposed;
    first_t = true;
  }
  if (fp8 && second_t) {
    p.transposes.push_back({gemm_buffer::a, gemm_buffer::a_transposed, kk, M, end_to_end ? 1 : ba.numel()});
    p.scratch_a = M * K * ba.numel();
    second = gemm_buffer::a_transposed;
    second_t = false;
  }
  gemm_call base;
  base.op_first = first_t ? gemm_op::t : gemm_op::n;
  base.op_second = second_t ? gemm_op::t : gemm_op::n;
  base.m = N;
  base.n = M;
  base.k = kk;
  base.first = first;
  base.second = second;
  base.ld_first = first_t ? kk : N;    // stored N x K (op n) or K x N (op t), column-major
  base.ld_second = second_t ? M : kk;  // stored K x M (op n) or M x K (op t)
  base.ld_d = N;

  const dim_t mat_a = M * K, mat_b = K * N, mat_d = M * N;
  if (end_to_end) {
    p.calls.push_back(base);
  } else if (sum_batches) {
    p.calls.reserve(static_cast<std::size_t>(count));
    for (dim_t t = 0; t < count; ++t) {
      dim_t oa, ob;
      offsets(0, t, oa, ob);
      gemm_call one = base;
      one.first_offset = ob * mat_b;
      one.second_offset = oa * mat_a;
      one.accumulate = t > 0;
      p.calls.push_back(one);
    }
  } else if (count > 1 && all_uniform && stride_b == 0 && stride_a == 1 && second_t == false &&
      second == gemm_buffer::a) {
    gemm_call one = base;  // one B for all, A's batches contiguous: M * count rows of A
    one.n = M * count;
    p.calls.push_back(one);
  } else if (all_uniform) {
    gemm_call one = base;
    one.batches = count;
    one.stride_first = stride_b * mat_b;
    one.stride_second = stride_a * mat_a;
    one.stride_d = mat_d;
    p.calls.push_back(one);
  } else {
    // The most trailing batch dims one stride per operand describes (the last one at least: a single dim is
    // idx * stride): one strided call per index of the leading dims, e.g. x [B, 1, T, D] W [H, D, E]: B calls of
    // H batches.
    std::size_t s = 1;
    dim_t inner = count / batch.d[0];
    while (!uniform(s, inner, stride_a, stride_b)) inner /= batch.d[s++];
    p.calls.reserve(static_cast<std::size_t>(count / inner));
    for (dim_t t = 0; t < count; t += inner) {
      dim_t oa, ob;
      offsets(0, t, oa, ob);
      gemm_call one = base;
      one.first_offset = ob * mat_b;
      one.second_offset = oa * mat_a;
      one.d_offset = t * mat_d;
      one.batches = inner;
      one.stride_first = stride_b * mat_b;
      one.stride_second = stride_a * mat_a;
      one.stride_d = mat_d;
      p.calls.push_back(one);
    }
  }
  return p;
}

}  // namespace ctg::cuda
