// Data parallelism in one process (dist/data_parallel.hpp, dist/sharded_adamw.hpp):
// the shard layout, one rank that is exactly the plain store and AdamW, and
// W emulated ranks that train the global batch (within rounding of one store
// fed the whole batch). tests/mpi/ runs the same on real ranks.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <ctg/ctg.hpp>
#include <ctg/dist/checkpoint.hpp>
#include <ctg/io/safetensors.hpp>
#include <ctg/optim/optim.hpp>

#include "temp_files.hpp"

namespace {
using ctg::dyn;
using X = ctg::input<"x", ctg::f32, dyn, 4>;
using Y = ctg::input<"y", ctg::f32, dyn, 3>;
// Rows that do not divide: 5 rows on 2 or 3 ranks, 1 row on 2 or 3 (empty shards).
using W1 = ctg::param<"w1", ctg::bf16, 4, 5>;
using W2 = ctg::param<"w2", ctg::f32, 5, 3>;
using B2 = ctg::param<"b2", ctg::f32, 1, 3>;
using F = ctg::frozen<"f", ctg::f32, 3, 3>;
using V = std::vector<float>;

auto loss() {
  auto h = ctg::tanh(ctg::matmul(X{}, ctg::cast<ctg::f32>(W1{})));
  auto y = ctg::matmul(ctg::matmul(h, W2{}) + B2{}, F{});
  return ctg::mean(ctg::square(y - Y{}));
}

// Batch b of `count` rows: rows [b * count, (b + 1) * count) of one global batch.
struct batch {
  V x, y;
};
batch rows(int first, int count) {
  batch b{V(static_cast<std::size_t>(count) * 4), V(static_cast<std::size_t>(count) * 3)};
  for (int r = 0; r < count; ++r) {
    for (int c = 0; c < 4; ++c) b.x[static_cast<std::size_t>(r * 4 + c)] = std::sin(0.7f * float((first + r) * 4 + c));
    for (int c = 0; c < 3; ++c) b.y[static_cast<std::size_t>(r * 3 + c)] = 0.3f * std::cos(float((first + r) * 3 + c));
  }
  return b;
}

template <class Store>
void init(Store& s) {
  ctg::nn::init_params(s, 11, 0.5);
  auto f = s.template param<F>();
  for (std::size_t i = 0; i < f.size(); ++i) f[i] = (i % 4 == 0) ? 1.0f : 0.1f;
}
template <class L, class Store>
V values(Store& s) {
  V v;
  for (auto x : s.template param<L>()) v.push_back(static_cast<float>(ctg::load_as(x)));
  return v;
}
}  // namespace

TEST_CASE("dim-0 shards: ceil(rows / world) per rank, padded; a rank may hold none") {
  constexpr auto a = ctg::dist::shard_rows::of(5, 2);
  static_assert(a.per_rank == 3 && a.begin(0) == 0 && a.end(0) == 3 && a.begin(1) == 3 && a.end(1) == 5);
  constexpr auto b = ctg::dist::shard_rows::of(1, 3);
  static_assert(b.per_rank == 1 && b.held(0) == 1 && b.held(1) == 0 && b.held(2) == 0);
  // The block of a step: every trainable leaf's padded shard, in wrt order; no frozen leaf.
  using step_t = decltype(ctg::value_and_grad(loss()));
  const auto lay = ctg::dist::block_layout<step_t>::of(3);
  std::size_t want = 0;  // by hand: w1 2 rows x 5, w2 2 rows x 3, b2 1 row x 3
  want += 2 * 5 + 2 * 3 + 1 * 3;
  CHECK(lay.elements == want);
}

namespace {
template <ctg::fixed_string Prefix>
struct small_block {
  template <ctg::expr X>
  constexpr auto operator()(X x) const {
    using P = ctg::precision::full<ctg::f32>;
    return x + ctg::nn::linear<Prefix + ".up", 4, P>(ctg::nn::rms_norm<Prefix + ".norm", P>(x));
  }
};
}  // namespace

TEST_CASE("a stacked leaf is cut per layer, on each layer's own dim 0 (as FSDP2 cuts each block it wraps)") {
  using SX = ctg::input<"x", ctg::f32, dyn, 4>;
  using step_t = decltype(ctg::value_and_grad(ctg::sum(ctg::nn::stack<3, small_block>(SX{}))));
  using Up = ctg::param<"layers.{i}.up.weight", ctg::f32, 3, 4, 4>;
  using Norm = ctg::param<"layers.{i}.norm.scale", ctg::f32, 3, 4>;
  static_assert(ctg::tl::contains<Up, step_t::wrt>::value && ctg::tl::contains<Norm, step_t::wrt>::value);
  const auto lay = ctg::dist::block_layout<step_t>::of(3);
  const auto& up = lay.leaf[ctg::tl::index_of<Up, step_t::wrt>::value];
  const auto& norm = lay.leaf[ctg::tl::index_of<Norm, step_t::wrt>::value];
  // up: 3 layers of 4 rows of 4; on 3 ranks, 2 rows of each layer per rank, rank 2 none.
  CHECK(up.pieces == 3);
  CHECK(up.shard.per_rank == 2);
  CHECK(up.part_elements() == 3 * 2 * 4);
  CHECK(up.held_elements(1) == 3 * 2 * 4);
  CHECK(up.held_elements(2) == 0);
  const auto r = up.run_of(1, 2);  // rank 1's rows 2, 3 of layer 2
  CHECK(r.whole == 2 * 16 + 2 * 4);
  CHECK(r.packed == 2 * 8);
  CHECK(r.n == 8);
  // norm: 3 layers of 4 one-element rows.
  CHECK(norm.row_elements == 1);
  CHECK(norm.run_of(0, 1).whole == 4);
  CHECK(norm.run_of(0, 1).n == 2);
}

