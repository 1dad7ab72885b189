// AdamW against an independent double-precision reference (written here from
// the formulas, not from the implementation): several steps with and without
// weight decay and clipping, an f32 master for a bf16 leaf, frozen leaves
// untouched, non-finite gradients rejected with nothing changed.
#include "error_message.hpp"
#include "temp_files.hpp"
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include <ctg/ctg.hpp>
#include <ctg/optim/optim.hpp>

namespace {
using W = ctg::param<"w", ctg::f32, 3, 4>;
using B = ctg::param<"b", ctg::bf16, 4>;
using F = ctg::frozen<"f", ctg::f32, 4>;
using X = ctg::input<"x", ctg::f32, ctg::dyn, 3>;

auto make_loss() { return ctg::mean(ctg::square(ctg::matmul(X{}, W{}) + ctg::cast<ctg::f32>(B{}) * F{})); }
using step_t = decltype(ctg::value_and_grad(make_loss()));
using store_t = decltype(ctg::make_store(std::declval<ctg::cpu::device>(), step_t{}));
using opt_t = ctg::optim::adamw<store_t>;

static_assert(opt_t::has_state<W> && opt_t::has_state<B>);
static_assert(!opt_t::has_state<F>, "a frozen leaf gets no optimizer state");
static_assert(!opt_t::has_master<W> && opt_t::has_master<B>);
// opt.master<F>(), opt.exp_avg<F>() do not compile: "ctg: frozen parameter: a frozen leaf has no optimizer state".
// opt.master<W>() does not compile: "ctg: an f32 parameter is its own master copy".
static_assert(opt_t::state_elements() == 2 * (12 + 4) + 4, "moments for w and b, a master for b only");

constexpr int batch = 5;

std::vector<float> inputs(int seed) {
  std::vector<float> x(batch * 3);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.7f * static_cast<float>(i + 1) + static_cast<float>(seed));
  return x;
}

void init(store_t& s) {
  auto w = s.param<W>();
  for (std::size_t i = 0; i < w.size(); ++i) w[i] = 0.3f * std::cos(1.3f * static_cast<float>(i)) + 0.05f;
  auto b = s.param<B>();
  for (std::size_t i = 0; i < b.size(); ++i) b[i] = ctg::bf16(0.2f * static_cast<float>(i) - 0.25f);
  auto f = s.param<F>();
  for (std::size_t i = 0; i < f.size(); ++i) f[i] = 1.0f + 0.5f * static_cast<float>(i);
}

template <class T>
std::vector<double> as_double(std::span<const T> v) {
  std::vector<double> out;
  for (const T& e : v) out.push_back(static_cast<double>(ctg::load_as<T>(e)));
  return out;
}
template <class T>
std::vector<double> as_double(std::span<T> v) {
  return as_double(std::span<const T>(v));
}

template <class T>
std::vector<unsigned char> bytes_of(std::span<T> v) {
  std::vector<unsigned char> out(v.size_bytes());
  if (!out.empty()) std::memcpy(out.data(), v.data(), out.size());
  return out;
}

// Straightforward AdamW in double: the formulas of the AdamW paper as
// torch.optim.AdamW applies them, with clip_grad_norm_ in front.
struct reference_adamw {
  double beta1, beta2, eps;
  std::vector<double> wd;  // per trainable leaf
  double max_norm;
  std::vector<std::vector<double>> p, m, v;  // one entry per trainable leaf
  long t = 0;

  double step(const std::vector<std::vector<double>>& grads, double lr) {
    double sq = 0;
    for (const auto& g : grads)
      for (double x : g) sq += x * x;
    const double norm = std::sqrt(sq);
    const double coef = max_norm > 0 ? std::min(max_norm / (norm + 1e-6), 1.0) : 1.0;
    ++t;
    for (std::size_t k = 0; k < grads.size(); ++k) {
      if (m[k].empty()) m[k].assign(grads[k].size(), 0.0), v[k].assign(grads[k].size(), 0.0);
      for (std::size_t i = 0; i < grads[k].size(); ++i) {
        const double g = grads[k][i] * coef;
        p[k][i] -= lr * wd[k] * p[k][i];
        m[k][i] = beta1 * m[k][i] + (1 - beta1) * g;
        v[k][i] = beta2 * v[k][i] + (1 - beta2) * g * g;
        const double m_hat = m[k][i] / (1 - std::pow(beta1, double(t)));
        const double v_hat = v[k][i] / (1 - std::pow(beta2, double(t)));
        p[k][i] -= lr * m_hat / (std::sqrt(v_hat) + eps);
      }
    }
    return norm;
  }
};

