// Gradients across dtypes: cast chains (f32 -> bf16 -> f32: the gradient flows and
// is rounded where the rules say), bf16 and f16 parameters (gradients of the
// parameter's dtype, accumulated in f32), mixed bf16 + f16 promotion, no_grad and
// broadcast_to. Expected roundings come from gc::round_bf16 / gc::round_f16,
// written from the format definitions (not from ctg's conversions).
#include "grad_check.hpp"

namespace {

// Tolerances for narrow parameters: finite differences on a smooth f32 graph fed
// by the rounded parameter, compared with a gradient rounded once to bf16 / f16.
constexpr gc::tol bf16_tol{2.0 / 128, 1e-2, 1e-3};
constexpr gc::tol f16_tol{2.0 / 1024, 2e-3, 1e-4};

template <class T>
double round_as(double x) {
  if constexpr (std::is_same_v<T, ctg::bf16>) return gc::round_bf16(x);
  else return gc::round_f16(x);
}

}  // namespace

TEST_CASE("cast f32 -> bf16 -> f32: the value is rounded, the gradient flows back rounded") {
  using W = ctg::param<"w", ctg::f32, 4, 8>;
  using R = ctg::frozen<"r", ctg::f32, 4, 8>;
  gc::rng rng(201);
  ctg::cpu::device dev;
  const auto w0 = rng.vec(32, -3.0, 3.0);
  const auto r0 = rng.vec(32, -1.0, 1.0);

  auto roundtrip = ctg::cast<ctg::f32>(ctg::cast<ctg::bf16>(W{}));
  static_assert(ctg::requires_grad_v<decltype(roundtrip)>);
  static_assert(std::is_same_v<ctg::dtype_t<decltype(roundtrip)>, ctg::f32>);

  SUBCASE("forward: exactly bf16 rounding (to nearest even)") {
    auto fwd = ctg::forward(roundtrip);
    auto fs = ctg::make_store(dev, fwd);
    const auto w = gc::set<W>(fs, w0);
    std::vector<double> want(32);
    for (std::size_t i = 0; i < 32; ++i) want[i] = gc::round_bf16(w[i]);
    gc::check_close(gc::run_forward(fwd, fs), want, 0, 0, "cast value");
    // and a bf16 tie: 1 + 2^-8 is halfway between 1 and 1 + 2^-7; even is 1.
    CHECK(gc::round_bf16(1.0 + 1.0 / 256) == 1.0);
    fs.param<W>()[0] = 1.0f + 1.0f / 256;
    fwd(fs);
    CHECK(fs.value()[0] == 1.0f);
  }
  SUBCASE("linear: d/dW sum(cast(cast(W)) * R) = bf16(R)") {
    auto step = ctg::value_and_grad(ctg::sum(roundtrip * R{}), ctg::wrt<W>);
    auto st = ctg::make_store(dev, step);
    gc::set<W>(st, w0);
    const auto r = gc::set<R>(st, r0);
    step(st);
    const auto g = gc::to_vec(st.grad<W>());
    std::vector<double> want(32);
    for (std::size_t i = 0; i < 32; ++i) want[i] = gc::round_bf16(r[i]);
    gc::check_close(g, want, 0, 0, "grad = bf16(R)");
    gc::check_close(g, r, 1.0 / 256, 0, "grad close to the f32 path's R");
  }
  SUBCASE("through a bf16 square: d/dW = bf16(2 bf16(R) bf16(W)), close to 2 W R") {
    auto step = ctg::value_and_grad(ctg::sum(ctg::cast<ctg::f32>(ctg::square(ctg::cast<ctg::bf16>(W{}))) * R{}),
                                    ctg::wrt<W>);
    auto st = ctg::make_store(dev, step);
    const auto w = gc::set<W>(st, w0);
    const auto r = gc::set<R>(st, r0);
    step(st);
    const auto g = gc::to_vec(st.grad<W>());
    std::vector<double> exact(32), f32_path(32);
    for (std::size_t i = 0; i < 32; ++i) {
      exact[i] = gc::round_bf16(2 * gc::round_bf16(r[i]) * gc::round_bf16(w[i]));
      f32_path[i] = 2 * w[i] * r[i];
    }
    gc::check_close(g, exact, 0, 0, "grad rounded per node");
    gc::check_close(g, f32_path, 1e-2, 1e-6, "grad close to the f32 path");
  }
}

