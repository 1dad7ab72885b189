#pragma once
// Binary arithmetic cases shared by ops_grad_binary.cpp and ops_grad_broadcast.cpp
// (two executables, so that each compiles in well under 40 s): the four ops, the
// broadcast configurations, and the one test body run for every (op, config).
#include "grad_check.hpp"

namespace binary_cases {

struct add_op {
  static constexpr const char* name = "+";
  template <class A, class B>
  static auto make(A a, B b) {
    return a + b;
  }
  static double ref(double a, double b) { return a + b; }
};
struct sub_op {
  static constexpr const char* name = "-";
  template <class A, class B>
  static auto make(A a, B b) {
    return a - b;
  }
  static double ref(double a, double b) { return a - b; }
};
struct mul_op {
  static constexpr const char* name = "*";
  template <class A, class B>
  static auto make(A a, B b) {
    return a * b;
  }
  static double ref(double a, double b) { return a * b; }
};
struct div_op {
  static constexpr const char* name = "/";
  template <class A, class B>
  static auto make(A a, B b) {
    return a / b;
  }
  static double ref(double a, double b) { return a / b; }
};

// Broadcast configurations: the dims of A, of B, and of the result.
template <std::int64_t... D>
using dims = ctg::shape<D...>;
template <class SA, class SB, class SOut>
struct config {
  using a = SA;
  using b = SB;
  using out = SOut;
};
using same = config<dims<3, 4>, dims<3, 4>, dims<3, 4>>;
using bias = config<dims<3, 4>, dims<4>, dims<3, 4>>;             // [M,N] op [N]
using bias_left = config<dims<4>, dims<3, 4>, dims<3, 4>>;        // [N] op [M,N]
using column = config<dims<3, 1>, dims<3, 4>, dims<3, 4>>;        // [M,1] op [M,N]
using scalar_leaf = config<dims<>, dims<3, 4>, dims<3, 4>>;       // rank-0 leaf op [M,N]
using both_sides = config<dims<2, 1, 4>, dims<3, 1>, dims<2, 3, 4>>;  // [B,1,N] op [M,1]

template <class Op, class Cfg>
struct combo {
  using op = Op;
  using cfg = Cfg;
};

template <class S>
std::vector<std::size_t> dims_vec() {
  return std::vector<std::size_t>(S::dims.begin(), S::dims.end());
}

template <class S>
struct leaf_of;
template <std::int64_t... D>
struct leaf_of<ctg::shape<D...>> {
  using a = ctg::param<"a", ctg::f64, D...>;
  using b = ctg::param<"b", ctg::f64, D...>;
  template <class T>
  using r = ctg::frozen<"r", T, D...>;
};

#define OPS_X_CONFIG(CFG)                                                                    \
  binary_cases::combo<binary_cases::add_op, binary_cases::CFG>,                              \
      binary_cases::combo<binary_cases::sub_op, binary_cases::CFG>,                          \
      binary_cases::combo<binary_cases::mul_op, binary_cases::CFG>,                          \
      binary_cases::combo<binary_cases::div_op, binary_cases::CFG>

// Forward value of Op(A, B) vs the broadcasting reference, then the gradients of
// sum(Op(A, B) * R) with respect to A and to B vs finite differences.
template <class K>
void run_binary_case() {
  using Op = typename K::op;
  using Cfg = typename K::cfg;
  using A = typename leaf_of<typename Cfg::a>::a;
  using B = typename leaf_of<typename Cfg::b>::b;
  using R = typename leaf_of<typename Cfg::out>::template r<ctg::f64>;
  CAPTURE(Op::name);
  using E = decltype(Op::make(A{}, B{}));
  static_assert(std::is_same_v<ctg::shape_t<E>, typename Cfg::out>);
  static_assert(std::is_same_v<ctg::dtype_t<E>, ctg::f64>);

  gc::rng rng(31);
  ctg::cpu::device dev;
  const auto a0 = rng.vec(gc::numel<A>(), -2.0, 2.0);
  const auto b0 = rng.signed_vec(gc::numel<B>(), 0.5, 2.0);  // away from 0 for '/'

  auto fwd = ctg::forward(E{});
  auto fs = ctg::make_store(dev, fwd);
  const auto a = gc::set<A>(fs, a0);
  const auto b = gc::set<B>(fs, b0);
  const auto want = gc::ref_binary(a, dims_vec<typename Cfg::a>(), b, dims_vec<typename Cfg::b>(),
                                   dims_vec<typename Cfg::out>(), Op::ref);
  gc::check_close(gc::run_forward(fwd, fs), want, 1e-15, 0, "forward value");

  auto step = ctg::value_and_grad(ctg::sum(E{} * R{}), ctg::wrt<A, B>);
  auto s = ctg::make_store(dev, step);
  gc::set<A>(s, a0);
  gc::set<B>(s, b0);
  gc::set<R>(s, rng.vec(gc::numel<R>(), -1.0, 1.0));
  {
    INFO("d/dA");
    gc::check_grad<A>(step, s, gc::f64_tol);
  }
  {
    INFO("d/dB");
    gc::check_grad<B>(step, s, gc::f64_tol);
  }
}

}  // namespace binary_cases