struct fixture {
  step_t step;
  ctg::cpu::device dev;
  store_t store = ctg::make_store(dev, step);
  fixture() { init(store); }
  float run(int seed) {
    const auto x = inputs(seed);
    return step(store, ctg::feed<X>(std::span<const float>(x), batch));
  }
  std::vector<std::vector<double>> grads() { return {as_double(store.grad<W>()), as_double(store.grad<B>())}; }
};

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double d = 0;
  for (std::size_t i = 0; i < a.size(); ++i) d = std::max(d, std::abs(a[i] - b[i]));
  return d;
}

// Runs `steps` steps of ctg's AdamW and the reference on the same gradients
// and checks params, masters, moments and the returned norm after each step.
void compare_with_reference(ctg::optim::adamw_config cfg, int steps, bool expect_clipping,
                            const std::vector<float>& lrs = {}) {
  fixture f;
  opt_t opt(f.store, cfg);
  // (w is a matrix, b a vector: decay_leaves::matrices decays w only.)
  const double wd_b = cfg.decay == ctg::optim::decay_leaves::matrices ? 0.0 : cfg.weight_decay;
  reference_adamw ref{cfg.beta1, cfg.beta2, cfg.eps, {cfg.weight_decay, wd_b}, cfg.max_grad_norm, {}, {{}, {}}, {{}, {}}};
  ref.p = {as_double(f.store.param<W>()), as_double(f.store.param<B>())};
  double max_err_w = 0, max_err_b = 0, max_err_m = 0, max_err_v = 0;
  bool clipped = false;
  for (int s = 0; s < steps; ++s) {
    f.run(s);
    const float lr = lrs.empty() ? cfg.lr : lrs[static_cast<std::size_t>(s)];
    const auto g = f.grads();
    const double ref_norm = ref.step(g, lr);
    const float norm = opt.step(f.store, lr);
    CHECK(opt.steps() == s + 1);
    CHECK(norm == doctest::Approx(ref_norm).epsilon(1e-6));
    clipped = clipped || (cfg.max_grad_norm > 0 && ref_norm > cfg.max_grad_norm);

    max_err_w = std::max(max_err_w, max_abs_diff(as_double(f.store.param<W>()), ref.p[0]));
    const auto master_b = as_double(opt.master<B>());
    max_err_b = std::max(max_err_b, max_abs_diff(master_b, ref.p[1]));
    max_err_m = std::max(max_err_m, max_abs_diff(as_double(opt.exp_avg<W>()), ref.m[0]));
    max_err_m = std::max(max_err_m, max_abs_diff(as_double(opt.exp_avg<B>()), ref.m[1]));
    max_err_v = std::max(max_err_v, max_abs_diff(as_double(opt.exp_avg_sq<W>()), ref.v[0]));
    max_err_v = std::max(max_err_v, max_abs_diff(as_double(opt.exp_avg_sq<B>()), ref.v[1]));
    // The stored bf16 parameter is its master rounded to nearest even.
    const auto pb = f.store.param<B>();
    const auto mb = opt.master<B>();
    for (std::size_t i = 0; i < pb.size(); ++i) CHECK(pb[i].bits == ctg::bf16(mb[i]).bits);
  }
  CHECK(clipped == expect_clipping);
  INFO("max errors: w " << max_err_w << ", b master " << max_err_b << ", m " << max_err_m << ", v " << max_err_v);
  // f32 rounding over a few steps: a few ulp of values of order 1. A wrong
  // formula (bias correction, decay, clipping, eps placement) is off by
  // about lr * something, i.e. >= 1e-4 here (measured: ~6e-8).
  CHECK(max_err_w < 5e-7);
  CHECK(max_err_b < 5e-7);
  CHECK(max_err_m < 3e-7);
  CHECK(max_err_v < 5e-9);
}
}  // namespace

TEST_CASE("adamw matches a double reference: no weight decay, no clipping") {
  compare_with_reference({.lr = 1e-2f, .weight_decay = 0.0f}, 10, false);
}

