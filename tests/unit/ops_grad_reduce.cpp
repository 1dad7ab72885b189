// Reductions: sum / mean / max over an axis (kept as 1) or the whole tensor, amax,
// mean over a ctg::dyn dim fed at run time, and max with ties (gradient split
// evenly, as PyTorch's amax). Forward values against references computed here;
// gradients against central finite differences (f64) or exact expected values
// (ties). softmax / log_softmax: ops_grad_softmax.cpp.
#include "reduce_cases.hpp"

#include <bit>
#include <cstdint>
#include <cmath>
#include <cstring>
#include <limits>
#include <span>
#include <string>
#include <vector>

using namespace reduce_cases;

namespace {

// The kept-axis shapes, checked statically.
static_assert(std::is_same_v<ctg::shape_t<decltype(red<rk::sum, 0, m34>::make(ctg::param<"w", ctg::f64, 3, 4>{}))>,
                             ctg::shape<1, 4>>);
static_assert(std::is_same_v<ctg::shape_t<decltype(red<rk::mean, -1, m34>::make(ctg::param<"w", ctg::f64, 3, 4>{}))>,
                             ctg::shape<3, 1>>);
static_assert(std::is_same_v<
              ctg::shape_t<decltype(red<rk::max, 1, t234>::make(ctg::param<"w", ctg::f64, 2, 3, 4>{}))>,
              ctg::shape<2, 1, 4>>);
static_assert(std::is_same_v<ctg::shape_t<decltype(red<rk::sum, whole, t234>::make(ctg::param<"w", ctg::f64, 2, 3, 4>{}))>,
                             ctg::shape<>>);

}  // namespace

TEST_CASE_TEMPLATE("sum / mean / max over axis 0, 1, -1 and whole: forward value and gradient (f64)", C,
                   red<rk::sum, 0, m34>, red<rk::sum, 1, m34>, red<rk::sum, -1, m34>, red<rk::sum, whole, m34>,
                   red<rk::sum, 1, t234>, red<rk::sum, 0, t234>, red<rk::mean, 0, m34>, red<rk::mean, 1, m34>,
                   red<rk::mean, -1, m34>, red<rk::mean, whole, m34>, red<rk::mean, -2, t234>,
                   red<rk::max, 0, m34>, red<rk::max, 1, m34>, red<rk::max, -1, m34>, red<rk::max, whole, m34>,
                   red<rk::max, 1, t234>) {
  reduce_case<C, ctg::f64>(gc::f64_tol, 1e-14);
}

TEST_CASE("mean over a ctg::dyn batch dim: the count comes from the fed size") {
  using X = ctg::input<"x", ctg::f64, ctg::dyn, 4>;
  using W = ctg::param<"w", ctg::f64, 4>;
  using R = ctg::frozen<"r", ctg::f64, 1, 4>;
  static_assert(std::is_same_v<ctg::shape_t<decltype(ctg::mean<0>(X{} * W{}))>, ctg::shape<1, 4>>);
  gc::rng rng(121);
  ctg::cpu::device dev;
  auto step = ctg::value_and_grad(ctg::sum(ctg::mean<0>(ctg::square(X{} * W{})) * R{}) + ctg::mean(X{} * W{}),
                                  ctg::wrt<W>);
  auto st = ctg::make_store(dev, step);
  const auto w = gc::set<W>(st, rng.vec(4, -1.0, 1.0));
  const auto r = gc::set<R>(st, rng.vec(4, -1.0, 1.0));
  for (std::size_t rows : {3u, 7u, 1u}) {
    CAPTURE(rows);
    const auto x = rng.vec(rows * 4, -1.0, 1.0);
    const auto xd = gc::data_of<double>(x);
    const auto f = ctg::feed<X>(std::span<const double>(xd), rows);
    const auto g = gc::check_grad<W>(step, st, gc::f64_tol, f);
    // loss = sum_j r_j mean_i (x_ij w_j)^2 + mean_ij x_ij w_j
    double want_loss = 0;
    std::vector<double> want(4, 0.0);
    for (std::size_t i = 0; i < rows; ++i)
      for (std::size_t j = 0; j < 4; ++j) {
        const double xi = x[i * 4 + j];
        want_loss += r[j] * xi * xi * w[j] * w[j] / double(rows) + xi * w[j] / double(rows * 4);
        want[j] += r[j] * 2 * xi * xi * w[j] / double(rows) + xi / double(rows * 4);
      }
    CHECK(gc::close(gc::last_loss(st), want_loss, 1e-14, 1e-15));
    gc::check_close(g, want, 1e-13, 1e-15, "analytic grad");
  }
}

