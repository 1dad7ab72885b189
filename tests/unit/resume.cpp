// Exact resume (issue 15 item 4): a model with dropout and FP8 delayed
// scaling, trained 3 steps with AdamW, saved, loaded into a fresh store and a
// fresh optimizer and trained 3 more, gives bitwise the losses, gradients and
// stored leaves (parameters and FP8 amax histories and scales) of 6 steps
// run without stopping. The dropout masks are keyed by the store's seed and
// step count, so both must come back from the file.
#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include <ctg/io/safetensors.hpp>
#include <ctg/optim/optim.hpp>

#include "grad_check.hpp"
#include "same_state.hpp"

namespace fs = std::filesystem;

namespace {
using ctg::dyn;
namespace pr = ctg::precision;
using X = ctg::input<"x", ctg::f32, dyn, 8>;
using R = ctg::input<"r", ctg::f32, dyn, 4>;
using W1 = ctg::param<"w1", ctg::f32, 8, 8>;
using W2 = ctg::param<"w2", ctg::bf16, 8, 4>;  // narrow: AdamW keeps an f32 master
using D = pr::delayed<4>;
using XHistory = ctg::scaling::delayed<"b1.x", D>::history_leaf;
using GScale = ctg::scaling::delayed<"b1.g", D>::scale_leaf;

// An FP8 (delayed scaling) product, dropout, a bf16 product, dropout again.
auto loss() {
  auto q = ctg::fp8_matmul<ctg::f32, ctg::scaling::delayed<"b1.g", D>>(
      ctg::quantize<ctg::e4m3, ctg::scaling::delayed<"b1.x", D>>(X{}),
      ctg::quantize<ctg::e4m3, ctg::scaling::delayed<"b1.w", D>>(W1{}));
  auto h = ctg::dropout<"b1.drop">(ctg::silu(q), ctg::lit<0.25>) + X{};
  auto out = ctg::matmul(ctg::tanh(h), ctg::cast<ctg::f32>(W2{}));
  return ctg::sum(ctg::dropout<"out.drop">(out, ctg::lit<0.3>) * R{});
}
using step_t = decltype(ctg::value_and_grad(loss()));
using store_t = decltype(ctg::make_store(std::declval<ctg::cpu::device>(), step_t{}));
using opt_t = ctg::optim::adamw<store_t>;

static_assert([]<class... Ls>(ctg::tl::list<Ls...>) {
  return (std::size_t(0) + ... + std::size_t(Ls::role == ctg::leaf_role::state));
}(ctg::leaves_t<step_t::nodes>{}) == 2 * 3, "three delayed quantizers, each a history and a scale leaf");

const ctg::optim::adamw_config config{.lr = 0.05f, .weight_decay = 0.02f, .max_grad_norm = 2.0f};

// The batch of step s: the same for every run.
struct batch {
  std::vector<float> x, r;
  explicit batch(int s) {
    gc::rng g(100 + static_cast<std::uint64_t>(s));
    x = gc::data_of<float>(g.vec(5 * 8, -2, 2));
    r = gc::data_of<float>(g.vec(5 * 4, -1, 1));
  }
};

struct run {
  step_t step;
  ctg::cpu::device dev;
  store_t store = ctg::make_store(dev, step);
  float go(int s) {
    const batch b(s);
    return step(store, ctg::feed<X>(b.x, 5), ctg::feed<R>(b.r, 5));
  }
};

using same_state::check_same_leaves;
using same_state::check_same_state;

struct temp_dir {
  fs::path path = fs::temp_directory_path() / ("ctg_resume_test_" + std::to_string(std::random_device{}()));
  temp_dir() { fs::create_directories(path); }
  ~temp_dir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};
}  // namespace

TEST_CASE("train 3 steps, save, load into a fresh store and optimizer, train 3 more: bitwise 6 steps") {
  constexpr int first = 3, more = 3;
  temp_dir dir;
  const fs::path path = dir.path / "ckpt.ctg";

  run a;
  a.store.seed(2026);
  ctg::nn::init_params(a.store, 11, 0.4);
  opt_t opt_a(a.store, config);
  for (int s = 0; s < first; ++s) {
    a.go(s);
    opt_a.step(a.store);
  }
  ctg::optim::save(path, a.store, opt_a);
  // The FP8 state has moved from its start, so a load that missed it would show.
  CHECK(a.store.param<GScale>()[0] != 1.0f);
  CHECK(a.store.param<XHistory>()[1] != 0.0f);

  // A fresh store (seed 0, no steps run), other parameters, a default optimizer.
  run b;
  ctg::nn::init_params(b.store, 12, 0.4);
  opt_t opt_b(b.store);
  ctg::optim::load(path, b.store, opt_b);
  check_same_leaves(a.store, b.store);
  CHECK(b.store.seed() == 2026);
  CHECK(b.store.steps_run() == first);
  CHECK(opt_b.steps() == first);

  for (int s = first; s < first + more; ++s) {
    INFO("step " << s);
    const float la = a.go(s), lb = b.go(s);
    CHECK(std::memcmp(&la, &lb, sizeof la) == 0);
    check_same_state(a.store, b.store);
    const float na = opt_a.step(a.store), nb = opt_b.step(b.store);
    CHECK(std::memcmp(&na, &nb, sizeof na) == 0);
    check_same_state(a.store, b.store);
  }
}