TEST_CASE("f32 weight cast to bf16 in a bf16 matmul (the README model): gradient vs an f64 reference") {
  // loss = mean(square(cast<f32>(X @ cast<bf16>(W)))), X a bf16 input.
  using X = ctg::input<"x", ctg::bf16, ctg::dyn, 6>;
  using W = ctg::param<"w", ctg::f32, 6, 3>;
  auto loss = ctg::mean(ctg::square(ctg::cast<ctg::f32>(ctg::matmul(X{}, ctg::cast<ctg::bf16>(W{})))));
  static_assert(std::is_same_v<ctg::dtype_t<decltype(loss)>, ctg::f32>);
  static_assert(ctg::has_grad_path_v<decltype(loss), W>);
  gc::rng rng(211);
  ctg::cpu::device dev;
  auto step = ctg::value_and_grad(loss, ctg::wrt<W>);
  auto st = ctg::make_store(dev, step);
  const auto w = gc::set<W>(st, rng.vec(18, -1.0, 1.0));
  const std::size_t rows = 5;
  const auto xd = gc::data_of<ctg::bf16>(rng.vec(rows * 6, -1.0, 1.0));
  std::vector<double> x(xd.size());
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = gc::to_d(xd[i]);
  step(st, ctg::feed<X>(std::span<const ctg::bf16>(xd), rows));
  const auto g = gc::to_vec(st.grad<W>());
  // f64 reference on the same (bf16-rounded) operands: dW = X^T (2 Y / n).
  std::vector<double> y(rows * 3, 0.0), want(18, 0.0);
  double want_loss = 0;
  for (std::size_t i = 0; i < rows; ++i)
    for (std::size_t j = 0; j < 3; ++j) {
      for (std::size_t k = 0; k < 6; ++k) y[i * 3 + j] += x[i * 6 + k] * gc::round_bf16(w[k * 3 + j]);
      want_loss += y[i * 3 + j] * y[i * 3 + j] / double(rows * 3);
    }
  for (std::size_t k = 0; k < 6; ++k)
    for (std::size_t j = 0; j < 3; ++j)
      for (std::size_t i = 0; i < rows; ++i) want[k * 3 + j] += x[i * 6 + k] * 2 * y[i * 3 + j] / double(rows * 3);
  CHECK(gc::close(gc::last_loss(st), want_loss, 2e-2, 0));
  gc::check_close(g, want, 3e-2, 1e-3, "grad vs f64 reference");
}

TEST_CASE_TEMPLATE("narrow parameters: the gradient has the parameter's dtype and matches finite differences", T,
                   ctg::bf16, ctg::f16) {
  // A narrow weight read through cast<f32> into a smooth f32 graph: finite
  // differences are taken on the weight's own grid (the helper uses the step
  // actually stored), and the gradient is rounded once to T.
  using W = ctg::param<"w", T, 4, 3>;
  using X = ctg::input<"x", T, 5, 4>;
  using R = ctg::frozen<"r", ctg::f32, 5, 3>;
  auto loss = ctg::sum(ctg::tanh(ctg::matmul(ctg::cast<ctg::f32>(X{}), ctg::cast<ctg::f32>(W{}))) * R{});
  auto step = ctg::value_and_grad(loss, ctg::wrt<W>);
  gc::rng rng(221);
  ctg::cpu::device dev;
  auto st = ctg::make_store(dev, step);
  static_assert(std::is_same_v<decltype(st.template grad<W>()), std::span<const T>>);
  static_assert(std::is_same_v<decltype(st.template param<W>()), std::span<T>>);
  gc::set<W>(st, rng.vec(12, -1.0, 1.0));
  gc::set<R>(st, rng.vec(15, -1.0, 1.0));
  const auto x = gc::data_of<T>(rng.vec(20, -1.0, 1.0));
  const auto g = gc::check_grad<W>(step, st, std::is_same_v<T, ctg::bf16> ? bf16_tol : f16_tol,
                                   ctg::feed<X>(std::span<const T>(x)));
  for (double v : g) CHECK(v == round_as<T>(v));  // representable in T
}