TEST_CASE("max with ties: the gradient is split evenly among the tied elements (PyTorch amax)") {
  ctg::cpu::device dev;
  SUBCASE("max<1> per row") {
    using W = ctg::param<"w", ctg::f64, 2, 4>;
    using R = ctg::frozen<"r", ctg::f64, 2, 1>;
    auto step = ctg::value_and_grad(ctg::sum(ctg::max<1>(W{}) * R{}), ctg::wrt<W>);
    auto st = ctg::make_store(dev, step);
    gc::set<W>(st, {1.0, 3.0, 3.0, 2.0, /**/ 5.0, 0.5, 5.0, 5.0});
    gc::set<R>(st, {0.8, -0.6});
    step(st);
    CHECK(gc::last_loss(st) == doctest::Approx(3.0 * 0.8 + 5.0 * -0.6).epsilon(1e-15));
    gc::check_close(gc::to_vec(st.grad<W>()), {0.0, 0.4, 0.4, 0.0, /**/ -0.2, 0.0, -0.2, -0.2}, 1e-15, 0,
                    "tied grad");
  }
  SUBCASE("max<0> per column") {
    using W = ctg::param<"w", ctg::f64, 3, 2>;
    auto step = ctg::value_and_grad(ctg::sum(ctg::max<0>(W{})), ctg::wrt<W>);
    auto st = ctg::make_store(dev, step);
    gc::set<W>(st, {2.0, -1.0, /**/ 2.0, -1.0, /**/ 1.0, -1.0});
    step(st);
    CHECK(gc::last_loss(st) == 1.0);
    gc::check_close(gc::to_vec(st.grad<W>()), {0.5, 1.0 / 3, 0.5, 1.0 / 3, 0.0, 1.0 / 3}, 1e-15, 0, "tied grad");
  }
  SUBCASE("whole-tensor max") {
    using W = ctg::param<"w", ctg::f64, 2, 3>;
    auto step = ctg::value_and_grad(ctg::max(W{}) * ctg::lit<3.0>, ctg::wrt<W>);
    auto st = ctg::make_store(dev, step);
    gc::set<W>(st, {0.25, 4.0, -7.0, 4.0, 1.0, 3.5});
    step(st);
    CHECK(gc::last_loss(st) == 12.0);
    gc::check_close(gc::to_vec(st.grad<W>()), {0.0, 1.5, 0.0, 1.5, 0.0, 0.0}, 1e-15, 0, "tied grad");
  }
  SUBCASE("amax: |+3| and |-3| tie; the gradient carries the sign") {
    using W = ctg::param<"w", ctg::f64, 2, 3>;
    auto step = ctg::value_and_grad(ctg::amax(W{}), ctg::wrt<W>);
    auto st = ctg::make_store(dev, step);
    gc::set<W>(st, {3.0, -1.0, 0.5, -3.0, 2.0, -2.5});
    step(st);
    CHECK(gc::last_loss(st) == 3.0);
    gc::check_close(gc::to_vec(st.grad<W>()), {0.5, 0.0, 0.0, -0.5, 0.0, 0.0}, 1e-15, 0, "tied grad");
  }
}

