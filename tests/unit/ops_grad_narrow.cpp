// Unary ops on bf16 and f16 leaves: the value is the exact result rounded once to the
// leaf's dtype (within half an ulp of the <cmath> reference, plus f32 compute error),
// and the gradient (of the leaf's dtype) is f'(x) * R within a few ulps of rounding
// per backward node. f'(x) is taken by central differences of the f64 reference.
#include "unary_cases.hpp"

namespace {

template <class T>
struct narrow;
template <>
struct narrow<ctg::bf16> {
  static constexpr double half_ulp = 1.0 / 256;  // relative, 2^-8
  static constexpr double grad_tol = 1e-2;  // a few roundings of 2^-9 (observed max 3.6e-3)
};
template <>
struct narrow<ctg::f16> {
  static constexpr double half_ulp = 1.0 / 2048;  // 2^-11
  static constexpr double grad_tol = 1.5e-3;  // observed max 4.6e-4
};

template <class C, class T>
void narrow_case(std::uint64_t seed) {
  CAPTURE(C::name);
  using W = ctg::param<"w", T, 4, 6>;
  using R = ctg::frozen<"r", ctg::f32, 4, 6>;
  gc::rng rng(seed);
  ctg::cpu::device dev;
  const auto w0 = C::away ? rng.signed_vec(24, C::lo, C::hi) : rng.vec(24, C::lo, C::hi);

  using E = decltype(C::make(W{}));
  static_assert(std::is_same_v<ctg::dtype_t<E>, T>);
  auto fwd = ctg::forward(E{});
  auto fs = ctg::make_store(dev, fwd);
  const auto w = gc::set<W>(fs, w0);
  std::vector<double> want(w.size());
  for (std::size_t i = 0; i < w.size(); ++i) want[i] = C::ref(w[i]);
  gc::check_close(gc::run_forward(fwd, fs), want, narrow<T>::half_ulp * 1.001, 0, "forward value");

  auto step = ctg::value_and_grad(ctg::sum(ctg::cast<ctg::f32>(E{}) * R{}), ctg::wrt<W>);
  auto st = ctg::make_store(dev, step);
  gc::set<W>(st, w0);
  const auto r = gc::set<R>(st, rng.vec(24, -1.0, 1.0));
  step(st);
  static_assert(std::is_same_v<decltype(st.template grad<W>()), std::span<const T>>);
  const auto g = gc::to_vec(st.template grad<W>());
  std::vector<double> dwant(w.size());
  for (std::size_t i = 0; i < w.size(); ++i) {
    const double h = 1e-6;
    dwant[i] = (C::ref(w[i] + h) - C::ref(w[i] - h)) / (2 * h) * r[i];
  }
  gc::check_close(g, dwant, narrow<T>::grad_tol, narrow<T>::grad_tol, "grad vs f'(x) R");
  double gmax = 0;
  for (double v : g) gmax = std::max(gmax, std::abs(v));
  CHECK(gmax > 0.1);
}

}  // namespace

TEST_CASE_TEMPLATE("unary op on bf16: value rounded once, gradient in bf16", C, ALL_UNARY_CASES) {
  narrow_case<C, ctg::bf16>(3003);
}

TEST_CASE_TEMPLATE("unary op on f16: value rounded once, gradient in f16", C, ALL_UNARY_CASES) {
  narrow_case<C, ctg::f16>(4004);
}

// softmax and log_softmax of a 16-bit x: computed in f32 and rounded once,
// as PyTorch's (ctg rounded x - max to bf16 first: a probability's relative
// error reached 0.29 on rows of scale 8). Rows of growing scale; the value
// within half an ulp of the exact one of the rounded inputs (f16: or of its
// smallest subnormal step); the gradient of sum(softmax(x) * r),
// y (r - sum(y r)), within the unary ops' tolerance.
TEST_CASE_TEMPLATE("softmax / log_softmax of bf16 and f16: computed in f32, rounded once", T, ctg::bf16, ctg::f16) {
  constexpr std::size_t rows = 8, cols = 32;
  using W = ctg::param<"w", T, rows, cols>;
  using R = ctg::frozen<"r", ctg::f32, rows, cols>;
  gc::rng rng(77);
  ctg::cpu::device dev;
  std::vector<double> w0 = rng.vec(rows * cols, -1.0, 1.0);
  for (std::size_t i = 0; i < w0.size(); ++i) w0[i] *= static_cast<double>(1 + i / cols);
  const double atol = std::is_same_v<T, ctg::f16> ? 0x1p-25 : 0.0;
  for (bool log : {false, true}) {
    CAPTURE(log);
    auto run = [&](auto e) {
      auto fwd = ctg::forward(e);
      auto fs = ctg::make_store(dev, fwd);
      const auto w = gc::set<W>(fs, w0);
      std::vector<double> want(w.size());
      for (std::size_t r = 0; r < rows; ++r) {
        double m = -1e300, s = 0;
        for (std::size_t j = 0; j < cols; ++j) m = std::max(m, w[r * cols + j]);
        for (std::size_t j = 0; j < cols; ++j) s += std::exp(w[r * cols + j] - m);
        for (std::size_t j = 0; j < cols; ++j) {
          const double z = w[r * cols + j] - m;
          want[r * cols + j] = log ? z - std::log(s) : std::exp(z) / s;
        }
      }
      gc::check_close(gc::run_forward(fwd, fs), want, narrow<T>::half_ulp * 1.001, atol, "forward value");
    };
    if (log) run(ctg::log_softmax(W{}));
    else run(ctg::softmax(W{}));
  }
  auto step = ctg::value_and_grad(ctg::sum(ctg::cast<ctg::f32>(ctg::softmax(W{})) * R{}), ctg::wrt<W>);
  auto st = ctg::make_store(dev, step);
  const auto w = gc::set<W>(st, w0);
  const auto r = gc::set<R>(st, rng.vec(rows * cols, -1.0, 1.0));
  step(st);
  const auto g = gc::to_vec(st.template grad<W>());
  std::vector<double> want(g.size());
  for (std::size_t i = 0; i < rows; ++i) {
    double m = -1e300, s = 0, yr = 0;
    for (std::size_t j = 0; j < cols; ++j) m = std::max(m, w[i * cols + j]);
    for (std::size_t j = 0; j < cols; ++j) s += std::exp(w[i * cols + j] - m);
    for (std::size_t j = 0; j < cols; ++j) yr += std::exp(w[i * cols + j] - m) / s * r[i * cols + j];
    for (std::size_t j = 0; j < cols; ++j)
      want[i * cols + j] = std::exp(w[i * cols + j] - m) / s * (r[i * cols + j] - yr);
  }
  gc::check_close(g, want, narrow<T>::grad_tol, narrow<T>::grad_tol, "grad vs y (r - sum(y r))");
}
