// A GPU store replays a step's launches as a CUDA graph (exec/cuda/
// step_graphs.cuh): a graph holds each kernel's arguments as they were at
// capture, so a replay is right only if nothing a launch reads from the host
// changes while the step's key stays the same. That is the store's side,
// and it is tested here on the CPU: a backend that captures a step as a
// tape of runner calls with their arguments fixed (the bindings copied, as
// a kernel's pointers and shapes are), and replays the tape instead of
// running the step, by the same replay_cache a GPU store uses
// (exec/cuda/replay_cache.hpp). Uploads and downloads inside a step, which
// a graph cannot hold, fail the test, and so does scratch reserved inside
// one (a device allocation would wait for the device, and change the key).
#include <doctest/doctest.h>

#include <cstring>
#include <functional>
#include <memory>
#include <vector>

#include <ctg/ctg.hpp>
#include <ctg/exec/cuda/replay_cache.hpp>

#include "same_state.hpp"

namespace {
using ctg::dyn;
using ctg::i32;
using tape = std::vector<std::function<void()>>;

struct taping_backend : ctg::cpu::backend {
  using base = ctg::cpu::backend;
  using workspace = base::workspace;
  static constexpr bool replays_launches = true;

  static inline tape* recording = nullptr;  // while a step is captured
  static inline bool launching = false;    // while a step's launches run (as they are, captured or replayed)
  static inline ctg::cuda::replay_cache<std::shared_ptr<tape>> cache;
  static inline int runs = 0, captures = 0, replays = 0, reservations = 0;
  static inline bool fail_captures = false;  // every capture fails after recording: the step runs again as it is

  static void copy(workspace& ws, std::byte* dst, const std::byte* src, std::size_t bytes) {
    if (recording) recording->push_back([&ws, dst, src, bytes] { base::copy(ws, dst, src, bytes); });
    else base::copy(ws, dst, src, bytes);
  }
  static void write_value(workspace& ws, std::byte* dst, const std::byte* bytes, std::size_t n) {
    if (!recording) return base::write_value(ws, dst, bytes, n);
    std::array<std::byte, 8> v{};
    std::memcpy(v.data(), bytes, n);
    recording->push_back([&ws, dst, v, n] { base::write_value(ws, dst, v.data(), n); });
  }
  static void upload(workspace& ws, std::byte* dst, const void* src, std::size_t bytes) {
    if (recording) FAIL("an upload inside a step's launches: a graph cannot hold it");
    base::upload(ws, dst, src, bytes);
  }
  static void download(workspace& ws, void* dst, const std::byte* src, std::size_t bytes) {
    if (recording) FAIL("a download inside a step's launches: a graph cannot hold it");
    base::download(ws, dst, src, bytes);
  }

  // Each runner, recorded with the bindings of the moment (N: the step's nodes).
  template <ctg::runner_t<workspace> R, std::size_t N>
  static void taped(const ctg::group_call& g, const ctg::bindings_view& b, workspace& ws, float* amax) {
    if (!recording) return R(g, b, ws, amax);
    auto buf = std::make_shared<std::vector<std::byte*>>(b.buf, b.buf + N);
    auto shape = std::make_shared<std::vector<ctg::rt_shape>>(b.shape, b.shape + N);
    recording->push_back(
        [g, buf, shape, key = b.key, &ws, amax] { R(g, ctg::bindings_view{buf->data(), shape->data(), key}, ws, amax); });
  }
  template <class Key, std::size_t R>
  static consteval ctg::runner_t<workspace> runner_for() {
    constexpr ctg::runner_t<workspace> r = base::runner_for<Key, R>();
    if constexpr (r == nullptr) return nullptr;
    else return &taped<r, ctg::step_of<Key>::nodes::size>;
  }
  // Each scratch reservation (the CPU's: a reduction over other axes'
  // accumulators, in the blocks of the transformer's stack too), counted;
  // none while a step's launches run.
  template <ctg::scratch_sizer_t<workspace> S>
  static void counted(const ctg::group_call& g, const ctg::bindings_view& b, workspace& ws) {
    if (launching) FAIL("scratch reserved inside a step's launches: a step must allocate nothing");
    ++reservations;
    S(g, b, ws);
  }
  template <class Key, std::size_t R>
  static consteval ctg::scratch_sizer_t<workspace> scratch_for() {
    constexpr ctg::scratch_sizer_t<workspace> s = base::scratch_for<Key, R>();
    if constexpr (s == nullptr) return nullptr;
    else return &counted<s>;
  }

