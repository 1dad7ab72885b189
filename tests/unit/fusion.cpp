// Fusion: which nodes share a loop, and that fusing never changes a bit.
// unit.fusion_fma builds this file for a target with FMA (-mavx2 -mfma,
// CTG_TEST_TARGET_FMA): fused and unfused steps stay bit for bit there only
// while g++ contracts no a*b+c across nodes (core/config.hpp, CTG_HOT_BEGIN).
#include <doctest/doctest.h>

#include <ctg/ctg.hpp>
#include <ctg/lower/describe.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <span>
#include <vector>

namespace {
#ifdef CTG_TEST_TARGET_FMA
// (A CPU without FMA cannot run this build: it reports itself skipped.)
const bool cpu_has_fma = [] {
  if (__builtin_cpu_supports("fma") && __builtin_cpu_supports("avx2")) return true;
  std::puts("this CPU has no FMA or AVX2: unit.fusion_fma skipped");
  std::exit(77);
}();
#endif

using X = ctg::input<"x", ctg::f32, ctg::dyn, 64>;
using B = ctg::input<"b", ctg::bf16, ctg::dyn, 64>;
using W = ctg::param<"w", ctg::f32, 64, 32>;
using V = ctg::param<"v", ctg::f32, 64>;

std::vector<float> random_floats(std::size_t n, unsigned seed, float lo = -2.0f, float hi = 2.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (auto& e : v) e = u(rng);
  return v;
}

// The fused step and the unfused reference give identical bits.
template <class Step, class... Feeds>
void check_fused_equals_unfused(Step step, const Feeds&... feeds) {
  ctg::cpu::device dev;
  auto fused = ctg::make_store(dev, step);
  auto plain_step = ctg::unfused(step);
  auto plain = ctg::make_store(dev, plain_step);
  step(fused, feeds...);
  plain_step(plain, feeds...);
  auto a = fused.value();
  auto b = plain.value();
  REQUIRE(a.size() == b.size());
  std::size_t diff = 0;
  for (std::size_t i = 0; i < a.size(); ++i) diff += std::memcmp(&a[i], &b[i], sizeof(a[i])) != 0;
  CHECK(diff == 0);
}
// A gradient of the fused step against the unfused one's: the same bits,
// and more than half of it nonzero (a gradient that is all zeros would match).
template <class G>
void check_same_nonzero_grad(std::span<const G> fused, std::span<const G> plain) {
  REQUIRE(fused.size() == plain.size());
  std::size_t diff = 0, nonzero = 0;
  for (std::size_t i = 0; i < fused.size(); ++i) {
    diff += std::memcmp(&fused[i], &plain[i], sizeof(G)) != 0;
    nonzero += static_cast<float>(fused[i]) != 0.0f;
  }
  CHECK(diff == 0);
  CHECK(nonzero > fused.size() / 2);
}
}  // namespace

TEST_CASE("an element function's a*b+c is rounded twice, never one FMA (silu's gradient)") {
  // silu'(x) = s (1 + x (1 - s)), s = sigmoid(x). On a target with FMA,
  // clang's default contraction made 1 + x*(1-s) one fma (g++'s default made
  // such sums across nodes one): the CPU's bits then were not the GPU's
  // (--fmad=false) nor PyTorch's. The reference rounds the product first.
  using P = ctg::param<"p", ctg::f32, 64, 64>;
  auto step = ctg::value_and_grad(ctg::sum(ctg::silu(P{})));
  ctg::cpu::device dev;
  auto store = ctg::make_store(dev, step);
  const auto xs = random_floats(64 * 64, 11, -6.0f, 6.0f);
  std::copy(xs.begin(), xs.end(), store.param<P>().begin());
  step(store);
  const auto grad = store.grad<P>();
  // s as ctg computes it (sigmoid's exp, inlined into this file's code, would
  // be compiled with this file's contraction under g++).
  auto sigmoid = ctg::forward(ctg::sigmoid(P{}));
  auto s_store = ctg::make_store(dev, sigmoid);
  std::copy(xs.begin(), xs.end(), s_store.param<P>().begin());
  sigmoid(s_store);
  const auto sv = s_store.value();
  std::size_t diff = 0;
  for (std::size_t i = 0; i < xs.size(); ++i) {
    const float x = xs[i], s = sv[i];
    volatile float product = x * (1.0f - s);  // (stored: rounded, not fused into the add)
    const float want = s * (1.0f + product);
    diff += std::memcmp(&want, &grad[i], sizeof(float)) != 0;
  }
  CHECK(diff == 0);
}

