// matmul (plain, batched, broadcast batch dims) and transpose: forward values
// against a triple-loop reference written here, gradients of both operands
// against central finite differences (f64; one f32 case with a loose tolerance).
#include <bit>
#include <cstdint>

#include "grad_check.hpp"
#include "step_counts.hpp"

namespace {

template <class S>
std::vector<std::size_t> dims_vec() {
  return std::vector<std::size_t>(S::dims.begin(), S::dims.end());
}

// C = A @ B over broadcast batch dims, by the definition.
std::vector<double> ref_matmul(const std::vector<double>& a, std::vector<std::size_t> ad, const std::vector<double>& b,
                               std::vector<std::size_t> bd, const std::vector<std::size_t>& cd) {
  const std::size_t M = ad[ad.size() - 2], K = ad.back(), N = bd.back();
  REQUIRE(bd[bd.size() - 2] == K);
  const std::vector<std::size_t> abatch(ad.begin(), ad.end() - 2), bbatch(bd.begin(), bd.end() - 2),
      cbatch(cd.begin(), cd.end() - 2);
  std::vector<double> c(gc::count_of(cd), 0.0);
  for (std::size_t bi = 0; bi < gc::count_of(cbatch); ++bi) {
    const auto idx = gc::unflatten(bi, cbatch);
    const std::size_t ao = gc::bcast_index(abatch, cbatch, idx) * M * K;
    const std::size_t bo = gc::bcast_index(bbatch, cbatch, idx) * K * N;
    for (std::size_t i = 0; i < M; ++i)
      for (std::size_t j = 0; j < N; ++j) {
        double acc = 0;
        for (std::size_t k = 0; k < K; ++k) acc += a[ao + i * K + k] * b[bo + k * N + j];
        c[bi * M * N + i * N + j] = acc;
      }
  }
  return c;
}

template <class SA, class SB, class SC>
struct mm {
  using a = SA;
  using b = SB;
  using c = SC;
};
template <std::int64_t... D>
using s = ctg::shape<D...>;

template <class S>
struct leaves;
template <std::int64_t... D>
struct leaves<ctg::shape<D...>> {
  template <class T>
  using a = ctg::param<"a", T, D...>;
  template <class T>
  using b = ctg::param<"b", T, D...>;
  template <class T>
  using r = ctg::frozen<"r", T, D...>;
};

// op(x) of a batch of row-major matrices (the last two of dims d), by the definition.
std::vector<double> ref_transposed(const std::vector<double>& x, const std::vector<std::size_t>& d) {
  const std::size_t R = d[d.size() - 2], C = d.back(), n = R * C;
  std::vector<double> t(x.size());
  for (std::size_t m = 0; m < x.size() / n; ++m)
    for (std::size_t r = 0; r < R; ++r)
      for (std::size_t c = 0; c < C; ++c) t[m * n + c * R + r] = x[m * n + r * C + c];
  return t;
}
std::vector<std::size_t> op_dims(std::vector<std::size_t> d, bool transposed) {
  if (transposed) std::swap(d[d.size() - 1], d[d.size() - 2]);
  return d;
}
template <bool T, class X>
constexpr auto transposed_if(X x) {
  if constexpr (T) return ctg::transpose(x);
  else return x;
}

// Product E of leaves A and B: its value against ref(a, b) (the leaves'
// values, by the definition), the gradients of sum(E * R) for both against
// central finite differences.
template <class E, class A, class B, class R, class Ref>
void check_product(std::uint64_t seed, gc::tol t, double value_rtol, Ref ref) {
  gc::rng rng(seed);
  ctg::cpu::device dev;
  const auto a0 = rng.vec(gc::numel<A>(), -1.0, 1.0);
  const auto b0 = rng.vec(gc::numel<B>(), -1.0, 1.0);

  auto fwd = ctg::forward(E{});
  auto fs = ctg::make_store(dev, fwd);
  const auto a = gc::set<A>(fs, a0);
  const auto b = gc::set<B>(fs, b0);
  gc::check_close(gc::run_forward(fwd, fs), ref(a, b), value_rtol, value_rtol, "forward value");

  auto step = ctg::value_and_grad(ctg::sum(E{} * R{}), ctg::wrt<A, B>);
  auto st = ctg::make_store(dev, step);
  gc::set<A>(st, a0);
  gc::set<B>(st, b0);
  gc::set<R>(st, rng.vec(gc::numel<R>(), -1.0, 1.0));
  {
    INFO("d/dA");
    gc::check_grad<A>(step, st, t);
  }
  {
    INFO("d/dB");
    gc::check_grad<B>(step, st, t);
  }
}

// matmul(op(a), op(b)), op = transpose where TA / TB, of leaves stored with
// dims SA and SB: one matmul node reading the stored leaves in place (a
// transpose is a flag of the product, never a node or a copy); its value
// against the triple loop on the transposed values, both gradients against
// finite differences.
template <bool TA, bool TB, class SA, class SB, class SC, class T>
void product_case(gc::tol t, double value_rtol) {
  using A = typename leaves<SA>::template a<T>;
  using B = typename leaves<SB>::template b<T>;
  using R = typename leaves<SC>::template r<T>;
  using E = decltype(ctg::matmul(transposed_if<TA>(A{}), transposed_if<TB>(B{})));
  static_assert(E::kind == ctg::node_kind::matmul && E::transpose_a == TA && E::transpose_b == TB);
  static_assert(std::is_same_v<typename E::children, ctg::tl::list<A, B>>, "the stored leaves, read in place");
  static_assert(std::is_same_v<ctg::shape_t<E>, SC>);
  static_assert(std::is_same_v<ctg::dtype_t<E>, T>);
  check_product<E, A, B, R>(61, t, value_rtol, [](const std::vector<double>& a, const std::vector<double>& b) {
    return ref_matmul(TA ? ref_transposed(a, dims_vec<SA>()) : a, op_dims(dims_vec<SA>(), TA),
                      TB ? ref_transposed(b, dims_vec<SB>()) : b, op_dims(dims_vec<SB>(), TB), dims_vec<SC>());
  });
}
template <class Cfg, class T>
void matmul_case(gc::tol t, double value_rtol) {
  product_case<false, false, typename Cfg::a, typename Cfg::b, typename Cfg::c, T>(t, value_rtol);
}
template <bool TA, bool TB, class SA, class SB, class SC>
void transposed_operand_case() {
  product_case<TA, TB, SA, SB, SC, ctg::f64>(gc::f64_tol, 1e-14);
}

using plain = mm<s<3, 4>, s<4, 5>, s<3, 5>>;                     // [M,K] @ [K,N]
using batched_shared_b = mm<s<2, 3, 4>, s<4, 5>, s<2, 3, 5>>;    // [B,M,K] @ [K,N]
using batched = mm<s<2, 3, 4>, s<2, 4, 5>, s<2, 3, 5>>;          // [B,M,K] @ [B,K,N]
using batched_shared_a = mm<s<3, 4>, s<2, 4, 5>, s<2, 3, 5>>;    // [M,K] @ [B,K,N]
using batch_bcast = mm<s<2, 1, 3, 4>, s<3, 4, 2>, s<2, 3, 3, 2>>;  // [B,1,M,K] @ [C,K,N]
using vector_dot = mm<s<1, 6>, s<6, 1>, s<1, 1>>;                // [1,K] @ [K,1]

}  // namespace