  template <class Body>
  static void replay_launches(workspace& ws, std::span<const std::byte> key, Body&& body) {
    launching = true;
    const std::size_t accumulators = ws.axis_acc.size();
    launch(key, body);
    CHECK(ws.axis_acc.size() == accumulators);  // (nothing grew)
    launching = false;
  }
  template <class Body>
  static void launch(std::span<const std::byte> key, Body& body) {
    auto [act, slot] = cache.next(key);
    using action = decltype(cache)::action;
    if (act == action::replay) {
      for (auto& call : *slot->graph) call();
      ++replays;
    } else if (act == action::capture) {
      auto t = std::make_shared<tape>();
      recording = t.get();
      body();  // (recorded, not run: a capture launches nothing)
      recording = nullptr;
      if (fail_captures) {
        cache.capture_failed(*slot);
        body();
        ++runs;
        return;
      }
      for (auto& call : *t) call();
      cache.captured(*slot, std::move(t));
      ++captures;
    } else {
      body();
      ++runs;
    }
  }
  static void reset() {
    cache.clear();
    runs = captures = replays = reservations = 0;
    fail_captures = false;
  }
};

template <class Step>
using taping_store = ctg::basic_store<taping_backend, ctg::step_key_t<Step>>;

template <ctg::nn::checkpointing C>
struct config {
  static constexpr ctg::dim_t vocab = 11, max_seq = 6, dim = 8, heads = 2, head_dim = 4, hidden = 12;
  static constexpr std::size_t layers = 2;
  static constexpr ctg::nn::checkpointing checkpoint = C;
  static constexpr double dropout = 0.0;
};
struct with_dropout : config<ctg::nn::checkpointing::none> {
  static constexpr double dropout = 0.25;
};
using Ids = ctg::input<"ids", i32, dyn, dyn>;
using Pos = ctg::input<"pos", i32, dyn>;
using Tg = ctg::input<"targets", i32, dyn, dyn>;

// Plain SGD on host memory, the same on both stores.
template <class Store>
void sgd(Store& s, float lr) {
  [&]<class... Ls>(ctg::tl::list<Ls...>) {
    auto one = [&]<class L>(std::type_identity<L>) {
      if constexpr (L::role == ctg::leaf_role::param) {
        auto p = s.template param<L>();
        auto g = s.template grad<L>();
        for (std::size_t i = 0; i < p.size(); ++i)
          p[i] = ctg::store_as<typename L::dtype>(ctg::load_as(p[i]) - lr * ctg::load_as(g[i]));
      }
    };
    (one(std::type_identity<Ls>{}), ...);
  }(ctg::leaves_t<typename Store::step_type::nodes>{});
}

// Steps on batches[s] x 5 tokens, the replaying store against the CPU's:
// the same loss, parameters, gradients and FP8 state, bit for bit, at every
// step. The token ids change every step in the same memory (a CPU store
// reads fed memory in place: its address is part of the key), except at
// step `moved_at`, fed from a copy elsewhere.
template <class Policy, ctg::nn::checkpointing C>
void replayed_steps_match(const std::vector<int>& batches, std::size_t moved_at = ~std::size_t{0}) {
  using model = ctg::nn::transformer<config<C>, Policy>;
  auto step = ctg::value_and_grad(model::loss(Ids{}, Pos{}, Tg{}));
  using Step = decltype(step);
  taping_backend::reset();
  taping_store<Step> a;
  ctg::cpu::device dev;
  auto b = ctg::make_store(dev, step);
  ctg::nn::init_params(a, 4, 0.3);
  ctg::nn::init_params(b, 4, 0.3);
  const std::vector<i32> pos{0, 1, 2, 3, 4};
  std::uint32_t r = 7;
  std::vector<i32> all_ids(3 * 5), all_tg(all_ids.size());
  for (std::size_t s = 0; s < batches.size(); ++s) {
    const std::size_t n = static_cast<std::size_t>(batches[s]) * 5;
    for (std::size_t i = 0; i < n; ++i) {
      r = r * 1664525u + 1013904223u;
      all_ids[i] = static_cast<i32>(r >> 24) % 11;
      all_tg[i] = static_cast<i32>(r >> 16) % 11;
    }
    const std::vector<i32> copy(all_ids.begin(), all_ids.begin() + static_cast<std::ptrdiff_t>(n));
    const std::span<const i32> ids = s == moved_at ? std::span<const i32>(copy) : std::span<const i32>(all_ids.data(), n);
    const std::span<const i32> tg(all_tg.data(), n);
    auto feeds = [&](auto& st) {
      return step(st, ctg::feed<Ids>(ids, batches[s], 5), ctg::feed<Pos>(pos, 5), ctg::feed<Tg>(tg, batches[s], 5));
    };
    const float la = feeds(a), lb = feeds(b);
    INFO("step " << s << ", batch " << batches[s]);
    CHECK(std::memcmp(&la, &lb, sizeof la) == 0);
    same_state::check_same_state(a, b);
    sgd(a, 0.05f);
    sgd(b, 0.05f);
  }
}
}  // namespace

