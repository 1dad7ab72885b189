// Whole training steps on the GPU (exec/cuda/store.cuh) against the CPU
// store: the tiny transformer's loss and every parameter gradient, over
// three steps (FP8 delayed scaling: the scales the device updates after
// each step are used by the next), in f32 (with dropout), bf16 autocast,
// FP8 delayed and FP8 current scaling. Then on the GPU alone: two stores
// give the same bits, and checkpointing every layer gives the bits of
// keeping every value, and steps replayed as CUDA graphs give the bits of
// steps launched one by one; a checkpoint saved on the GPU loads on the CPU
// and back. And a product of a bf16 input and an f32 weight
// (cuBLASLt multiplies one type: the store widens the input first) against
// the CPU. Training: five AdamW steps on each device (optim/cuda/adamw.cuh
// on the GPU), the losses compared step by step; AdamW's errors on the GPU
// (a gradient that is not finite, a bf16 parameter written behind the
// optimizer's back) change nothing. Without a GPU: skipped (77).
//
// Tolerances (the CPU and GPU sum in different orders; elementwise groups
// give the same bits). Gradients, per leaf, relative to its largest entry:
// f32 1e-4 (f32 sums of a few hundred terms, ~1e-6 each, through the
// backward chain); bf16 5e-2 (a value rounding to the other side of a bf16
// step moves by 2^-8 relative, and such flips propagate). FP8: a value
// rounding to the other side of an e5m2 step (2 mantissa bits) moves by up
// to 2^-2 of itself, so the largest entry error is bounded by 0.25 of the
// largest entry; and the L2 error by FP8's own effect, measured on the CPU
// (cpu_vs_gpu). The losses: 1e-5, 1e-2 and 3e-2 relative; over five AdamW
// steps 1e-4, 2e-2 and 5e-2.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <ctg/ctg.hpp>
#include <ctg/exec/cuda/store.cuh>
#include <ctg/io/checkpoint.hpp>
#include <ctg/optim/cuda/adamw.cuh>
#include <type_traits>
#include <utility>
#include <vector>

#include "device_test.hpp"

