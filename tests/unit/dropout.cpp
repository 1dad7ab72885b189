// dropout<"name">(x, p): a counter-based mask keyed by (seed, step, name,
// layer, element index); the same mask in every recompute.
#include <cmath>
#include <cstring>

#include "../common/nested_stacks.hpp"
#include "grad_check.hpp"

namespace {
using ctg::dyn;
using X = ctg::input<"x", ctg::f32, dyn, 64>;
using W = ctg::param<"w", ctg::f32, 64, 64>;

std::vector<float> ones(std::size_t n) { return std::vector<float>(n, 1.0f); }

template <class Step, class Store>
std::vector<float> values(Step step, Store& st, const std::vector<float>& x, int rows) {
  step(st, ctg::feed<X>(x, rows));
  auto v = st.value();
  return {v.begin(), v.end()};
}
}  // namespace

TEST_CASE("dropout keeps each element with probability 1-p, scaled by 1/(1-p), keyed as documented") {
  X x;
  auto step = ctg::forward(ctg::dropout<"drop">(x, ctg::lit<0.25>));
  ctg::cpu::device dev;
  auto st = ctg::make_store(dev, step);
  st.seed(1234);
  const int rows = 512;
  std::vector<float> xs(rows * 64);
  for (std::size_t i = 0; i < xs.size(); ++i) xs[i] = 0.5f + static_cast<float>(i % 7);
  const auto v = values(step, st, xs, rows);
  std::size_t dropped = 0;
  const std::uint32_t stream = ctg::name_hash("drop", 4);
  for (std::size_t i = 0; i < v.size(); ++i) {
    const bool keep = ctg::philox_uniform(1234, 0, stream, i) >= 0.25f;  // step 0: the first step
    REQUIRE(v[i] == (keep ? xs[i] * static_cast<float>(1.0 / 0.75) : 0.0f));
    dropped += !keep;
  }
  const double n = static_cast<double>(v.size()), sigma = std::sqrt(n * 0.25 * 0.75);
  CHECK(std::abs(static_cast<double>(dropped) - 0.25 * n) < 5 * sigma);
  // The next step draws a new mask; the same seed and step give the same mask again.
  const auto v2 = values(step, st, xs, rows);
  CHECK(v2 != v);
  auto again = ctg::make_store(dev, step);
  again.seed(1234);
  CHECK(values(step, again, xs, rows) == v);
  auto other_seed = ctg::make_store(dev, step);
  other_seed.seed(1235);
  CHECK(values(step, other_seed, xs, rows) != v);
}

TEST_CASE("the step count that keys masks is 64-bit: no mask repeats after 2^32 runs") {
  // (It was 32-bit: run 2^32 drew run 0's mask again, and steps_run() read
  // 0; under data_parallel the count is global runs, W x k a step.)
  auto step = ctg::forward(ctg::dropout<"drop">(X{}, ctg::lit<0.5>));
  ctg::cpu::device dev;
  auto st = ctg::make_store(dev, step);
  st.seed(1234);
  const std::vector<float> xs = ones(8 * 64);
  const auto first = values(step, st, xs, 8);  // (step 0)
  st.set_steps_run(0xFFFFFFFFull);
  const auto last_below = values(step, st, xs, 8);
  const auto wrapped = values(step, st, xs, 8);  // (step 2^32)
  CHECK(st.steps_run() == (std::uint64_t{1} << 32) + 1);
  CHECK(wrapped != first);
  CHECK(wrapped != last_below);
  st.set_steps_run(0);
  CHECK(values(step, st, xs, 8) == first);  // (below 2^32, the masks are as before)
}

TEST_CASE("in f32 a kept element is scaled as PyTorch scales it: by 1 / (1-p rounded to f32)") {
  // (1/(1-p) rounded once, 1.1764706 at p = 0.15, was an ulp above
  // PyTorch's 1.1764705: 54,659 of 55,835 kept elements differed.)
  auto step = ctg::forward(ctg::dropout<"drop">(X{}, ctg::lit<0.15>));
  ctg::cpu::device dev;
  auto st = ctg::make_store(dev, step);
  const auto v = values(step, st, ones(8 * 64), 8);
  const float torch_scale = 1.0f / static_cast<float>(1.0 - 0.15);  // (torch: the mask divided by 1-p, in f32)
  std::size_t kept = 0;
  for (float e : v) {
    CHECK((e == 0.0f || e == torch_scale));
    kept += e != 0.0f;
  }
  CHECK(kept > 0);
  CHECK(torch_scale != static_cast<float>(1.0 / 0.85));  // (the case the old rounding missed)
}

// In f64 the kept elements are scaled by 1/(1-p) in f64 (the README's
// promise), not by its f32 rounding (1.1111111640930176 for p = 0.1).
TEST_CASE("dropout in f64 scales by 1/(1-p) in f64") {
  using Xd = ctg::input<"x", ctg::f64, dyn, 8>;
  auto step = ctg::forward(ctg::dropout<"d">(Xd{}, ctg::lit<0.1>));
  ctg::cpu::device dev;
  auto st = ctg::make_store(dev, step);
  const std::vector<double> ones(64, 1.0);
  step(st, ctg::feed<Xd>(ones, 8));
  std::size_t kept = 0;
  for (double v : st.value()) {
    CHECK((v == 0.0 || v == 1.0 / 0.9));
    kept += v != 0.0;
  }
  CHECK(kept > 0);
}