TEST_CASE_TEMPLATE("matmul (f64): forward value vs triple loop, gradients of both operands", Cfg, plain,
                   batched_shared_b, batched, batched_shared_a, batch_bcast, vector_dot) {
  matmul_case<Cfg, ctg::f64>(gc::f64_tol, 1e-14);
}

TEST_CASE("matmul of transposed operands (f64): one node reading them in place; value and gradients") {
  transposed_operand_case<true, false, s<4, 3>, s<4, 5>, s<3, 5>>();           // a^T b
  transposed_operand_case<false, true, s<3, 4>, s<5, 4>, s<3, 5>>();           // a b^T
  transposed_operand_case<true, true, s<4, 3>, s<5, 4>, s<3, 5>>();            // a^T b^T
  transposed_operand_case<true, false, s<2, 4, 3>, s<4, 5>, s<2, 3, 5>>();     // batched a^T, shared b
  transposed_operand_case<false, true, s<2, 3, 4>, s<2, 5, 4>, s<2, 3, 5>>();  // batched a b^T
  transposed_operand_case<true, true, s<4, 3>, s<2, 5, 4>, s<2, 3, 5>>();      // shared a^T, batched b^T
}

TEST_CASE("matmul (f32): forward value and gradients with f32 tolerances") {
  matmul_case<batched_shared_b, ctg::f32>(gc::f32_tol, 1e-6);
}