TEST_CASE("replay_cache: the first step with a key runs, the next is captured, later ones replay") {
  using cache_t = ctg::cuda::replay_cache<int>;
  using action = cache_t::action;
  cache_t c;
  const std::vector<std::byte> a{std::byte{1}}, b{std::byte{2}}, d{std::byte{3}};
  auto next = [&](const std::vector<std::byte>& k) {
    auto [act, slot] = c.next(k);
    if (act == action::capture) cache_t::captured(*slot, 1);
    return act;
  };
  CHECK(next(a) == action::run);
  CHECK(next(a) == action::capture);
  CHECK(next(a) == action::replay);
  // Two keys alternate (a store's first output alternates between two buffers): both kept.
  CHECK(next(b) == action::run);
  CHECK(next(a) == action::replay);
  CHECK(next(b) == action::capture);
  CHECK(next(a) == action::replay);
  CHECK(next(b) == action::replay);
  // A third key evicts the oldest (a): a comes back as new.
  CHECK(next(d) == action::run);
  CHECK(next(b) == action::replay);
  CHECK(next(a) == action::run);
  // A failed capture is not tried again: its key runs as it is.
  auto [act, slot] = c.next(a);
  CHECK(act == action::capture);
  cache_t::capture_failed(*slot);
  CHECK(next(a) == action::run);
  CHECK(next(a) == action::run);
}

TEST_CASE("replayed steps give the bits of steps run as they are (bf16, every layer recomputed)") {
  replayed_steps_match<ctg::precision::autocast<ctg::bf16>, ctg::nn::checkpointing::every_layer>({3, 3, 3, 3, 3, 3, 2, 2, 2, 2, 3});
  // Steps 0-1 run, 2-3 are captured (the loss alternates between two
  // buffers: two keys), 4-5 replay; batch 2 is a new pair of keys (2 runs,
  // 2 captures), and batch 3 again a new key (evicted).
  CHECK(taping_backend::runs == 5);
  CHECK(taping_backend::captures == 4);
  CHECK(taping_backend::replays == 2);
}

TEST_CASE("scratch is reserved before a step's launches, once for each new set of shapes") {
  using model = ctg::nn::transformer<config<ctg::nn::checkpointing::every_layer>, ctg::precision::autocast<ctg::bf16>>;
  auto step = ctg::value_and_grad(model::loss(Ids{}, Pos{}, Tg{}));
  taping_backend::reset();
  taping_store<decltype(step)> a;
  ctg::nn::init_params(a, 4, 0.3);
  const std::vector<i32> ids(15, 3), tg(15, 5), pos{0, 1, 2, 3, 4};
  auto run = [&](int batch) {
    const auto n = static_cast<std::size_t>(batch) * 5;
    step(a, ctg::feed<Ids>(std::span<const i32>(ids.data(), n), batch, 5), ctg::feed<Pos>(pos, 5),
         ctg::feed<Tg>(std::span<const i32>(tg.data(), n), batch, 5));
    return taping_backend::reservations;
  };
  // (The sizers are the CPU's: each reduction over other axes, the stack's block's included.)
  const int each = run(3);
  CHECK(each > 0);
  CHECK(run(3) == each);
  CHECK(run(2) == 2 * each);
  CHECK(run(2) == 2 * each);
  CHECK(run(3) == 3 * each);
}

TEST_CASE("replayed steps give the bits of steps run as they are (FP8 delayed scaling, no recompute)") {
  replayed_steps_match<ctg::precision::fp8<ctg::precision::delayed<>>, ctg::nn::checkpointing::none>(
      {3, 3, 3, 3, 3, 3, 3, 3}, 6);
  // Steps 0-1 run, 2-3 are captured, 4-5 and 7 replay; step 6's ids are elsewhere: it runs.
  CHECK(taping_backend::runs == 3);
  CHECK(taping_backend::captures == 2);
  CHECK(taping_backend::replays == 3);
}

