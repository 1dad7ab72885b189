#pragma once
// Where the batches of a batched matmul C[batch..., M, N] = A[batch_a..., ., .]
// B[batch_b..., ., .] read and write (batch dims broadcast by numpy's rule),
// and the batches grouped by the B they read:
//
//   detail::for_each_batch(sa, sb, sc, f);      // f(batch, A offset, B offset), in matrices
//   detail::unsummed_product(batch_dims, M, N); // a summed product's shape before its sum
//   ws.matmul_groups.group(batches, M, N, K);   // groups of batches sharing B (cpu::run_matmul)
#include <algorithm>
#include <vector>

#include <ctg/core/config.hpp>
#include <ctg/core/shape.hpp>
#include <ctg/exec/cpu/gemm.hpp>
#include <ctg/lower/loop_layout.hpp>

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

// The shape C[batch..., M, N] of a product summed over its batches
// (matmul_node's SumBatches: C [M, N]) before its sum.
inline rt_shape unsummed_product(rt_shape batches, dim_t M, dim_t N) {
  batches.d[batches.rank++] = M;
  batches.d[batches.rank++] = N;
  return batches;
}

// A batched matmul's batches in groups that read the same B (in batch order
// within a group), as gemm_sharing_b takes them. Scratch a workspace keeps:
// grown to the most batches seen, never shrunk.
class matmul_groups {
 public:
  const matmul_groups& group(const matmul_batches& mb, dim_t M, dim_t N, dim_t K) {
    const auto n = static_cast<std::size_t>(mb.count);
    batch_.resize(n);
    for (dim_t t = 0; t < mb.count; ++t) {
      dim_t oa, ob;
      mb.offsets(t, oa, ob);
      batch_[static_cast<std::size_t>(t)] = {ob * K * N, oa * M * K, t * M * N};
    }
    std::sort(batch_.begin(), batch_.end(), [](const batch& x, const batch& y) {
      return x.b != y.b ? x.b < y.b : x.c < y.c;  // (c: the batch order)
    });
    a_.resize(n);
    c_.resize(n);
    start_.clear();
    for (std::size_t i = 0; i < n; ++i) {
      a_[i] = batch_[i].a;
      c_[i] = batch_[i].c;
      if (i == 0 || batch_[i].b != batch_[i - 1].b) start_.push_back(static_cast<dim_t>(i));
    }
    start_.push_back(static_cast<dim_t>(n));
    return *this;
  }
  dim_t count() const { return static_cast<dim_t>(start_.size()) - 1; }
  dim_t batches() const { return start_.back(); }
  // Group k's B (offset in elements), and its products.
  dim_t b_offset(dim_t k) const { return batch_[static_cast<std::size_t>(start_[k])].b; }
  cpu::gemm_products products(dim_t k) const {
    const dim_t s = start_[static_cast<std::size_t>(k)];
    return {a_.data() + s, c_.data() + s, start_[static_cast<std::size_t>(k) + 1] - s};
  }

 private:
  struct batch {
    dim_t b, a, c;  // offsets in elements
  };
  std::vector<batch> batch_;
  std::vector<dim_t> a_, c_, start_ = {0};
};
}  // namespace ctg::detail
