// The CUDA backend's GEMM plans (exec/cuda/gemm_plan.hpp), tested without a
// GPU: a few plans read field by field, then every matrix product of the
// tiny transformer's training step (f32, bf16 autocast, FP8 delayed; inside
// its stacked blocks too, forward and backward) planned and executed by an
// interpreter of cuBLASLt's column-major semantics, reading the very
// layouts the cuBLASLt calls are given (cuda::lt_operands_of), against the
// CPU backend's own result for that product.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include <ctg/ctg.hpp>
#include <ctg/exec/cuda/gemm_plan.hpp>

#include "../common/rt_shapes.hpp"
#include "step_counts.hpp"

namespace {
using ctg::dim_t;
namespace cu = ctg::cuda;
constexpr auto shape = test_shapes::dims;

constexpr auto f32 = cu::gemm_type::f32;
constexpr auto e4m3 = cu::gemm_type::e4m3;

// ------------------------------------------------------- the interpreter ----
// cuBLASLt's semantics, column-major: element (i, j) of a stored matrix X
// with leading dimension ld is X[i + j * ld]; op t reads the transpose.
// Products are summed in double, with the sum of |terms| for the error bound.
template <class T>
double at(const T* x, cu::gemm_op op, dim_t i, dim_t j, dim_t ld) {
  return static_cast<double>(ctg::to_float(op == cu::gemm_op::n ? x[i + j * ld] : x[j + i * ld]));
}
template <class T>
double at(const T* x, dim_t i) {
  return static_cast<double>(ctg::to_float(x[i]));
}

struct reference {
  std::vector<double> value, magnitude;  // row-major C[M, N]: the product, and alpha * sum |a| |b|
};

template <class TA, class TB>
reference interpret(const cu::gemm_plan& p, const TA* a, const TB* b, dim_t d_elements, double alpha) {
  std::vector<TA> a_t(static_cast<std::size_t>(p.scratch_a));
  std::vector<TB> b_t(static_cast<std::size_t>(p.scratch_b));
  for (const cu::transpose_step& t : p.transposes)
    for (dim_t m = 0; m < t.batches; ++m)
      for (dim_t r = 0; r < t.rows; ++r)
        for (dim_t c = 0; c < t.cols; ++c) {
          const dim_t from = m * t.rows * t.cols + r * t.cols + c, to = m * t.rows * t.cols + c * t.rows + r;
          if (t.from == cu::gemm_buffer::a) a_t[static_cast<std::size_t>(to)] = a[from];
          else b_t[static_cast<std::size_t>(to)] = b[from];
        }
  reference out{std::vector<double>(static_cast<std::size_t>(d_elements), std::nan("")),
                std::vector<double>(static_cast<std::size_t>(d_elements), 0.0)};
  REQUIRE(p.zeros <= d_elements);
  std::fill_n(out.value.begin(), p.zeros, 0.0);  // (K is 0: the runner's memset)
  for (const cu::gemm_call& c : p.calls) {
    // What the cuBLASLt call is given (exec/cuda/gemm.cuh makes its layouts
    // from these): A is ctg's B (or its copy), B ctg's A. Each layout must
    // hold its op's shape, fit its leading dim, and read its buffer's type.
    const cu::lt_operands o = cu::lt_operands_of(p, c);
    auto op_rows = [](const cu::lt_matrix& x) { return x.op == cu::gemm_op::n ? x.rows : x.cols; };
    auto op_cols = [](const cu::lt_matrix& x) { return x.op == cu::gemm_op::n ? x.cols : x.rows; };
    REQUIRE((op_rows(o.a) == c.m && op_cols(o.a) == c.k && op_rows(o.b) == c.k && op_cols(o.b) == c.n));
    REQUIRE((o.d.rows == c.m && o.d.cols == c.n && o.d.op == cu::gemm_op::n));
    // (cuBLASLt: every leading dim at least max(1, rows))
    REQUIRE((o.a.ld >= std::max<dim_t>(1, o.a.rows) && o.b.ld >= std::max<dim_t>(1, o.b.rows) &&
             o.d.ld >= std::max<dim_t>(1, o.d.rows)));
    REQUIRE((o.a.type == (o.a.buffer == cu::gemm_buffer::a || o.a.buffer == cu::gemm_buffer::a_transposed ? p.type_a
                                                                                                          : p.type_b)));
    REQUIRE((o.d.type == p.type_d && o.d.buffer == cu::gemm_buffer::d));
    const TB* first = o.a.buffer == cu::gemm_buffer::b ? b : b_t.data();
    const TA* second = o.b.buffer == cu::gemm_buffer::a ? a : a_t.data();
    REQUIRE((o.a.buffer == cu::gemm_buffer::b || o.a.buffer == cu::gemm_buffer::b_transposed));
    REQUIRE((o.b.buffer == cu::gemm_buffer::a || o.b.buffer == cu::gemm_buffer::a_transposed));
    for (dim_t t = 0; t < o.d.batches; ++t) {
      const TB* f = first + o.a.offset + t * o.a.stride;
      const TA* s = second + o.b.offset + t * o.b.stride;
      const dim_t d0 = o.d.offset + t * o.d.stride;
      for (dim_t i = 0; i < c.m; ++i)
        for (dim_t j = 0; j < c.n; ++j) {
          double sum = 0, mag = 0;
          for (dim_t l = 0; l < c.k; ++l) {
            const double x = at(f, o.a.op, i, l, o.a.ld) * at(s, o.b.op, l, j, o.b.ld);
            sum += x;
            mag += std::abs(x);
          }
          const std::size_t d = static_cast<std::size_t>(d0 + i + j * o.d.ld);
          REQUIRE(d < out.value.size());
          if (c.accumulate) {  // (beta 1: D holds an earlier call's value)
            REQUIRE(!std::isnan(out.value[d]));
            out.value[d] += alpha * sum;
            out.magnitude[d] += alpha * mag;
          } else {
            out.value[d] = alpha * sum;
            out.magnitude[d] = alpha * mag;
          }
        }
    }
  }
  return out;
}

// The unit roundoff of a result type.
template <class T>
constexpr double unit_roundoff() {
  return static_cast<double>(ctg::dtype_traits<T>::epsilon) / 2;
}

// What the checks saw.
struct tally {
  int products = 0, fp8 = 0, transposed = 0, folded = 0, strided = 0, per_batch = 0, summed = 0, bad = 0;
  double worst = 0;  // the largest |cpu - plan| / bound
};
tally seen;

// Plans C = op(A) op(B) (summed over its batches: SumBatches) from the
// run's shapes, runs the plan, and compares with what the CPU wrote. Bound:
// the f32 accumulation of the K terms of every batch summed, one more
// rounding a batch, and the fp8 scaling ((K batches + batches + 2) u32 of
// the sum of |terms|), then the rounding of the result to its type (u of
// that type, relative).
template <class TA, class TB, class TD, bool Fp8, bool TrA, bool TrB, bool SumBatches>
void check_product(const ctg::group_call& g, const ctg::bindings_view& b) {
  const std::size_t ia = g.child[0], ib = g.child[1], r = g.root;
  const auto p = cu::plan_gemm(b.shape[ia], b.shape[ib], b.shape[r], cu::gemm_type_of<TA>(), cu::gemm_type_of<TB>(),
                               cu::gemm_type_of<TD>(), Fp8, TrA, TrB, SumBatches);
  const dim_t summed = SumBatches ? ctg::product_batch_dims(b.shape[ia], b.shape[ib]).numel() : 1;
  const double alpha = Fp8 ? double(ctg::fp8_side(b, ia)->scale_inv) * double(ctg::fp8_side(b, ib)->scale_inv) : 1.0;
  const dim_t n = b.shape[r].numel();
  const reference ref = interpret(p, b.template as<const TA>(ia), b.template as<const TB>(ib), n, alpha);
  const TD* cpu = b.template as<const TD>(r);
  const dim_t K = TrA ? b.shape[ia].d[b.shape[ia].rank - 2] : b.shape[ia].d[b.shape[ia].rank - 1];
  for (dim_t i = 0; i < n; ++i) {
    const double got = static_cast<double>(ctg::to_float(cpu[i])), want = ref.value[static_cast<std::size_t>(i)];
    const double sum_error = double(K * summed + summed + 2) * 0x1p-24 * ref.magnitude[static_cast<std::size_t>(i)];
    const double bound = sum_error + unit_roundoff<TD>() * (std::abs(want) + sum_error) + 1e-30;
    const double ratio = std::abs(got - want) / bound;
    if (!(ratio <= 1.0)) ++seen.bad;
    if (ratio > seen.worst || ratio != ratio) seen.worst = ratio;
  }
  ++seen.products;
  seen.fp8 += Fp8;
  seen.summed += SumBatches;
  seen.transposed += !p.transposes.empty();
  for (const auto& c : p.calls) {
    seen.folded += c.n > b.shape[r].d[b.shape[r].rank - 2];
    seen.strided += c.batches > 1;
  }
  seen.per_batch += p.calls.size() > 1;
}

// C = op(A) op(B) by its definition: numpy broadcasting over the batch dims (right-aligned; a dim of 1 repeats),
// row-major matrices, summed in double.
std::vector<double> naive_product(const ctg::rt_shape& a, const ctg::rt_shape& b, const ctg::rt_shape& c,
                                  const std::vector<float>& x, const std::vector<float>& y, bool tr_a, bool tr_b) {
  const std::size_t rc = c.rank - 2;
  const dim_t M = c.d[rc], N = c.d[rc + 1], K = tr_a ? a.d[a.rank - 2] : a.d[a.rank - 1];
  // Offset (in matrices) of operand s's batch for C's batch multi-index idx.
  auto batch_of = [&](const ctg::rt_shape& s, const dim_t* idx) {
    dim_t off = 0;
    for (std::size_t d = 0; d + 2 < s.rank; ++d) off = off * s.d[d] + (s.d[d] == 1 ? 0 : idx[d + rc - (s.rank - 2)]);
    return off;
  };
  std::vector<double> out(static_cast<std::size_t>(c.numel()));
  dim_t idx[ctg::max_rank]{};
  for (dim_t t = 0; t < c.numel() / (M * N); ++t) {
    for (std::size_t d = rc, r = static_cast<std::size_t>(t); d-- > 0;) {
      idx[d] = static_cast<dim_t>(r) % c.d[d];
      r /= static_cast<std::size_t>(c.d[d]);
    }
    const dim_t oa = batch_of(a, idx) * M * K, ob = batch_of(b, idx) * K * N;
    for (dim_t i = 0; i < M; ++i)
      for (dim_t j = 0; j < N; ++j) {
        double sum = 0;
        for (dim_t l = 0; l < K; ++l)
          sum += double(x[static_cast<std::size_t>(oa + (tr_a ? l * M + i : i * K + l))]) *
                 double(y[static_cast<std::size_t>(ob + (tr_b ? j * K + l : l * N + j))]);
        out[static_cast<std::size_t>(t * M * N + i * N + j)] = sum;
      }
  }
  return out;
}

// Plans C = op(A) op(B) (c: the product's shape; summed, its sum over the batches) on random data and checks the
// plan's calls (how many, and each one's batches) and its interpreted result against naive_product.
void check_broadcast_plan(const ctg::rt_shape& a, const ctg::rt_shape& b, const ctg::rt_shape& c, bool fp8,
                          bool tr_a, bool tr_b, std::size_t calls, dim_t batches, bool summed = false) {
  const auto t = fp8 ? e4m3 : f32;  // (the interpreter reads floats whatever the type: fp8 tests the transposes)
  ctg::rt_shape d = c;  // (the result's shape)
  if (summed) d = test_shapes::dims({c.d[c.rank - 2], c.d[c.rank - 1]});
  const cu::gemm_plan p = cu::plan_gemm(a, b, d, t, t, f32, fp8, tr_a, tr_b, summed);
  REQUIRE(p.calls.size() == calls);
  for (const cu::gemm_call& call : p.calls) CHECK(call.batches == batches);
  unsigned state = 7;
  auto random = [&] {
    state = state * 1664525u + 1013904223u;
    return float(state >> 8) / float(1u << 24) - 0.5f;
  };
  std::vector<float> x(static_cast<std::size_t>(a.numel())), y(static_cast<std::size_t>(b.numel()));
  for (float& v : x) v = random();
  for (float& v : y) v = random();
  const reference got = interpret(p, x.data(), y.data(), d.numel(), 1.0);
  std::vector<double> want = naive_product(a, b, c, x, y, tr_a, tr_b);
  if (summed) {  // (the batches' products added up)
    const std::size_t mn = static_cast<std::size_t>(d.numel());
    for (std::size_t i = mn; i < want.size(); ++i) want[i % mn] += want[i];
    want.resize(mn);
  }
  for (std::size_t i = 0; i < want.size(); ++i) CHECK(std::abs(got.value[i] - want[i]) <= 1e-12);
}

// The CPU backend, with every matrix product checked against its plan.
struct plan_checking_backend : ctg::cpu::backend {
  template <class Key, std::size_t R>
  static void checked(const ctg::group_call& g, const ctg::bindings_view& b, workspace& ws, float* amax) {
    ctg::cpu::backend::runner_for<Key, R>()(g, b, ws, amax);
    using node = ctg::tl::at_t<R, typename ctg::step_of<Key>::nodes>;
    using C0 = ctg::detail::child_dtype_t<Key, R, 0>;
    using C1 = ctg::detail::child_dtype_t<Key, R, 1>;
    check_product<C0, C1, typename node::dtype, node::kind == ctg::node_kind::fp8_matmul, node::transpose_a,
                  node::transpose_b, step_counts::is_summed_product<node::kind, node>()>(g, b);
  }
  template <class Key, std::size_t R>
  static consteval ctg::runner_t<workspace> runner_for() {
    using node = ctg::tl::at_t<R, typename ctg::step_of<Key>::nodes>;
    if constexpr (node::kind == ctg::node_kind::matmul || node::kind == ctg::node_kind::fp8_matmul)
      return &checked<Key, R>;
    else
      return ctg::cpu::backend::runner_for<Key, R>();
  }
};

struct config {
  static constexpr ctg::dim_t vocab = 11, max_seq = 6, dim = 8, heads = 2, head_dim = 4, hidden = 12;
  static constexpr std::size_t layers = 2;
};
using Ids = ctg::input<"ids", ctg::i32, ctg::dyn, ctg::dyn>;
using Pos = ctg::input<"pos", ctg::i32, ctg::dyn>;
using Tg = ctg::input<"targets", ctg::i32, ctg::dyn, ctg::dyn>;

template <class Policy>
tally check_transformer() {
  auto step = ctg::value_and_grad(ctg::nn::transformer<config, Policy>::loss(Ids{}, Pos{}, Tg{}));
  ctg::basic_store<plan_checking_backend, ctg::step_key_t<decltype(step)>> store;
  ctg::nn::init_params(store, 5, 0.4);
  std::vector<ctg::i32> ids(15), tg(15), pos{0, 1, 2, 3, 4};
  for (std::size_t i = 0; i < ids.size(); ++i) {
    ids[i] = static_cast<ctg::i32>((3 * i + 1) % 11);
    tg[i] = static_cast<ctg::i32>((5 * i + 2) % 11);
  }
  seen = {};
  for (int s = 0; s < 2; ++s)  // (FP8: the second step casts with the scales the first set)
    step(store, ctg::feed<Ids>(ids, 3, 5), ctg::feed<Pos>(pos, 5), ctg::feed<Tg>(tg, 3, 5));
  return seen;
}
}  // namespace

