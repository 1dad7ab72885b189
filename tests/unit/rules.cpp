// Backward rules are total: every element functor in op::all_functors either
// has a rule (it instantiates, and for the derivative-only functors the rule
// is checked against finite differences here; the public ops have their
// finite-difference tests in ops_grad*.cpp), passes the gradient through, or
// stops it (its node never requires grad). A functor that claims a rule it
// does not have is the compile error of tests/compile_fail/no_backward_rule.cpp.
#include "grad_check.hpp"

namespace {

using ctg::grad;
using W = ctg::param<"w", ctg::f64, 3, 3>;
using V = ctg::param<"v", ctg::f64, 3, 3>;
using G = ctg::frozen<"g", ctg::f64, 3, 3>;  // stands for an incoming gradient

template <class Op>
constexpr bool unary_v = requires { Op::template apply<double>(0.0); } ||
                         requires { Op::template apply_at<double>(0, 0, 0.0); };

// The node of Op over leaves of shape [3, 3], and its rule for child 0 (and 1).
template <class Op>
consteval bool check_one() {
  using node = std::conditional_t<unary_v<Op>, ctg::elementwise_node<Op, W>, ctg::elementwise_node<Op, W, V>>;
  if constexpr (Op::gradient == grad::none) {
    static_assert(!node::requires_grad, "a grad::none functor must stop the gradient");
  } else {
    static_assert(node::requires_grad);
    using r0 = decltype(ctg::rule<0>(node{}, G{}));
    static_assert(ctg::expr<r0>);
    if constexpr (Op::gradient == grad::pass) static_assert(std::is_same_v<r0, G>, "grad::pass returns g itself");
    if constexpr (!unary_v<Op>) static_assert(ctg::expr<decltype(ctg::rule<1>(node{}, G{}))>);
  }
  return true;
}
template <class... Ops>
consteval bool check_all(ctg::op::functor_list<Ops...>) {
  return (check_one<Ops>() && ...);
}
static_assert(check_all(ctg::op::all_functors{}));

// The derivative-only functors' rules against finite differences (f64):
// d/dw sum(Op(w) * r).
template <class Op>
void second_derivative_case(std::uint64_t seed) {
  using X = ctg::param<"x", ctg::f64, 4, 6>;
  using R = ctg::frozen<"r", ctg::f64, 4, 6>;
  gc::rng rng(seed);
  ctg::cpu::device dev;
  auto step = ctg::value_and_grad(ctg::sum(ctg::detail::make_ew<Op, X>() * R{}), ctg::wrt<X>);
  auto s = ctg::make_store(dev, step);
  gc::set<X>(s, rng.vec(24, -3.0, 3.0));
  gc::set<R>(s, rng.vec(24, -1.0, 1.0));
  gc::check_grad<X>(step, s, gc::f64_tol);
}

}  // namespace

TEST_CASE("silu_grad's rule (silu'') matches finite differences") { second_derivative_case<ctg::op::silu_grad>(11); }
TEST_CASE("gelu_grad's rule (gelu'') matches finite differences") { second_derivative_case<ctg::op::gelu_grad>(12); }

// div_by_count (a / max(b, 1)) on both children, b on both sides of 1
// (away from the kink, where the finite difference straddles it).
TEST_CASE("div_by_count's rule matches finite differences in a and b") {
  using A = ctg::param<"a", ctg::f64, 4, 6>;
  using B = ctg::param<"b", ctg::f64, 4, 6>;
  using R = ctg::frozen<"r", ctg::f64, 4, 6>;
  gc::rng rng(13);
  ctg::cpu::device dev;
  auto step = ctg::value_and_grad(ctg::sum(ctg::detail::make_ew<ctg::op::div_by_count, A, B>() * R{}),
                                  ctg::wrt<A, B>);
  auto s = ctg::make_store(dev, step);
  std::vector<double> b = rng.vec(24, 0.0, 3.0);
  for (double& v : b) v = std::abs(v - 1.0) < 0.1 ? v + 0.3 : v;
  gc::set<A>(s, rng.vec(24, -3.0, 3.0));
  gc::set<B>(s, b);
  gc::set<R>(s, rng.vec(24, -1.0, 1.0));
  gc::check_grad<A>(step, s, gc::f64_tol);
  gc::check_grad<B>(step, s, gc::f64_tol);
}

// keep_where (a where m is not 0, else 0): a's gradient passes where m is
// not 0 (finite differences), and none reaches m.
TEST_CASE("keep_where's rule matches finite differences in a") {
  using A = ctg::param<"a", ctg::f64, 4, 6>;
  using M = ctg::frozen<"m", ctg::f64, 4, 6>;
  using R = ctg::frozen<"r", ctg::f64, 4, 6>;
  gc::rng rng(14);
  ctg::cpu::device dev;
  auto step = ctg::value_and_grad(ctg::sum(ctg::detail::make_ew<ctg::op::keep_where, A, M>() * R{}), ctg::wrt<A>);
  auto s = ctg::make_store(dev, step);
  std::vector<double> m = rng.vec(24, -1.0, 1.0);
  for (std::size_t i = 0; i < m.size(); i += 3) m[i] = 0.0;
  gc::set<A>(s, rng.vec(24, -3.0, 3.0));
  gc::set<M>(s, m);
  gc::set<R>(s, rng.vec(24, -1.0, 1.0));
  const auto g = gc::check_grad<A>(step, s, gc::f64_tol);
  for (std::size_t i = 0; i < m.size(); i += 3) CHECK(g[i] == 0.0);
}

TEST_CASE("sum(w^3) through a product rule: the gradient is 3 w^2") {
  // The appendix case of the architecture review, through public ops.
  using X = ctg::param<"x", ctg::f32, 3>;
  auto step = ctg::value_and_grad(ctg::sum(ctg::square(X{}) * X{}));
  ctg::cpu::device dev;
  auto s = ctg::make_store(dev, step);
  auto x = s.param<X>();
  x[0] = 1.0f;
  x[1] = 2.0f;
  x[2] = 3.0f;
  CHECK(step(s) == 36.0f);
  const auto g = s.grad<X>();
  CHECK(g[0] == 3.0f);
  CHECK(g[1] == 12.0f);
  CHECK(g[2] == 27.0f);
}

TEST_CASE("causal_mask's backward passes g where col <= row and 0 elsewhere") {
  using X = ctg::param<"x", ctg::f64, 3, 3>;
  using R = ctg::frozen<"r", ctg::f64, 3, 3>;
  auto step = ctg::value_and_grad(
      ctg::sum(ctg::detail::make_ew<ctg::op::causal_mask<false>, X>() * R{}), ctg::wrt<X>);
  ctg::cpu::device dev;
  auto s = ctg::make_store(dev, step);
  gc::rng rng(13);
  gc::set<X>(s, rng.vec(9, -1.0, 1.0));
  const auto r = gc::set<R>(s, rng.vec(9, -1.0, 1.0));
  step(s);
  const auto g = s.grad<X>();
  for (int row = 0; row < 3; ++row)
    for (int col = 0; col < 3; ++col) CHECK(g[row * 3 + col] == (col <= row ? r[row * 3 + col] : 0.0));
}
