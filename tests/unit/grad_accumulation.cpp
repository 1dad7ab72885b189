// Gradient accumulation (issue 15, item 9): store.accumulate(k) makes sets of
// k micro-batches whose mean gradient one optimizer step consumes. The mean
// over k micro-batches of b rows equals the gradient of one batch of k*b rows:
// bitwise where every sum is exact, otherwise within the bound of the two
// summation orders (derived below); FP8 amaxes are combined by max over the
// set, so the scaling states equal the big batch's bitwise.
#include "error_message.hpp"
#include "temp_files.hpp"
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include <ctg/ctg.hpp>
#include <ctg/optim/optim.hpp>

namespace {
using ctg::dyn;
using X = ctg::input<"x", ctg::f32, dyn, 4>;
using T = ctg::input<"t", ctg::f32, dyn, 4>;
using W = ctg::param<"w", ctg::f32, 4, 4>;
using B = ctg::param<"b", ctg::bf16, 4>;
using V = std::vector<float>;
constexpr int K = 4;  // inputs per row (x's width), outputs per row

auto loss() { return ctg::mean(ctg::square(ctg::matmul(X{}, W{}) + ctg::cast<ctg::f32>(B{}) - T{})); }
using step_t = decltype(ctg::value_and_grad(loss()));
using store_t = decltype(ctg::make_store(std::declval<ctg::cpu::device>(), step_t{}));

struct model {
  step_t step;
  ctg::cpu::device dev;
  store_t store = ctg::make_store(dev, step);
  model(const V& w, const V& b) {
    std::copy(w.begin(), w.end(), store.param<W>().begin());
    for (std::size_t j = 0; j < b.size(); ++j) store.param<B>()[j] = ctg::bf16(b[j]);
  }
  // Rows [from, from + n) of x and t.
  float run(const V& x, const V& t, std::size_t from, std::size_t n) {
    return step(store, ctg::feed<X>(std::span<const float>(x).subspan(from * K, n * K), n),
                ctg::feed<T>(std::span<const float>(t).subspan(from * K, n * K), n));
  }
};

template <class S>
V as_floats(S s) {
  V out;
  for (auto e : s) out.push_back(static_cast<float>(ctg::load_as(e)));
  return out;
}

// Multiples of 1/8 in [-1, 1]: every product and sum of the model is exact in f32.
V dyadic(std::size_t n, unsigned seed) {
  std::mt19937 g(seed);
  V v(n);
  for (auto& e : v) e = static_cast<float>(static_cast<int>(g() % 17) - 8) / 8.0f;
  return v;
}
V uniform(std::size_t n, unsigned seed) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  V v(n);
  for (auto& e : v) e = u(g);
  return v;
}

// How far the accumulated mean may be from the big batch's gradient. Both sum
// the same per-row terms (each row's forward and its d = dloss/dy are computed
// alike; d = 2 (x w + b - t) / (rows * K) either way, the 1/k seed being a
// power of two), in two orders: one sum over all n rows, or k sums over b rows
// added up. Each order is within gamma(n) * sum|terms| of the exact sum, so
// they differ by at most 2 gamma(n) sum|terms| (f32, u = 2^-24). The bf16
// gradient of b is rounded to bf16 once in the big batch, and k times plus
// once per add (k - 1) when accumulated: (k + 1) more bf16 roundings, each
// within u_bf16 = 2^-8 of sum|terms|. |d| is bounded from a double reference
// plus the rounding of its own f32 computation ((K + 2) u of its terms).
struct bounds {
  V w, b;
};
bounds difference_bound(const V& x, const V& t, const V& w, const V& b, std::size_t rows, int k) {
  const double u = std::ldexp(1.0, -24), ub = std::ldexp(1.0, -8);
  const double n = static_cast<double>(rows), gamma = n * u / (1 - n * u);
  const double gamma_b = (k + 1) * ub / (1 - (k + 1) * ub);
  bounds out{V(K * K, 0.0f), V(K, 0.0f)};
  std::vector<double> sw(K * K, 0.0), sb(K, 0.0);
  for (std::size_t r = 0; r < rows; ++r)
    for (int j = 0; j < K; ++j) {
      double y = b[j] - t[r * K + j], mag = std::abs(b[j]) + std::abs(t[r * K + j]);
      for (int i = 0; i < K; ++i) {
        y += double(x[r * K + i]) * w[i * K + j];
        mag += std::abs(double(x[r * K + i]) * w[i * K + j]);
      }
      const double d = 2.0 * (std::abs(y) + (K + 2) * u * mag) / (n * K);
      sb[j] += d;
      for (int i = 0; i < K; ++i) sw[i * K + j] += std::abs(x[r * K + i]) * d;
    }
  for (int e = 0; e < K * K; ++e) out.w[e] = static_cast<float>(2 * gamma * sw[e]);
  for (int j = 0; j < K; ++j) out.b[j] = static_cast<float>((gamma_b + 2 * gamma) * sb[j]);
  return out;
}
}  // namespace