TEST_CASE("adamw matches a double reference: decoupled weight decay") {
  compare_with_reference({.lr = 1e-2f, .weight_decay = 0.1f}, 10, false);
}

TEST_CASE("adamw matches a double reference: weight decay of matrices only (the bias gets none)") {
  compare_with_reference({.lr = 1e-2f, .weight_decay = 0.3f, .decay = ctg::optim::decay_leaves::matrices}, 10, false);
}

TEST_CASE("adamw matches a double reference: global-norm clipping, other betas and eps") {
  compare_with_reference({.lr = 2e-2f, .beta1 = 0.8f, .beta2 = 0.95f, .eps = 1e-6f, .weight_decay = 0.05f,
                          .max_grad_norm = 0.05f},
                         10, true);
}

TEST_CASE("adamw matches a double reference: an lr per call (a schedule)") {
  const ctg::optim::warmup_cosine sched{.peak_lr = 3e-2f, .min_lr = 1e-3f, .warmup_steps = 3, .total_steps = 8};
  std::vector<float> lrs;
  for (int s = 0; s < 10; ++s) lrs.push_back(sched(s));
  compare_with_reference({.lr = 123.0f, .weight_decay = 0.1f}, 10, false, lrs);
}

TEST_CASE("clipping that does not bind changes nothing; the norm is the independent sqrt of the sum of squares") {
  fixture a, b;
  opt_t oa(a.store, {.lr = 1e-2f}), ob(b.store, {.lr = 1e-2f, .max_grad_norm = 1e6f});
  for (int s = 0; s < 4; ++s) {
    a.run(s);
    b.run(s);
    double sq = 0;
    for (const auto& g : a.grads())
      for (double x : g) sq += x * x;
    const float na = oa.step(a.store), nb = ob.step(b.store);
    CHECK(na == doctest::Approx(std::sqrt(sq)).epsilon(1e-7));
    CHECK(na == nb);
    CHECK(bytes_of(a.store.param<W>()) == bytes_of(b.store.param<W>()));
    CHECK(bytes_of(a.store.param<B>()) == bytes_of(b.store.param<B>()));
    CHECK(bytes_of(oa.master<B>()) == bytes_of(ob.master<B>()));
  }
}

TEST_CASE("a binding clip scales every gradient by max_norm / (norm + 1e-6)") {
  fixture f;
  const float max_norm = 0.01f;
  opt_t opt(f.store, {.lr = 1e-2f, .weight_decay = 0.0f, .max_grad_norm = max_norm});
  f.run(0);
  const auto g = f.grads();
  const float norm = opt.step(f.store);
  REQUIRE(norm > 10 * max_norm);
  // After one step m = (1 - beta1) * g * coef, whatever the update.
  const double coef = max_norm / (static_cast<double>(norm) + 1e-6);
  const auto m = opt.exp_avg<W>();
  for (std::size_t i = 0; i < m.size(); ++i) CHECK(m[i] == doctest::Approx(0.1 * g[0][i] * coef).epsilon(1e-5));
  // And the clipped gradients have norm max_norm.
  double sq = 0;
  for (const auto& gg : g)
    for (double x : gg) sq += (x * coef) * (x * coef);
  CHECK(std::sqrt(sq) == doctest::Approx(max_norm).epsilon(1e-5));
}

TEST_CASE("a bf16 parameter keeps an f32 master that moves below bf16 resolution") {
  fixture f;
  opt_t opt(f.store, {.lr = 1e-4f, .weight_decay = 0.0f});
  const auto before = bytes_of(f.store.param<B>());
  // The master starts as the exact bf16 value.
  for (std::size_t i = 0; i < 4; ++i) CHECK(opt.master<B>()[i] == ctg::to_float(f.store.param<B>()[i]));
  f.run(0);
  opt.step(f.store);
  bool master_differs = false;
  for (std::size_t i = 0; i < 4; ++i) {
    const float mb = opt.master<B>()[i], pb = ctg::to_float(f.store.param<B>()[i]);
    master_differs = master_differs || mb != pb;
    CHECK(f.store.param<B>()[i].bits == ctg::bf16(mb).bits);
  }
  CHECK(master_differs);
  // An update of 1e-4 on values of order 0.25 is below bf16's resolution: the
  // stored parameter does not move, the master does; a bf16-only optimizer
  // would never make progress here.
  CHECK(bytes_of(f.store.param<B>()) == before);
}