TEST_CASE("a step with dropout runs its launches as they are (its random key changes every step)") {
  using model = ctg::nn::transformer<with_dropout, ctg::precision::full<ctg::f32>>;
  auto step = ctg::value_and_grad(model::loss(Ids{}, Pos{}, Tg{}));
  taping_backend::reset();
  taping_store<decltype(step)> a;
  ctg::nn::init_params(a, 4, 0.3);
  const std::vector<i32> ids(10, 3), tg(10, 5), pos{0, 1, 2, 3, 4};
  for (int s = 0; s < 4; ++s) step(a, ctg::feed<Ids>(ids, 2, 5), ctg::feed<Pos>(pos, 5), ctg::feed<Tg>(tg, 2, 5));
  CHECK(taping_backend::runs + taping_backend::captures + taping_backend::replays == 0);
}

namespace {
using RX = ctg::input<"x", ctg::f32, dyn, 16>;
using RW1 = ctg::param<"w1", ctg::f32, 16, 32>;
using RW2 = ctg::param<"w2", ctg::f32, 32, 32>;
using RS = ctg::param<"s", ctg::f32, 32>;
// Two checkpoint regions (their recompute rebinds buffers as a run goes),
// one reading the other's output.
auto regions_loss() {
  auto h1 = ctg::checkpoint(ctg::silu(ctg::matmul(RX{}, RW1{})) * RS{});
  auto inner = ctg::matmul(h1, RW2{});
  auto h2 = ctg::checkpoint(ctg::tanh(ctg::matmul(ctg::tanh(inner), RW2{})) * h1);  // (a product: backward reads it)
  return ctg::mean(ctg::square(h2)) + ctg::mean(ctg::sigmoid(inner)) * ctg::lit<0.25>;
}

// Replayed; and (failing) every capture fails after recording, so those
// steps run their host side twice (the store starts the launches again
// from the placed buffers): the CPU store's bits either way.
void regions_replayed(bool failing) {
  auto step = ctg::value_and_grad(regions_loss());
  static_assert(ctg::program<decltype(step)>::table.region_count == 2);
  taping_backend::reset();
  taping_backend::fail_captures = failing;
  taping_store<decltype(step)> a;
  ctg::cpu::device dev;
  auto b = ctg::make_store(dev, step);
  ctg::nn::init_params(a, 4, 0.3);
  ctg::nn::init_params(b, 4, 0.3);
  std::vector<float> x(4 * 16);
  for (int s = 0; s < 6; ++s) {
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = 0.05f * static_cast<float>((i * 7 + s * 3) % 23) - 0.5f;
    const float la = step(a, ctg::feed<RX>(x, 4)), lb = step(b, ctg::feed<RX>(x, 4));
    INFO("step " << s);
    CHECK(std::memcmp(&la, &lb, sizeof la) == 0);
    same_state::check_same_state(a, b);
    sgd(a, 0.1f);
    sgd(b, 0.1f);
  }
  CHECK(taping_backend::captures == (failing ? 0 : 2));
  CHECK(taping_backend::replays == (failing ? 0 : 2));
}
}  // namespace

TEST_CASE("replayed steps with checkpoint regions give the bits of steps run as they are") { regions_replayed(false); }

TEST_CASE("after a failed capture a step runs as it is: the same bits") {
  regions_replayed(true);
}

// A profiled store times each group alone (exec/group_profile.hpp), so it
// launches them one by one: no capture, no replay, and the same bits.
TEST_CASE("a profiled step runs its launches as they are: the same bits") {
  auto step = ctg::value_and_grad(regions_loss());
  taping_backend::reset();
  taping_store<decltype(step)> a;
  ctg::cpu::device dev;
  auto b = ctg::make_store(dev, step);
  ctg::nn::init_params(a, 4, 0.3);
  ctg::nn::init_params(b, 4, 0.3);
  a.profile_groups(true);
  std::vector<float> x(4 * 16);
  for (int s = 0; s < 4; ++s) {
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = 0.05f * static_cast<float>((i * 5 + s) % 19) - 0.4f;
    const float la = step(a, ctg::feed<RX>(x, 4)), lb = step(b, ctg::feed<RX>(x, 4));
    INFO("step " << s);
    CHECK(std::memcmp(&la, &lb, sizeof la) == 0);
    same_state::check_same_state(a, b);
  }
  CHECK(taping_backend::captures == 0);
  CHECK(taping_backend::replays == 0);
  CHECK(taping_backend::runs == 0);  // (replay_launches is not called at all)
  CHECK(!a.group_times().empty());
  for (const auto& t : a.group_times()) CHECK(t.calls >= 4);
}