TEST_CASE("amax without ties: forward value and gradient vs finite differences") {
  using W = ctg::param<"w", ctg::f64, 3, 4>;
  static_assert(std::is_same_v<ctg::shape_t<decltype(ctg::amax(W{}))>, ctg::shape<>>);
  gc::rng rng(131);
  ctg::cpu::device dev;
  const auto w0 = rng.signed_vec(12, 0.2, 2.0);
  auto fwd = ctg::forward(ctg::amax(W{}));
  auto fs = ctg::make_store(dev, fwd);
  const auto w = gc::set<W>(fs, w0);
  double want = 0;
  for (double v : w) want = std::max(want, std::fabs(v));
  gc::check_close(gc::run_forward(fwd, fs), {want}, 0, 0, "amax");

  // sum(amax(W) * W) so that every element has a non-zero gradient.
  auto step = ctg::value_and_grad(ctg::sum(ctg::amax(W{}) * W{}), ctg::wrt<W>);
  auto st = ctg::make_store(dev, step);
  gc::set<W>(st, w0);
  gc::check_grad<W>(step, st, gc::f64_tol);
}

TEST_CASE("a row max is the in-order max bit for bit: signed zeros, NaN payloads, the tail past 16 lanes") {
  // The CPU takes a row's max in SIMD lanes; where the order matters (a zero
  // result: the first of -0 and +0 wins; NaNs: the last one wins) it must
  // give what combining the row in order gives.
  using W = ctg::param<"w", ctg::f32, 5, 40>;
  auto fwd = ctg::forward(ctg::max<1>(W{}));
  ctg::cpu::device dev;
  auto st = ctg::make_store(dev, fwd);
  auto w = st.param<W>();
  const float nan_a = std::bit_cast<float>(0x7FC00001u), nan_b = std::bit_cast<float>(0xFFC00123u);
  for (std::size_t i = 0; i < w.size(); ++i) w[i] = -1.0f - static_cast<float>(i % 7);
  w[0 * 40 + 37] = 2.5f;                           // row 0: the max in the tail
  w[1 * 40 + 3] = -0.0f, w[1 * 40 + 17] = 0.0f;   // row 1: -0 first in the row, +0 in an earlier lane (1)
  w[2 * 40 + 4] = 0.0f, w[2 * 40 + 18] = -0.0f;   // row 2: +0 first in the row, -0 in an earlier lane (2)
  w[3 * 40 + 5] = nan_a, w[3 * 40 + 20] = nan_b;  // row 3: two NaNs; the last one wins
  for (std::size_t j = 0; j < 40; ++j) w[4 * 40 + j] = -std::numeric_limits<float>::infinity();  // row 4: all -inf
  fwd(st);
  const auto got = st.value();
  REQUIRE(got.size() == 5);
  for (std::size_t r = 0; r < 5; ++r) {
    double acc = -std::numeric_limits<double>::infinity();
    for (std::size_t j = 0; j < 40; ++j) {
      const double b = w[r * 40 + j];
      acc = b > acc || b != b ? b : acc;
    }
    INFO("row ", r);
    CHECK(std::bit_cast<std::uint32_t>(got[r]) == std::bit_cast<std::uint32_t>(static_cast<float>(acc)));
  }
  CHECK(std::signbit(got[1]));
  CHECK_FALSE(std::signbit(got[2]));
  CHECK(std::bit_cast<std::uint32_t>(got[3]) == std::bit_cast<std::uint32_t>(nan_b));
}