namespace {
template <ctg::checkpointing C, int DropoutPercent>
struct cfg {
  static constexpr ctg::dim_t vocab = 64, max_seq = 32, dim = 32, heads = 2, head_dim = 16, hidden = 96;  // (FP8: x16)
  static constexpr std::size_t layers = 2;
  static constexpr ctg::checkpointing checkpoint = C;
  static constexpr double dropout = DropoutPercent / 100.0;
};
using Ids = ctg::input<"ids", ctg::i32, ctg::dyn, ctg::dyn>;
using Pos = ctg::input<"pos", ctg::i32, ctg::dyn>;
using Tg = ctg::input<"targets", ctg::i32, ctg::dyn, ctg::dyn>;
constexpr int B = 2, T = 16;

struct batch {
  std::vector<int> ids, tg, pos;
  batch() : ids(B * T), tg(B * T), pos(T) {
    for (int i = 0; i < T; ++i) pos[i] = i;
    for (int i = 0; i < B * T; ++i) {
      ids[i] = (7 * i + 3) % 64;
      tg[i] = (5 * i + 1) % 64;
    }
  }
};

template <class Step, class Store>
float run(Step step, Store& s, const batch& d) {
  return step(s, ctg::feed(Ids{}, d.ids, B, T), ctg::feed(Pos{}, d.pos, T), ctg::feed(Tg{}, d.tg, B, T));
}

// Every gradient of both stores, leaf by leaf, on the host.
template <class L, class S>
void grad_of(S& s, std::vector<std::vector<float>>& out) {
  if constexpr (ctg::detail::stored_leaf<L>()) {
    std::vector<typename L::dtype> g(L::dims::static_numel);
    s.download_grad(L{}, std::span<typename L::dtype>(g));
    std::vector<float>& o = out.emplace_back(g.size());
    for (std::size_t i = 0; i < g.size(); ++i) o[i] = static_cast<float>(ctg::to_float(g[i]));
  }
}
template <class S>
std::vector<std::vector<float>> grads_of(S& s) {
  std::vector<std::vector<float>> out;
  [&]<class... Ls>(ctg::tl::list<Ls...>) { (grad_of<Ls>(s, out), ...); }(typename S::step_type::wrt{});
  return out;
}

// Over every leaf: the largest |gpu - cpu| relative to the leaf's largest
// |cpu| entry, and ||gpu - cpu|| / ||cpu|| (L2).
struct grad_errors {
  double entry = 0, l2 = 0;
};
grad_errors worst_grad_errors(const std::vector<std::vector<float>>& cpu, const std::vector<std::vector<float>>& gpu) {
  if (cpu.size() != gpu.size()) return {INFINITY, INFINITY};
  grad_errors worst;
  for (std::size_t l = 0; l < cpu.size(); ++l) {
    double scale = 0, diff = 0, norm2 = 0, diff2 = 0;
    for (std::size_t i = 0; i < cpu[l].size(); ++i) {
      scale = std::fmax(scale, std::fabs(cpu[l][i]));
      const double d = std::fabs(double(gpu[l][i]) - double(cpu[l][i]));
      diff = d == d ? std::fmax(diff, d) : INFINITY;
      norm2 += double(cpu[l][i]) * double(cpu[l][i]);
      diff2 += d * d;
    }
    worst.entry = std::fmax(worst.entry, scale > 0 ? diff / scale : diff);
    worst.l2 = std::fmax(worst.l2, norm2 > 0 ? std::sqrt(diff2 / norm2) : std::sqrt(diff2));
    if (diff2 != diff2) worst.l2 = INFINITY;
  }
  return worst;
}
double worst_grad_error(const std::vector<std::vector<float>>& cpu, const std::vector<std::vector<float>>& gpu) {
  return worst_grad_errors(cpu, gpu).entry;
}

// A store of `step` on the CPU (one thread) and one on the GPU, both
// initialised by nn::init_params(seed).
template <class Step>
struct cpu_and_gpu {
  decltype(ctg::make_store(ctg::cpu::device{1}, std::declval<Step>())) cpu;
  decltype(ctg::make_store(std::declval<const ctg::cuda::device&>(), std::declval<Step>())) gpu;
  cpu_and_gpu(const ctg::cuda::device& dev, Step step, std::uint64_t seed)
      : cpu(ctg::make_store(ctg::cpu::device{1}, step)), gpu(ctg::make_store(dev, step)) {
    ctg::nn::init_params(cpu, seed);
    ctg::nn::init_params(gpu, seed);
  }
};

// The CPU's step under Reference (bf16 autocast for an FP8 policy): its
// gradients, to measure how far FP8's own rounding moves them.
template <class Reference, class Cfg>
std::vector<std::vector<float>> reference_grads(int seed, const batch& d, int steps) {
  auto step = ctg::value_and_grad(ctg::nn::transformer<Cfg, Reference>::loss(Ids{}, Pos{}, Tg{}));
  auto rs = ctg::make_store(ctg::cpu::device{1}, step);
  ctg::nn::init_params(rs, seed);
  for (int s = 0; s < steps; ++s) run(step, rs, d);
  return grads_of(rs);
}

// grad_tol: the largest entry error. With a Reference policy (FP8), the L2
// error must also stay below FP8's own effect on the CPU: the L2 distance
// between the CPU's FP8 gradients and its Reference (bf16) ones. The GPU's
// FP8 GEMMs keep 14-bit partial sums (tests/cuda/gemm.cu), and an input
// rounding to the other side of an e4m3 or e5m2 step moves by up to 2^-3 or
// 2^-2 of itself, so no fixed bound below FP8's own error is justified.
template <class Policy, class Cfg, class Reference = void>
bool cpu_vs_gpu(const ctg::cuda::device& gpu, const char* name, double loss_tol, double grad_tol) {
  using M = ctg::nn::transformer<Cfg, Policy>;
  auto step = ctg::value_and_grad(M::loss(Ids{}, Pos{}, Tg{}));
  cpu_and_gpu<decltype(step)> stores(gpu, step, 11);
  auto& cs = stores.cpu;
  auto& gs = stores.gpu;
  const batch d;
  bool ok = true;
  for (int s = 0; s < 3; ++s) {
    const float lc = run(step, cs, d), lg = run(step, gs, d);
    const double loss_err = std::fabs(double(lg) - double(lc)) / std::fabs(double(lc));
    const auto cpu = grads_of(cs);
    const grad_errors e = worst_grad_errors(cpu, grads_of(gs));
    double l2_tol = INFINITY;
    if constexpr (!std::is_void_v<Reference>)
      l2_tol = worst_grad_errors(cpu, reference_grads<Reference, Cfg>(11, d, s + 1)).l2;
    const bool pass = loss_err <= loss_tol && e.entry <= grad_tol && e.l2 <= l2_tol;
    std::printf(
        "%-16s step %d: loss cpu %.9g gpu %.9g (rel %.1e <= %.0e), gradients: entry %.1e (<= %.0e), "
        "L2 %.1e (<= %.1e): %s\n",
        name, s, lc, lg, loss_err, loss_tol, e.entry, grad_tol, e.l2, l2_tol, pass ? "ok" : "FAILED");
    ok &= pass;
  }
  return ok;
}

// loss = mean(tanh(x w)^2), x bf16, w f32: the matmul and its gradient x^T dz
// mix dtypes.
bool mixed_matmul(const ctg::cuda::device& gpu) {
  using X = ctg::input<"x", ctg::bf16, ctg::dyn, 24>;
  using W = ctg::param<"w", ctg::f32, 24, 40>;
  auto step = ctg::value_and_grad(ctg::mean(ctg::square(ctg::tanh(ctg::matmul(X{}, W{})))));
  auto cs = ctg::make_store(ctg::cpu::device{1}, step);
  auto gs = ctg::make_store(gpu, step);
  ctg::nn::init_params(cs, 3, 0.3);
  ctg::nn::init_params(gs, 3, 0.3);
  std::vector<ctg::bf16> x(7 * 24);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = ctg::bf16(0.1f * static_cast<float>(i % 13) - 0.6f);
  const float lc = step(cs, ctg::feed(X{}, x, 7)), lg = step(gs, ctg::feed(X{}, x, 7));
  const double loss_err = std::fabs(double(lg) - double(lc)) / std::fabs(double(lc));
  const double grad_err = worst_grad_error(grads_of(cs), grads_of(gs));
  const bool ok = loss_err <= 1e-5 && grad_err <= 1e-5;
  std::printf(
      "%-28s loss cpu %.9g gpu %.9g (rel %.2e <= 1e-05), worst "
      "gradient error %.2e (<= 1e-05): %s\n",
      "bf16 x f32 matmul", lc, lg, loss_err, grad_err, ok ? "ok" : "FAILED");
  return ok;
}

// Five steps of training on each device from the same parameters: each step's
// loss.
// grad norms: within 1e-2 of the CPU's; for FP8 (a Reference policy), within
// the largest difference between the CPU's FP8 and Reference training's norms.
template <class Policy, class Cfg, class Reference = void>
bool train_cpu_vs_gpu(const ctg::cuda::device& gpu, const char* name, double loss_tol) {
  using M = ctg::nn::transformer<Cfg, Policy>;
  auto step = ctg::value_and_grad(M::loss(Ids{}, Pos{}, Tg{}));
  cpu_and_gpu<decltype(step)> stores(gpu, step, 11);
  auto& cs = stores.cpu;
  auto& gs = stores.gpu;
  const ctg::optim::adamw_config cfg{.lr = 1e-2f, .max_grad_norm = 1.0f};
  ctg::optim::adamw copt(cs, cfg);
  ctg::optim::adamw gopt(gs, cfg);
  const batch d;
  std::vector<float> reference_norms;
  if constexpr (!std::is_void_v<Reference>) {
    auto rstep = ctg::value_and_grad(ctg::nn::transformer<Cfg, Reference>::loss(Ids{}, Pos{}, Tg{}));
    auto rs = ctg::make_store(ctg::cpu::device{1}, rstep);
    ctg::nn::init_params(rs, 11);
    ctg::optim::adamw ropt(rs, cfg);
    for (int s = 0; s < 5; ++s) {
      run(rstep, rs, d);
      reference_norms.push_back(ropt.step(rs));
    }
  }
  std::vector<float> cpu_norms, gpu_norms;
  double worst = 0;
  for (int s = 0; s < 5; ++s) {
    const float lc = run(step, cs, d), lg = run(step, gs, d);
    cpu_norms.push_back(copt.step(cs));
    gpu_norms.push_back(gopt.step(gs));
    worst = std::fmax(worst, std::fabs(double(lg) - double(lc)) / std::fabs(double(lc)));
    std::printf("%-16s AdamW step %d: loss cpu %.9g gpu %.9g, grad norm cpu %.6g gpu %.6g\n", name, s, lc, lg,
                cpu_norms.back(), gpu_norms.back());
  }
  double norm_err = 0, norm_tol = 0;
  for (int s = 0; s < 5; ++s) {
    norm_err = std::fmax(norm_err, std::fabs(double(gpu_norms[s]) - double(cpu_norms[s])) / double(cpu_norms[s]));
    norm_tol =
        reference_norms.empty()
            ? 1e-2
            : std::fmax(norm_tol, std::fabs(double(reference_norms[s]) - double(cpu_norms[s])) / double(cpu_norms[s]));
  }
  const bool ok = worst <= loss_tol && norm_err <= norm_tol;
  std::printf("%-16s 5 AdamW steps: worst loss difference %.1e (<= %.0e), grad norms %.1e (<= %.1e): %s\n", name, worst,
              loss_tol, norm_err, norm_tol, ok ? "ok" : "FAILED");
  return ok;
}

// A step that fails in AdamW on the GPU changes nothing: a NaN weight (its
// gradient is NaN), then a bf16 weight written after the last update.
bool adamw_errors(const ctg::cuda::device& gpu) {
  using X = ctg::input<"x", ctg::bf16, ctg::dyn, 16>;
  using W = ctg::param<"w", ctg::bf16, 16, 32>;
  auto step = ctg::value_and_grad(ctg::mean(ctg::square(ctg::tanh(ctg::matmul(X{}, W{})))));
  auto gs = ctg::make_store(gpu, step);
  ctg::nn::init_params(gs, 3, 0.3);
  ctg::optim::adamw opt(gs, {.lr = 1e-2f});
  std::vector<ctg::bf16> x(4 * 16, ctg::bf16(0.25f)), w(16 * 32), before(16 * 32), after(16 * 32);
  step(gs, ctg::feed(X{}, x, 4));
  opt.step(gs);
  auto expect_error = [&](const char* what, const char* message) {
    gs.download(W{}, std::span<ctg::bf16>(before));
    const auto steps = opt.steps();
    step(gs, ctg::feed(X{}, x, 4));
    bool ok = false;
    try {
      opt.step(gs);
    } catch (const ctg::error& e) {
      ok = std::string(e.what()).find(message) == 0;
      std::printf("adamw on the GPU, %s: %s\n", what, e.what());
    }
    gs.download(W{}, std::span<ctg::bf16>(after));
    ok = ok && opt.steps() == steps && std::memcmp(before.data(), after.data(), before.size() * 2) == 0;
    std::printf("adamw on the GPU, %s: error and nothing written: %s\n", what, ok ? "ok" : "FAILED");
    return ok;
  };
  gs.download(W{}, std::span<ctg::bf16>(w));
  w[5] = ctg::bf16(0.125f + ctg::to_float(w[5]));  // (a value its master does not give)
  gs.upload(W{}, std::span<const ctg::bf16>(w));
  bool ok = expect_error("written weight", "ctg: adamw: parameter 'w' was written after the optimizer last set it");
  w[3] = ctg::bf16(NAN);
  gs.upload(W{}, std::span<const ctg::bf16>(w));
  opt.sync_masters(gs);
  ok &= expect_error("NaN gradient", "ctg: adamw: the gradient of 'w' is not finite");
  return ok;
}

bool same_bits(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t l = 0; l < a.size(); ++l)
    if (a[l].size() != b[l].size() || std::memcmp(a[l].data(), b[l].data(), a[l].size() * sizeof(float)) != 0)
      return false;
  return true;
}