TEST_CASE("frozen leaves are never written") {
  fixture f;
  opt_t opt(f.store, {.lr = 5e-2f, .weight_decay = 0.5f, .max_grad_norm = 1.0f});
  const auto frozen = bytes_of(f.store.param<F>());
  for (int s = 0; s < 5; ++s) {
    f.run(s);
    opt.step(f.store);
  }
  CHECK(bytes_of(f.store.param<F>()) == frozen);
}

namespace {
using test_util::message_of;

struct snapshot {
  std::vector<unsigned char> w, b, f, mw, vw, mb, vb, master_b;
  std::int64_t steps;
  snapshot(store_t& s, const opt_t& o)
      : w(bytes_of(s.param<W>())), b(bytes_of(s.param<B>())), f(bytes_of(s.param<F>())),
        mw(bytes_of(o.exp_avg<W>())), vw(bytes_of(o.exp_avg_sq<W>())), mb(bytes_of(o.exp_avg<B>())),
        vb(bytes_of(o.exp_avg_sq<B>())), master_b(bytes_of(o.master<B>())), steps(o.steps()) {}
  bool operator==(const snapshot&) const = default;
};
}  // namespace

TEST_CASE("a non-finite gradient throws naming the leaf and changes nothing") {
  for (float bad : {std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
    fixture f;
    opt_t opt(f.store, {.lr = 1e-2f, .max_grad_norm = 1.0f});
    for (int s = 0; s < 2; ++s) {
      f.run(s);
      opt.step(f.store);
    }
    const snapshot before(f.store, opt);
    auto x = inputs(7);
    x[4] = bad;
    f.step(f.store, ctg::feed<X>(std::span<const float>(x), batch));
    // The first trainable leaf (in wrt order) with a non-finite gradient.
    std::string_view first;
    [&]<class... Ls>(ctg::tl::list<Ls...>) {
      auto one = [&]<class L>(std::type_identity<L>) {
        for (const auto& e : f.store.grad<L>())
          if (first.empty() && !std::isfinite(static_cast<double>(ctg::load_as(e)))) first = L::name.c_str();
      };
      (one(std::type_identity<Ls>{}), ...);
    }(step_t::wrt{});
    REQUIRE_FALSE(first.empty());
    const std::string m = message_of([&] { opt.step(f.store); });
    std::string quoted = "'";
    quoted.append(first).append("'");
    CHECK(m.find(quoted) != std::string::npos);
    CHECK(m.find("not finite") != std::string::npos);
    CHECK(snapshot(f.store, opt) == before);
    // A good step afterwards goes through.
    f.run(3);
    CHECK(std::isfinite(opt.step(f.store)));
    CHECK(opt.steps() == 3);
  }
}

TEST_CASE("a leaf whose gradient alone is not finite is the one named") {
  // A huge (finite) frozen f: r = x w + b f is finite, the gradient of w
  // (x^T 2r/n) is finite, the gradient of b (sum 2r/n * f) overflows.
  fixture f;
  opt_t opt(f.store);
  f.store.param<F>()[2] = 1e30f;
  f.run(0);
  for (float e : f.store.grad<W>()) REQUIRE(std::isfinite(e));
  bool b_bad = false;
  for (auto e : f.store.grad<B>()) b_bad = b_bad || !std::isfinite(ctg::to_float(e));
  REQUIRE(b_bad);
  const snapshot before(f.store, opt);
  const std::string m = message_of([&] { opt.step(f.store); });
  CHECK(m.find("gradient of 'b' is not finite") != std::string::npos);
  CHECK(m.find("'w'") == std::string::npos);
  CHECK(snapshot(f.store, opt) == before);
}

TEST_CASE("bad configuration and lr throw ctg::error") {
  fixture f;
  CHECK(message_of([&] { opt_t o(f.store, {.lr = -1.0f}); }).find("lr") != std::string::npos);
  CHECK(message_of([&] { opt_t o(f.store, {.beta1 = 1.0f}); }).find("beta1") != std::string::npos);
  CHECK(message_of([&] { opt_t o(f.store, {.beta2 = -0.1f}); }).find("beta2") != std::string::npos);
  CHECK(message_of([&] { opt_t o(f.store, {.eps = std::nanf("")}); }).find("eps") != std::string::npos);
  CHECK(message_of([&] { opt_t o(f.store, {.weight_decay = -0.1f}); }).find("weight_decay") != std::string::npos);
  CHECK(message_of([&] { opt_t o(f.store, {.max_grad_norm = -1.0f}); }).find("max_grad_norm") != std::string::npos);
  opt_t opt(f.store);
  f.run(0);
  const snapshot before(f.store, opt);
  CHECK(message_of([&] { opt.step(f.store, std::numeric_limits<float>::infinity()); }).find("lr") !=
        std::string::npos);
  CHECK(snapshot(f.store, opt) == before);
}

TEST_CASE("sync_masters re-takes masters from re-initialised parameters") {
  fixture f;
  opt_t opt(f.store);
  auto b = f.store.param<B>();
  for (auto& e : b) e = ctg::bf16(0.75f);
  CHECK(opt.master<B>()[0] != 0.75f);
  opt.sync_masters(f.store);
  for (float v : opt.master<B>()) CHECK(v == 0.75f);
}

// Issue 15, item 5: the f32 master owns a narrow parameter's value. A write to
// the stored parameter after the optimizer exists would be undone by its next
// update; instead that update throws, naming the leaf, and changes nothing.
TEST_CASE("a direct write to a bf16 parameter after the optimizer exists: the next step throws, then sync_masters") {
  fixture f;
  opt_t opt(f.store, {.lr = 1e-3f, .weight_decay = 0.0f});
  f.run(0);
  opt.step(f.store);
  f.run(1);
  f.store.param<B>()[2] = ctg::bf16(0.75f);  // far from what the master holds
  const snapshot before(f.store, opt);
  const std::string m = message_of([&] { opt.step(f.store); });
  CHECK(m.find("parameter 'b' was written") != std::string::npos);
  CHECK(m.find("sync_masters") != std::string::npos);
  CHECK(snapshot(f.store, opt) == before);  // the write stands; nothing else moved
  // Taking the written values as masters: the update starts from 0.75 (an
  // AdamW step moves a parameter by at most about lr).
  opt.sync_masters(f.store);
  opt.step(f.store);
  CHECK(std::abs(opt.master<B>()[2] - 0.75f) < 2e-3f);
  CHECK(opt.steps() == 2);
}

TEST_CASE("a params-only load with an optimizer alive: the next step throws; loading the optimizer too continues exactly") {
  test_util::temp_dir dir("ctg_adamw_test_");
  fixture a;
  opt_t oa(a.store, {.lr = 1e-2f});
  for (int s = 0; s < 3; ++s) {
    a.run(s);
    oa.step(a.store);
  }
  ctg::io::save(dir / "full.ctg", a.store, oa);

  fixture b;  // another run, its optimizer alive
  opt_t ob(b.store, {.lr = 1e-2f});
  b.run(5);
  ob.step(b.store);
  ctg::io::load(dir / "full.ctg", b.store);  // parameters only: the masters are b's
  b.run(3);
  const snapshot before(b.store, ob);
  const std::string m = message_of([&] { ob.step(b.store); });
  CHECK(m.find("parameter 'b' was written") != std::string::npos);
  CHECK(m.find("io::load(path, store, opt)") != std::string::npos);
  CHECK(snapshot(b.store, ob) == before);
  // The optimizer's state with the parameters: b goes on exactly as a does.
  ctg::io::load(dir / "full.ctg", b.store, ob);
  a.run(3);
  b.run(3);
  const float na = oa.step(a.store), nb = ob.step(b.store);
  CHECK(na == nb);
  CHECK(snapshot(b.store, ob) == snapshot(a.store, oa));
}

TEST_CASE("an optimizer updates the store it was made for only; a store moved from is none") {
  // (adamw opt(a); opt.step(b) applied a's moments and step count to b's parameters, without a word.)
  using X = ctg::input<"x", ctg::f32, ctg::dyn, 2>;
  using W = ctg::param<"w", ctg::f32, 2, 2>;
  auto step = ctg::value_and_grad(ctg::sum(ctg::matmul(X{}, W{})));
  ctg::cpu::device dev{1};
  auto a = ctg::make_store(dev, step);
  auto b = ctg::make_store(dev, step);
  for (auto* s : {&a, &b}) ctg::nn::init_params(*s, 3, 0.5);
  ctg::optim::adamw opt(a, {.lr = 0.1f});
  const std::vector<float> x{1, 2, 3, 4};
  step(b, ctg::feed<X>(x, 2));
  const std::vector<float> before(b.param<W>().begin(), b.param<W>().end());
  CHECK_THROWS_WITH_AS(opt.step(b), doctest::Contains("this optimizer was made for another store"), ctg::error);
  CHECK(std::vector<float>(b.param<W>().begin(), b.param<W>().end()) == before);
  CHECK(opt.steps() == 0);
  // Moved, the store keeps its optimizer; the store moved from has none.
  auto moved = std::move(a);
  step(moved, ctg::feed<X>(x, 2));
  opt.step(moved);
  CHECK(opt.steps() == 1);
  CHECK_THROWS_WITH_AS(opt.step(a), doctest::Contains("made for another store"), ctg::error);
  // Nor is it saved or loaded with another store (b's parameters were saved
  // with a's moments and step count, and training resumed from them).
  const test_util::temp_dir dir("ctg_adamw_store_");
  const auto file = (dir / "ckpt.ctg").string();
  CHECK_THROWS_WITH_AS(ctg::io::save(file, b, opt), doctest::Contains("made for another store"), ctg::error);
  CHECK_FALSE(std::filesystem::exists(file));
  ctg::io::save(file, moved, opt);
  const auto b_before = std::vector<float>(b.param<W>().begin(), b.param<W>().end());
  CHECK_THROWS_WITH_AS(ctg::io::load(file, b, opt), doctest::Contains("made for another store"), ctg::error);
  CHECK(std::vector<float>(b.param<W>().begin(), b.param<W>().end()) == b_before);
  CHECK(opt.steps() == 1);
}

// (The check stopped one element short: a write to the last was undone.)
TEST_CASE("adamw: a write to the last element of a bf16 parameter is detected too") {
  using B = ctg::param<"b", ctg::bf16, 37>;
  auto step = ctg::value_and_grad(ctg::sum(ctg::square(ctg::cast<ctg::f32>(B{}))));
  ctg::cpu::device dev;
  auto s = ctg::make_store(dev, step);
  for (auto& v : s.param<B>()) v = ctg::bf16(0.5f);
  ctg::optim::adamw opt(s, {.lr = 1e-3f, .weight_decay = 0.0f});
  step(s);
  opt.step(s);
  step(s);
  s.param<B>()[36] = ctg::bf16(0.75f);
  std::string msg;
  try {
    opt.step(s);
  } catch (const ctg::error& e) {
    msg = e.what();
  }
  CHECK(msg.find("parameter 'b' was written") != std::string::npos);
}

namespace {
template <ctg::fixed_string P>
struct affine_block {
  template <ctg::expr H>
  constexpr auto operator()(H h) const {
    return ctg::tanh(ctg::matmul(h, ctg::param<P + ".w", ctg::f32, 4, 4>{}) + ctg::param<P + ".b", ctg::f32, 4>{}) *
           ctg::param<P + ".scale", ctg::f32, 4>{};
  }
};
template <ctg::fixed_string P>
struct nested_block {
  template <ctg::expr H>
  constexpr auto operator()(H h) const {
    return ctg::nn::stack<2, affine_block>(h) + ctg::param<P + ".outer_b", ctg::f32, 4>{};
  }
};
using SX = ctg::input<"x", ctg::f32, ctg::dyn, 4>;
using Head = ctg::param<"head", ctg::f32, 4, 2>;
using HeadBias = ctg::param<"head_bias", ctg::f32, 2>;

template <class Body>
auto head_loss(Body body) {
  return ctg::mean(ctg::square(ctg::matmul(body, Head{}) + HeadBias{}));
}

// One AdamW step from the same parameters and gradient with decay of
// matrices only gives each matrix what decay of every leaf gives it, and
// each vector what no decay gives it, bit for bit. `matrix` names the leaves
// of two dims or more in one layer (written here from the model, not from
// ctg's rule).
template <class Step>
void check_matrices_only(Step step, const std::vector<std::string>& matrix) {
  ctg::cpu::device dev{1};
  using store_type = decltype(ctg::make_store(dev, step));
  std::vector<float> x(6 * 4);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.3f * static_cast<float>(i) + 0.2f);
  auto after_one_step = [&](ctg::optim::adamw_config cfg) {
    auto st = std::make_unique<store_type>(ctg::make_store(dev, step));
    ctg::nn::init_params(*st, 5, 0.5);
    ctg::optim::adamw opt(*st, cfg);
    step(*st, ctg::feed<SX>(x, 6));
    opt.step(*st);
    return st;
  };
  const auto every = after_one_step({.lr = 0.05f, .weight_decay = 0.5f});
  const auto none = after_one_step({.lr = 0.05f, .weight_decay = 0.0f});
  const auto matrices =
      after_one_step({.lr = 0.05f, .weight_decay = 0.5f, .decay = ctg::optim::decay_leaves::matrices});
  std::size_t checked = 0;
  ctg::tl::for_each_indexed<typename Step::wrt>([&]<std::size_t K, class L>() {
    const bool is_matrix = std::find(matrix.begin(), matrix.end(), L::name.c_str()) != matrix.end();
    const auto got = matrices->template param<L>();
    const auto want = (is_matrix ? every : none)->template param<L>();
    const auto other = (is_matrix ? none : every)->template param<L>();
    INFO(L::name.c_str() << (is_matrix ? ": decayed" : ": not decayed"));
    CHECK(std::memcmp(got.data(), want.data(), got.size_bytes()) == 0);
    CHECK(std::memcmp(got.data(), other.data(), got.size_bytes()) != 0);  // (the decay moves it)
    ++checked;
  });
  CHECK(checked == Step::wrt::size);
}
}  // namespace