TEST_CASE_TEMPLATE("narrow reductions and gradients accumulate in f32, rounding once", T, ctg::bf16, ctg::f16) {
  // 300 ones: an accumulator of T's precision would stop at 256 (bf16) or be exact
  // (f16 has 11 bits), so bf16 shows the difference; 300 is representable in both.
  using X = ctg::input<"x", T, 300, 1>;
  using B = ctg::param<"b", T, 1>;
  using W = ctg::param<"w", T, 1, 1>;
  const std::vector<T> ones = gc::data_of<T>(std::vector<double>(300, 1.0));
  const auto fx = ctg::feed<X>(std::span<const T>(ones));
  ctg::cpu::device dev;

  SUBCASE("forward sum stays T and equals 300") {
    auto fwd = ctg::forward(ctg::sum(X{}));
    static_assert(std::is_same_v<ctg::dtype_t<decltype(ctg::sum(X{}))>, T>);
    auto fs = ctg::make_store(dev, fwd);
    fwd(fs, fx);
    CHECK(gc::to_d(fs.value()[0]) == 300.0);
  }
  SUBCASE("bias gradient: summed over 300 rows") {
    auto step = ctg::value_and_grad(ctg::sum(ctg::cast<ctg::f32>(X{} + B{})), ctg::wrt<B>);
    auto st = ctg::make_store(dev, step);
    gc::set<B>(st, {0.5});
    step(st, fx);
    CHECK(gc::to_d(st.template grad<B>()[0]) == 300.0);
    CHECK(gc::last_loss(st) == 450.0);
  }
  SUBCASE("matmul weight gradient: X^T G over 300 rows") {
    auto step = ctg::value_and_grad(ctg::sum(ctg::cast<ctg::f32>(ctg::matmul(X{}, W{}))), ctg::wrt<W>);
    auto st = ctg::make_store(dev, step);
    gc::set<W>(st, {2.0});
    step(st, fx);
    CHECK(gc::to_d(st.template grad<W>()[0]) == 300.0);
    CHECK(gc::last_loss(st) == 600.0);
  }
}

TEST_CASE("bf16 + f16 promotes to f32; each gradient is cast back to its leaf's dtype") {
  using A = ctg::param<"a", ctg::bf16, 3, 4>;
  using H = ctg::param<"h", ctg::f16, 3, 4>;
  using R = ctg::frozen<"r", ctg::f32, 3, 4>;
  static_assert(std::is_same_v<ctg::dtype_t<decltype(A{} + H{})>, ctg::f32>);
  gc::rng rng(231);
  ctg::cpu::device dev;
  auto step = ctg::value_and_grad(ctg::sum((A{} * H{}) * R{}), ctg::wrt<A, H>);
  auto st = ctg::make_store(dev, step);
  const auto a = gc::set<A>(st, rng.vec(12, -2.0, 2.0));
  const auto h = gc::set<H>(st, rng.vec(12, -2.0, 2.0));
  const auto r = gc::set<R>(st, rng.vec(12, -1.0, 1.0));
  step(st);
  std::vector<double> ga(12), gh(12);
  double want_loss = 0;
  for (std::size_t i = 0; i < 12; ++i) {
    ga[i] = gc::round_bf16(static_cast<float>(r[i] * h[i]));  // f32 product, rounded to bf16
    gh[i] = gc::round_f16(static_cast<float>(r[i] * a[i]));
    want_loss += a[i] * h[i] * r[i];
  }
  gc::check_close(gc::to_vec(st.grad<A>()), ga, 0, 0, "grad of the bf16 leaf");
  gc::check_close(gc::to_vec(st.grad<H>()), gh, 0, 0, "grad of the f16 leaf");
  CHECK(gc::close(gc::last_loss(st), want_loss, 1e-6, 1e-6));
}

TEST_CASE("cast f32 -> f64 -> f32 round trip is exact and differentiable") {
  using W = ctg::param<"w", ctg::f32, 3, 4>;
  using R = ctg::frozen<"r", ctg::f64, 3, 4>;
  auto loss = ctg::sum(ctg::exp(ctg::cast<ctg::f64>(W{})) * R{});
  static_assert(std::is_same_v<ctg::dtype_t<decltype(loss)>, ctg::f64>);
  gc::rng rng(241);
  ctg::cpu::device dev;
  auto step = ctg::value_and_grad(loss, ctg::wrt<W>);
  auto st = ctg::make_store(dev, step);
  const auto w = gc::set<W>(st, rng.vec(12, -1.0, 1.0));
  const auto r = gc::set<R>(st, rng.vec(12, -1.0, 1.0));
  const auto g = gc::check_grad<W>(step, st, gc::f32_tol);
  std::vector<double> want(12);
  for (std::size_t i = 0; i < 12; ++i) want[i] = static_cast<float>(std::exp(w[i]) * r[i]);
  gc::check_close(g, want, 0, 0, "grad = f32(exp(w) r)");
}