TEST_CASE("transpose: forward value and gradient (rank 2 and rank 3)") {
  gc::rng rng(71);
  ctg::cpu::device dev;
  SUBCASE("rank 2") {
    using W = ctg::param<"w", ctg::f64, 3, 5>;
    using R = ctg::frozen<"r", ctg::f64, 5, 3>;
    static_assert(std::is_same_v<ctg::shape_t<decltype(ctg::transpose(W{}))>, ctg::shape<5, 3>>);
    auto fwd = ctg::forward(ctg::transpose(W{}));
    auto fs = ctg::make_store(dev, fwd);
    const auto w = gc::set<W>(fs, rng.vec(15, -1.0, 1.0));
    std::vector<double> want(15);
    for (std::size_t i = 0; i < 3; ++i)
      for (std::size_t j = 0; j < 5; ++j) want[j * 3 + i] = w[i * 5 + j];
    gc::check_close(gc::run_forward(fwd, fs), want, 0, 0, "forward value");

    auto step = ctg::value_and_grad(ctg::sum(ctg::square(ctg::transpose(W{})) * R{}), ctg::wrt<W>);
    auto st = ctg::make_store(dev, step);
    gc::set<W>(st, w);
    gc::set<R>(st, rng.vec(15, -1.0, 1.0));
    gc::check_grad<W>(step, st, gc::f64_tol);
  }
  SUBCASE("rank 3: only the last two dims swap") {
    using W = ctg::param<"w", ctg::f64, 2, 3, 4>;
    using R = ctg::frozen<"r", ctg::f64, 2, 4, 3>;
    static_assert(std::is_same_v<ctg::shape_t<decltype(ctg::transpose(W{}))>, ctg::shape<2, 4, 3>>);
    auto fwd = ctg::forward(ctg::transpose(W{}));
    auto fs = ctg::make_store(dev, fwd);
    const auto w = gc::set<W>(fs, rng.vec(24, -1.0, 1.0));
    std::vector<double> want(24);
    for (std::size_t b = 0; b < 2; ++b)
      for (std::size_t i = 0; i < 3; ++i)
        for (std::size_t j = 0; j < 4; ++j) want[b * 12 + j * 3 + i] = w[b * 12 + i * 4 + j];
    gc::check_close(gc::run_forward(fwd, fs), want, 0, 0, "forward value");

    auto step = ctg::value_and_grad(ctg::sum(ctg::square(ctg::transpose(W{})) * R{}), ctg::wrt<W>);
    auto st = ctg::make_store(dev, step);
    gc::set<W>(st, w);
    gc::set<R>(st, rng.vec(24, -1.0, 1.0));
    gc::check_grad<W>(step, st, gc::f64_tol);
  }
}