// Two GPU stores of step A and step B (the same model, run differently): the
// same loss and gradient bits.
template <class StepA, class StepB>
bool gpu_bitwise(const ctg::cuda::device& gpu, const char* name, StepA a, StepB b) {
  auto sa = ctg::make_store(gpu, a);
  auto sb = ctg::make_store(gpu, b);
  ctg::nn::init_params(sa, 5);
  ctg::nn::init_params(sb, 5);
  const batch d;
  bool ok = true;
  for (int s = 0; s < 2; ++s) {
    const float la = run(a, sa, d), lb = run(b, sb, d);
    const bool pass = std::memcmp(&la, &lb, sizeof la) == 0 && same_bits(grads_of(sa), grads_of(sb));
    std::printf("%-44s step %d: loss %.9g and %.9g, gradients %s\n", name, s, la, lb,
                pass ? "bitwise equal: ok" : "differ: FAILED");
    ok &= pass;
  }
  return ok;
}

// A checkpoint moves between devices (the same file): three AdamW steps on
// the GPU, saved with the optimizer, loaded into a CPU store and optimizer:
// every leaf bitwise the GPU's, and the next step's loss and gradient norm
// within the AdamW tolerance of the GPU's next step; the CPU's file then
// loads on the GPU, every leaf bitwise.
template <class Policy, class Cfg>
bool checkpoint_across_devices(const ctg::cuda::device& gpu, const char* name, double tol) {
  auto step = ctg::value_and_grad(ctg::nn::transformer<Cfg, Policy>::loss(Ids{}, Pos{}, Tg{}));
  cpu_and_gpu<decltype(step)> stores(gpu, step, 11);
  auto& cs = stores.cpu;
  auto& gs = stores.gpu;
  const ctg::optim::adamw_config cfg{.lr = 1e-2f, .max_grad_norm = 1.0f};
  ctg::optim::adamw copt(cs, {.lr = 0.5f});  // (another configuration: the load restores the file's)
  ctg::optim::adamw gopt(gs, cfg);
  const batch d;
  for (int s = 0; s < 3; ++s) {
    run(step, gs, d);
    gopt.step(gs);
  }
  const auto path = std::filesystem::temp_directory_path() / "ctg_cuda_store_step.ctg";
  ctg::io::save(path, gs, gopt);
  ctg::io::load(path, cs, copt);
  auto leaves_equal = [&] {
    bool same = true;
    [&]<class... Ls>(ctg::tl::list<Ls...>) {
      auto one = [&]<class L>(std::type_identity<L>) {
        if constexpr (!L::fed) {
          std::vector<typename L::dtype> g(L::dims::static_numel);
          gs.download(L{}, std::span<typename L::dtype>(g));
          const auto c = cs.template param<L>();
          same &= std::memcmp(g.data(), c.data(), c.size_bytes()) == 0;
        }
      };
      (one(std::type_identity<Ls>{}), ...);
    }(ctg::leaves_t<typename decltype(step)::nodes>{});
    return same;
  };
  bool ok = leaves_equal() && cs.steps_run() == gs.steps_run() && copt.steps() == gopt.steps() &&
            copt.config().lr == cfg.lr;
  const float lc = run(step, cs, d), lg = run(step, gs, d);
  const float nc = copt.step(cs), ng = gopt.step(gs);
  const double loss_err = std::fabs(double(lg) - double(lc)) / std::fabs(double(lc));
  const double norm_err = std::fabs(double(ng) - double(nc)) / double(nc);
  ok &= loss_err <= tol && norm_err <= tol;
  ctg::io::save(path, cs, copt);
  ctg::io::load(path, gs, gopt);
  ok &= leaves_equal();
  std::filesystem::remove(path);
  std::printf("%-28s GPU file on the CPU: leaves bitwise, next loss rel %.1e, norm rel %.1e (<= %.0e); CPU file on "
              "the GPU: leaves bitwise: %s\n", name, loss_err, norm_err, tol, ok ? "ok" : "FAILED");
  return ok;
}