TEST_CASE("decay_leaves::matrices: a stack's biases and norm scales get no decay, its matrices do; nested too") {
  // A stacked leaf has a leading dim per stack ([3, 4] for a bias in a stack
  // of 3, [2, 2, 4] in a stack of 2 inside one of 2): the rule counts the
  // dims in one layer.
  auto flat = ctg::value_and_grad(head_loss(ctg::nn::stack<3, affine_block>(SX{})));
  using flat_nodes = decltype(flat)::nodes;
  static_assert(ctg::per_layer_rank<flat_nodes, ctg::param<"layers.{i}.w", ctg::f32, 3, 4, 4>> == 2);
  static_assert(ctg::per_layer_rank<flat_nodes, ctg::param<"layers.{i}.b", ctg::f32, 3, 4>> == 1);
  static_assert(ctg::per_layer_rank<flat_nodes, Head> == 2 && ctg::per_layer_rank<flat_nodes, HeadBias> == 1);
  check_matrices_only(flat, {"layers.{i}.w", "head"});

  auto nested = ctg::value_and_grad(head_loss(ctg::nn::stack<2, nested_block>(SX{})));
  using nested_nodes = decltype(nested)::nodes;
  static_assert(ctg::per_layer_rank<nested_nodes, ctg::param<"layers.{i}.w", ctg::f32, 2, 2, 4, 4>> == 2);
  static_assert(ctg::per_layer_rank<nested_nodes, ctg::param<"layers.{i}.b", ctg::f32, 2, 2, 4>> == 1);
  static_assert(ctg::per_layer_rank<nested_nodes, ctg::param<"layers.{i}.outer_b", ctg::f32, 2, 4>> == 1);
  check_matrices_only(nested, {"layers.{i}.w", "head"});
}

TEST_CASE("the decay choice is saved and restored with the optimizer (tests/unit/state_file.cpp: older files)") {
  test_util::temp_dir dir("ctg_adamw_decay_");
  fixture f;
  opt_t opt(f.store, {.lr = 1e-2f, .weight_decay = 0.1f, .decay = ctg::optim::decay_leaves::matrices});
  f.run(0);
  opt.step(f.store);
  ctg::optim::save(dir / "decay.ctg", f.store, opt);
  opt_t other(f.store, {.lr = 1e-2f, .weight_decay = 0.1f});
  REQUIRE(other.config().decay == ctg::optim::decay_leaves::every_leaf);
  ctg::optim::load(dir / "decay.ctg", f.store, other);
  CHECK(other.config().decay == ctg::optim::decay_leaves::matrices);
  CHECK(other.steps() == 1);
}