TEST_CASE("matmul with transposed operands and a leaf on both sides") {
  gc::rng rng(81);
  ctg::cpu::device dev;
  SUBCASE("A @ transpose(B) and transpose(A) @ B") {
    using A = ctg::param<"a", ctg::f64, 4, 3>;
    using B = ctg::param<"b", ctg::f64, 5, 3>;
    using C = ctg::param<"c", ctg::f64, 4, 2>;
    using R1 = ctg::frozen<"r1", ctg::f64, 4, 5>;
    using R2 = ctg::frozen<"r2", ctg::f64, 3, 2>;
    auto loss = ctg::sum(ctg::matmul(A{}, ctg::transpose(B{})) * R1{}) +
                ctg::sum(ctg::matmul(ctg::transpose(A{}), C{}) * R2{});
    auto step = ctg::value_and_grad(loss, ctg::wrt<A, B, C>);
    auto st = ctg::make_store(dev, step);
    gc::set<A>(st, rng.vec(12, -1.0, 1.0));
    gc::set<B>(st, rng.vec(15, -1.0, 1.0));
    gc::set<C>(st, rng.vec(8, -1.0, 1.0));
    gc::set<R1>(st, rng.vec(20, -1.0, 1.0));
    gc::set<R2>(st, rng.vec(6, -1.0, 1.0));
    gc::check_grad<A>(step, st, gc::f64_tol);
    gc::check_grad<B>(step, st, gc::f64_tol);
    gc::check_grad<C>(step, st, gc::f64_tol);
  }
  SUBCASE("matmul(W, W): d/dW = G W^T + W^T G") {
    using W = ctg::param<"w", ctg::f64, 4, 4>;
    using R = ctg::frozen<"r", ctg::f64, 4, 4>;
    auto step = ctg::value_and_grad(ctg::sum(ctg::matmul(W{}, W{}) * R{}), ctg::wrt<W>);
    auto st = ctg::make_store(dev, step);
    const auto w = gc::set<W>(st, rng.vec(16, -1.0, 1.0));
    const auto r = gc::set<R>(st, rng.vec(16, -1.0, 1.0));
    const auto g = gc::check_grad<W>(step, st, gc::f64_tol);
    std::vector<double> want(16, 0.0);
    for (std::size_t i = 0; i < 4; ++i)
      for (std::size_t j = 0; j < 4; ++j)
        for (std::size_t k = 0; k < 4; ++k) want[i * 4 + j] += r[i * 4 + k] * w[j * 4 + k] + w[k * 4 + i] * r[k * 4 + j];
    gc::check_close(g, want, 1e-13, 1e-15, "analytic grad");
  }
}

TEST_CASE("matmul with a dyn batch of rows fed at run time") {
  using X = ctg::input<"x", ctg::f64, ctg::dyn, 4>;
  using W = ctg::param<"w", ctg::f64, 4, 3>;
  gc::rng rng(91);
  ctg::cpu::device dev;
  auto step = ctg::value_and_grad(ctg::sum(ctg::tanh(ctg::matmul(X{}, W{}))), ctg::wrt<W>);
  auto st = ctg::make_store(dev, step);
  gc::set<W>(st, rng.vec(12, -1.0, 1.0));
  for (std::size_t rows : {1u, 5u}) {
    CAPTURE(rows);
    const auto x = gc::data_of<double>(rng.vec(rows * 4, -1.0, 1.0));
    gc::check_grad<W>(step, st, gc::f64_tol, ctg::feed<X>(std::span<const double>(x), rows));
  }
}

// [batch, rows, 4] x W[4, 3]: W's gradient is one product over every row of
// every batch (reshape merges the dyn dims), not a batched product summed
// over batches; checked against finite differences, and the merging view's
// values and run-time shape.
TEST_CASE("matmul of batches of rows by a matrix: the weight's gradient over all rows at once") {
  using X = ctg::input<"x", ctg::f64, ctg::dyn, ctg::dyn, 4>;
  using W = ctg::param<"w", ctg::f64, 4, 3>;
  gc::rng rng(92);
  ctg::cpu::device dev;
  auto step = ctg::value_and_grad(ctg::sum(ctg::tanh(ctg::matmul(X{}, W{}))), ctg::wrt<W>);
  // The gradient reads x through the merging views (no [batch, 4, 3]
  // partial products summed over batches).
  using nodes = decltype(step)::nodes;
  static_assert([]<class... Ns>(ctg::tl::list<Ns...>) {
    return (std::size_t(0) + ... + std::size_t(Ns::kind == ctg::node_kind::view)) >= 2;
  }(nodes{}));
  auto st = ctg::make_store(dev, step);
  gc::set<W>(st, rng.vec(12, -1.0, 1.0));
  for (std::size_t batches : {1u, 3u}) {
    CAPTURE(batches);
    const auto x = gc::data_of<double>(rng.vec(batches * 5 * 4, -1.0, 1.0));
    gc::check_grad<W>(step, st, gc::f64_tol, ctg::feed<X>(std::span<const double>(x), batches, 5));
  }
  // The merging view alone: [2, 3, 4] as [6, 4], the same elements in order.
  auto fwd = ctg::forward(ctg::reshape<ctg::shape<ctg::dyn, 4>>(X{}) * ctg::lit<2.0>);
  auto fs = ctg::make_store(dev, fwd);
  std::vector<double> x(24);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<double>(i);
  fwd(fs, ctg::feed<X>(std::span<const double>(x), 2, 3));
  const auto v = fs.value();
  REQUIRE(v.size() == 24);
  for (std::size_t i = 0; i < v.size(); ++i) CHECK(v[i] == 2.0 * static_cast<double>(i));
}

