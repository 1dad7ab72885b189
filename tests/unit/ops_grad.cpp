// Unary elementwise ops: forward values against <cmath> references, and
// gradients against central finite differences (gc::check_grad), in f64 (tight)
// and f32 (loose). Binary ops, matmul, reductions, dtypes and narrow
// unary ops live in ops_grad_binary.cpp, ops_grad_broadcast.cpp, ops_grad_matmul.cpp,
// ops_grad_reduce.cpp, ops_grad_softmax.cpp, ops_grad_dtype.cpp and ops_grad_narrow.cpp.
#include "unary_cases.hpp"

#include <limits>

namespace {

// Forward values of C on a [3,5] leaf of dtype T, then d/dW sum(C(W) * R).
template <class C, class T>
void unary_case(gc::tol t, double value_rtol, std::uint64_t seed) {
  CAPTURE(C::name);
  using W = ctg::param<"w", T, 3, 5>;
  using R = ctg::frozen<"r", T, 3, 5>;
  gc::rng rng(seed);
  ctg::cpu::device dev;
  const auto w0 = C::away ? rng.signed_vec(15, C::lo, C::hi) : rng.vec(15, C::lo, C::hi);

  auto fwd = ctg::forward(C::make(W{}));
  static_assert(std::is_same_v<ctg::dtype_t<decltype(C::make(W{}))>, T>);
  static_assert(std::is_same_v<ctg::shape_t<decltype(C::make(W{}))>, ctg::shape<3, 5>>);
  auto fs = ctg::make_store(dev, fwd);
  const auto w = gc::set<W>(fs, w0);
  std::vector<double> want(w.size());
  for (std::size_t i = 0; i < w.size(); ++i) want[i] = C::ref(w[i]);
  gc::check_close(gc::run_forward(fwd, fs), want, value_rtol, 1e-300, "forward value");

  auto step = ctg::value_and_grad(ctg::sum(C::make(W{}) * R{}), ctg::wrt<W>);
  auto s = ctg::make_store(dev, step);
  gc::set<W>(s, w0);
  gc::set<R>(s, rng.vec(15, -1.0, 1.0));
  gc::check_grad<W>(step, s, t);
}

}  // namespace

TEST_CASE_TEMPLATE("unary op (f64): forward value vs <cmath>, gradient vs finite differences", C,
                   ALL_UNARY_CASES) {
  unary_case<C, ctg::f64>(gc::f64_tol, 1e-14, 1001);
}

TEST_CASE_TEMPLATE("unary op (f32): forward value vs <cmath>, gradient vs finite differences", C,
                   ALL_UNARY_CASES) {
  // f32 compute: a few ulps for the values; finite differences with a large step.
  unary_case<C, ctg::f32>(gc::f32_tol, 1e-5, 2002);
}

TEST_CASE("relu and abs gradients on negative inputs are exact: 0 and -R") {
  // All-negative inputs: relu passes no gradient, abs passes -R. Compared with the
  // exact values, not only with finite differences.
  using W = ctg::param<"w", ctg::f64, 2, 3>;
  using R = ctg::frozen<"r", ctg::f64, 2, 3>;
  gc::rng rng(7);
  ctg::cpu::device dev;
  const auto w0 = rng.vec(6, -2.0, -0.2);
  const auto r0 = rng.vec(6, 0.5, 1.5);

  auto relu_step = ctg::value_and_grad(ctg::sum(ctg::relu(W{}) * R{}), ctg::wrt<W>);
  auto rs = ctg::make_store(dev, relu_step);
  gc::set<W>(rs, w0);
  gc::set<R>(rs, r0);
  relu_step(rs);
  CHECK(gc::last_loss(rs) == 0.0);
  gc::check_close(gc::to_vec(rs.grad<W>()), std::vector<double>(6, 0.0), 0, 0, "relu grad");

  // A NaN passes relu, as in PyTorch (torch.relu(nan) is nan, and its
  // backward passes the gradient there): the loss shows it, so check_finite
  // rejects the step. (relu gave 0, hiding it; the gradient at NaN was 0.)
  std::vector<double> with_nan = w0;
  with_nan[2] = std::numeric_limits<double>::quiet_NaN();
  with_nan[4] = -0.0;
  gc::set<W>(rs, with_nan);
  relu_step(rs);
  CHECK(std::isnan(gc::last_loss(rs)));
  const auto g = gc::to_vec(rs.grad<W>());
  CHECK(g[2] == r0[2]);
  CHECK(g[4] == 0.0);
  rs.check_finite(true);
  CHECK_THROWS_AS(relu_step(rs), ctg::error);

  auto abs_step = ctg::value_and_grad(ctg::sum(ctg::abs(W{}) * R{}), ctg::wrt<W>);
  auto as = ctg::make_store(dev, abs_step);
  gc::set<W>(as, w0);
  gc::set<R>(as, r0);
  abs_step(as);
  std::vector<double> minus_r(6);
  for (std::size_t i = 0; i < 6; ++i) minus_r[i] = -r0[i];
  gc::check_close(gc::to_vec(as.grad<W>()), minus_r, 0, 0, "abs grad");
}

TEST_CASE("unary chain: gelu(log(W)) * exp(-W) differentiates through every link") {
  using W = ctg::param<"w", ctg::f64, 4, 3>;
  using R = ctg::frozen<"r", ctg::f64, 4, 3>;
  gc::rng rng(11);
  ctg::cpu::device dev;
  auto step = ctg::value_and_grad(ctg::sum(ctg::gelu(ctg::log(W{})) * ctg::exp(-W{}) * R{}), ctg::wrt<W>);
  auto s = ctg::make_store(dev, step);
  gc::set<W>(s, rng.vec(12, 0.3, 3.0));
  gc::set<R>(s, rng.vec(12, -1.0, 1.0));
  gc::check_grad<W>(step, s, gc::f64_tol);
}