TEST_CASE("fp8 plans: which dims cuBLASLt FP8 runs (multiples of 16)") {
  const auto e4 = cu::gemm_type::e4m3, b16 = cu::gemm_type::bf16;
  CHECK(cu::fp8_dims_supported(cu::plan_gemm(shape({32, 64}), shape({64, 48}), shape({32, 48}), e4, e4, b16, true,
                                             false, false)));
  CHECK_FALSE(cu::fp8_dims_supported(cu::plan_gemm(shape({32, 88}), shape({88, 48}), shape({32, 48}), e4, e4, b16,
                                                   true, false, false)));  // k = 88
  CHECK_FALSE(cu::fp8_dims_supported(cu::plan_gemm(shape({40, 64}), shape({64, 48}), shape({40, 48}), e4, e4, b16,
                                                   true, false, false)));  // m = 40
  CHECK_FALSE(cu::fp8_dims_supported(cu::plan_gemm(shape({32, 64}), shape({64, 24}), shape({32, 24}), e4, e4, b16,
                                                   true, false, false)));  // n = 24
  // Batches folded into rows count as rows: 3 x 8 = 24 is not a multiple of 16.
  CHECK_FALSE(cu::fp8_dims_supported(cu::plan_gemm(shape({3, 8, 64}), shape({64, 48}), shape({3, 8, 48}), e4, e4,
                                                   b16, true, false, false)));
}