TEST_CASE("the mean over 4 micro-batches of 2 rows is one batch of 8: bitwise when the sums are exact") {
  const V w = dyadic(K * K, 1), b = dyadic(K, 2), x = dyadic(8 * K, 3), t = dyadic(8 * K, 4);
  model big(w, b), micro(w, b);
  big.run(x, t, 0, 8);
  micro.store.accumulate(4);
  for (std::size_t m = 0; m < 4; ++m) {
    CHECK(micro.store.accumulated() == m);
    micro.run(x, t, 2 * m, 2);
  }
  CHECK(micro.store.accumulated() == 4);
  const V gw = as_floats(micro.store.grad<W>()), big_gw = as_floats(big.store.grad<W>());
  CHECK(std::memcmp(gw.data(), big_gw.data(), gw.size() * sizeof(float)) == 0);
  // b's gradient is bf16: rounded once per micro-batch and per add.
  const bounds bound = difference_bound(x, t, w, b, 8, 4);
  const V gb = as_floats(micro.store.grad<B>()), big_gb = as_floats(big.store.grad<B>());
  for (int j = 0; j < K; ++j) CHECK(std::abs(gb[j] - big_gb[j]) <= bound.b[j]);
}

TEST_CASE("accumulated and big-batch gradients differ by no more than their two summation orders allow") {
  const V w = uniform(K * K, 5), b = uniform(K, 6), x = uniform(32 * K, 7), t = uniform(32 * K, 8);
  model big(w, b), micro(w, b);
  big.run(x, t, 0, 32);
  micro.store.accumulate(8);
  for (std::size_t m = 0; m < 8; ++m) micro.run(x, t, 4 * m, 4);
  const bounds bound = difference_bound(x, t, w, b, 32, 8);
  const V gw = as_floats(micro.store.grad<W>()), big_gw = as_floats(big.store.grad<W>());
  const V gb = as_floats(micro.store.grad<B>()), big_gb = as_floats(big.store.grad<B>());
  for (int e = 0; e < K * K; ++e) CHECK(std::abs(gw[e] - big_gw[e]) <= bound.w[e]);
  for (int j = 0; j < K; ++j) CHECK(std::abs(gb[j] - big_gb[j]) <= bound.b[j]);
}

TEST_CASE("the optimizer takes a complete set once; a set under way is neither changed nor saved") {
  using test_util::message_of;
  const V w = dyadic(K * K, 1), b = dyadic(K, 2), x = dyadic(8 * K, 3), t = dyadic(8 * K, 4);
  model big(w, b), micro(w, b);
  ctg::optim::adamw big_opt(big.store, {.lr = 1e-2f}), opt(micro.store, {.lr = 1e-2f});
  micro.store.accumulate(4);
  for (std::size_t m = 0; m < 3; ++m) micro.run(x, t, 2 * m, 2);
  const V w_before = as_floats(micro.store.param<W>());
  CHECK(message_of([&] { opt.step(micro.store); }).find("3 of 4 micro-batches") != std::string::npos);
  CHECK(message_of([&] { micro.store.accumulate(2); }).find("3 of 4 micro-batches") != std::string::npos);
  test_util::temp_dir dir("ctg_accumulation_test_");
  CHECK(message_of([&] { ctg::io::save(dir / "mid.ctg", micro.store, opt); }).find("middle of a set") !=
        std::string::npos);
  // Nor loaded into: the set's gradients were taken at the values a load replaces.
  ctg::io::save(dir / "big.ctg", big.store, big_opt);
  CHECK(message_of([&] { ctg::io::load(dir / "big.ctg", micro.store, opt); }).find("middle of a set") !=
        std::string::npos);
  CHECK(message_of([&] { ctg::io::load(dir / "big.ctg", micro.store); }).find("middle of a set") != std::string::npos);
  CHECK(as_floats(micro.store.param<W>()) == w_before);
  CHECK(opt.steps() == 0);
  CHECK(micro.store.accumulated() == 3);
  // The fourth completes the set; one AdamW step on it moves w as the big
  // batch's does, bitwise (w's gradient is exact; no clipping couples it to b's).
  micro.run(x, t, 6, 2);
  big.run(x, t, 0, 8);
  opt.step(micro.store);
  big_opt.step(big.store);
  CHECK(as_floats(micro.store.param<W>()) == as_floats(big.store.param<W>()));
  CHECK(micro.store.accumulated() == 0);
  // Each set is applied once.
  CHECK(message_of([&] { opt.step(micro.store); }).find("no gradients since the last update") != std::string::npos);
  CHECK(opt.steps() == 1);
}