TEST_CASE("a load drops a gradient no update applied: rolling back past a step, the update needs a new one") {
  // (The gradient of the values the load replaced stayed, and the next update applied it to the loaded ones.)
  temp_dir dir;
  const fs::path path = dir.path / "ckpt.ctg";
  run a;
  ctg::nn::init_params(a.store, 11, 0.4);
  opt_t opt_a(a.store, config);
  a.go(0);
  opt_a.step(a.store);
  ctg::optim::save(path, a.store, opt_a);
  a.go(1);  // (a step to roll back: its gradient is not applied)
  ctg::optim::load(path, a.store, opt_a);
  CHECK(a.store.accumulated() == 0);
  CHECK_THROWS_WITH_AS(opt_a.step(a.store), doctest::Contains("no gradients since the last update"), ctg::error);
  // The run goes on as one resumed from the file.
  run b;
  opt_t opt_b(b.store);
  ctg::optim::load(path, b.store, opt_b);
  const float la = a.go(1), lb = b.go(1);
  CHECK(std::memcmp(&la, &lb, sizeof la) == 0);
  const float na = opt_a.step(a.store), nb = opt_b.step(b.store);
  CHECK(std::memcmp(&na, &nb, sizeof na) == 0);
  check_same_state(a.store, b.store);
}

TEST_CASE("a store-only save and load keeps the seed and the step count too") {
  temp_dir dir;
  const fs::path path = dir.path / "store.ctg";
  run a;
  a.store.seed(0xFEDCBA9876543210ull);
  ctg::nn::init_params(a.store, 3, 0.4);
  a.go(0);
  a.go(1);
  ctg::io::save(path, a.store);
  run b;
  ctg::io::load(path, b.store);
  CHECK(b.store.seed() == 0xFEDCBA9876543210ull);
  CHECK(b.store.steps_run() == 2);
  const float la = a.go(2), lb = b.go(2);
  CHECK(std::memcmp(&la, &lb, sizeof la) == 0);
  check_same_state(a.store, b.store);
}

namespace {
// A store whose memory the host may not read (a GPU store's contract: only
// upload and download), here on the CPU backend: what the state file does
// for a device store, without a device.
struct opaque_backend : ctg::cpu::backend {
  static constexpr bool host_memory = false;
};
using opaque_store_t = ctg::basic_store<opaque_backend, ctg::step_key_t<step_t>>;

// Every stored leaf of an opaque store, downloaded, as one byte string.
std::vector<std::byte> downloaded_leaves(opaque_store_t& s) {
  std::vector<std::byte> all;
  [&]<class... Ls>(ctg::tl::list<Ls...>) {
    auto one = [&]<class L>(std::type_identity<L>) {
      if constexpr (!L::fed) {
        std::vector<typename L::dtype> v(L::dims::static_numel);
        s.download(L{}, std::span<typename L::dtype>(v));
        const auto* b = reinterpret_cast<const std::byte*>(v.data());
        all.insert(all.end(), b, b + v.size() * sizeof(typename L::dtype));
      }
    };
    (one(std::type_identity<Ls>{}), ...);
  }(ctg::leaves_t<step_t::nodes>{});
  return all;
}
}  // namespace

TEST_CASE("a store the host cannot read (a GPU's contract) saves and loads the CPU store's file") {
  temp_dir dir;
  const fs::path from_cpu = dir.path / "cpu.ctg", from_opaque = dir.path / "opaque.ctg", other = dir.path / "other.ctg";
  run a;
  a.store.seed(77);
  ctg::nn::init_params(a.store, 5, 0.4);
  a.go(0);
  a.go(1);
  ctg::io::save(from_cpu, a.store);

  // The CPU's file into the opaque store: a step there gives the CPU's loss bits.
  step_t step;
  opaque_store_t o;
  ctg::io::load(from_cpu, o);
  CHECK(o.seed() == 77);
  CHECK(o.steps_run() == 2);
  const batch b2(2);
  const float lo = step(o, ctg::feed<X>(b2.x, 5), ctg::feed<R>(b2.r, 5)), la = a.go(2);
  CHECK(std::memcmp(&lo, &la, sizeof lo) == 0);

  // Its file (values copied through the host) loads into a CPU store: the same leaves, FP8 state included.
  ctg::io::save(from_opaque, o);
  run c;
  ctg::io::load(from_opaque, c.store);
  check_same_leaves(a.store, c.store);
  CHECK(c.store.param<GScale>()[0] != 1.0f);  // (moved: the comparison is not of starting values)

  // A file of another model: an error naming the record, and the opaque store unchanged.
  {
    using V = ctg::param<"v", ctg::f32, 3>;
    auto other_step = ctg::value_and_grad(ctg::sum(ctg::square(V{})));
    ctg::cpu::device dev;
    auto os = ctg::make_store(dev, other_step);
    ctg::io::save(other, os);
  }
  const std::vector<std::byte> before = downloaded_leaves(o);
  CHECK_THROWS_WITH_AS(ctg::io::load(other, o), doctest::Contains("found no such record"), ctg::error);
  CHECK(downloaded_leaves(o) == before);
}