TEST_CASE("an f64 loss is returned as a double, with every digit; an f32 loss as a float") {
  using X = ctg::frozen<"x", ctg::f64, 2>;
  using W = ctg::param<"w", ctg::f64, 2>;
  ctg::cpu::device dev;
  auto step = ctg::value_and_grad(ctg::sum(X{} * W{}), ctg::wrt<W>);
  auto st = ctg::make_store(dev, step);
  st.param<X>()[0] = 1.0;
  st.param<X>()[1] = 1e-12;  // (below a float's resolution of 1)
  st.param<W>()[0] = 1.0;
  st.param<W>()[1] = 1.0;
  const auto loss = step(st);
  static_assert(std::is_same_v<decltype(loss), const double>);
  CHECK(loss == 1.0 + 1e-12);
  using V = ctg::param<"v", ctg::f32, 2>;
  auto f32_step = ctg::value_and_grad(ctg::sum(V{}), ctg::wrt<V>);
  auto fs = ctg::make_store(dev, f32_step);
  static_assert(std::is_same_v<decltype(f32_step(fs)), float>);
}

TEST_CASE("no_grad: the value passes, the gradient does not") {
  using W = ctg::param<"w", ctg::f64, 3, 4>;
  using R = ctg::frozen<"r", ctg::f64, 3, 4>;
  gc::rng rng(251);
  ctg::cpu::device dev;
  const auto w0 = rng.vec(12, -2.0, 2.0);
  auto fwd = ctg::forward(ctg::no_grad(W{}));
  auto fs = ctg::make_store(dev, fwd);
  const auto w = gc::set<W>(fs, w0);
  gc::check_close(gc::run_forward(fwd, fs), w, 0, 0, "no_grad value");

  // d/dW sum(W * no_grad(W) * R) = no_grad(W) * R, half of the true derivative 2 W R.
  auto step = ctg::value_and_grad(ctg::sum(W{} * ctg::no_grad(W{}) * R{}), ctg::wrt<W>);
  auto st = ctg::make_store(dev, step);
  gc::set<W>(st, w0);
  const auto r = gc::set<R>(st, rng.vec(12, -1.0, 1.0));
  step(st);
  std::vector<double> want(12);
  double want_loss = 0;
  for (std::size_t i = 0; i < 12; ++i) {
    want[i] = w[i] * r[i];
    want_loss += w[i] * w[i] * r[i];
  }
  gc::check_close(gc::to_vec(st.grad<W>()), want, 1e-15, 0, "grad through one path only");
  CHECK(gc::close(gc::last_loss(st), want_loss, 1e-14, 0));
}

TEST_CASE("broadcast_to: forward value and gradient (summed back over the stretched dims)") {
  gc::rng rng(261);
  ctg::cpu::device dev;
  SUBCASE("[4] -> [3,4]") {
    using B = ctg::param<"b", ctg::f64, 4>;
    using R = ctg::frozen<"r", ctg::f64, 3, 4>;
    using E = decltype(ctg::broadcast_to<ctg::shape<3, 4>>(B{}));
    static_assert(std::is_same_v<ctg::shape_t<E>, ctg::shape<3, 4>>);
    auto fwd = ctg::forward(E{});
    auto fs = ctg::make_store(dev, fwd);
    const auto b = gc::set<B>(fs, rng.vec(4, -1.0, 1.0));
    std::vector<double> want(12);
    for (std::size_t i = 0; i < 12; ++i) want[i] = b[i % 4];
    gc::check_close(gc::run_forward(fwd, fs), want, 0, 0, "broadcast value");
    auto step = ctg::value_and_grad(ctg::sum(ctg::square(E{}) * R{}), ctg::wrt<B>);
    auto st = ctg::make_store(dev, step);
    gc::set<B>(st, b);
    gc::set<R>(st, rng.vec(12, -1.0, 1.0));
    gc::check_grad<B>(step, st, gc::f64_tol);
  }
  SUBCASE("[3,1] -> [2,3,4]") {
    using B = ctg::param<"b", ctg::f64, 3, 1>;
    using R = ctg::frozen<"r", ctg::f64, 2, 3, 4>;
    using E = decltype(ctg::broadcast_to<ctg::shape<2, 3, 4>>(B{}));
    static_assert(std::is_same_v<ctg::shape_t<E>, ctg::shape<2, 3, 4>>);
    auto fwd = ctg::forward(E{});
    auto fs = ctg::make_store(dev, fwd);
    const auto b = gc::set<B>(fs, rng.vec(3, -1.0, 1.0));
    std::vector<double> want(24);
    for (std::size_t i = 0; i < 24; ++i) want[i] = b[(i / 4) % 3];
    gc::check_close(gc::run_forward(fwd, fs), want, 0, 0, "broadcast value");
    auto step = ctg::value_and_grad(ctg::sum(ctg::square(E{}) * R{}), ctg::wrt<B>);
    auto st = ctg::make_store(dev, step);
    gc::set<B>(st, b);
    gc::set<R>(st, rng.vec(24, -1.0, 1.0));
    gc::check_grad<B>(step, st, gc::f64_tol);
  }
}