TEST_CASE("one rank is the plain store and AdamW, bit for bit") {
  auto step = ctg::value_and_grad(loss());
  ctg::cpu::device dev;
  auto plain = ctg::make_store(dev, step);
  auto alone = ctg::make_store(dev, step);
  init(plain);
  init(alone);
  ctg::optim::adamw opt(plain, {.lr = 0.05f, .max_grad_norm = 0.5f});
  ctg::dist::data_parallel dp(alone, ctg::dist::emulate{1});
  ctg::dist::sharded_adamw sopt(dp, {.lr = 0.05f, .max_grad_norm = 0.5f});
  for (int s = 0; s < 5; ++s) {
    const batch b = rows(4 * s, 4);
    const float l0 = step(plain, ctg::feed<X>(b.x, 4), ctg::feed<Y>(b.y, 4));
    const float l1 = step(alone, ctg::feed<X>(b.x, 4), ctg::feed<Y>(b.y, 4));
    CHECK(l0 == l1);
    CHECK(dp.loss() == l1);
    CHECK(opt.step(plain) == sopt.step());
  }
  CHECK(values<W1>(plain) == values<W1>(alone));
  CHECK(values<W2>(plain) == values<W2>(alone));
  CHECK(values<B2>(plain) == values<B2>(alone));
  CHECK(values<F>(alone) == values<F>(plain));  // (frozen: never written)
}

TEST_CASE("sharded_adamw decays the leaves adamw decays: matrices only, bit for bit at one rank") {
  using V3 = ctg::param<"v3", ctg::f32, 3>;  // (a vector: b2 is [1, 3], a matrix to the rule)
  auto h = ctg::tanh(ctg::matmul(X{}, ctg::cast<ctg::f32>(W1{})));
  auto step = ctg::value_and_grad(ctg::mean(ctg::square(ctg::matmul(ctg::matmul(h, W2{}) + B2{} + V3{}, F{}) - Y{})));
  ctg::cpu::device dev;
  auto plain = ctg::make_store(dev, step);
  auto every = ctg::make_store(dev, step);
  auto alone = ctg::make_store(dev, step);
  init(plain);
  init(every);
  init(alone);
  const ctg::optim::adamw_config cfg{.lr = 0.05f, .weight_decay = 0.5f, .decay = ctg::optim::decay_leaves::matrices};
  ctg::optim::adamw opt(plain, cfg);
  ctg::optim::adamw every_opt(every, {.lr = 0.05f, .weight_decay = 0.5f});
  ctg::dist::data_parallel dp(alone, ctg::dist::emulate{1});
  ctg::dist::sharded_adamw sopt(dp, cfg);
  for (int s = 0; s < 3; ++s) {
    const batch b = rows(4 * s, 4);
    step(plain, ctg::feed<X>(b.x, 4), ctg::feed<Y>(b.y, 4));
    step(every, ctg::feed<X>(b.x, 4), ctg::feed<Y>(b.y, 4));
    step(alone, ctg::feed<X>(b.x, 4), ctg::feed<Y>(b.y, 4));
    CHECK(opt.step(plain) == sopt.step());
    every_opt.step(every);
  }
  CHECK(values<W1>(plain) == values<W1>(alone));
  CHECK(values<W2>(plain) == values<W2>(alone));
  CHECK(values<B2>(plain) == values<B2>(alone));
  CHECK(values<V3>(plain) == values<V3>(alone));
  CHECK(values<V3>(plain) != values<V3>(every));  // (the vector's decay is what differs)
}

