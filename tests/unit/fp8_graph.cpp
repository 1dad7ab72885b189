// FP8 in the graph: quantize / dequantize, fp8_matmul against an f32
// reference within a derived bound, delayed-scaling state over several steps
// against hand-computed values, and exact replay under checkpoint.
#include <cmath>
#include <cstring>
#include <limits>
#include <span>
#include <utility>
#include <vector>

#include <ctg/optim/optim.hpp>

#include "grad_check.hpp"
#include "step_counts.hpp"

namespace {
using ctg::dyn;
namespace pr = ctg::precision;
using X = ctg::input<"x", ctg::f32, dyn, 8>;
using W = ctg::param<"w", ctg::f32, 8, 4>;
using R = ctg::input<"r", ctg::f32, dyn, 4>;
using Cur = ctg::scaling::current<pr::current<>>;

// Largest error of one e4m3 (M=3) / e5m2 (M=2) quantization under scale s:
// half an ulp relative in the normal range, half the smallest subnormal below it.
double q_err(double v, double s, int mant, double min_sub) {
  return std::max(std::abs(v) * std::ldexp(1.0, -(mant + 1)), 0.5 * min_sub / s) * (1 + 1e-6);
}
double amax_of(const auto& v) {
  double m = 0;
  for (auto e : v) m = std::max(m, std::abs(double(e)));
  return m;
}
// dW[k][j] = sum_i x[i][k] r[i][j] of an [6, 8] x and [6, 4] upstream
// gradient r, x in e4m3 (scaled to its amax), r in e5m2 (scaled to its):
// each element within its bound. Returns the sums of the bounds and of
// |dW|'s exact values.
std::pair<double, double> check_weight_gradient(std::span<const float> g, const std::vector<float>& xs,
                                                const std::vector<float>& rs) {
  const double sx = 448 / amax_of(xs), sg = 57344 / amax_of(rs);
  const double sub4 = std::ldexp(1.0, -9), sub5 = std::ldexp(1.0, -16);
  double bounds = 0, refs = 0;
  for (int k = 0; k < 8; ++k)
    for (int j = 0; j < 4; ++j) {
      double ref = 0, bound = 0;
      for (int i = 0; i < 6; ++i) {
        const double a = xs[i * 8 + k], b = rs[i * 4 + j];
        const double ea = q_err(a, sx, 3, sub4), eb = q_err(b, sg, 2, sub5);
        ref += a * b;
        bound += std::abs(a) * eb + std::abs(b) * ea + ea * eb + 1e-6 * std::abs(a * b);
      }
      INFO("dW[" << k << "][" << j << "] = " << g[k * 4 + j] << ", exact " << ref);
      CHECK(std::abs(g[k * 4 + j] - ref) <= bound);
      bounds += bound;
      refs += std::abs(ref);
    }
  return {bounds, refs};
}
}  // namespace

TEST_CASE("quantize -> dequantize (current scaling) stays within half an fp8 ulp") {
  X x;
  auto step = ctg::forward(ctg::dequantize<ctg::f32>(ctg::quantize<ctg::e4m3, Cur>(x)));
  ctg::cpu::device dev;
  auto st = ctg::make_store(dev, step);
  gc::rng r(1);
  auto xs = gc::data_of<float>(r.vec(64, -3, 3));
  xs[5] = 1e-5f;  // deep in e4m3's subnormal range after scaling
  step(st, ctg::feed<X>(xs, 8));
  float amax = 0;
  for (float v : xs) amax = std::max(amax, std::abs(v));
  const double scale = 448.0 / amax;
  for (std::size_t i = 0; i < xs.size(); ++i)
    CHECK(std::abs(st.value()[i] - xs[i]) <= q_err(xs[i], scale, 3, std::ldexp(1.0, -9)));
  CHECK(std::abs(st.value()[0]) > 0);  // the amax maps to 448: the largest value round-trips
}