TEST_CASE("plans, field by field") {
  // C[2, 4] = A[2, 3] B[3, 4]: C^T = B^T A^T, column-major.
  auto p = cu::plan_gemm(shape({2, 3}), shape({3, 4}), shape({2, 4}), f32, f32, f32, false, false, false);
  REQUIRE(p.calls.size() == 1);
  const auto& c = p.calls[0];
  CHECK((c.m == 4 && c.n == 2 && c.k == 3));
  CHECK((c.first == cu::gemm_buffer::b && c.second == cu::gemm_buffer::a));
  CHECK((c.op_first == cu::gemm_op::n && c.op_second == cu::gemm_op::n));
  CHECK((c.ld_first == 4 && c.ld_second == 3 && c.ld_d == 4 && c.batches == 1));
  // x[5, 2, 3] W[3, 4]: one B for every batch: 10 rows in one product.
  p = cu::plan_gemm(shape({5, 2, 3}), shape({3, 4}), shape({5, 2, 4}), f32, f32, f32, false, false, false);
  REQUIRE(p.calls.size() == 1);
  CHECK((p.calls[0].n == 10 && p.calls[0].batches == 1));
  // [5, 2, 3] [5, 3, 4]: a strided batch.
  p = cu::plan_gemm(shape({5, 2, 3}), shape({5, 3, 4}), shape({5, 2, 4}), f32, f32, f32, false, false, false);
  REQUIRE(p.calls.size() == 1);
  CHECK((p.calls[0].batches == 5 && p.calls[0].stride_first == 12 && p.calls[0].stride_second == 6 &&
         p.calls[0].stride_d == 8));
  // [2, 1, 2, 3] [1, 3, 3, 4]: a broadcast no stride describes: one strided batch of 3 per index of the first dim.
  p = cu::plan_gemm(shape({2, 1, 2, 3}), shape({1, 3, 3, 4}), shape({2, 3, 2, 4}), f32, f32, f32, false, false, false);
  REQUIRE(p.calls.size() == 2);
  CHECK((p.calls[1].second_offset == 1 * 6 && p.calls[1].first_offset == 0 && p.calls[1].d_offset == 3 * 8));
  CHECK((p.calls[1].batches == 3 && p.calls[1].stride_second == 0 && p.calls[1].stride_first == 12 &&
         p.calls[1].stride_d == 8));
  // FP8 forward: B is copied transposed for the TN layout.
  p = cu::plan_gemm(shape({2, 3}), shape({3, 4}), shape({2, 4}), e4m3, e4m3, f32, true, false, false);
  REQUIRE(p.transposes.size() == 1);
  CHECK((p.transposes[0].from == cu::gemm_buffer::b && p.scratch_b == 12));
  CHECK((p.calls[0].op_first == cu::gemm_op::t && p.calls[0].op_second == cu::gemm_op::n && p.calls[0].ld_first == 3));
  // FP8 with A stored transposed ([K, M]) and B transposed ([N, K]): A copied, B read as is.
  p = cu::plan_gemm(shape({3, 2}), shape({4, 3}), shape({2, 4}), e4m3, e4m3, f32, true, true, true);
  REQUIRE(p.transposes.size() == 1);
  CHECK((p.transposes[0].from == cu::gemm_buffer::a && p.calls[0].ld_first == 3 && p.calls[0].ld_second == 3));
  // Nothing to compute: no call.
  CHECK(cu::plan_gemm(shape({0, 3}), shape({3, 4}), shape({0, 4}), f32, f32, f32, false, false, false).calls.empty());
  // A sum of no products (an empty batch's weight gradient x^T dy, K = 0): zeros, no call (a leading dim of 0
  // is not one cuBLASLt takes). Every layout and fp8 too, interpreted against the naive product (zeros).
  for (const bool fp8 : {false, true})
    for (const bool ta : {false, true})
      for (const bool tb : {false, true}) {
        const ctg::rt_shape a = ta ? shape({2, 0, 3}) : shape({2, 3, 0}), b = tb ? shape({4, 0}) : shape({0, 4});
        p = cu::plan_gemm(a, b, shape({2, 3, 4}), fp8 ? e4m3 : f32, fp8 ? e4m3 : f32, f32, fp8, ta, tb);
        CHECK((p.calls.empty() && p.transposes.empty() && p.zeros == 2 * 3 * 4));
        check_broadcast_plan(a, b, shape({2, 3, 4}), fp8, ta, tb, 0, 1);
      }
  CHECK_THROWS_AS(cu::plan_gemm(shape({2, 3}), shape({5, 4}), shape({2, 4}), f32, f32, f32, false, false, false),
                  ctg::error);
}

