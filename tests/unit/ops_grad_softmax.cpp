// softmax / log_softmax along an axis (last, first, and a middle axis of a rank-3
// tensor): forward values against a reference computed here, gradients against
// central finite differences, in f64 and (with reductions) in f32.
#include "reduce_cases.hpp"

using namespace reduce_cases;

TEST_CASE_TEMPLATE("softmax / log_softmax along an axis: forward value and gradient (f64)", C,
                   red<rk::softmax, -1, m34>, red<rk::softmax, 0, m34>, red<rk::log_softmax, -1, m34>,
                   red<rk::log_softmax, 0, m34>, red<rk::softmax, 1, t234>, red<rk::log_softmax, 1, t234>) {
  reduce_case<C, ctg::f64>(gc::f64_tol, 1e-14);
}

TEST_CASE_TEMPLATE("reductions and softmax in f32: forward value and gradient, f32 tolerances", C,
                   red<rk::mean, 0, m34>, red<rk::max, -1, m34>, red<rk::softmax, -1, m34>,
                   red<rk::log_softmax, -1, m34>) {
  reduce_case<C, ctg::f32>(gc::f32_tol, 1e-6);
}

TEST_CASE("softmax: default axis is the last, rows sum to 1, and the gradient of sum(softmax) is 0") {
  using W = ctg::param<"w", ctg::f64, 3, 5>;
  static_assert(std::is_same_v<decltype(ctg::softmax(W{})), decltype(ctg::softmax<-1>(W{}))>);
  static_assert(std::is_same_v<decltype(ctg::log_softmax(W{})), decltype(ctg::log_softmax<-1>(W{}))>);
  gc::rng rng(111);
  ctg::cpu::device dev;
  auto fwd = ctg::forward(ctg::sum<-1>(ctg::softmax(W{})));
  auto fs = ctg::make_store(dev, fwd);
  gc::set<W>(fs, rng.vec(15, -30.0, 30.0));  // large logits: the max shift keeps exp finite
  gc::check_close(gc::run_forward(fwd, fs), std::vector<double>(3, 1.0), 1e-15, 0, "row sums");

  auto step = ctg::value_and_grad(ctg::sum(ctg::softmax(W{})), ctg::wrt<W>);
  auto st = ctg::make_store(dev, step);
  gc::set<W>(st, rng.vec(15, -2.0, 2.0));
  step(st);
  gc::check_close(gc::to_vec(st.grad<W>()), std::vector<double>(15, 0.0), 0, 1e-15, "grad of a constant");
}


TEST_CASE("composites that fuse row reductions: cross-entropy, layer norm, attention (f64 gradients)") {
  gc::rng rng(141);
  ctg::cpu::device dev;
  SUBCASE("cross-entropy against soft targets: -mean(log_softmax(X) * softmax(Y))") {
    using X = ctg::param<"x", ctg::f64, 3, 5>;
    using Y = ctg::param<"y", ctg::f64, 3, 5>;
    auto step = ctg::value_and_grad(-ctg::mean(ctg::log_softmax(X{}) * ctg::softmax(Y{})), ctg::wrt<X, Y>);
    auto st = ctg::make_store(dev, step);
    const auto x = gc::set<X>(st, rng.vec(15, -2.0, 2.0));
    const auto y = gc::set<Y>(st, rng.vec(15, -2.0, 2.0));
    const auto gx = gc::check_grad<X>(step, st, gc::f64_tol);
    gc::check_grad<Y>(step, st, gc::f64_tol);
    // d/dx = (softmax(x) - p) / numel, with p = softmax(y) (rows of p sum to 1)
    const auto sx = ref_reduce(rk::softmax, x, {3, 5}, -1), p = ref_reduce(rk::softmax, y, {3, 5}, -1);
    std::vector<double> want(15);
    for (std::size_t i = 0; i < 15; ++i) want[i] = (sx[i] - p[i]) / 15.0;
    gc::check_close(gx, want, 1e-12, 1e-15, "analytic cross-entropy grad");
  }
  SUBCASE("layer norm over the last axis, with gain") {
    using X = ctg::param<"x", ctg::f64, 4, 6>;
    using G = ctg::param<"g", ctg::f64, 6>;
    using R = ctg::frozen<"r", ctg::f64, 4, 6>;
    auto centered = X{} - ctg::mean<-1>(X{});
    auto ln = centered * ctg::rsqrt(ctg::mean<-1>(ctg::square(centered)) + ctg::lit<1e-5>) * G{};
    auto step = ctg::value_and_grad(ctg::sum(ln * R{}), ctg::wrt<X, G>);
    auto st = ctg::make_store(dev, step);
    gc::set<X>(st, rng.vec(24, -2.0, 2.0));
    gc::set<G>(st, rng.vec(6, 0.5, 1.5));
    gc::set<R>(st, rng.vec(24, -1.0, 1.0));
    gc::check_grad<X>(step, st, gc::f64_tol);
    gc::check_grad<G>(step, st, gc::f64_tol);
  }
  SUBCASE("batched attention: softmax(Q K^T * s) V") {
    using Q = ctg::param<"q", ctg::f64, 2, 3, 4>;
    using K = ctg::param<"k", ctg::f64, 2, 3, 4>;
    using V = ctg::param<"v", ctg::f64, 2, 3, 4>;
    using R = ctg::frozen<"r", ctg::f64, 2, 3, 4>;
    auto att = ctg::softmax(ctg::matmul(Q{}, ctg::transpose(K{})) * ctg::lit<0.5>);
    auto step = ctg::value_and_grad(ctg::sum(ctg::matmul(att, V{}) * R{}), ctg::wrt<Q, K, V>);
    auto st = ctg::make_store(dev, step);
    gc::set<Q>(st, rng.vec(24, -1.0, 1.0));
    gc::set<K>(st, rng.vec(24, -1.0, 1.0));
    gc::set<V>(st, rng.vec(24, -1.0, 1.0));
    gc::set<R>(st, rng.vec(24, -1.0, 1.0));
    gc::check_grad<Q>(step, st, gc::f64_tol);
    gc::check_grad<K>(step, st, gc::f64_tol);
    gc::check_grad<V>(step, st, gc::f64_tol);
  }
}