TEST_CASE("a 6-op elementwise chain is one group") {
  X x;
  auto chain = ctg::exp(ctg::tanh(x * ctg::lit<0.5> + ctg::lit<1.0>)) * ctg::sigmoid(x);  // 6 ops
  using step = decltype(ctg::forward(chain));
  static_assert(ctg::group_count_v<step> == 1);
  static_assert(ctg::count_groups<step>(ctg::group_kind::elementwise) == 1);
  // Unfused, each of the 6 ops is its own loop.
  static_assert(ctg::group_count_v<decltype(ctg::unfused(ctg::forward(chain)))> == 6);
  const auto xs = random_floats(5 * 64, 1);
  check_fused_equals_unfused(ctg::forward(chain), ctg::feed<X>(xs, 5));
}

TEST_CASE("row-wise sum(exp(x - max(x))) is one group, as are softmax and log_softmax") {
  X x;
  using rowsum = decltype(ctg::forward(ctg::sum<-1>(ctg::exp(x - ctg::max<-1>(x)))));
  static_assert(ctg::group_count_v<rowsum> == 1);
  static_assert(ctg::count_groups<rowsum>(ctg::group_kind::reduction) == 1);
  static_assert(ctg::group_count_v<decltype(ctg::forward(ctg::softmax(x)))> == 1);
  static_assert(ctg::group_count_v<decltype(ctg::forward(ctg::log_softmax(x)))> == 1);
  // softmax's exp(x - max) is summed and read by its body: the sum keeps the
  // values (the CPU's row cache); log_softmax's body reads no summed value.
  auto cached = []<class Step>(Step) {
    constexpr std::size_t root = Step::nodes::size - 1;
    return !std::is_void_v<typename ctg::detail::cpu_fused_group<ctg::kernel::fused_plan_t<Step, root>>::cached>;
  };
  CHECK(cached(ctg::forward(ctg::softmax(x))));
  CHECK(!cached(ctg::forward(ctg::log_softmax(x))));
  CHECK(!cached(rowsum{}));
  const auto xs = random_floats(7 * 64, 2, -20.0f, 20.0f);
  check_fused_equals_unfused(rowsum{}, ctg::feed<X>(xs, 7));
  check_fused_equals_unfused(ctg::forward(ctg::softmax(x)), ctg::feed<X>(xs, 7));
  check_fused_equals_unfused(ctg::forward(ctg::log_softmax(x)), ctg::feed<X>(xs, 7));
}

TEST_CASE("a reduction over another axis than the last gets its own loop") {
  X x;
  // The column max cannot be computed inside a row loop.
  using s = decltype(ctg::forward(x - ctg::max<0>(x)));
  static_assert(ctg::group_count_v<s> == 2);
  const auto xs = random_floats(9 * 64, 3);
  check_fused_equals_unfused(s{}, ctg::feed<X>(xs, 9));
}

TEST_CASE("matmul is its own group; elementwise epilogues fuse after it") {
  X x;
  auto h = ctg::silu(ctg::matmul(x, W{})) * ctg::lit<2.0>;
  using s = decltype(ctg::forward(h));
  static_assert(ctg::group_count_v<s> == 2);
  static_assert(ctg::count_groups<s>(ctg::group_kind::matmul) == 1);
  const auto xs = random_floats(3 * 64, 4);
  ctg::cpu::device dev;
  s step;
  auto fused = ctg::make_store(dev, step);
  auto plain_step = ctg::unfused(step);
  auto plain = ctg::make_store(dev, plain_step);
  const auto ws = random_floats(64 * 32, 5);
  std::copy(ws.begin(), ws.end(), fused.param<W>().begin());
  std::copy(ws.begin(), ws.end(), plain.param<W>().begin());
  step(fused, ctg::feed<X>(xs, 3));
  plain_step(plain, ctg::feed<X>(xs, 3));
  for (std::size_t i = 0; i < fused.value().size(); ++i) CHECK(fused.value()[i] == plain.value()[i]);
}