TEST_CASE("every product of the tiny transformer's step, planned and interpreted, is the CPU's") {
  namespace pr = ctg::precision;
  const tally f = check_transformer<pr::full<ctg::f32>>();
  const tally b = check_transformer<pr::autocast<ctg::bf16>>();
  const tally q = check_transformer<pr::fp8<pr::delayed<>>>();
  MESSAGE("products checked: f32 " << f.products << ", bf16 " << b.products << ", fp8 " << q.products << " ("
                                   << q.fp8 << " fp8, " << q.transposed << " with a transposed copy); worst error / "
                                   << "bound: f32 " << f.worst << ", bf16 " << b.worst << ", fp8 " << q.worst);
  for (const tally* t : {&f, &b, &q}) {
    CHECK(t->bad == 0);
    CHECK(t->products >= 2 * 12);  // (2 steps; per layer q, k, v, o, 2 mlp, 2 attention products, and the head)
    CHECK(t->folded > 0);          // [batch, seq, dim] x weights: one product
    CHECK(t->strided > 0);         // attention: [batch, heads, ...] batches
  }
  CHECK(f.summed > 0);  // (attention's projection weights' gradients, w @ x^T's: summed over the batch)
  CHECK(b.summed > 0);
  CHECK(q.summed > 0);  // (and every fp8 weight's: the linear layers' x^T dy too)
  CHECK(q.fp8 > 0);
  CHECK(q.transposed > 0);
}