// W emulated ranks, each fed its share of the global batch, against one
// store fed the whole global batch (the same batch every step, so the loss
// falls).
//
// The bounds: w1 is bf16, so its gradient is bf16, and each rank's share
// rounds to bf16 before the f32 sum (relative 2^-9 per element, against
// one rounding of the whole); every other difference is the order of f32
// sums. So the gradient norms agree to 2^-8 relative; AdamW's update is
// lr * m / sqrt(v), which a relative gradient error d changes by about
// lr * d: after 5 steps the parameters differ by at most 5 * lr * 2^-8
// (plus one bf16 ulp of w1, 2^-8 relative), and the losses, which move
// with the parameters, by 2^-8 relative.
template <int W>
void emulated_world_trains_the_global_batch() {
  auto step = ctg::value_and_grad(loss());
  ctg::cpu::device dev;
  auto whole = ctg::make_store(dev, step);
  auto shared = ctg::make_store(dev, step);
  init(whole);
  init(shared);
  constexpr float lr = 0.02f;
  ctg::optim::adamw opt(whole, {.lr = lr});
  ctg::dist::data_parallel dp(shared, ctg::dist::emulate{W});
  ctg::dist::sharded_adamw sopt(dp, {.lr = lr});
  constexpr int per_rank = 2;
  const batch g = rows(0, W * per_rank);
  float first = 0, last = 0;
  for (int s = 0; s < 5; ++s) {
    const float lw = step(whole, ctg::feed<X>(g.x, W * per_rank), ctg::feed<Y>(g.y, W * per_rank));
    for (int r = 0; r < W; ++r) {
      const batch b = rows(r * per_rank, per_rank);
      step(shared, ctg::feed<X>(b.x, per_rank), ctg::feed<Y>(b.y, per_rank));
    }
    CHECK(std::abs(dp.loss() - lw) <= 0x1p-8f * lw);
    const float nw = opt.step(whole), ns = sopt.step();
    CHECK(std::abs(nw - ns) <= 0x1p-8f * nw);
    (s == 0 ? first : last) = dp.loss();
  }
  CHECK(last < first);  // (it trains)
  const float moved = 5 * lr * 0x1p-8f;
  const V a = values<W1>(whole), b = values<W1>(shared);
  for (std::size_t i = 0; i < a.size(); ++i) CHECK(std::abs(a[i] - b[i]) <= moved + std::abs(a[i]) * 0x1p-8f);
  const V c = values<W2>(whole), d = values<W2>(shared);
  for (std::size_t i = 0; i < c.size(); ++i) CHECK(std::abs(c[i] - d[i]) <= moved);
  const V e = values<B2>(whole), f = values<B2>(shared);
  for (std::size_t i = 0; i < e.size(); ++i) CHECK(std::abs(e[i] - f[i]) <= moved);
}

TEST_CASE("2 and 3 emulated ranks train the global batch, within rounding of one store") {
  emulated_world_trains_the_global_batch<2>();
  emulated_world_trains_the_global_batch<3>();
}

TEST_CASE("optimizer state: only this process's shards of trainable leaves") {
  auto step = ctg::value_and_grad(loss());
  ctg::cpu::device dev;
  auto s = ctg::make_store(dev, step);
  init(s);
  ctg::dist::data_parallel dp(s, ctg::dist::emulate{2});
  ctg::dist::sharded_adamw opt(dp);
  // Every shard (both emulated ranks): moments of w1, w2, b2 and a master of w1 (bf16); none of f.
  CHECK(opt.state_elements() == 2 * (20 + 15 + 3) + 20);
  CHECK(opt.exp_avg<W2>(0).size() == 3 * 3);  // rank 0: rows 0-2 of 5
  CHECK(opt.exp_avg<W2>(1).size() == 2 * 3);  // rank 1: rows 3-4
  CHECK(opt.exp_avg<B2>(1).empty());          // 1 row on 2 ranks: rank 1 holds none
}

TEST_CASE("mistakes: every run of a step feeds one shape; an update needs a whole step") {
  auto step = ctg::value_and_grad(loss());
  ctg::cpu::device dev;
  auto s = ctg::make_store(dev, step);
  init(s);
  ctg::dist::data_parallel dp(s, ctg::dist::emulate{2});
  ctg::dist::sharded_adamw opt(dp);
  CHECK_THROWS_WITH_AS(opt.step(), doctest::Contains("no gradients since the last update (each set is applied once): run a step on every rank first"), ctg::error);
  const batch a = rows(0, 2), b = rows(2, 3);
  const auto steps_run = s.steps_run();
  step(s, ctg::feed<X>(a.x, 2), ctg::feed<Y>(a.y, 2));
  CHECK(dp.runs_done() == 1);
  // Rank 1 feeds another size: as on real ranks, no rank commits the step (rank 0's run is undone).
  CHECK_THROWS_WITH_AS(step(s, ctg::feed<X>(b.x, 3), ctg::feed<Y>(b.y, 3)),
                       doctest::Contains("rank 1: dyn sizes 3, 3"), ctg::error);
  CHECK(dp.runs_done() == 0);
  CHECK(s.steps_run() == steps_run);
  CHECK(s.accumulated() == 0);
  CHECK_THROWS_WITH_AS(opt.step(), doctest::Contains("no gradients since the last update (each set is applied once): run a step on every rank first"), ctg::error);
  const V before = values<W2>(s);
  step(s, ctg::feed<X>(a.x, 2), ctg::feed<Y>(a.y, 2));  // (the step again, from rank 0)
  CHECK_THROWS_WITH_AS(opt.step(), doctest::Contains("no gradients since the last update (each set is applied once): run a step on every rank first"), ctg::error);
  step(s, ctg::feed<X>(a.x, 2), ctg::feed<Y>(a.y, 2));
  opt.step();
  CHECK(values<W2>(s) != before);
  CHECK_THROWS_WITH_AS(ctg::dist::data_parallel(s, ctg::dist::emulate{0}), doctest::Contains("at least 1 rank"),
                       ctg::error);
  // The store's own accumulate(k) while in the group: an error (it scaled each run's gradient by another count
  // than the group's, and an update then failed after changing the parameters).
  CHECK_THROWS_WITH_AS(s.accumulate(2), doctest::Contains("set its micro-batches with dp.accumulate(k)"), ctg::error);
  CHECK(s.micro_batches() == 2);  // (the group's: one run of each of its 2 ranks)
}