TEST_CASE("a forward + backward graph fuses and matches the unfused one bit for bit") {
  X x;
  auto loss = ctg::mean(ctg::square(ctg::log_softmax(ctg::matmul(x, W{})))) + ctg::sum(V{} * V{});
  auto step = ctg::value_and_grad(loss, ctg::wrt<W, V>);
  using plain_t = decltype(ctg::unfused(step));
  static_assert(ctg::group_count_v<decltype(step)> < ctg::group_count_v<plain_t>);
  const auto xs = random_floats(6 * 64, 6);
  const auto ws = random_floats(64 * 32, 7, -0.3f, 0.3f);
  const auto vs = random_floats(64, 8);
  ctg::cpu::device dev;
  auto fused = ctg::make_store(dev, step);
  plain_t plain_step;
  auto plain = ctg::make_store(dev, plain_step);
  std::copy(ws.begin(), ws.end(), fused.param<W>().begin());
  std::copy(ws.begin(), ws.end(), plain.param<W>().begin());
  std::copy(vs.begin(), vs.end(), fused.param<V>().begin());
  std::copy(vs.begin(), vs.end(), plain.param<V>().begin());
  const float a = step(fused, ctg::feed<X>(xs, 6));
  const float b = plain_step(plain, ctg::feed<X>(xs, 6));
  CHECK(a == b);
  for (std::size_t i = 0; i < ws.size(); ++i) CHECK(fused.grad<W>()[i] == plain.grad<W>()[i]);
  for (std::size_t i = 0; i < vs.size(); ++i) CHECK(fused.grad<V>()[i] == plain.grad<V>()[i]);
}

TEST_CASE("identical subexpressions are one node") {
  X x;
  auto a = ctg::exp(x) + ctg::exp(x);  // exp(x) is one node, used twice
  using nodes = typename decltype(ctg::forward(a))::nodes;
  static_assert(nodes::size == 3);  // x, exp(x), the sum
}

TEST_CASE("bf16 chains round once per node output, fused or not") {
  B b;
  auto e = ctg::cast<ctg::f32>(ctg::silu(b) * b + ctg::lit<0.5>);
  std::vector<ctg::bf16> bs(4 * 64);
  const auto fs = random_floats(bs.size(), 9);
  for (std::size_t i = 0; i < bs.size(); ++i) bs[i] = ctg::bf16(fs[i]);
  check_fused_equals_unfused(ctg::forward(e), ctg::feed<B>(bs, 4));
  // And against a scalar reference that rounds to bf16 after each op.
  ctg::cpu::device dev;
  auto step = ctg::forward(e);
  auto st = ctg::make_store(dev, step);
  step(st, ctg::feed<B>(bs, 4));
  auto r = [](float v) { return ctg::to_float(ctg::bf16(v)); };
  for (std::size_t i = 0; i < bs.size(); ++i) {
    const float x = ctg::to_float(bs[i]);
    const float s = r(x / (1.0f + std::exp(-x)));
    const float want = r(r(s * x) + 0.5f);
    CHECK(st.value()[i] == want);
  }
}

// A row sum combines in the documented order (kernel::row_reduction): element
// j into lane j % 16, then the lanes pairwise. Values where the order shows in
// f64: lane 0 sees 2^60, 1, -2^60 (the 1 is lost: 0), lane 1 a lone 1, so the
// sum is 1; added in row order the second 1 meets 2^60 and is lost too (0).
// Rows of 35 (two blocks of 16 and a tail of 3), on the CPU's row reduction
// and on the portable definition (the GPU's host model uses it).
TEST_CASE("a row sum adds in 16 lanes, then pairwise") {
  using R35 = ctg::input<"r", ctg::f32, ctg::dyn, 35>;
  std::vector<float> row(35, 0.0f);
  row[0] = 0x1p60f;
  row[1] = 1.0f;
  row[16] = 1.0f;
  row[32] = -0x1p60f;
  std::vector<float> rows = row;
  rows.insert(rows.end(), row.rbegin(), row.rend());  // and reversed (below)
  auto total = ctg::forward(ctg::sum<-1>(R35{}));
  auto store = ctg::make_store(ctg::cpu::device{1}, total);
  total(store, ctg::feed<R35>(rows, 2));
  // Reversed: j' = 34 - j: 2^60 at 34 (lane 2), 1 at 33 (lane 1), 1 at 18 (lane 2), -2^60 at 2 (lane 2):
  // lane 2 = ((0 + -2^60) + 1) + 2^60 = 0, lane 1 = 1: the sum is 1 again.
  CHECK(store.value()[0] == 1.0f);
  CHECK(store.value()[1] == 1.0f);
  // The portable definition the GPU's host model uses, on the same row.
  struct ctx {
    const float* x;
  };
  struct at {
    static float value(const ctx& c, ctg::dim_t j) { return c.x[j]; }
  };
  using red = ctg::kernel::row_reduction<0, ctg::op::sum_r, float, at>;
  CHECK(red::combine_row(ctx{row.data()}, 35) == 1.0);
  CHECK(red::combine_row(ctx{rows.data() + 35}, 35) == 1.0);
}