// A sum or mean over one run of axes other than the last, of a stored tensor,
// runs as [O, R, I] blocks on the CPU; the general row loop (taken when the
// reduced expression is more than a bare read: x * 1 here) must give the same
// bits, on one thread and on three, in f32 and bf16.
template <class T, std::int64_t... D>
void blocks_match_row_loop() {
  using W = ctg::param<"w", T, D...>;
  ctg::cpu::device one{1}, three{3};
  auto same = [&](auto reduced, auto general, const char* what) {
    for (ctg::cpu::device dev : {one, three}) {
      auto fast = ctg::forward(reduced);
      auto slow = ctg::forward(general);
      auto fs = ctg::make_store(dev, fast);
      auto ss = ctg::make_store(dev, slow);
      auto wf = fs.template param<W>();
      auto ws = ss.template param<W>();
      for (std::size_t i = 0; i < wf.size(); ++i) {  // +-2^60 and +-1: an f64 sum's order shows in its result
        const std::uint32_t h = static_cast<std::uint32_t>(i) * 2654435761u >> 13;
        wf[i] = ws[i] = ctg::from_float<T>((h & 2 ? -1.0f : 1.0f) * (h & 1 ? 0x1p60f : 1.0f));
      }
      fast(fs);
      slow(ss);
      const auto a = fs.value();
      const auto b = ss.value();
      REQUIRE(a.size() == b.size());
      std::size_t bad = 0;
      for (std::size_t i = 0; i < a.size(); ++i)
        bad += std::memcmp(&a[i], &b[i], sizeof(a[i])) != 0;
      INFO(std::string(what), ", threads ", dev.thread_count());
      CHECK(bad == 0);
    }
  };
  constexpr std::int64_t d[] = {D...};
  same(ctg::sum_to<ctg::shape<1, d[1], d[2], d[3]>>(W{}), ctg::sum_to<ctg::shape<1, d[1], d[2], d[3]>>(W{} * ctg::lit<1.0>),
       "leading axis");
  same(ctg::sum_to<ctg::shape<d[0], 1, d[2], d[3]>>(W{}), ctg::sum_to<ctg::shape<d[0], 1, d[2], d[3]>>(W{} * ctg::lit<1.0>),
       "a middle axis");
  same(ctg::sum_to<ctg::shape<d[0], 1, 1, d[3]>>(W{}), ctg::sum_to<ctg::shape<d[0], 1, 1, d[3]>>(W{} * ctg::lit<1.0>),
       "two middle axes");
  same(ctg::sum_to<ctg::shape<d[3]>>(W{}), ctg::sum_to<ctg::shape<d[3]>>(W{} * ctg::lit<1.0>), "all but the last, rank dropped");
  same(ctg::mean<1>(W{}), ctg::mean<1>(W{} * ctg::lit<1.0>), "mean");
  same(ctg::sum_to<ctg::shape<1, d[1], 1, d[3]>>(W{}), ctg::sum_to<ctg::shape<1, d[1], 1, d[3]>>(W{} * ctg::lit<1.0>),
       "two runs (the row loop both times)");
}

TEST_CASE("a reduction over leading or middle axes of a stored tensor: the same bits as the row loop") {
  blocks_match_row_loop<ctg::f32, 3, 5, 4, 7>();
  blocks_match_row_loop<ctg::bf16, 3, 5, 4, 7>();
  blocks_match_row_loop<ctg::f32, 8, 8, 16, 64>();  // (big enough for threads)
  blocks_match_row_loop<ctg::bf16, 8, 8, 16, 64>();
}

// A weight gradient summed over a run-time batch (a per-sequence product's
// [B, 768, 768] in a transformer) with B = 1: nothing of more than one
// element is reduced, and the blocks take it as one run of columns.
TEST_CASE("a sum over a run-time batch of one or of three: the same bits as the row loop") {
  using X = ctg::input<"x", ctg::bf16, ctg::dyn, 8, 16, 64>;
  using S = ctg::shape<8, 16, 64>;
  for (ctg::cpu::device dev : {ctg::cpu::device{1}, ctg::cpu::device{3}})
    for (std::size_t batch : {1u, 3u}) {
      std::vector<ctg::bf16> x(batch * 8 * 16 * 64);
      for (std::size_t i = 0; i < x.size(); ++i) {
        const std::uint32_t h = static_cast<std::uint32_t>(i) * 2654435761u >> 13;
        x[i] = ctg::from_float<ctg::bf16>((h & 2 ? -1.0f : 1.0f) * (h & 1 ? 0x1p60f : 1.0f + (h % 7) / 8.0f));
      }
      auto fast = ctg::forward(ctg::cast<ctg::f32>(ctg::sum_to<S>(X{})));
      auto slow = ctg::forward(ctg::cast<ctg::f32>(ctg::sum_to<S>(X{} * ctg::lit<1.0>)));
      auto fs = ctg::make_store(dev, fast);
      auto ss = ctg::make_store(dev, slow);
      fast(fs, ctg::feed<X>(std::span<const ctg::bf16>(x), batch));
      slow(ss, ctg::feed<X>(std::span<const ctg::bf16>(x), batch));
      const auto a = fs.value();
      const auto b = ss.value();
      REQUIRE(a.size() == 8 * 16 * 64);
      REQUIRE(b.size() == a.size());
      std::size_t bad = 0, wrong = 0;
      for (std::size_t i = 0; i < a.size(); ++i) {
        bad += std::bit_cast<std::uint32_t>(a[i]) != std::bit_cast<std::uint32_t>(b[i]);
        double want = 0;  // (exact in f64: at most three terms of +-2^60 or a few eighths)
        for (std::size_t r = 0; r < batch; ++r) want += ctg::to_float(x[r * a.size() + i]);
        wrong += a[i] != ctg::to_float(ctg::from_float<ctg::bf16>(static_cast<float>(want)));
      }
      INFO("batch ", batch, ", threads ", dev.thread_count());
      CHECK(bad == 0);
      CHECK(wrong == 0);
    }
}