TEST_CASE("a product summed over its batches: a call per batch adding to D, or one along K where batches lie end to end") {
  // w @ x^T's weight gradient: dy [3, 4, 5] x [3, 5, 6] -> [4, 6], the sum over the 3 batches.
  auto p = cu::plan_gemm(shape({3, 4, 5}), shape({3, 5, 6}), shape({4, 6}), f32, f32, f32, false, false, false, true);
  REQUIRE(p.calls.size() == 3);
  for (std::size_t t = 0; t < 3; ++t) {
    CHECK((p.calls[t].accumulate == (t > 0) && p.calls[t].d_offset == 0 && p.calls[t].batches == 1));
    CHECK((p.calls[t].second_offset == dim_t(t) * 20 && p.calls[t].first_offset == dim_t(t) * 30));
  }
  check_broadcast_plan(shape({3, 4, 5}), shape({3, 5, 6}), shape({3, 4, 6}), false, false, false, 3, 1, true);
  // x^T dy, a linear layer's weight gradient: x [3, 5, 4] read transposed, dy [3, 5, 6]. Both operands' batches
  // are contiguous and K-major, so they lie end to end along K: one call of K = 15, no accumulation.
  p = cu::plan_gemm(shape({3, 5, 4}), shape({3, 5, 6}), shape({4, 6}), f32, f32, f32, false, true, false, true);
  REQUIRE(p.calls.size() == 1);
  CHECK((p.calls[0].m == 6 && p.calls[0].n == 4 && p.calls[0].k == 15 && p.calls[0].batches == 1));
  CHECK((p.calls[0].op_first == cu::gemm_op::n && p.calls[0].op_second == cu::gemm_op::t));
  CHECK((p.calls[0].ld_first == 6 && p.calls[0].ld_second == 4 && !p.calls[0].accumulate));
  check_broadcast_plan(shape({3, 5, 4}), shape({3, 5, 6}), shape({3, 4, 6}), false, true, false, 1, 1, true);
  check_broadcast_plan(shape({2, 3, 5, 4}), shape({2, 3, 5, 6}), shape({2, 3, 4, 6}), false, true, false, 1, 1, true);
  // Not end to end: an operand broadcast (A [2, 1]), or B read transposed (its K is not the outer dim).
  check_broadcast_plan(shape({2, 1, 5, 4}), shape({2, 3, 5, 6}), shape({2, 3, 4, 6}), false, true, false, 6, 1, true);
  check_broadcast_plan(shape({3, 5, 4}), shape({3, 6, 5}), shape({3, 4, 6}), false, true, true, 3, 1, true);
  // Broadcast batch dims [2, 3] (A [2, 1], B [3]), operands read transposed: 6 calls.
  check_broadcast_plan(shape({2, 1, 5, 4}), shape({3, 6, 5}), shape({2, 3, 4, 6}), false, true, true, 6, 1, true);
  // A matrix times batches (a rank-2 A broadcast), and the batches of one operand read transposed.
  check_broadcast_plan(shape({4, 5}), shape({3, 5, 6}), shape({3, 4, 6}), false, false, false, 3, 1, true);
  check_broadcast_plan(shape({3, 5, 4}), shape({5, 6}), shape({3, 4, 6}), false, true, false, 3, 1, true);
  // No batch, or no k: zeros, no call.
  p = cu::plan_gemm(shape({0, 4, 5}), shape({0, 5, 6}), shape({4, 6}), f32, f32, f32, false, false, false, true);
  CHECK((p.calls.empty() && p.zeros == 24));
  p = cu::plan_gemm(shape({3, 4, 0}), shape({3, 0, 6}), shape({4, 6}), f32, f32, f32, false, false, false, true);
  CHECK((p.calls.empty() && p.zeros == 24));
  // FP8 (TN only): B copied transposed per batch, a call per batch adding to D; end to end along K, each
  // operand copied transposed as one matrix of K * batches rows, and one call.
  check_broadcast_plan(shape({3, 4, 5}), shape({3, 5, 6}), shape({3, 4, 6}), true, false, false, 3, 1, true);
  p = cu::plan_gemm(shape({3, 5, 4}), shape({3, 5, 6}), shape({4, 6}), e4m3, e4m3, f32, true, true, false, true);
  REQUIRE((p.calls.size() == 1 && p.transposes.size() == 2));
  for (const cu::transpose_step& t : p.transposes) CHECK((t.rows == 15 && t.batches == 1));
  CHECK((p.calls[0].k == 15 && p.calls[0].ld_first == 15 && p.calls[0].ld_second == 15));
  CHECK((p.calls[0].op_first == cu::gemm_op::t && p.calls[0].op_second == cu::gemm_op::n));
  check_broadcast_plan(shape({3, 5, 4}), shape({3, 5, 6}), shape({3, 4, 6}), true, true, false, 1, 1, true);
  check_broadcast_plan(shape({2, 3, 5, 4}), shape({2, 3, 5, 6}), shape({2, 3, 4, 6}), true, true, false, 1, 1, true);
  // (a result of more than two dims is not a summed product)
  CHECK_THROWS_AS(cu::plan_gemm(shape({3, 4, 5}), shape({3, 5, 6}), shape({3, 4, 6}), f32, f32, f32, false, false,
                                false, true),
                  ctg::error);
}