// A fused loop writes a row in blocks of 16, the last block ending at the
// row's end over part of the one before (a row under 16: one by one):
// every element is written, none outside the range.
TEST_CASE("overlapping blocks of 16 cover a range exactly") {
  for (ctg::dim_t j0 : {0, 16, 48})
    for (ctg::dim_t n = 0; n <= 50; ++n) {
      std::vector<int> times(static_cast<std::size_t>(j0 + n + 32), 0);
      ctg::cpu::each_in_overlapping_blocks_of_16(j0, j0 + n, [&](ctg::dim_t j) { ++times[static_cast<std::size_t>(j)]; });
      for (ctg::dim_t j = 0; j < static_cast<ctg::dim_t>(times.size()); ++j) {
        const bool inside = j >= j0 && j < j0 + n;
        CAPTURE(j0);
        CAPTURE(n);
        CAPTURE(j);
        CHECK(inside == (times[static_cast<std::size_t>(j)] > 0));
        // A block is 16 calls; only the last overlaps the one before.
        CHECK(times[static_cast<std::size_t>(j)] <= 2);
      }
    }
}

// Rows of every length from 1 to 50 through a row group (a row max, then
// each element less it, written with its cast): the exact values, each run
// on other data, so a stale or skipped element fails.
TEST_CASE("a row group writes every element of rows of any length") {
  using R = ctg::input<"r", ctg::f32, ctg::dyn, ctg::dyn>;
  auto centred = R{} - ctg::max<-1>(R{});
  auto step = ctg::forward(ctg::cast<ctg::f32>(ctg::cast<ctg::bf16>(centred)) + centred);
  auto store = ctg::make_store(ctg::cpu::device{1}, step);
  for (ctg::dim_t L = 1; L <= 50; ++L) {
    const ctg::dim_t rows = 3;
    std::vector<float> x(static_cast<std::size_t>(rows * L));
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i * 7 + static_cast<std::size_t>(L)) % 23);
    step(store, ctg::feed<R>(x, rows, L));
    const auto y = store.value();
    REQUIRE(y.size() == x.size());
    std::size_t wrong = 0;
    for (ctg::dim_t r = 0; r < rows; ++r) {
      float m = x[static_cast<std::size_t>(r * L)];
      for (ctg::dim_t j = 0; j < L; ++j) m = std::max(m, x[static_cast<std::size_t>(r * L + j)]);
      for (ctg::dim_t j = 0; j < L; ++j) {
        const std::size_t i = static_cast<std::size_t>(r * L + j);
        wrong += y[i] != 2.0f * (x[i] - m);  // (small integers: exact in bf16 and f32)
      }
    }
    CAPTURE(L);
    CHECK(wrong == 0);
  }
}

// A batched product whose B broadcasts over a batch dim runs as groups of
// batches sharing B's packing (cpu::run_matmul): every batch still has the
// bits of its own cpu::gemm, in f32 and bf16, on 1, 2 and 3 threads: 7 groups
// (each on a thread of its own) and 2 groups of 5 (threads within a group).
TEST_CASE("batches that read one B: each the bits of its own gemm") {
  auto check = []<class T, ctg::dim_t heads, ctg::dim_t M, ctg::dim_t K, ctg::dim_t N>() {
    using A = ctg::input<"a", T, ctg::dyn, 1, M, K>;  // broadcast over the heads
    using Wh = ctg::frozen<"w", T, heads, K, N>;     // broadcast over the batch
    const ctg::dim_t batch = 5;
    std::vector<T> a(static_cast<std::size_t>(batch * M * K)), w(static_cast<std::size_t>(heads * K * N));
    const auto av = random_floats(a.size(), 7), wv = random_floats(w.size(), 8);
    for (std::size_t i = 0; i < a.size(); ++i) a[i] = ctg::from_float<T>(av[i]);
    for (std::size_t i = 0; i < w.size(); ++i) w[i] = ctg::from_float<T>(wv[i]);
    std::vector<T> want(static_cast<std::size_t>(batch * heads * M * N));
    ctg::cpu::gemm_workspace gws;
    for (ctg::dim_t b = 0; b < batch; ++b)
      for (ctg::dim_t h = 0; h < heads; ++h)
        ctg::cpu::gemm(M, N, K, a.data() + b * M * K, w.data() + h * K * N, want.data() + (b * heads + h) * M * N,
                       gws);
    auto step = ctg::forward(ctg::matmul(A{}, Wh{}));
    for (unsigned threads : {1u, 2u, 3u}) {
      auto store = ctg::make_store(ctg::cpu::device{threads}, step);
      std::copy(w.begin(), w.end(), store.template param<Wh>().begin());
      step(store, ctg::feed<A>(a, batch));
      const auto got = store.value();
      REQUIRE(got.size() == want.size());
      std::size_t diff = 0;
      for (std::size_t i = 0; i < got.size(); ++i) diff += std::memcmp(&got[i], &want[i], sizeof(T)) != 0;
      INFO("threads ", threads, " heads ", heads);
      CHECK(diff == 0);
    }
  };
  check.template operator()<float, 7, 20, 64, 33>();
  check.template operator()<ctg::bf16, 7, 20, 64, 33>();
  check.template operator()<float, 2, 64, 64, 96>();
  check.template operator()<ctg::bf16, 2, 64, 63, 96>();
}