TEST_CASE("a data_parallel that ends mid-step drops its runs' FP8 amaxes with the set") {
  // (They stayed, and the store's next update took their max: a scale 100x too small here.)
  using D = ctg::precision::delayed<4>;
  using Scale = ctg::scaling::delayed<"l.weight.fp8_input", D>::scale_leaf;
  using WL = ctg::param<"l.weight", ctg::f32, 4, 3>;
  auto step = ctg::value_and_grad(ctg::mean(ctg::square(ctg::nn::linear<ctg::precision::fp8<D>>(X{}, WL{}) - Y{})));
  ctg::cpu::device dev;
  auto dropped = ctg::make_store(dev, step), alone = ctg::make_store(dev, step);
  for (auto* s : {&dropped, &alone}) ctg::nn::init_params(*s, 5, 0.5);
  const V big(8, 100.0f), small(8, 1.0f), y(6, 0.0f);
  {
    ctg::dist::data_parallel dp(dropped, ctg::dist::emulate{1});
    dp.accumulate(2);
    step(dropped, ctg::feed<X>(big, 2), ctg::feed<Y>(y, 2));  // (1 of 2 runs; then the data_parallel ends)
  }
  for (auto* s : {&dropped, &alone}) step(*s, ctg::feed<X>(small, 2), ctg::feed<Y>(y, 2));
  CHECK(alone.param<Scale>()[0] == 448.0f);
  CHECK(dropped.param<Scale>()[0] == alone.param<Scale>()[0]);
}

TEST_CASE("a plain optim::adamw on a data-parallel store is an error: its gradient is one rank's share") {
  // (It applied each rank's own gradient, scaled by 1/W, unreduced: the ranks' weights drifted apart.)
  auto step = ctg::value_and_grad(loss());
  ctg::cpu::device dev;
  auto s = ctg::make_store(dev, step);
  init(s);
  ctg::optim::adamw plain(s);
  const batch a = rows(0, 2);
  {
    ctg::dist::data_parallel dp(s, ctg::dist::emulate{1});
    step(s, ctg::feed<X>(a.x, 2), ctg::feed<Y>(a.y, 2));
    const V before = values<W2>(s);
    CHECK_THROWS_WITH_AS(plain.step(s), doctest::Contains("use dist::sharded_adamw(dp)"), ctg::error);
    CHECK(values<W2>(s) == before);
  }
  step(s, ctg::feed<X>(a.x, 2), ctg::feed<Y>(a.y, 2));  // (alone again: the plain optimizer updates it)
  const V before = values<W2>(s);
  plain.step(s);
  CHECK(values<W2>(s) != before);
}

TEST_CASE("a checkpoint of W ranks is the single-process file: it loads at any world size") {
  auto step = ctg::value_and_grad(loss());
  ctg::cpu::device dev;
  const test_util::temp_dir dir("ctg_dp_ckpt_");
  const auto file = dir / "ckpt.ctg";
  auto saved = ctg::make_store(dev, step);
  init(saved);
  const batch g = rows(0, 6);
  // Two steps at 2 emulated ranks (3 rows each), then saved.
  {
    ctg::dist::data_parallel dp(saved, ctg::dist::emulate{2});
    ctg::dist::sharded_adamw opt(dp, {.lr = 0.02f});
    for (int s = 0; s < 2; ++s) {
      for (int r = 0; r < 2; ++r) {
        const batch b = rows(3 * r, 3);
        step(saved, ctg::feed<X>(b.x, 3), ctg::feed<Y>(b.y, 3));
      }
      opt.step();
    }
    ctg::dist::save(file.string(), dp, opt);
  }
  // One process, the plain optimizer: the same parameters, and moments at step 2.
  auto plain = ctg::make_store(dev, step);
  ctg::optim::adamw popt(plain);
  ctg::io::load(file.string(), plain, popt);
  CHECK(values<W1>(plain) == values<W1>(saved));
  CHECK(values<W2>(plain) == values<W2>(saved));
  CHECK(values<F>(plain) == values<F>(saved));
  CHECK(popt.steps() == 2);
  CHECK(popt.config().lr == 0.02f);
  // 3 emulated ranks: the same parameters, and the next loss of the same
  // global batch within the rounding of its sums.
  auto three = ctg::make_store(dev, step);
  ctg::dist::data_parallel dp3(three, ctg::dist::emulate{3});
  ctg::dist::sharded_adamw opt3(dp3);
  ctg::dist::load(file.string(), dp3, opt3);
  CHECK(values<W1>(three) == values<W1>(saved));
  CHECK(opt3.steps() == 2);
  const float whole = step(plain, ctg::feed<X>(g.x, 6), ctg::feed<Y>(g.y, 6));
  for (int r = 0; r < 3; ++r) {
    const batch b = rows(2 * r, 2);
    step(three, ctg::feed<X>(b.x, 2), ctg::feed<Y>(b.y, 2));
  }
  CHECK(std::abs(dp3.loss() - whole) <= 1e-6f * whole);
  // The next update: moments restored (step 3 of AdamW, not step 1).
  popt.step(plain);
  opt3.step();
  const V a = values<W2>(plain), b = values<W2>(three);
  for (std::size_t i = 0; i < a.size(); ++i) CHECK(std::abs(a[i] - b[i]) <= 0.02f * 0x1p-8f);
  // A file that is not there: an error, nothing loaded.
  const V before = values<W2>(three);
  CHECK_THROWS_AS(ctg::dist::load(file.string() + ".missing", dp3, opt3), ctg::error);
  CHECK(values<W2>(three) == before);
}

