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