// A cheap node (casts, adds, multiplies) that loops of several groups read has
// no buffer: each of those groups computes it again (schedule.hpp, duplicated
// nodes). RMSNorm in
// bf16, forward and backward: the f32 casts of x, of the scale and of the
// upstream gradient and the normalized x are read by forward and backward
// groups alike, and none is written out; the loss and both gradients keep the
// bits of the unfused step, where every node has a buffer.
TEST_CASE("cheap nodes read by several groups are computed in each, bit for bit") {
  using Xb = ctg::param<"x", ctg::bf16, 16, 64>;
  using Sb = ctg::param<"scale", ctg::bf16, 64>;
  using Gb = ctg::input<"g", ctg::bf16, 16, 64>;
  auto xf = ctg::cast<ctg::f32>(Xb{});
  auto xhat = xf * ctg::rsqrt(ctg::mean<-1>(ctg::square(xf)) + ctg::lit<1e-5>);
  auto y = ctg::cast<ctg::bf16>(xhat * ctg::cast<ctg::f32>(Sb{}));
  auto step = ctg::value_and_grad(ctg::sum(ctg::cast<ctg::f32>(y) * ctg::cast<ctg::f32>(Gb{})));
  using S = decltype(step);
  constexpr const auto& d = ctg::description<S>;
  for (std::size_t i : {ctg::tl::index_of<decltype(xf), S::nodes>::value,
                        ctg::tl::index_of<decltype(xhat), S::nodes>::value}) {
    CAPTURE(i);
    CHECK(d.node[i].duplicated);
    CHECK(!d.node[i].buffer);
    CHECK(d.node[i].group == ctg::no_index);
  }
  // Each written out in f32, they took 11 groups; now 6: the row mean of
  // squares, its rsqrt (a division), the loss, x's gradient (a group by rows
  // with its row sum), the scale's gradient and its cast to bf16.
  static_assert(ctg::group_count_v<S> == 6);

  std::vector<ctg::bf16> xs(16 * 64), ss(64), gs(16 * 64);
  const auto xv = random_floats(xs.size(), 11), sv = random_floats(ss.size(), 12), gv = random_floats(gs.size(), 13);
  for (std::size_t i = 0; i < xs.size(); ++i) xs[i] = ctg::bf16(xv[i]), gs[i] = ctg::bf16(gv[i]);
  for (std::size_t i = 0; i < ss.size(); ++i) ss[i] = ctg::bf16(sv[i]);
  ctg::cpu::device dev;
  auto fused = ctg::make_store(dev, step);
  auto plain_step = ctg::unfused(step);
  auto plain = ctg::make_store(dev, plain_step);
  std::copy(xs.begin(), xs.end(), fused.param<Xb>().begin());
  std::copy(xs.begin(), xs.end(), plain.param<Xb>().begin());
  std::copy(ss.begin(), ss.end(), fused.param<Sb>().begin());
  std::copy(ss.begin(), ss.end(), plain.param<Sb>().begin());
  const float a = step(fused, ctg::feed<Gb>(gs));
  const float b = plain_step(plain, ctg::feed<Gb>(gs));
  CHECK(std::memcmp(&a, &b, sizeof a) == 0);
  auto same_bits = [](auto u, auto v) {
    REQUIRE(u.size() == v.size());
    std::size_t diff = 0;
    for (std::size_t i = 0; i < u.size(); ++i) diff += std::memcmp(&u[i], &v[i], sizeof(u[i])) != 0;
    return diff == 0;
  };
  CHECK(same_bits(fused.grad<Xb>(), plain.grad<Xb>()));
  CHECK(same_bits(fused.grad<Sb>(), plain.grad<Sb>()));
}