// w [F, d] @ x^T over a dyn batch (attention's projections): w's gradient is
// the batches' products summed in the product itself, [F, d] in f32 (f64
// here), not [batch, F, d] partial products summed by a reduction; against
// finite differences, for 1 and 3 batches; over no batch, zeros (the buffer
// is written, not left as the last step's).
TEST_CASE("matmul: the gradient of a matrix a batched product broadcasts is its batches' products summed") {
  using X = ctg::input<"x", ctg::f64, ctg::dyn, 5, 4>;
  using W = ctg::param<"w", ctg::f64, 3, 4>;
  gc::rng rng(94);
  ctg::cpu::device dev;
  auto step = ctg::value_and_grad(ctg::sum(ctg::tanh(ctg::matmul(W{}, ctg::transpose(X{})))), ctg::wrt<W>);
  using S = decltype(step);
  static_assert(step_counts::summed_products<S> == 1);
  static_assert(step_counts::reductions<S> == 1, "the loss's sum only");
  static_assert(step_counts::ops_named<S>("matmul summed") == 1);  // (in a graph's text: g x)
  using G = ctg::tl::at_t<1, S::outputs>;
  static_assert(std::is_same_v<ctg::shape_t<G>, ctg::shape<3, 4>>);
  auto st = ctg::make_store(dev, step);
  gc::set<W>(st, rng.vec(12, -1.0, 1.0));
  for (std::size_t batches : {1u, 3u}) {
    CAPTURE(batches);
    const auto x = gc::data_of<double>(rng.vec(batches * 5 * 4, -1.0, 1.0));
    gc::check_grad<W>(step, st, gc::f64_tol, ctg::feed<X>(std::span<const double>(x), batches));
  }
  const std::vector<double> none;
  step(st, ctg::feed<X>(std::span<const double>(none), 0));
  for (double g : st.grad<W>()) CHECK(g == 0.0);
  // A static batch, and the matrix on the right read transposed: the same node.
  using Y = ctg::param<"y", ctg::f64, 2, 3, 4>;
  using V = ctg::param<"v", ctg::f64, 5, 4>;
  auto right = ctg::value_and_grad(ctg::sum(ctg::tanh(ctg::matmul(Y{}, ctg::transpose(V{})))), ctg::wrt<Y, V>);
  static_assert(step_counts::summed_products<decltype(right)> == 1 && step_counts::reductions<decltype(right)> == 1);
  auto rs = ctg::make_store(dev, right);
  gc::set<Y>(rs, rng.vec(24, -1.0, 1.0));
  gc::set<V>(rs, rng.vec(20, -1.0, 1.0));
  gc::check_grad<V>(right, rs, gc::f64_tol);
  gc::check_grad<Y>(right, rs, gc::f64_tol);
}