TEST_CASE("micro-batches: 2 emulated ranks of 2 micro-batches each train the global batch of 4") {
  auto step = ctg::value_and_grad(loss());
  ctg::cpu::device dev;
  auto whole = ctg::make_store(dev, step);
  auto shared = ctg::make_store(dev, step);
  init(whole);
  init(shared);
  constexpr float lr = 0.02f;
  ctg::optim::adamw opt(whole, {.lr = lr});
  whole.accumulate(4);
  ctg::dist::data_parallel dp(shared, ctg::dist::emulate{2});
  ctg::dist::sharded_adamw sopt(dp, {.lr = lr});
  dp.accumulate(2);
  CHECK(dp.micro_batches() == 2);
  for (int s = 0; s < 3; ++s) {
    float sum = 0;
    for (int m = 0; m < 4; ++m) {  // (run m * 2 + v is rank v's micro-batch m; each micro-batch is 2 rows)
      const batch b = rows(2 * m, 2);
      sum += step(whole, ctg::feed<X>(b.x, 2), ctg::feed<Y>(b.y, 2));
      if (m == 1) CHECK_THROWS_WITH_AS(dp.accumulate(1), doctest::Contains("runs of this step are done"), ctg::error);
      step(shared, ctg::feed<X>(b.x, 2), ctg::feed<Y>(b.y, 2));
      if (m < 3) CHECK_THROWS_WITH_AS(sopt.step(), doctest::Contains("no gradients since the last update (each set is applied once): run a step on every rank first"), ctg::error);
    }
    // (the bounds of the test above: bf16 gradients rounded per micro-batch or per rank)
    CHECK(std::abs(dp.loss() - sum / 4) <= 0x1p-8f * sum / 4);
    const float nw = opt.step(whole), ns = sopt.step();
    CHECK(std::abs(nw - ns) <= 0x1p-8f * nw);
  }
  const V c = values<W2>(whole), d = values<W2>(shared);
  for (std::size_t i = 0; i < c.size(); ++i) CHECK(std::abs(c[i] - d[i]) <= 3 * lr * 0x1p-8f);
  CHECK_THROWS_WITH_AS(dp.accumulate(0), doctest::Contains("at least 1 micro-batch"), ctg::error);
}

namespace {
using DX = ctg::input<"x", ctg::f32, dyn, 4>;
using DY = ctg::input<"y", ctg::f32, dyn, 3>;
using DW1 = ctg::param<"w1", ctg::f32, 4, 8>;
using DW2 = ctg::param<"w2", ctg::f32, 8, 3>;
auto dropout_loss() {
  auto h = ctg::dropout<"drop">(ctg::tanh(ctg::matmul(DX{}, DW1{})), ctg::lit<0.5>);
  return ctg::mean(ctg::square(ctg::matmul(h, DW2{}) - DY{}));
}
using dropout_step = decltype(ctg::value_and_grad(dropout_loss()));
// Step s of 2 emulated ranks, k micro-batches each: the global batch's loss.
template <class Store>
void dropout_runs(dropout_step& step, Store& store, int s, int k) {
  for (int m = 0; m < k; ++m)
    for (int v = 0; v < 2; ++v) {
      const batch b = rows(100 * s + 10 * m + 3 * v, 3);
      step(store, ctg::feed<DX>(b.x, 3), ctg::feed<DY>(b.y, 3));
    }
}
template <class Store, class Dp, class Opt>
float dropout_global_step(dropout_step& step, Store& store, Dp& dp, Opt& opt, int s, int k) {
  dropout_runs(step, store, s, k);
  opt.step();
  return dp.loss();
}
}  // namespace