// Which nodes read by several groups are computed in each, and which keep a
// buffer: a division or a transcendental function (exp) and an expression
// reading more than max_duplicated_loads buffers keep one; an expression past
// max_shared_inline_ops nodes keeps one below its top.
TEST_CASE("costly, large or wide nodes read by several groups keep a buffer") {
  using P = ctg::param<"p", ctg::f32, 8, 32>;
  using Q = ctg::param<"q", ctg::f32, 8, 32>;
  using R = ctg::param<"r", ctg::f32, 8, 32>;
  using U = ctg::param<"u", ctg::f32, 8, 32>;
  P p;
  // Each read by a column sum and a row sum (a reduction over other axes
  // than the last is a group of its own).
  auto both = [](auto e) { return ctg::sum(ctg::sum<0>(e)) + ctg::sum(ctg::sum<-1>(e)); };
  auto duplicated = []<class E>(E, auto step) {
    constexpr const auto& d = ctg::description<decltype(step)>;
    constexpr std::size_t i = ctg::tl::index_of<E, typename decltype(step)::nodes>::value;
    static_assert(d.node[i].duplicated != d.node[i].buffer);
    return d.node[i].duplicated;
  };
  auto cheap = p * ctg::lit<2.0> + p;
  CHECK(duplicated(cheap, ctg::forward(both(cheap))));
  auto costly = ctg::exp(p);
  CHECK(!duplicated(costly, ctg::forward(both(costly))));
  // A chain too large to compute again whole: a node of it gets a buffer,
  // and each group computes again only the part above it.
  auto large = p + p + p + p + p + p + p + p + p;  // 8 adds, 9 loads
  static_assert(8 + 9 > ctg::detail::max_shared_inline_ops);
  const auto& dl = ctg::description<decltype(ctg::forward(both(large)))>;
  std::size_t buffered_adds = 0;
  for (std::size_t i = 0; i < dl.size(); ++i)
    buffered_adds += dl.node[i].op == "add" && dl.node[i].dims.rank == 2 && dl.node[i].buffer;
  CHECK(buffered_adds >= 1);
  auto wide = p + Q{} + R{} + U{};  // 4 buffers
  static_assert(4 > ctg::detail::max_duplicated_loads);
  CHECK(!duplicated(wide, ctg::forward(both(wide))));
  // The same bits as the unfused step, whichever way.
  const auto ps = random_floats(8 * 32, 14, -0.5f, 0.5f);
  auto same_as_unfused = [&](auto step) {
    ctg::cpu::device dev;
    auto fused = ctg::make_store(dev, step);
    auto plain_step = ctg::unfused(step);
    auto plain = ctg::make_store(dev, plain_step);
    std::copy(ps.begin(), ps.end(), fused.template param<P>().begin());
    std::copy(ps.begin(), ps.end(), plain.template param<P>().begin());
    step(fused);
    plain_step(plain);
    return std::memcmp(fused.value().data(), plain.value().data(), sizeof(float)) == 0;
  };
  CHECK(same_as_unfused(ctg::forward(both(cheap))));
  CHECK(same_as_unfused(ctg::forward(both(large))));
}

// cross_entropy over bf16 logits (as autocast runs a model's head) keeps
// nothing of the logits' size but the logits: forward keeps a value a row
// (the max, log(sum(exp))), and backward is one group that reads the logits
// and writes their gradient in bf16 (log-softmax's rule takes the softmax
// from its own value: ops.hpp). The loss and the gradient keep the bits of
// the unfused step.
TEST_CASE("cross_entropy keeps a value a row, and its backward is one pass over the logits") {
  constexpr ctg::dim_t vocab = 96;
  using Wb = ctg::param<"w", ctg::bf16, 64, vocab>;
  using T = ctg::input<"t", ctg::i32, ctg::dyn>;
  auto logits = ctg::matmul(ctg::cast<ctg::bf16>(X{}), Wb{});
  auto step = ctg::value_and_grad(ctg::nn::cross_entropy(logits, T{}));
  using S = decltype(step);
  constexpr const auto& d = ctg::description<S>;
  // Buffers of [tokens, vocab]: the logits forward, their gradient backward.
  std::size_t forward_buffers = 0, backward_buffers = 0, backward_groups = 0;
  for (std::size_t i = 0; i < d.size(); ++i) {
    const auto& n = d.node[i];
    if (n.dims.rank != 2 || n.dims.d[0] != ctg::dyn || n.dims.d[1] != vocab) continue;
    CAPTURE(n.op);
    if (n.buffer) ++(n.backward ? backward_buffers : forward_buffers);
  }
  for (const auto& g : d.group)
    backward_groups += g.backward && d.node[g.root].dims.rank == 2 && d.node[g.root].dims.d[1] == vocab &&
                       d.node[g.root].dims.d[0] == ctg::dyn;
  CHECK(forward_buffers == 1);
  CHECK(backward_buffers == 1);
  CHECK(backward_groups == 1);

  const auto xs = random_floats(13 * 64, 21), ws = random_floats(64 * vocab, 22, -0.5f, 0.5f);
  std::vector<ctg::i32> ts(13);
  for (std::size_t i = 0; i < ts.size(); ++i) ts[i] = static_cast<ctg::i32>((i * 37) % vocab);
  ts[4] = -100;  // ignored
  ctg::cpu::device dev;
  auto fused = ctg::make_store(dev, step);
  auto plain_step = ctg::unfused(step);
  auto plain = ctg::make_store(dev, plain_step);
  for (std::size_t i = 0; i < ws.size(); ++i)
    fused.param<Wb>()[i] = plain.param<Wb>()[i] = ctg::bf16(ws[i]);
  const float a = step(fused, ctg::feed<X>(xs, 13), ctg::feed<T>(ts, 13));
  const float b = plain_step(plain, ctg::feed<X>(xs, 13), ctg::feed<T>(ts, 13));
  CHECK(std::isfinite(a));
  CHECK(std::memcmp(&a, &b, sizeof a) == 0);
  check_same_nonzero_grad(fused.grad<Wb>(), plain.grad<Wb>());
}