TEST_CASE("a file's FP8 state no step could have written is refused at load, nothing loaded") {
  // (An FP8 scale of 0 or NaN, or a NaN in an amax history, behind a valid
  // checksum loaded: the next step's FP8 products were all 0 or NaN.)
  const fs::path dir = fs::temp_directory_path() / ("ctg_resume_fp8_" + std::to_string(std::random_device{}()));
  fs::create_directories(dir);
  run a, b;
  a.go(0);
  const std::vector<float> scale_before(b.store.param<GScale>().begin(), b.store.param<GScale>().end());
  auto refused = [&](auto leaf, float v, const char* rule) {
    using L = decltype(leaf);
    const float kept = a.store.param<L>()[0];
    a.store.param<L>()[0] = v;
    ctg::io::save(dir / "bad.ctg", a.store);  // (well formed: the store's own values)
    a.store.param<L>()[0] = kept;
    const std::string want = "ctg: state file '" + (dir / "bad.ctg").string() + "': param '" +
                             std::string(L::name.c_str()) + "': element 0 is ";
    std::string message = "(loaded)";
    try {
      ctg::io::load(dir / "bad.ctg", b.store);
    } catch (const ctg::error& e) {
      message = e.what();
    }
    INFO(message);
    CHECK(message.starts_with(want));
    CHECK(message.ends_with(std::string(", where it is ") + rule + ": the file is corrupt; nothing was loaded"));
  };
  refused(GScale{}, 0.0f, "finite and > 0");
  refused(GScale{}, -2.0f, "finite and > 0");
  refused(GScale{}, NAN, "finite and > 0");
  refused(XHistory{}, -1.0f, "not negative");
  CHECK(std::vector<float>(b.store.param<GScale>().begin(), b.store.param<GScale>().end()) == scale_before);
  // What a step can record loads: an amax of 0 (a tensor of zeros), NaN or
  // inf (a non-finite step with check_finite off records them, as
  // TransformerEngine does).
  for (const float v : {0.0f, NAN, INFINITY}) {
    a.store.param<XHistory>()[0] = v;
    ctg::io::save(dir / "recorded.ctg", a.store);
    ctg::io::load(dir / "recorded.ctg", b.store);
    const float got = b.store.param<XHistory>()[0];
    CHECK(std::memcmp(&got, &v, sizeof v) == 0);
  }
  fs::remove_all(dir);
}

TEST_CASE("safetensors on a store the host cannot read: its leaves through host copies, both ways") {
  temp_dir dir;
  const fs::path from_cpu = dir.path / "cpu.safetensors", from_opaque = dir.path / "opaque.safetensors",
                 weights = dir.path / "weights.safetensors", other = dir.path / "other.safetensors";
  run a;
  ctg::nn::init_params(a.store, 5, 0.4);
  a.go(0);
  a.go(1);
  ctg::io::save_safetensors(from_cpu, a.store);

  // The CPU store's file into the opaque store, and the opaque store's file
  // into a CPU store: the same leaves, FP8 state included.
  opaque_store_t o;
  ctg::io::load_safetensors(from_cpu, o);
  ctg::io::save_safetensors(from_opaque, o);
  run c;
  ctg::io::load_safetensors(from_opaque, c.store);
  check_same_leaves(a.store, c.store);
  CHECK(c.store.param<GScale>()[0] != 1.0f);  // (moved: the comparison is not of starting values)

  // Weights only: the weights come in, the FP8 state starts afresh (scale 1, history 0).
  ctg::io::save_safetensors(weights, a.store, ctg::io::tensor_map{}.weights_only());
  ctg::io::load_safetensors(weights, o, ctg::io::tensor_map{}.weights_only());
  std::vector<float> scale(1), history(XHistory::dims::static_numel, -1.0f), w1(W1::dims::static_numel);
  o.download(GScale{}, std::span<float>(scale));
  o.download(XHistory{}, std::span<float>(history));
  o.download(W1{}, std::span<float>(w1));
  CHECK(scale[0] == 1.0f);
  CHECK(history == std::vector<float>(history.size(), 0.0f));
  CHECK(std::memcmp(w1.data(), a.store.param<W1>().data(), w1.size() * sizeof(float)) == 0);

  // A file of another model: an error naming the tensor, and the opaque store unchanged.
  {
    using V = ctg::param<"v", ctg::f32, 3>;
    auto other_step = ctg::value_and_grad(ctg::sum(ctg::square(V{})));
    ctg::cpu::device dev;
    auto os = ctg::make_store(dev, other_step);
    ctg::io::save_safetensors(other, os);
  }
  ctg::io::load_safetensors(from_cpu, o);
  const std::vector<std::byte> before = downloaded_leaves(o);
  CHECK_THROWS_WITH_AS(ctg::io::load_safetensors(other, o), doctest::Contains("found no such tensor"), ctg::error);
  CHECK(downloaded_leaves(o) == before);
}