namespace {
// The same product in FP8 with delayed scaling: y = x w, loss = mean(y * r).
namespace pr = ctg::precision;
using R = ctg::input<"r", ctg::f32, dyn, 4>;
using D = pr::delayed<4>;
using SX = ctg::scaling::delayed<"x.fp8", D>;
using SW = ctg::scaling::delayed<"w.fp8", D>;
using SG = ctg::scaling::delayed<"g.fp8", D>;
auto fp8_loss() {
  auto y = ctg::fp8_matmul<ctg::f32, SG>(ctg::quantize<ctg::e4m3, SX>(X{}), ctg::quantize<ctg::e4m3, SW>(W{}));
  return ctg::mean(y * R{});
}
}  // namespace

TEST_CASE("FP8: amaxes combine by max over a set (not the last micro-batch's); states equal the big batch's") {
  auto step = ctg::value_and_grad(fp8_loss());
  ctg::cpu::device dev;
  auto big = ctg::make_store(dev, step);
  auto micro = ctg::make_store(dev, step);
  const V w = dyadic(K * K, 9);
  std::copy(w.begin(), w.end(), big.param<W>().begin());
  std::copy(w.begin(), w.end(), micro.param<W>().begin());
  micro.accumulate(2);
  for (int set = 0; set < 2; ++set) {
    INFO("set " << set);
    V x = dyadic(4 * K, 10 + set), r = dyadic(4 * K, 20 + set);
    x[1] = 7.0f;  // the first micro-batch (rows 0, 1) holds the set's largest |x|,
    x[9] = 3.5f;  // the second (rows 2, 3) a smaller one
    auto feed = [&](auto& st, std::size_t from, std::size_t n) {
      step(st, ctg::feed<X>(std::span<const float>(x).subspan(from * K, n * K), n),
           ctg::feed<R>(std::span<const float>(r).subspan(from * K, n * K), n));
    };
    const double sx = big.param<SX::scale_leaf>()[0], sg = big.param<SG::scale_leaf>()[0];  // this set's scales
    feed(big, 0, 4);
    feed(micro, 0, 2);
    feed(micro, 2, 2);
    auto same = [](auto a, auto b) { return std::memcmp(a.data(), b.data(), a.size_bytes()) == 0; };
    CHECK(micro.param<SX::scale_leaf>()[0] == 64.0f);  // 448 / 7
    CHECK(same(micro.param<SX::scale_leaf>(), big.param<SX::scale_leaf>()));
    CHECK(same(micro.param<SX::history_leaf>(), big.param<SX::history_leaf>()));
    CHECK(same(micro.param<SG::scale_leaf>(), big.param<SG::scale_leaf>()));
    CHECK(same(micro.param<SG::history_leaf>(), big.param<SG::history_leaf>()));
    CHECK(same(micro.param<SW::history_leaf>(), big.param<SW::history_leaf>()));
    // The gradients: the same fp8 products per row (same scales), summed in two
    // orders: within 2 gamma(4) of the sum of |dequantized x| |dequantized dy|,
    // each at most its value times (1 + 2^-4) (e4m3) or (1 + 2^-3) (e5m2) plus
    // half the smallest subnormal over the scale.
    const double u = std::ldexp(1.0, -24), gamma = 4 * u / (1 - 4 * u);
    const auto gm = micro.grad<W>(), gb = big.grad<W>();
    for (int i = 0; i < K; ++i)
      for (int j = 0; j < K; ++j) {
        double s = 0;
        for (int row = 0; row < 4; ++row) {
          const double xv = std::abs(x[row * K + i]) * (1 + 0x1p-4) + 0x1p-10 / sx;
          const double dy = std::abs(r[row * K + j]) / 16.0 * (1 + 0x1p-3) + 0x1p-17 / sg;
          s += xv * dy;
        }
        CHECK(std::abs(gm[i * K + j] - gb[i * K + j]) <= 2 * gamma * s);
      }
  }
}