// Attention's softmax over its [batch, heads, T, T] scores under autocast:
// forward is one loop (the row max and the sum of exp inlined) writing the
// probabilities in f32, then their bf16 cast for the product with v; no
// exp(z) of the scores' size is kept (softmax's rule takes its gradient
// from its own value: ops.hpp), so the only buffers of that size forward
// are the scores, the probabilities and their cast, which the softmax's
// loop writes too (a side output). Loss and gradients keep the unfused
// step's bits.
TEST_CASE("attention's softmax is one loop and keeps its probabilities, no exp of the scores' size") {
  using P = ctg::precision::autocast<ctg::bf16>;
  using Xa = ctg::input<"x", ctg::f32, 2, 16, 32>;
  using Wq = ctg::param<"a.wq", ctg::f32, 32, 32>;
  auto step = ctg::value_and_grad(ctg::mean(ctg::square(ctg::nn::causal_self_attention<"a", 4, 8, P>(Xa{}))));
  using S = decltype(step);
  constexpr const auto& d = ctg::description<S>;
  auto is_scores = [](const ctg::node_description& n) {
    return n.dims.rank == 4 && n.dims.d[0] == 2 && n.dims.d[1] == 4 && n.dims.d[2] == 16 && n.dims.d[3] == 16;
  };
  std::size_t forward_buffers = 0, forward_groups = 0, exp_buffers = 0;
  for (std::size_t i = 0; i < d.size(); ++i) {
    const auto& n = d.node[i];
    if (!is_scores(n) || !n.buffer) continue;
    CAPTURE(n.op);
    forward_buffers += !n.backward;
    exp_buffers += n.op == "exp";
  }
  for (const auto& g : d.group)
    forward_groups += !g.backward && is_scores(d.node[g.root]) && g.kind != ctg::group_kind::matmul;
  CHECK(forward_buffers == 3);  // the scores (a product), the probabilities, their bf16 cast
  CHECK(forward_groups == 1);   // the softmax, writing their bf16 cast too (a side output)
  CHECK(exp_buffers == 0);

  const auto xs = random_floats(2 * 16 * 32, 23);
  ctg::cpu::device dev;
  auto fused = ctg::make_store(dev, step);
  auto plain_step = ctg::unfused(step);
  auto plain = ctg::make_store(dev, plain_step);
  ctg::nn::init_params(fused, 7, 0.3);
  ctg::nn::init_params(plain, 7, 0.3);
  const float a = step(fused, ctg::feed<Xa>(xs));
  const float b = plain_step(plain, ctg::feed<Xa>(xs));
  CHECK(std::isfinite(a));
  CHECK(std::memcmp(&a, &b, sizeof a) == 0);
  check_same_nonzero_grad(fused.grad<Wq>(), plain.grad<Wq>());
}