TEST_CASE("two dropouts with different names draw different masks; p = 0 is the identity") {
  X x;
  auto step = ctg::forward(ctg::dropout<"a">(x, ctg::lit<0.5>) - ctg::dropout<"b">(x, ctg::lit<0.5>));
  ctg::cpu::device dev;
  auto st = ctg::make_store(dev, step);
  const auto v = values(step, st, ones(64 * 8), 8);
  std::size_t differ = 0;
  for (float e : v) differ += e != 0.0f;
  CHECK(differ > 64 * 8 / 4);
  static_assert(std::is_same_v<decltype(ctg::dropout<"z">(x, ctg::lit<0.0>)), X>);
}

TEST_CASE("dropout in bf16 rounds once; its gradient is the same mask (finite differences, f64)") {
  using Xb = ctg::input<"x", ctg::bf16, dyn, 8>;
  auto step = ctg::forward(ctg::dropout<"d">(Xb{}, ctg::lit<0.1>));
  static_assert(std::is_same_v<ctg::dtype_t<decltype(ctg::dropout<"d">(Xb{}, ctg::lit<0.1>))>, ctg::bf16>);
  ctg::cpu::device dev;
  auto st = ctg::make_store(dev, step);
  std::vector<ctg::bf16> xs(32, ctg::bf16(1.5f));
  step(st, ctg::feed<Xb>(xs, 4));
  for (std::size_t i = 0; i < 32; ++i) {
    const float m = ctg::dropout_mask_node<"d", 0.1, Xb>::value({0, 0, 0}, i);
    CHECK(static_cast<float>(st.value()[i]) == static_cast<float>(ctg::bf16(1.5f * m)));
  }

  using P = ctg::param<"p", ctg::f64, 3, 5>;
  auto loss = ctg::sum(ctg::square(ctg::dropout<"d">(P{} * P{}, ctg::lit<0.3>)));
  auto g = ctg::value_and_grad(loss);
  auto gs = ctg::make_store(dev, g);
  gs.seed(7);
  gc::rng r(3);
  gc::set<P>(gs, r.vec(15, -1, 1));
  // Every evaluation must see one mask: hold the step count at 5.
  auto run = [&] {
    gs.set_steps_run(5);
    g(gs);
    return gs.value()[0];  // the f64 loss (the step returns it as float)
  };
  run();
  const auto grad = gc::to_vec(gs.grad<P>());
  auto w = gs.param<P>();
  std::size_t zero = 0;
  for (std::size_t i = 0; i < w.size(); ++i) {
    const double orig = w[i], h = 1e-6;
    w[i] = orig + h;
    const double lp = run();
    w[i] = orig - h;
    const double lm = run();
    w[i] = orig;
    CHECK(grad[i] == doctest::Approx((lp - lm) / (2 * h)).epsilon(1e-6).scale(1e-8));
    zero += grad[i] == 0.0;
  }
  CHECK(zero > 0);          // some elements were dropped (p = 0.3, 15 elements)
  CHECK(zero < w.size());   // and some kept
}

namespace {
using SX = ctg::input<"x", ctg::f32, ctg::dyn, 64>;
template <ctg::fixed_string Prefix>
struct drop_block {
  template <ctg::expr E>
  constexpr auto operator()(E x) const {
    return ctg::dropout<"drop">(x * ctg::param<Prefix + ".w", ctg::f32, 64>{}, ctg::lit<0.5>);
  }
};
}  // namespace

TEST_CASE("nn::stack: each layer draws its own dropout mask") {
  // (Keyed by layer 0 each, they shared one: an element survived both with
  // probability 1/2, not 1/4; nothing else tested it.) A stack of 2 blocks
  // x * w -> dropout(p = 0.5), w = x = 1: the loss is 4 times the elements
  // both layers keep; Philox's stream is fixed by the seed, so the count is
  // too (6 sigma of the binomial count around n / 4).
  using R = ctg::input<"r", ctg::f32, dyn, 64>;
  auto step = ctg::value_and_grad(ctg::sum(ctg::nn::stack<2, drop_block>(SX{}) * R{}));
  ctg::cpu::device dev;
  auto st = ctg::make_store(dev, step);
  st.seed(77);
  using W = ctg::param<"layers.{i}.w", ctg::f32, 2, 64>;
  for (auto& v : st.param<W>()) v = 1.0f;
  const int rows = 256;
  std::vector<float> x(rows * 64, 1.0f), r(rows * 64, 0.0f);
  // r = 1: the loss is sum(y) = 4 * (number of elements kept by both layers).
  std::fill(r.begin(), r.end(), 1.0f);
  const float loss = step(st, ctg::feed<SX>(x, rows), ctg::feed<R>(r, rows));
  const double n = rows * 64.0;
  const double kept_both = static_cast<double>(loss) / 4.0;
  const double sigma = std::sqrt(n * 0.25 * 0.75);
  MESSAGE("fraction kept by both layers: " << kept_both / n << " (independent masks: 0.25, one mask: 0.5)");
  CHECK(std::abs(kept_both - 0.25 * n) < 6 * sigma);
}