TEST_CASE("broadcast batches no stride describes: one strided-batched call per index of the leading batch dims") {
  // Per-head projections: x [3, 1, 5, 8] W [4, 8, 6] -> [3, 4, 5, 6]: 3 calls of the 4 heads.
  check_broadcast_plan(shape({3, 1, 5, 8}), shape({4, 8, 6}), shape({3, 4, 5, 6}), false, false, false, 3, 4);
  // Their weights' gradient, x^T dy: x [3, 1, 5, 8] (read transposed) dy [3, 4, 5, 6] -> [3, 4, 8, 6].
  check_broadcast_plan(shape({3, 1, 5, 8}), shape({3, 4, 5, 6}), shape({3, 4, 8, 6}), false, true, false, 3, 4);
  // Their input's gradient, dy W^T: dy [3, 4, 5, 6] W [4, 8, 6] (read transposed) -> [3, 4, 5, 8].
  check_broadcast_plan(shape({3, 4, 5, 6}), shape({4, 8, 6}), shape({3, 4, 5, 8}), false, false, true, 3, 4);
  // FP8: both operands copied transposed first (A read transposed, B not), batch layouts kept.
  check_broadcast_plan(shape({3, 1, 5, 8}), shape({4, 5, 6}), shape({3, 4, 8, 6}), true, true, false, 3, 4);
  // Batch dims [2, 4, 3] of A [2, 1, 3] and B [4, 1]: only the last is one stride: 8 calls of 3.
  check_broadcast_plan(shape({2, 1, 3, 5, 8}), shape({4, 1, 8, 6}), shape({2, 4, 3, 5, 6}), false, false, false, 8,
                       3);
}