// A group's side output: a cast of its root that would be a group of its
// own reading the root back (the root read by backward in f32, the cast by
// a product) is written by the root's loop, with the bits the cast's own
// loop gives. Not where the cast belongs to a checkpoint region the root
// does not (a recompute of the region would not run the root's loop).
TEST_CASE("a value and its cast read elsewhere: one loop writes both, bit for bit") {
  using W1 = ctg::param<"w1", ctg::f32, 64, 32>;
  using W2 = ctg::param<"w2", ctg::bf16, 32, 16>;
  auto side_of = []<class R, class C>(R, C, auto step) {
    using S = decltype(step);
    constexpr const auto& d = ctg::description<S>;
    constexpr std::size_t r = ctg::tl::index_of<R, typename S::nodes>::value;
    constexpr std::size_t c = ctg::tl::index_of<C, typename S::nodes>::value;
    const bool written_by_r = d.group[d.node[r].group].side == c && d.node[c].group == d.node[r].group;
    CHECK(d.node[c].buffer);
    CHECK(written_by_r == (d.group[d.node[c].group].root == r));
    return written_by_r;
  };
  auto same_as_unfused = [](auto step) {
    const auto xs = random_floats(8 * 64, 31), w1 = random_floats(64 * 32, 32, -0.3f, 0.3f);
    const auto w2 = random_floats(32 * 16, 33, -0.3f, 0.3f);
    ctg::cpu::device dev;
    auto fused = ctg::make_store(dev, step);
    auto plain_step = ctg::unfused(step);
    auto plain = ctg::make_store(dev, plain_step);
    std::copy(w1.begin(), w1.end(), fused.template param<W1>().begin());
    std::copy(w1.begin(), w1.end(), plain.template param<W1>().begin());
    for (std::size_t i = 0; i < w2.size(); ++i)
      fused.template param<W2>()[i] = plain.template param<W2>()[i] = ctg::bf16(w2[i]);
    const float a = step(fused, ctg::feed<X>(xs, 8));
    const float b = plain_step(plain, ctg::feed<X>(xs, 8));
    CHECK(std::isfinite(a));
    CHECK(std::memcmp(&a, &b, sizeof a) == 0);
    check_same_nonzero_grad(fused.template grad<W1>(), plain.template grad<W1>());
    check_same_nonzero_grad(fused.template grad<W2>(), plain.template grad<W2>());
  };
  // exp's backward reads its value in f32; the product reads its bf16 cast.
  auto e = ctg::exp(ctg::matmul(X{}, W1{}) * ctg::lit<0.1>);
  auto eb = ctg::cast<ctg::bf16>(e);
  auto flat = ctg::value_and_grad(ctg::mean(ctg::square(ctg::cast<ctg::f32>(ctg::matmul(eb, W2{})))));
  CHECK(side_of(e, eb, flat));
  static_assert(ctg::group_count_v<decltype(flat)> < ctg::group_count_v<decltype(ctg::unfused(flat))>);
  same_as_unfused(flat);
  // Both in one checkpoint region: recomputed together, the same bits.
  auto in_region = ctg::value_and_grad(
      ctg::mean(ctg::square(ctg::cast<ctg::f32>(ctg::checkpoint(ctg::matmul(eb, W2{}))))));
  CHECK(side_of(e, eb, in_region));
  constexpr const auto& dr = ctg::description<decltype(in_region)>;
  constexpr std::size_t ebr = ctg::tl::index_of<decltype(eb), decltype(in_region)::nodes>::value;
  CHECK(dr.node[ebr].recomputed);
  same_as_unfused(in_region);
  // e read outside the region too: e kept, its cast recomputed in the region, a loop of its own.
  auto across = ctg::value_and_grad(
      ctg::mean(ctg::square(ctg::cast<ctg::f32>(ctg::checkpoint(ctg::matmul(eb, W2{}))))) + ctg::mean(e));
  CHECK(!side_of(e, eb, across));
  same_as_unfused(across);
}

TEST_CASE("nodes no output reaches are computed by no group, however large their expressions") {
  // A hand-made table: leaf 0, a chain of 17 elementwise nodes (past
  // max_shared_inline_ops), read by two nodes no output reaches (as a stack
  // block's vjp loss is: graph_step::root_is_output), and an output beside
  // them. The grouping's size pass once marked the chain's end for a buffer
  // on every pass, as it never got one: the fixed point never came.
  constexpr std::size_t N = 21, E = 20;
  static ctg::detail::plan_table<N, E> p;
  ctg::shape_value s{};
  s.rank = 1;
  s.d[0] = 4;
  std::size_t edge = 0;
  auto node = [&](std::size_t i, ctg::node_kind k, std::initializer_list<std::size_t> children, bool output) {
    auto& d = p.node[i];
    d.kind = k;
    d.dims = d.child_dims = s;
    d.output = output;
    d.nchild = children.size();
    p.first_child[i] = edge;
    for (std::size_t c : children) p.children[edge++] = c;
    p.first_child[i + 1] = edge;
  };
  node(0, ctg::node_kind::leaf, {}, false);
  for (std::size_t k = 1; k <= 17; ++k) node(k, ctg::node_kind::elementwise, {k - 1}, false);
  node(18, ctg::node_kind::elementwise, {17}, false);
  node(19, ctg::node_kind::elementwise, {17}, false);
  node(20, ctg::node_kind::elementwise, {0}, true);
  ctg::detail::decide_groups(p, true);
  for (std::size_t i = 1; i <= 19; ++i) {
    CAPTURE(i);
    CHECK(p.group[i] == ctg::detail::no_group);
    CHECK(!p.materialized[i]);
  }
  CHECK(p.group[20] == 20);
  CHECK(p.group_count == 1);
}