// The same steps with CUDA graphs (a step's launches captured once, then
// replayed: exec/cuda/step_graphs.cuh) and without: the same loss and
// gradient bits at every step while AdamW changes the parameters, with
// graphs captured and replayed (no capture failed).
template <class Policy, class Cfg>
bool graphs_bitwise(const ctg::cuda::device& gpu, const char* name) {
  auto step = ctg::value_and_grad(ctg::nn::transformer<Cfg, Policy>::loss(Ids{}, Pos{}, Tg{}));
  auto sa = ctg::make_store(gpu, step);
  auto sb = ctg::make_store(gpu, step);
  sb.workspace().graphs().enable(false);
  ctg::nn::init_params(sa, 5);
  ctg::nn::init_params(sb, 5);
  ctg::optim::adamw oa(sa, {.lr = 1e-2f});
  ctg::optim::adamw ob(sb, {.lr = 1e-2f});
  const batch d;
  bool ok = true;
  for (int s = 0; s < 8; ++s) {
    const float la = run(step, sa, d), lb = run(step, sb, d);
    const bool pass = std::memcmp(&la, &lb, sizeof la) == 0 && same_bits(grads_of(sa), grads_of(sb));
    std::printf("%-28s step %d: loss %.9g and %.9g, gradients %s\n", name, s, la, lb,
                pass ? "bitwise equal: ok" : "differ: FAILED");
    ok &= pass;
    oa.step(sa);
    ob.step(sb);
  }
  const auto& g = sa.workspace().graphs();
  // Two keys (the loss alternates between two buffers), and any device
  // allocation in the process changes both: a store allocates at its first
  // step (its buffers) and its second (the loss's other buffer), so sa's keys
  // settle once sb's second step has run. Steps 0-3 run, 4-5 are captured
  // (each key seen before), 6-7 replay. (Measured on an H200: a test of 6
  // steps that expected replays from step 4 got none.)
  const bool used = g.captures() == 2 && g.replays() == 2 && g.failed_captures() == 0 && sb.workspace().graphs().replays() == 0;
  std::printf("%-28s graphs: %llu captured, %llu replayed, %llu captures failed (2, 2, 0 expected): %s\n", name,
              static_cast<unsigned long long>(g.captures()), static_cast<unsigned long long>(g.replays()),
              static_cast<unsigned long long>(g.failed_captures()), used ? "ok" : "FAILED");
  return ok && used;
}
}  // namespace