TEST_CASE("a sharded_adamw whose data_parallel ended, or was replaced, is refused; a replaced optimizer is not") {
  // (It kept a reference: a data_parallel made again in its place ran with
  // the old shard layout, and its own end read freed memory. Replacing the
  // optimizer, new one first, cleared the new one's link.)
  auto step = ctg::value_and_grad(loss());
  ctg::cpu::device dev{1};
  auto store = ctg::make_store(dev, step);
  init(store);
  const char* gone = "this sharded_adamw's data_parallel has ended, or another sharded_adamw was made for it";
  using dp_t = ctg::dist::data_parallel<decltype(store)>;
  using opt_t = ctg::dist::sharded_adamw<decltype(store)>;
  auto train = [&](dp_t& dp) {
    for (int v = 0; v < dp.world(); ++v) {
      const batch b = rows(4 * v, 4);
      step(store, ctg::feed<X>(b.x, 4), ctg::feed<Y>(b.y, 4));
    }
  };
  std::optional<dp_t> dp;
  dp.emplace(store, ctg::dist::emulate{2});
  auto opt = std::make_unique<opt_t>(*dp, ctg::optim::adamw_config{.lr = 0.05f});
  dp.emplace(store, ctg::dist::emulate{3});  // in the same place
  train(*dp);
  const auto before = values<W1>(store);
  CHECK_THROWS_WITH_AS(opt->step(), doctest::Contains(gone), ctg::error);
  CHECK(values<W1>(store) == before);
  // The usual replacement: the new optimizer is made, then the old one goes.
  opt = std::make_unique<opt_t>(*dp, ctg::optim::adamw_config{.lr = 0.05f});
  CHECK_NOTHROW(opt->step());
  CHECK(values<W1>(store) != before);
  auto second = std::make_unique<opt_t>(*dp, ctg::optim::adamw_config{.lr = 0.05f});  // the one now
  train(*dp);
  CHECK_THROWS_WITH_AS(opt->step(), doctest::Contains(gone), ctg::error);
  CHECK_NOTHROW(second->step());
  // Saved or loaded with another data_parallel's optimizer: refused.
  const test_util::temp_dir dir("ctg_dp_opt_");
  const auto file = (dir / "ckpt.ctg").string();
  auto other_store = ctg::make_store(dev, step);
  init(other_store);
  dp_t other(other_store, ctg::dist::emulate{3});
  CHECK_THROWS_WITH_AS(ctg::dist::save(file, other, *second), doctest::Contains("made for another data_parallel"),
                       ctg::error);
  CHECK_FALSE(std::filesystem::exists(file));
  // Its data_parallel ended first, the optimizer is refused, and ends well.
  dp.reset();
  CHECK_THROWS_WITH_AS(second->step(), doctest::Contains(gone), ctg::error);
  second.reset();
  opt.reset();
}

TEST_CASE("a data_parallel made again on its store goes on with the next global runs' dropout masks") {
  // (The constructor took the store's count for steps of one run and made
  // it global again: 0 -> 4 -> 12, other masks than one data_parallel kept.)
  ctg::cpu::device dev{1};
  dropout_step step;
  auto kept = ctg::make_store(dev, step), again = ctg::make_store(dev, step);
  for (auto* s : {&kept, &again}) {
    ctg::nn::init_params(*s, 11, 0.5);
    s->seed(77);
  }
  std::vector<float> want, got;
  {
    ctg::dist::data_parallel dp(kept, ctg::dist::emulate{2});
    for (int s = 0; s < 4; ++s) {  // (no update: each step's loss reads the same parameters, other masks)
      dropout_runs(step, kept, s, 1);
      want.push_back(dp.loss());
    }
  }
  for (int part = 0; part < 2; ++part) {
    ctg::dist::data_parallel dp(again, ctg::dist::emulate{2});
    for (int s = 2 * part; s < 2 * part + 2; ++s) {
      dropout_runs(step, again, s, 1);
      got.push_back(dp.loss());
    }
    // Ended mid-step, the step under way counts for nothing.
    if (part == 0) {
      const batch b = rows(9, 3);
      step(again, ctg::feed<DX>(b.x, 3), ctg::feed<DY>(b.y, 3));  // (rank 0's run only)
    }
  }
  CHECK(got == want);
  CHECK(again.steps_run() == kept.steps_run());  // 8: the global runs, as a checkpoint saves them
  CHECK(kept.steps_run() == 8);
}