namespace {
using nested_stacks::plain_drop;
using nested_stacks::two_inner;
// The fraction of ones that four dropouts of p = 0.5 in a row keep (each
// kept one is 16), for a step over x = 1.
template <class Step>
double kept_by_all(Step step) {
  ctg::cpu::device dev{1};
  auto st = ctg::make_store(dev, step);
  st.seed(77);
  const int rows = 1024;
  step(st, ctg::feed<SX>(std::vector<float>(rows * 64, 1.0f), rows));
  std::size_t kept = 0;
  for (float v : st.value()) kept += v == 16.0f;
  return static_cast<double>(kept) / (rows * 64.0);
}
}  // namespace

TEST_CASE("a stack inside a stacked block: every (outer, inner) layer draws its own mask") {
  // (Inner layer i was keyed i under every outer layer: the two outer
  // layers drew the same two masks, and 1/4 of the elements survived all
  // four dropouts, not 1/16.) 6 sigma of the binomial fraction.
  const double n = 1024 * 64.0, sigma = std::sqrt(n / 16 * 15 / 16) / n;
  const double flat = kept_by_all(ctg::forward(ctg::nn::stack<4, plain_drop>(SX{})));
  const double nested = kept_by_all(ctg::forward(ctg::nn::stack<2, two_inner>(SX{})));
  const double nested_kept = kept_by_all(ctg::forward(ctg::nn::stack<2, two_inner, ctg::checkpointing::none>(SX{})));
  MESSAGE("kept by all four: flat " << flat << ", nested " << nested << ", nested without recompute " << nested_kept
                                    << " (independent masks: 0.0625)");
  CHECK(std::abs(flat - 0.0625) < 6 * sigma);
  CHECK(std::abs(nested - 0.0625) < 6 * sigma);
  CHECK(std::abs(nested_kept - 0.0625) < 6 * sigma);
}

namespace {
template <ctg::fixed_string Prefix>
struct drop_then_inner {
  template <ctg::expr E>
  constexpr auto operator()(E x) const {
    return ctg::nn::stack<2, plain_drop>(ctg::dropout<"outer">(x, ctg::lit<0.5>));
  }
};
}  // namespace

TEST_CASE("two names whose streams meet at some layers of a stack are found at compile time") {
  // A layer's stream is hash(name) + 0x9E3779B9 x layer, so "layers.{i}.wqqnm"
  // at layer 1 draws exactly the mask of "layers.{i}.mhrdz" at layer 0 (their
  // hashes differ by 0x9E3779B9; found by search): a step with both in a
  // stack of 2 does not compile (compile_fail.dropout_stream_clash_layers).
  const std::uint32_t a = ctg::name_hash("layers.{i}.wqqnm", 16), b = ctg::name_hash("layers.{i}.mhrdz", 16);
  REQUIRE(a != b);
  for (std::uint64_t i = 0; i < 4096; ++i)
    REQUIRE(ctg::dropout_value<0.5>({7, 3, 1}, a, i) == ctg::dropout_value<0.5>({7, 3, 0}, b, i));
  using ctg::detail::streams_meet;
  CHECK(streams_meet(a, 2, b, 1));   // a's layer 1, b's layer 0
  CHECK(streams_meet(b, 1, a, 2));   // either order
  CHECK(!streams_meet(a, 1, b, 4));  // a drawn at layer 0 only: b's layers are other streams
  CHECK(streams_meet(a, 6, a + 5 * 0x9E3779B9u, 1));   // a's layer 5 is the other's layer 0
  CHECK(!streams_meet(a, 5, a + 5 * 0x9E3779B9u, 1));
  CHECK(streams_meet(a + 5 * 0x9E3779B9u, 1, a, 6));
  CHECK(streams_meet(a, 3, a, 1));  // equal hashes meet at layer 0
  // The layer keys each dropout draws with: 1 outside stacks, N in a stack of
  // N, N x M in a stack of M in it (dropouts_of's order).
  auto nested = ctg::forward(ctg::dropout<"top">(ctg::nn::stack<3, drop_then_inner>(SX{}), ctg::lit<0.5>));
  using nodes = decltype(nested)::nodes;
  using dropouts = ctg::detail::dropouts_of<nodes>::type;
  static_assert(dropouts::size == 3);
  const std::uint64_t counts[] = {ctg::tl::at_t<0, dropouts>::layers, ctg::tl::at_t<1, dropouts>::layers,
                                  ctg::tl::at_t<2, dropouts>::layers};
  CHECK(std::vector<std::uint64_t>(counts, counts + 3) == std::vector<std::uint64_t>{3, 6, 1});
}