// One check; a ctg::error it throws fails it (and the others still run).
template <class F>
bool attempt(const char* name, F&& check) {
  try {
    return check();
  } catch (const ctg::error& e) {
    std::printf("%s: FAILED: %s\n", name, e.what());
    return false;
  }
}

int main() {
  return run_device_test([](const ctg::cuda::device& gpu) {
    using every = cfg<ctg::checkpointing::every_layer, 0>;
    using none = cfg<ctg::checkpointing::none, 0>;
    using bf16 = ctg::precision::autocast<ctg::bf16>;
    bool ok = attempt("bf16 x f32 matmul", [&] { return mixed_matmul(gpu); });
    ok &= attempt("f32", [&] {
      return cpu_vs_gpu<ctg::precision::full<ctg::f32>, cfg<ctg::checkpointing::every_layer, 10>>(
          gpu, "f32, dropout 0.1", 1e-5, 1e-4);
    });
    ok &= attempt("bf16", [&] { return cpu_vs_gpu<bf16, every>(gpu, "bf16 autocast", 1e-2, 5e-2); });
    if (gpu.has_fp8_gemm()) {
      ok &= attempt("fp8 delayed", [&] {
        return cpu_vs_gpu<ctg::precision::fp8<ctg::precision::delayed<>>, every, bf16>(gpu, "fp8 delayed", 3e-2, 0.25);
      });
      ok &= attempt("fp8 current", [&] {
        return cpu_vs_gpu<ctg::precision::fp8<ctg::precision::current<>>, none, bf16>(gpu, "fp8 current", 3e-2, 0.25);
      });
    } else {
      std::printf(
          "FP8 steps not run: compute capability %d (cuBLASLt FP8 "
          "needs 8.9+)\n",
          gpu.compute_capability());
    }
    ok &= attempt("adamw f32", [&] {
      return train_cpu_vs_gpu<ctg::precision::full<ctg::f32>, cfg<ctg::checkpointing::every_layer, 10>>(gpu, "f32",
                                                                                                        1e-4);
    });
    ok &= attempt("adamw bf16", [&] { return train_cpu_vs_gpu<bf16, every>(gpu, "bf16", 2e-2); });
    if (gpu.has_fp8_gemm()) {
      ok &= attempt("adamw fp8 delayed", [&] {
        return train_cpu_vs_gpu<ctg::precision::fp8<ctg::precision::delayed<>>, every, bf16>(gpu, "fp8 delayed", 5e-2);
      });
      ok &= attempt("adamw fp8 current", [&] {
        return train_cpu_vs_gpu<ctg::precision::fp8<ctg::precision::current<>>, none, bf16>(gpu, "fp8 current", 5e-2);
      });
    }
    ok &= attempt("adamw errors", [&] { return adamw_errors(gpu); });
    auto with_ckpt = ctg::value_and_grad(ctg::nn::transformer<every, bf16>::loss(Ids{}, Pos{}, Tg{}));
    auto without = ctg::value_and_grad(ctg::nn::transformer<none, bf16>::loss(Ids{}, Pos{}, Tg{}));
    ok &= attempt("two stores", [&] { return gpu_bitwise(gpu, "bf16: two stores", with_ckpt, with_ckpt); });
    ok &= attempt("checkpointing",
                  [&] { return gpu_bitwise(gpu, "bf16: checkpointing every layer vs none", with_ckpt, without); });
    ok &= attempt("checkpoint bf16", [&] { return checkpoint_across_devices<bf16, every>(gpu, "bf16 checkpoint", 2e-2); });
    if (gpu.has_fp8_gemm())
      ok &= attempt("checkpoint fp8", [&] {
        return checkpoint_across_devices<ctg::precision::fp8<ctg::precision::delayed<>>, every>(gpu, "fp8 checkpoint",
                                                                                               5e-2);
      });
    ok &= attempt("graphs bf16", [&] { return graphs_bitwise<bf16, every>(gpu, "bf16: graphs vs none"); });
    if (gpu.has_fp8_gemm())
      ok &= attempt("graphs fp8", [&] {
        return graphs_bitwise<ctg::precision::fp8<ctg::precision::delayed<>>, every>(gpu, "fp8 delayed: graphs vs none");
      });
    return ok;
  });
}
