// Binary arithmetic, continued: [M,1] columns, a rank-0 leaf, broadcasting on both
// sides, literal operands, and leaves used on several paths. Forward values against
// references computed here; gradients against central finite differences (f64).
#include "binary_cases.hpp"

TEST_CASE_TEMPLATE("binary op, column / scalar leaf / both-sided broadcast: values and gradients", K,
                   OPS_X_CONFIG(column), OPS_X_CONFIG(scalar_leaf), OPS_X_CONFIG(both_sides)) {
  binary_cases::run_binary_case<K>();
}

// Literals on either side take the other operand's dtype.
namespace {
#define LIT_CASE(NAME, BUILD, REF)           \
  struct NAME {                              \
    static constexpr const char* name = #BUILD; \
    template <class X>                       \
    static auto make(X x) {                  \
      return BUILD;                          \
    }                                        \
    static double ref(double x) { return REF; } \
  };
LIT_CASE(x_plus_lit, x + ctg::lit<1.5>, x + 1.5)
LIT_CASE(lit_minus_x, ctg::lit<1.5> - x, 1.5 - x)
LIT_CASE(x_times_lit, x* ctg::lit<2.0>, x * 2.0)
LIT_CASE(lit_times_x, ctg::lit<-0.75> * x, -0.75 * x)
LIT_CASE(x_div_lit, x / ctg::lit<4.0>, x / 4.0)
LIT_CASE(lit_div_x, ctg::lit<3.0> / x, 3.0 / x)
LIT_CASE(x_minus_lit_squared, (x - ctg::lit<0.5>) * (x - ctg::lit<0.5>), (x - 0.5) * (x - 0.5))
#undef LIT_CASE
}  // namespace

TEST_CASE_TEMPLATE("literal operand: forward value and gradient", C, x_plus_lit, lit_minus_x, x_times_lit,
                   lit_times_x, x_div_lit, lit_div_x, x_minus_lit_squared) {
  using W = ctg::param<"w", ctg::f64, 2, 5>;
  using R = ctg::frozen<"r", ctg::f64, 2, 5>;
  using E = decltype(C::make(W{}));
  static_assert(std::is_same_v<ctg::dtype_t<E>, ctg::f64>);
  static_assert(std::is_same_v<ctg::shape_t<E>, ctg::shape<2, 5>>);
  CAPTURE(C::name);
  gc::rng rng(41);
  ctg::cpu::device dev;
  const auto w0 = rng.signed_vec(10, 0.5, 2.0);

  auto fwd = ctg::forward(E{});
  auto fs = ctg::make_store(dev, fwd);
  const auto w = gc::set<W>(fs, w0);
  std::vector<double> want(w.size());
  for (std::size_t i = 0; i < w.size(); ++i) want[i] = C::ref(w[i]);
  gc::check_close(gc::run_forward(fwd, fs), want, 1e-15, 0, "forward value");

  auto step = ctg::value_and_grad(ctg::sum(E{} * R{}), ctg::wrt<W>);
  auto s = ctg::make_store(dev, step);
  gc::set<W>(s, w0);
  gc::set<R>(s, rng.vec(10, -1.0, 1.0));
  gc::check_grad<W>(step, s, gc::f64_tol);
}

TEST_CASE("a leaf used on several paths: the gradient is the sum over paths") {
  using W = ctg::param<"w", ctg::f64, 3, 4>;
  using R = ctg::frozen<"r", ctg::f64, 3, 4>;
  gc::rng rng(51);
  ctg::cpu::device dev;
  const auto w0 = rng.signed_vec(12, 0.3, 1.5);
  const auto r0 = rng.vec(12, -1.0, 1.0);

  SUBCASE("W*W + W: d/dW = (2W + 1) R") {
    auto step = ctg::value_and_grad(ctg::sum((W{} * W{} + W{}) * R{}), ctg::wrt<W>);
    auto s = ctg::make_store(dev, step);
    const auto w = gc::set<W>(s, w0);
    const auto r = gc::set<R>(s, r0);
    const auto g = gc::check_grad<W>(step, s, gc::f64_tol);
    std::vector<double> want(12);
    for (std::size_t i = 0; i < 12; ++i) want[i] = (2 * w[i] + 1) * r[i];
    gc::check_close(g, want, 1e-15, 0, "analytic grad");
  }
  SUBCASE("exp(W) * W * W: product of three uses of one leaf") {
    auto step = ctg::value_and_grad(ctg::sum(ctg::exp(W{}) * W{} * W{} * R{}), ctg::wrt<W>);
    auto s = ctg::make_store(dev, step);
    const auto w = gc::set<W>(s, w0);
    const auto r = gc::set<R>(s, r0);
    const auto g = gc::check_grad<W>(step, s, gc::f64_tol);
    std::vector<double> want(12);
    for (std::size_t i = 0; i < 12; ++i) want[i] = std::exp(w[i]) * (w[i] * w[i] + 2 * w[i]) * r[i];
    gc::check_close(g, want, 1e-13, 0, "analytic grad");
  }
  SUBCASE("W + W + W, one node consumed twice by the same op") {
    auto step = ctg::value_and_grad(ctg::sum((W{} + W{} + W{}) * R{}), ctg::wrt<W>);
    auto s = ctg::make_store(dev, step);
    gc::set<W>(s, w0);
    const auto r = gc::set<R>(s, r0);
    const auto g = gc::check_grad<W>(step, s, gc::f64_tol);
    std::vector<double> want(12);
    for (std::size_t i = 0; i < 12; ++i) want[i] = 3 * r[i];
    gc::check_close(g, want, 1e-15, 0, "analytic grad");
  }
  SUBCASE("bias used twice through broadcasting: sum((X + b) * (X - b)) ") {
    using X = ctg::param<"x", ctg::f64, 3, 4>;
    using Bv = ctg::param<"b", ctg::f64, 4>;
    auto step = ctg::value_and_grad(ctg::sum((X{} + Bv{}) * (X{} - Bv{}) * R{}), ctg::wrt<X, Bv>);
    auto s = ctg::make_store(dev, step);
    const auto x = gc::set<X>(s, w0);
    const auto bv = gc::set<Bv>(s, rng.vec(4, -1.0, 1.0));
    const auto r = gc::set<R>(s, r0);
    const auto gb = gc::check_grad<Bv>(step, s, gc::f64_tol);
    gc::check_grad<X>(step, s, gc::f64_tol);
    std::vector<double> want(4, 0.0);  // d/db (x+b)(x-b) = -2b, summed over rows
    for (std::size_t i = 0; i < 3; ++i)
      for (std::size_t j = 0; j < 4; ++j) want[j] += -2 * bv[j] * r[i * 4 + j];
    gc::check_close(gb, want, 1e-14, 1e-15, "analytic grad of b");
    (void)x;
  }
}