TEST_CASE("a data-parallel checkpoint resumes bit for bit with dropout and micro-batches; no load mid-step") {
  ctg::cpu::device dev{1};
  const test_util::temp_dir dir("ctg_dp_resume_");
  const auto file = (dir / "ckpt.ctg").string();
  // Before the save, a detour: 1, a step whose gradient no update applied
  // (replaced by the next step's); 2, a first step of one micro-batch, then
  // k. (The load keyed the next runs from AdamW's step count times k and W,
  // not from the runs made: other masks after either.)
  for (const int k : {1, 2, 3})
  for (const int detour : {0, 1, 2}) {
    for (const bool accumulate_after_load : {false, true}) {
      INFO("k = " << k << ", detour " << detour << std::string(accumulate_after_load ? ", accumulate(k) after the load" : ""));
      dropout_step step;
      auto a = ctg::make_store(dev, step);
      ctg::nn::init_params(a, 11, 0.5);
      a.seed(77);
      std::vector<float> uninterrupted, resumed;
      {
        ctg::dist::data_parallel dp(a, ctg::dist::emulate{2});
        dp.accumulate(detour == 2 ? 1 : k);
        ctg::dist::sharded_adamw opt(dp, {.lr = 0.05f});
        for (int s = 0; s < 2; ++s) {
          if (detour == 1 && s == 1) dropout_runs(step, a, 50, k);
          dropout_global_step(step, a, dp, opt, s, detour == 2 && s == 0 ? 1 : k);
          if (detour == 2 && s == 0) dp.accumulate(k);
        }
        ctg::dist::save(file, dp, opt);
        for (int s = 2; s < 4; ++s) uninterrupted.push_back(dropout_global_step(step, a, dp, opt, s, k));
      }
      auto b = ctg::make_store(dev, step);
      ctg::dist::data_parallel dp(b, ctg::dist::emulate{2});
      if (!accumulate_after_load) dp.accumulate(k);
      ctg::dist::sharded_adamw opt(dp, {.lr = 0.05f});
      ctg::dist::load(file, dp, opt);
      if (accumulate_after_load) dp.accumulate(k);
      for (int s = 2; s < 4; ++s) resumed.push_back(dropout_global_step(step, b, dp, opt, s, k));
      CHECK(resumed == uninterrupted);  // (the same dropout masks: every run keyed as before the save)
    }
  }
  // A load while a step is under way (one rank's run done) is refused, and changes nothing.
  dropout_step step;
  auto s = ctg::make_store(dev, step);
  ctg::nn::init_params(s, 3, 0.5);
  ctg::dist::data_parallel dp(s, ctg::dist::emulate{2});
  ctg::dist::sharded_adamw opt(dp, {.lr = 0.05f});
  const batch b = rows(0, 3);
  step(s, ctg::feed<DX>(b.x, 3), ctg::feed<DY>(b.y, 3));
  const std::vector<float> before = values<DW1>(s);
  const auto steps_run = s.steps_run();
  CHECK_THROWS_WITH_AS(ctg::dist::load(file, dp, opt), doctest::Contains("runs of a data-parallel step are done"),
                       ctg::error);
  CHECK(values<DW1>(s) == before);
  CHECK(s.steps_run() == steps_run);
  CHECK(dp.runs_done() == 1);
  step(s, ctg::feed<DX>(b.x, 3), ctg::feed<DY>(b.y, 3));  // (rank 1: the step completes)
  opt.step();
  ctg::dist::load(file, dp, opt);  // (between steps: loads)
  CHECK(opt.steps() == 2);
}

TEST_CASE("a load into a data-parallel store spends its unapplied gradient; io's own save and load refuse it") {
  auto step = ctg::value_and_grad(loss());
  ctg::cpu::device dev;
  const test_util::temp_dir dir("ctg_dp_spent_");
  const auto file = (dir / "ckpt.ctg").string();
  const auto weights = (dir / "w.safetensors").string();
  auto s = ctg::make_store(dev, step);
  init(s);
  ctg::dist::data_parallel dp(s, ctg::dist::emulate{2});
  ctg::dist::sharded_adamw opt(dp, {.lr = 0.02f});
  auto global_step = [&](int first) {
    for (int r = 0; r < 2; ++r) {
      const batch b = rows(first + 3 * r, 3);
      step(s, ctg::feed<X>(b.x, 3), ctg::feed<Y>(b.y, 3));
    }
  };
  global_step(0);
  opt.step();
  ctg::dist::save(file, dp, opt);
  ctg::io::save_safetensors(weights, s);
  // A step's gradient, taken at other values than the file's, no update applied.
  for (const bool safetensors : {false, true}) {
    INFO((safetensors ? "io::load_safetensors" : "dist::load"));
    global_step(6);
    REQUIRE(dp.has_gradient());
    if (safetensors)
      ctg::io::load_safetensors(weights, s);
    else
      ctg::dist::load(file, dp, opt);
    CHECK_FALSE(dp.has_gradient());
    const V loaded = values<W2>(s);
    CHECK_THROWS_WITH_AS(opt.step(), doctest::Contains("no gradients since the last update (each set is applied once): run a step on every rank first"), ctg::error);
    CHECK(values<W2>(s) == loaded);
    CHECK(opt.steps() == 1);
  }
  // io::save would write rank 0's run count as the global one on rank 0 only,
  // and io::load would give every rank the same dropout keys.
  const auto steps_run = s.steps_run();
  const V before = values<W2>(s);
  ctg::optim::adamw<decltype(s)> whole(s);
  CHECK_THROWS_WITH_AS(ctg::io::save(file + ".io", s), doctest::Contains("use dist::save(path, dp, opt) on every rank"),
                       ctg::error);
  CHECK_THROWS_WITH_AS(ctg::io::save(file + ".io", s, whole),
                       doctest::Contains("use dist::save(path, dp, opt) on every rank"), ctg::error);
  CHECK_FALSE(std::filesystem::exists(file + ".io"));
  CHECK_THROWS_WITH_AS(ctg::io::load(file, s), doctest::Contains("use dist::load(path, dp, opt) on every rank"),
                       ctg::error);
  CHECK_THROWS_WITH_AS(ctg::io::load(file, s, whole), doctest::Contains("use dist::load(path, dp, opt) on every rank"),
                       ctg::error);
  CHECK(s.steps_run() == steps_run);
  CHECK(values<W2>(s) == before);
  global_step(12);  // (the run goes on)
  // An update waits for nothing: the store held (a step under way on
  // another thread) refuses it, and nothing moves.
  {
    const auto held = s.hold_alone();
    CHECK_THROWS_WITH_AS(opt.step(), doctest::Contains("is running a step or an optimizer update already"), ctg::error);
  }
  CHECK(values<W2>(s) == before);
  opt.step();
  CHECK(opt.steps() == 2);
}