TEST_CASE("current scaling of a tensor holding an inf or a NaN: every value NaN (torchao), and a checked loss fails") {
  // (The scale fell back to 1: an inf saturated to 448 and the rest was cast
  // unscaled, into e4m3's subnormals: a finite loss, trained on.)
  for (const float bad : {std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
    X x;
    auto fwd = ctg::forward(ctg::dequantize<ctg::f32>(ctg::quantize<ctg::e4m3, Cur>(x)));
    ctg::cpu::device dev;
    auto fs = ctg::make_store(dev, fwd);
    std::vector<float> xs(16, 1e-3f);
    xs[7] = bad;
    fwd(fs, ctg::feed<X>(xs, 2));
    for (float v : fs.value()) CHECK(std::isnan(v));

    using W = ctg::param<"w", ctg::f32, 8, 4>;
    auto step = ctg::value_and_grad(
        ctg::sum(ctg::fp8_matmul<ctg::f32, Cur>(ctg::quantize<ctg::e4m3, Cur>(x), ctg::quantize<ctg::e4m3, Cur>(W{}))));
    auto st = ctg::make_store(dev, step);
    ctg::nn::init_params(st, 3, 0.5);
    st.check_finite(true);
    CHECK_THROWS_WITH_AS(step(st, ctg::feed<X>(xs, 2)), doctest::Contains("the loss is not finite"), ctg::error);
  }
}

TEST_CASE("delayed scaling of a tensor holding an inf or a NaN: it reads back NaN, so AdamW refuses the gradient") {
  // (The cast saturated an inf to e5m2's 57344: a backward that overflowed
  // gave a finite gradient, which AdamW applied; then the inf in the history
  // kept the scale at 1 and the next steps' small gradients came out 0.)
  using D = pr::delayed<4>;
  using SX = ctg::scaling::delayed<"lin.x", D>;
  using SW = ctg::scaling::delayed<"lin.w", D>;
  using SG = ctg::scaling::delayed<"lin.grad", D>;
  for (const float bad : {std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
    auto y = ctg::fp8_matmul<ctg::f32, SG>(ctg::quantize<ctg::e4m3, SX>(X{}), ctg::quantize<ctg::e4m3, SW>(W{}));
    auto step = ctg::value_and_grad(ctg::sum(y * R{}), ctg::wrt<W>);
    ctg::cpu::device dev;
    auto st = ctg::make_store(dev, step);
    ctg::nn::init_params(st, 3, 0.5);
    ctg::optim::adamw opt(st);
    std::vector<float> xs(16, 0.5f), rs(8, 0.25f);
    step(st, ctg::feed<X>(xs, 2), ctg::feed<R>(rs, 2));
    opt.step(st);
    const std::vector<float> w(st.param<W>().begin(), st.param<W>().end());
    // An upstream gradient that overflowed: the weight's gradient is not finite, and no update is made.
    rs[5] = bad;
    step(st, ctg::feed<X>(xs, 2), ctg::feed<R>(rs, 2));  // (unchecked: the loss reads r too)
    bool finite = true;
    for (const float g : st.grad<W>()) finite = finite && std::isfinite(g);
    CHECK_FALSE(finite);
    CHECK_THROWS_WITH_AS(opt.step(st), doctest::Contains("is not finite"), ctg::error);
    CHECK(std::vector<float>(st.param<W>().begin(), st.param<W>().end()) == w);
    // An input holding it: the product reads back NaN, and a checked loss fails.
    rs[5] = 0.25f;
    xs[3] = bad;
    st.check_finite(true);
    CHECK_THROWS_WITH_AS(step(st, ctg::feed<X>(xs, 2), ctg::feed<R>(rs, 2)), doctest::Contains("the loss is not finite"),
                         ctg::error);
  }
}

TEST_CASE("an fp8 linear forward and backward agree with f32 within the quantization bound") {
  using DG = ctg::scaling::current<pr::current<>>;
  X x;
  auto y = ctg::fp8_matmul<ctg::f32, DG>(ctg::quantize<ctg::e4m3, Cur>(x), ctg::quantize<ctg::e4m3, Cur>(W{}));
  auto step = ctg::value_and_grad(ctg::sum(y * R{}), ctg::wrt<W>);
  ctg::cpu::device dev;
  auto st = ctg::make_store(dev, step);
  gc::rng r(2);
  const auto w = gc::set<W>(st, r.vec(32, -1, 1));
  const auto xs = gc::data_of<float>(r.vec(48, -2, 2)), rs = gc::data_of<float>(r.vec(24, -1, 1));
  step(st, ctg::feed<X>(xs, 6), ctg::feed<R>(rs, 6));
  const double sx = 448 / amax_of(xs), sw = 448 / amax_of(w);
  const double sub4 = std::ldexp(1.0, -9);
  check_weight_gradient(st.grad<W>(), xs, rs);
  // The loss: sum_ij y_ij r_ij with y = x W in fp8.
  double ref = 0, bound = 0;
  for (int i = 0; i < 6; ++i)
    for (int j = 0; j < 4; ++j)
      for (int k = 0; k < 8; ++k) {
        const double a = xs[i * 8 + k], b = w[k * 4 + j], c = rs[i * 4 + j];
        const double ea = q_err(a, sx, 3, sub4), eb = q_err(b, sw, 3, sub4);
        ref += a * b * c;
        bound += (std::abs(a) * eb + std::abs(b) * ea + ea * eb + 1e-6 * std::abs(a * b)) * std::abs(c);
      }
  CHECK(std::abs(st.value()[0] - ref) <= bound);
  CHECK(std::abs(st.value()[0] - ref) > 0);  // it really was quantized
}

// x of [batch, 3, 8]: w's gradient is the batches' fp8 products summed in
// one fp8_matmul ([8, 4] in f32), with no [batch, 8, 4] partial products
// and no reduction: each output one chain over every batch's rows, scaled
// once, so the bits of the flat x [6, 8]'s gradient, within its bound.
TEST_CASE("an fp8 weight's gradient over batches is one summed product: the flat product's bits") {
  using DG = ctg::scaling::current<pr::current<>>;
  using XB = ctg::input<"x", ctg::f32, dyn, 3, 8>;
  using RB = ctg::input<"r", ctg::f32, dyn, 3, 4>;
  auto loss_of = []<class In, class Up>(In, Up) {
    return ctg::sum(ctg::fp8_matmul<ctg::f32, DG>(ctg::quantize<ctg::e4m3, Cur>(In{}), ctg::quantize<ctg::e4m3, Cur>(W{})) *
                    Up{});
  };
  auto flat = ctg::value_and_grad(loss_of(X{}, R{}), ctg::wrt<W>);
  auto batched = ctg::value_and_grad(loss_of(XB{}, RB{}), ctg::wrt<W>);
  using S = decltype(batched);
  constexpr auto fp8 = ctg::node_kind::fp8_matmul;
  static_assert(step_counts::summed_products<S, fp8> == 1 && step_counts::summed_products<decltype(flat), fp8> == 0);
  static_assert(step_counts::reductions<S> == 1, "the loss's sum only");
  static_assert(std::is_same_v<ctg::tl::at_t<1, S::outputs>::dtype, ctg::f32>);
  static_assert(step_counts::ops_named<S>("fp8_matmul summed a^T b") == 1);  // (in a graph's text: x^T dy)
  ctg::cpu::device dev;
  auto fs = ctg::make_store(dev, flat);
  auto bs = ctg::make_store(dev, batched);
  gc::rng r(4);
  const auto w = r.vec(32, -1, 1);
  gc::set<W>(fs, w);
  gc::set<W>(bs, w);
  const auto xs = gc::data_of<float>(r.vec(48, -2, 2)), rs = gc::data_of<float>(r.vec(24, -1, 1));
  flat(fs, ctg::feed<X>(xs, 6), ctg::feed<R>(rs, 6));
  batched(bs, ctg::feed<XB>(xs, 2), ctg::feed<RB>(rs, 2));
  check_weight_gradient(bs.grad<W>(), xs, rs);
  const auto got = bs.grad<W>(), want = fs.grad<W>();
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < want.size(); ++i) CHECK(std::memcmp(&got[i], &want[i], sizeof(float)) == 0);
}

TEST_CASE("gradients far below 1 are scaled before their e5m2 cast, under current and delayed scaling") {
  // An upstream gradient of about 1e-6, below e5m2's smallest subnormal
  // (2^-16): cast without its scale it is 0, and so is dW. Scaled (by
  // 57344 / amax), it keeps e5m2's relative precision.
  using DS = ctg::scaling::delayed<"lin.grad", pr::delayed<4>>;
  auto check = [](auto gradient_scaling, int steps) {
    using DG = decltype(gradient_scaling);
    X x;
    auto y = ctg::fp8_matmul<ctg::f32, DG>(ctg::quantize<ctg::e4m3, Cur>(x), ctg::quantize<ctg::e4m3, Cur>(W{}));
    auto step = ctg::value_and_grad(ctg::sum(y * R{}), ctg::wrt<W>);
    ctg::cpu::device dev;
    auto st = ctg::make_store(dev, step);
    gc::rng r(3);
    gc::set<W>(st, r.vec(32, -1, 1));
    const auto xs = gc::data_of<float>(r.vec(48, -2, 2));
    auto rs = gc::data_of<float>(r.vec(24, -1, 1));
    for (auto& v : rs) v *= 1e-6f;
    for (int s = 0; s < steps; ++s) step(st, ctg::feed<X>(xs, 6), ctg::feed<R>(rs, 6));  // (delayed: its scale from the history)
    const auto [bounds, refs] = check_weight_gradient(st.template grad<W>(), xs, rs);
    // The bounds are tight enough that a zero gradient breaks one of them.
    CHECK(bounds < 0.5 * refs);
  };
  SUBCASE("current") { check(Cur{}, 1); }
  // Delayed: the first step's scale is the history's start (1); the second
  // step scales by the first's amax, the same as this step's.
  SUBCASE("delayed") { check(DS{}, 2); }
}

TEST_CASE("delayed scaling: scales and amax histories over steps, by hand") {
  // History 3, margin 0, max. x's amax per step: 4, 2, 0, +inf, 1.
  using D = pr::delayed<3>;
  using SX = ctg::scaling::delayed<"lin.x", D>;
  using SW = ctg::scaling::delayed<"lin.w", D>;
  using SG = ctg::scaling::delayed<"lin.grad", D>;
  X x;
  auto y = ctg::fp8_matmul<ctg::f32, SG>(ctg::quantize<ctg::e4m3, SX>(x), ctg::quantize<ctg::e4m3, SW>(W{}));
  auto step = ctg::value_and_grad(ctg::sum(y * R{}), ctg::wrt<W>);
  ctg::cpu::device dev;
  auto st = ctg::make_store(dev, step);
  using XS = SX::scale_leaf;
  using XH = SX::history_leaf;
  using GS = SG::scale_leaf;
  using GH = SG::history_leaf;
  CHECK(st.param<XS>()[0] == 1.0f);  // scales start at 1, histories at 0
  CHECK(st.param<XH>()[2] == 0.0f);
  for (auto& v : st.param<W>()) v = 0.5f;
  std::vector<float> xs(8, 0.0f), rs(4, 0.25f);
  auto run = [&](float a) {
    xs[3] = a;
    xs[6] = -a / 2;
    return step(st, ctg::feed<X>(xs, 1), ctg::feed<R>(rs, 1));
  };
  auto hist = [&](auto span) { return std::vector<float>(span.begin(), span.end()); };
  using V = std::vector<float>;
  // Step 1 (scale 1): amax 4 -> slot 0 = 4; max = 4, scale = 448/4 = 112; roll: [0, 0, 4] (slot 0 zeroed).
  run(4.0f);
  CHECK(st.param<XS>()[0] == 112.0f);
  CHECK(hist(st.param<XH>()) == V{0, 0, 4});
  // Step 2: amax 2 -> [2, 0, 4]; max 4, scale 112; roll: new[i] = old[i+1], new[2] = old[0] -> [0, 4, 2], slot 0 zeroed -> [0, 4, 2].
  run(2.0f);
  CHECK(st.param<XS>()[0] == 112.0f);
  CHECK(hist(st.param<XH>()) == V{0, 4, 2});
  // Step 3: amax 0 -> [0, 4, 2]; max 4: scale 112; roll -> [4, 2, 0] -> slot 0 zeroed: [0, 2, 0].
  run(0.0f);
  CHECK(st.param<XS>()[0] == 112.0f);
  CHECK(hist(st.param<XH>()) == V{0, 2, 0});
  // Step 4: amax inf -> [inf, 2, 0]; max inf is not finite: the scale stays 112; roll -> [2, 0, inf] -> [0, 0, inf].
  run(INFINITY);
  CHECK(st.param<XS>()[0] == 112.0f);
  CHECK(hist(st.param<XH>()) == V{0, 0, INFINITY});
  // Step 5: amax 1 -> [1, 0, inf]: max inf, kept 112; roll -> [0, inf, 1] -> [0, inf, 1].
  run(1.0f);
  CHECK(st.param<XS>()[0] == 112.0f);
  CHECK(hist(st.param<XH>()) == V{0, INFINITY, 1});
  // Step 6: amax 1 -> [1, inf, 1]: max inf, kept; roll -> [inf, 1, 1] -> [0, 1, 1].
  run(1.0f);
  // Step 7: amax 1 -> [1, 1, 1]: max 1, scale 448; roll -> [0, 1, 1].
  run(1.0f);
  CHECK(st.param<XS>()[0] == 448.0f);
  CHECK(hist(st.param<XH>()) == V{0, 1, 1});
  // The gradient's quantizer saw r = 0.25 every step: its scale is 57344 / 0.25.
  CHECK(st.param<GS>()[0] == 229376.0f);
  CHECK(hist(st.param<GH>()) == V{0, 0.25f, 0.25f});
  // A step that throws changes no state.
  xs[3] = 1.0f;
  CHECK_THROWS_AS(step(st, ctg::feed<X>(xs, 2), ctg::feed<R>(rs, 1)), ctg::error);
  CHECK(hist(st.param<XH>()) == V{0, 1, 1});
  // Nor one that fails after every group ran (a NaN loss under
  // check_finite): the amaxes it recorded (a NaN input: a NaN amax) are not
  // folded into the histories, nor are the scales updated.
  st.check_finite(true);
  xs[3] = NAN;
  CHECK_THROWS_WITH_AS(step(st, ctg::feed<X>(xs, 1), ctg::feed<R>(rs, 1)), doctest::Contains("the loss is not finite"),
                       ctg::error);
  CHECK(st.param<XS>()[0] == 448.0f);
  CHECK(hist(st.param<XH>()) == V{0, 1, 1});
  CHECK(st.param<GS>()[0] == 229376.0f);
  CHECK(hist(st.param<GH>()) == V{0, 0.25f, 0.25f});
  // The next step is step 8 of the run above: amax 2 -> [2, 1, 1], max 2, scale 224; roll -> [1, 1, 2] -> [0, 1, 2].
  run(2.0f);
  CHECK(st.param<XS>()[0] == 224.0f);
  CHECK(hist(st.param<XH>()) == V{0, 1, 2});
}

namespace {
// Two fp8 blocks with dropout, optionally each a checkpoint region.
template <bool Ckpt>
constexpr auto fp8_model() {
  using D = pr::delayed<4>;
  using W1 = ctg::param<"w1", ctg::f32, 8, 8>;
  using W2 = ctg::param<"w2", ctg::f32, 8, 4>;
  X x;
  auto block1 = [&] {
    auto q = ctg::fp8_matmul<ctg::f32, ctg::scaling::delayed<"b1.g", D>>(
        ctg::quantize<ctg::e4m3, ctg::scaling::delayed<"b1.x", D>>(x),
        ctg::quantize<ctg::e4m3, ctg::scaling::delayed<"b1.w", D>>(W1{}));
    return ctg::dropout<"b1.drop">(ctg::silu(q), ctg::lit<0.2>) + x;
  }();
  auto h = [&] {
    if constexpr (Ckpt) return ctg::checkpoint(block1);
    else return block1;
  }();
  auto block2 = ctg::fp8_matmul<ctg::f32, Cur>(ctg::quantize<ctg::e4m3, Cur>(ctg::tanh(h)),
                                               ctg::quantize<ctg::e4m3, Cur>(W2{}));
  auto out = [&] {
    if constexpr (Ckpt) return ctg::checkpoint(block2);
    else return block2;
  }();
  return ctg::sum(out * R{});
}
}  // namespace

TEST_CASE("fp8 blocks with dropout: checkpointed or not, bitwise the same over 6 steps (B4)") {
  auto a_step = ctg::value_and_grad(fp8_model<false>());
  auto b_step = ctg::value_and_grad(fp8_model<true>());
  static_assert(ctg::program<decltype(b_step)>::table.region_count == 2);
  using W1 = ctg::param<"w1", ctg::f32, 8, 8>;
  using W2 = ctg::param<"w2", ctg::f32, 8, 4>;
  using H = ctg::scaling::delayed<"b1.x", pr::delayed<4>>::history_leaf;
  using S = ctg::scaling::delayed<"b1.g", pr::delayed<4>>::scale_leaf;
  ctg::cpu::device dev;
  auto a = ctg::make_store(dev, a_step);
  auto b = ctg::make_store(dev, b_step);
  ctg::nn::init_params(a, 11, 0.4);
  ctg::nn::init_params(b, 11, 0.4);
  gc::rng r(6);
  for (int s = 0; s < 6; ++s) {
    const auto xs = gc::data_of<float>(r.vec(40, -2, 2)), rs = gc::data_of<float>(r.vec(20, -1, 1));
    const float la = a_step(a, ctg::feed<X>(xs, 5), ctg::feed<R>(rs, 5));
    const float lb = b_step(b, ctg::feed<X>(xs, 5), ctg::feed<R>(rs, 5));
    CHECK(std::memcmp(&la, &lb, sizeof la) == 0);
    auto same = [](auto p, auto q) { return std::memcmp(p.data(), q.data(), p.size_bytes()) == 0; };
    CHECK(same(a.grad<W1>(), b.grad<W1>()));
    CHECK(same(a.grad<W2>(), b.grad<W2>()));
    CHECK(same(a.param<H>(), b.param<H>()));
    CHECK(same(a.param<S>(), b.param<S>()));
    // A plain SGD step on both, so the parameters move as in training.
    for (auto [p, g] : {std::pair(a.param<W1>(), a.grad<W1>()), std::pair(b.param<W1>(), b.grad<W1>())})
      for (std::size_t i = 0; i < p.size(); ++i) p[i] -= 0.05f * g[i];
  }
  CHECK(b.kept_bytes() < a.kept_bytes());
  CHECK(a.param<S>()[0] != 1.0f);  // the gradient's scale was updated
}