// A row's max in any lane of the CPU's 16-lane blocks (the fold of lanes
// 8..15 was untested: softmax does not see a lost max), and a NaN there.
TEST_CASE("a row max found in any lane of a block of 16 (rows of 40), and a whole-tensor max") {
  using W = ctg::param<"w", ctg::f32, 6, 40>;
  ctg::cpu::device dev;
  auto rows = ctg::forward(ctg::max<1>(W{}));
  auto whole = ctg::forward(ctg::max(W{}));
  auto sr = ctg::make_store(dev, rows);
  auto sw = ctg::make_store(dev, whole);
  const int where[6] = {0, 7, 8, 13, 15, 29};  // lanes 0, 7, 8, 13, 15, and 13 of the second block
  auto fill = [&](auto p) {
    for (std::size_t i = 0; i < p.size(); ++i) p[i] = -1.0f - static_cast<float>(i % 5);
    for (int r = 0; r < 6; ++r) p[r * 40 + where[r]] = 3.0f + static_cast<float>(r);
  };
  fill(sr.param<W>());
  fill(sw.param<W>());
  rows(sr);
  whole(sw);
  const auto got = sr.value();
  for (int r = 0; r < 6; ++r) {
    CAPTURE(r);
    CHECK(got[r] == 3.0f + static_cast<float>(r));
  }
  CHECK(sw.value()[0] == 8.0f);
}

TEST_CASE("max's gradient goes to the element at lane 11 (rows of 32)") {
  using W = ctg::param<"w", ctg::f64, 2, 32>;
  auto step = ctg::value_and_grad(ctg::sum(ctg::max<1>(W{})), ctg::wrt<W>);
  ctg::cpu::device dev;
  auto s = ctg::make_store(dev, step);
  auto p = s.param<W>();
  for (std::size_t i = 0; i < p.size(); ++i) p[i] = -static_cast<double>(i % 9) - 1.0;
  p[11] = 5.0;
  p[32 + 27] = 6.0;
  CHECK(step(s) == 11.0);
  const auto g = s.grad<W>();
  for (std::size_t i = 0; i < g.size(); ++i) CHECK(g[i] == ((i == 11 || i == 59) ? 1.0 : 0.0));
}

TEST_CASE("a row max with a NaN in a high lane (8..15) is NaN") {
  using W = ctg::param<"w", ctg::f32, 3, 40>;
  auto fwd = ctg::forward(ctg::max<1>(W{}));
  ctg::cpu::device dev;
  auto st = ctg::make_store(dev, fwd);
  auto w = st.param<W>();
  for (std::size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(i % 13);
  w[0 * 40 + 10] = std::numeric_limits<float>::quiet_NaN();  // lane 10
  w[1 * 40 + 31] = std::numeric_limits<float>::quiet_NaN();  // lane 15 of the second block
  fwd(st);
  const auto got = st.value();
  CHECK(std::isnan(got[0]));
  CHECK(std::isnan(got[1]));
  CHECK(got[2] == 12.0f);
}