namespace {
using FX = ctg::input<"x", ctg::f32, dyn, 16>;
using FY = ctg::input<"y", ctg::f32, dyn, 16>;
using FW = ctg::param<"w", ctg::f32, 16, 16>;
// FP8 delayed scaling: the states' amaxes fold over a step's runs.
auto fp8_loss() {
  return ctg::mean(ctg::square(ctg::nn::linear<ctg::precision::fp8<ctg::precision::delayed<>>>(FX{}, FW{}) - FY{}));
}
batch rows16(int first, int count) {
  batch b{V(static_cast<std::size_t>(count) * 16), V(static_cast<std::size_t>(count) * 16)};
  for (std::size_t i = 0; i < b.x.size(); ++i) {
    b.x[i] = std::sin(0.37f * float(first * 16 + static_cast<int>(i)));
    b.y[i] = 0.5f * std::cos(0.23f * float(first * 16 + static_cast<int>(i)));
  }
  return b;
}
}  // namespace

TEST_CASE("emulated ranks: a run that fails undoes its micro-batch's earlier runs, as real ranks commit none") {
  // Two emulated ranks of 2 micro-batches, FP8 delayed scaling, 3 steps; in
  // the second step, the second micro-batch first runs rank 0 on 8 times
  // larger values (a larger amax), then rank 1 on a bad size (it fails); then
  // the micro-batch runs again from rank 0 on its own data: every step's
  // loss, the parameters and the FP8 state as a run with no failure, bit for
  // bit (the undone run's gradient and amax are gone).
  auto step = ctg::value_and_grad(fp8_loss());
  ctg::cpu::device dev{1};
  auto train = [&](bool fail) {
    auto s = ctg::make_store(dev, step);
    ctg::nn::init_params(s, 5, 0.5);
    ctg::dist::data_parallel dp(s, ctg::dist::emulate{2});
    dp.accumulate(2);
    ctg::dist::sharded_adamw opt(dp, {.lr = 0.05f});
    std::vector<float> losses;
    for (int t = 0; t < 3; ++t) {
      for (int m = 0; m < 2; ++m)
        for (int v = 0; v < 2; ++v) {
          batch b = rows16(10 * t + 4 * m + 2 * v, 2);
          if (fail && t == 1 && m == 1 && v == 0)
            for (float& x : b.x) x *= 8;
          if (fail && t == 1 && m == 1 && v == 1) {
            const batch wrong = rows16(0, 3);
            const auto steps_run = s.steps_run();
            CHECK_THROWS_AS(step(s, ctg::feed<FX>(wrong.x, 3), ctg::feed<FY>(wrong.y, 3)), ctg::error);
            CHECK(dp.runs_done() == 2);  // (the first micro-batch of both ranks stays)
            CHECK(s.steps_run() == steps_run - 1);
            for (int again = 0; again < 2; ++again) {
              const batch r = rows16(10 * t + 4 * m + 2 * again, 2);
              step(s, ctg::feed<FX>(r.x, 2), ctg::feed<FY>(r.y, 2));
            }
            continue;
          }
          step(s, ctg::feed<FX>(b.x, 2), ctg::feed<FY>(b.y, 2));
        }
      opt.step();
      losses.push_back(dp.loss());
    }
    std::vector<float> state = values<FW>(s);
    ctg::dist::detail::for_each_stored_leaf<decltype(step)>([&]<class L>() {  // (the FP8 scales and amax histories too)
      if constexpr (L::role == ctg::leaf_role::state)
        for (auto x : s.template param<L>()) state.push_back(static_cast<float>(ctg::load_as(x)));
    });
    return std::pair{losses, state};
  };
  const auto clean = train(false), failed = train(true);
  CHECK(failed.first == clean.first);
  CHECK(failed.second == clean.second);
}