// x^T dy over a static batch (a linear layer's weight gradient): the batches
// lie end to end along K, so cpu::run_summed_matmul makes them one product.
// Bit for bit the batches' products added one after another (cpu::gemm's
// add_to_c), with blocks of k that cross from one batch into the next.
TEST_CASE("matmul: a weight gradient x^T dy over a static batch is one product, bit for bit the batches' chain") {
  using X = ctg::input<"x", ctg::f32, 3, 100, 20>;
  using C = ctg::input<"c", ctg::f32, 3, 100, 12>;
  using W = ctg::param<"w", ctg::f32, 20, 12>;
  // (d loss / d (x @ w) is c, exactly: the summed product's operands are x and c)
  auto step = ctg::value_and_grad(ctg::sum(ctg::matmul(X{}, W{}) * C{}), ctg::wrt<W>);
  static_assert(step_counts::summed_products<decltype(step)> == 1);
  gc::rng rng(95);
  ctg::cpu::device dev;
  auto st = ctg::make_store(dev, step);
  gc::set<W>(st, rng.vec(20 * 12, -1.0, 1.0));
  const auto x = gc::data_of<float>(rng.vec(3 * 100 * 20, -1.0, 1.0));
  const auto c = gc::data_of<float>(rng.vec(3 * 100 * 12, -1.0, 1.0));
  step(st, ctg::feed<X>(x), ctg::feed<C>(c));
  std::vector<float> want(20 * 12, 0.0f);
  ctg::cpu::gemm_workspace ws;
  for (std::size_t t = 0; t < 3; ++t)
    ctg::cpu::gemm(20, 12, 100, x.data() + t * 2000, c.data() + t * 1200, want.data(), ws, nullptr,
                   {.transpose_a = true, .add_to_c = true});
  const auto got = st.grad<W>();
  REQUIRE(got.size() == want.size());
  std::size_t differ = 0;
  for (std::size_t i = 0; i < want.size(); ++i)
    differ += std::bit_cast<std::uint32_t>(got[i]) != std::bit_cast<std::uint32_t>(want[i]);
  CHECK(differ == 0);
}

TEST_CASE("matmul reads an operand stretched along batch dims where it lies; value and gradients") {
  // The gradient of a sum over heads, stretched back over them, times per-head weights.
  using G = ctg::param<"g", ctg::f64, 2, 1, 3, 4>;
  using W = ctg::param<"w", ctg::f64, 3, 4, 5>;
  using R = ctg::frozen<"r", ctg::f64, 2, 3, 3, 5>;
  using E = decltype(ctg::matmul(ctg::broadcast_to<s<2, 3, 3, 4>>(G{}), W{}));
  static_assert(std::is_same_v<typename E::children, ctg::tl::list<G, W>>, "g read where it lies");
  static_assert(std::is_same_v<ctg::shape_t<E>, s<2, 3, 3, 5>>);
  using H = ctg::param<"h", ctg::f64, 2, 1, 7, 5>;  // (and through a transpose)
  using Et = decltype(ctg::matmul(W{}, ctg::transpose(ctg::broadcast_to<s<2, 3, 7, 5>>(H{}))));
  static_assert(std::is_same_v<typename Et::children, ctg::tl::list<W, H>> && Et::transpose_b);
  static_assert(std::is_same_v<ctg::shape_t<Et>, s<2, 3, 4, 7>>);
  // Where the stretch is what gives the product its batch, or stretches the matrix itself, it stays.
  using M = ctg::param<"m", ctg::f64, 3, 4>;
  using V = ctg::param<"v", ctg::f64, 4, 5>;
  using kept_batch = decltype(ctg::matmul(ctg::broadcast_to<s<2, 3, 4>>(M{}), V{}));
  static_assert(!std::is_same_v<ctg::tl::at_t<0, typename kept_batch::children>, M>);
  static_assert(std::is_same_v<ctg::shape_t<kept_batch>, s<2, 3, 5>>);
  using kept_rows = decltype(ctg::matmul(ctg::broadcast_to<s<3, 4>>(ctg::param<"row", ctg::f64, 1, 4>{}), V{}));
  static_assert(!std::is_same_v<ctg::tl::at_t<0, typename kept_rows::children>, ctg::param<"row", ctg::f64, 1, 4>>);

  check_product<E, G, W, R>(93, gc::f64_tol, 1e-14, [](const std::vector<double>& g, const std::vector<double>& w) {
    return ref_matmul(g, {2, 1, 3, 4}, w, {3, 4, 5}, {2, 3, 3, 5});
  });
}
