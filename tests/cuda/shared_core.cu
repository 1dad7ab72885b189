// The store's shared core on the GPU, against the CPU store: what the CPU
// tests check of it (unit.dropout, unit.stack, unit.shared_store,
// unit.checkpoint) on device memory. Without a GPU: skipped (77).
//   A. a stack inside a stacked block draws a mask per (outer, inner) layer
//      (keyed o * 2 + i), bit for bit the CPU's, at steps 5 and 2^32 + 5
//      (the step count's high word reaches the kernels), and the two steps
//      differ; dropout's f32 scale at p = 0.15 (1 / float(0.85)) likewise.
//   B. a nested stack's kept area on device memory: four AdamW steps give
//      the same bits in every mix of checkpointing; within 1e-5 (relative)
//      of the CPU's losses (sums in another order).
//   C. make_store(gpu, train, eval): the evaluation step holds no leaves of
//      its own and reads the trained ones (its second run replayed), within
//      1e-5 of a CPU store given the GPU's weights.
//   D. io::load on a GPU store spends the gradient of the last step, so the
//      next adamw step is the "no gradients since the last update" error.
//   E. AdamW's decay_leaves::matrices on the device (below).
//   F. safetensors saved from and loaded into a GPU store (below).
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <vector>

#include <ctg/ctg.hpp>
#include <ctg/exec/cuda/store.cuh>
#include <ctg/io/checkpoint.hpp>
#include <ctg/io/safetensors.hpp>
#include <ctg/optim/cuda/adamw.cuh>

#include "../common/nested_stacks.hpp"
#include "device_test.hpp"

namespace {
using SX = ctg::input<"x", ctg::f32, ctg::dyn, 64>;
using nested_stacks::two_inner;

template <class Step, class Store>
std::vector<float> values_at(Step step, Store& st, std::uint64_t at, const std::vector<float>& x, int rows) {
  st.seed(77);
  st.set_steps_run(at);
  step(st, ctg::feed(SX{}, x, rows));
  std::vector<float> v(st.value_count());
  st.download_value(std::span<float>(v));
  return v;
}

bool nested_dropout_bits(const ctg::cuda::device& gpu) {
  bool ok = true;
  auto one = [&](auto step, const char* what) {
    auto cs = ctg::make_store(ctg::cpu::device{1}, step);
    auto gs = ctg::make_store(gpu, step);
    const int rows = 256;
    const std::vector<float> x(rows * 64, 1.0f);
    for (std::uint64_t at : {std::uint64_t{5}, (std::uint64_t{1} << 32) + 5}) {
      const auto c = values_at(step, cs, at, x, rows), g = values_at(step, gs, at, x, rows);
      const bool same = c == g;
      std::printf("%-40s step %llu: %s\n", what, static_cast<unsigned long long>(at), same ? "same bits" : "DIFFER");
      ok = ok && same;
    }
    ok = ok && values_at(step, gs, 5, x, rows) != values_at(step, gs, (std::uint64_t{1} << 32) + 5, x, rows);
  };
  one(ctg::forward(ctg::nn::stack<2, two_inner>(SX{})), "nested dropout stacks");
  one(ctg::forward(ctg::dropout<"d15">(SX{}, ctg::lit<0.15>)), "dropout p=0.15 (f32 scale)");
  return ok;
}

bool nested_kept_area(const ctg::cuda::device& gpu) {
  using C = ctg::checkpointing;
  using nested_stacks::nested_losses;
  constexpr double p = 0.1;  // (dropout after each inner layer: its masks keyed o * 2 + i)
  const auto ref = nested_losses<C::every_layer, C::every_layer, p>(gpu);
  const bool same = nested_losses<C::none, C::none, p>(gpu) == ref &&
                    nested_losses<C::none, C::every_layer, p>(gpu) == ref &&
                    nested_losses<C::every_layer, C::none, p>(gpu) == ref;
  const auto cpu = nested_losses<C::none, C::none, p>(ctg::cpu::device{1});
  double worst = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) worst = std::fmax(worst, std::fabs(ref[i] - cpu[i]) / std::fabs(cpu[i]));
  std::printf("nested stack kept area: every mix %s, vs CPU %.2e\n", same ? "same bits" : "DIFFER", worst);
  return same && worst < 1e-5;
}

using W = ctg::param<"w", ctg::f32, 64, 64>;
bool shared_store_eval(const ctg::cuda::device& gpu) {
  // (A CPU make_store(cpu, train, eval) in a .cu file stops nvcc 13.0 with an
  // internal error: the CPU side is a store of eval alone, given the GPU's W.)
  auto train = ctg::value_and_grad(ctg::sum(ctg::square(ctg::tanh(ctg::matmul(SX{}, W{})))));
  auto eval = ctg::forward(ctg::tanh(ctg::matmul(SX{}, W{})));
  std::vector<float> x(8 * 64);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = std::cos(0.37f * static_cast<float>(i));
  auto gs = ctg::make_store(gpu, train, eval);
  ctg::nn::init_params(gs, 3);
  ctg::optim::adamw opt(gs, {.lr = 0.01f});
  for (int s = 0; s < 2; ++s) {
    train(gs, ctg::feed(SX{}, x, 8));
    opt.step(gs);
  }
  eval(gs, ctg::feed(SX{}, x, 8));
  eval(gs, ctg::feed(SX{}, x, 8));  // (captured or replayed)
  std::vector<float> g(gs.value_count(eval)), w(64 * 64);
  gs.download_value(eval, std::span<float>(g));
  gs.download(W{}, std::span<float>(w));
  auto cs = ctg::make_store(ctg::cpu::device{1}, eval);
  cs.upload(W{}, std::span<const float>(w));
  eval(cs, ctg::feed(SX{}, x, 8));
  const auto c = cs.value();
  double worst = 0;
  for (std::size_t i = 0; i < c.size(); ++i) worst = std::fmax(worst, std::fabs(c[i] - g[i]));
  std::printf("shared store eval after training: max |gpu - cpu| %.2e; stored bytes %zu (w: %zu)\n", worst,
              gs.stored_bytes(), w.size() * sizeof(float));
  return c.size() == g.size() && worst < 1e-5;
}

bool load_drops_grads(const ctg::cuda::device& gpu) {
  auto train = ctg::value_and_grad(ctg::sum(ctg::square(ctg::matmul(SX{}, W{}))));
  auto gs = ctg::make_store(gpu, train);
  ctg::nn::init_params(gs, 3);
  ctg::optim::adamw opt(gs);
  const auto path = std::filesystem::temp_directory_path() / "ctg_cuda_shared_core.ctg";
  ctg::io::save(path, gs);
  std::vector<float> x(8 * 64, 0.5f);
  train(gs, ctg::feed(SX{}, x, 8));
  ctg::io::load(path, gs);
  bool threw = false;
  try {
    opt.step(gs);
  } catch (const ctg::error& e) {
    threw = std::string(e.what()).find("no gradients") != std::string::npos;
  }
  std::printf("io::load spends the GPU store's gradient: %s\n", threw ? "yes" : "NO");
  std::filesystem::remove(path);
  return threw;
}
// E. AdamW's decay of matrices only on the device: one step from the same
// parameters and gradient gives the matrix what decay of every leaf gives
// it, and the vector what no decay gives it, bit for bit.
using SV = ctg::param<"v", ctg::f32, 64>;
bool decay_of_matrices(const ctg::cuda::device& gpu) {
  auto train = ctg::value_and_grad(ctg::sum(ctg::square(ctg::tanh(ctg::matmul(SX{}, W{}) + SV{}))));
  std::vector<float> x(8 * 64);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = std::cos(0.37f * static_cast<float>(i));
  auto after_one_step = [&](ctg::optim::adamw_config cfg) {
    auto gs = ctg::make_store(gpu, train);
    ctg::nn::init_params(gs, 3, 0.5);
    ctg::optim::adamw opt(gs, cfg);
    train(gs, ctg::feed(SX{}, x, 8));
    opt.step(gs);
    std::vector<float> w(64 * 64), v(64);
    gs.download(W{}, std::span<float>(w));
    gs.download(SV{}, std::span<float>(v));
    return std::pair(w, v);
  };
  const auto every = after_one_step({.lr = 0.05f, .weight_decay = 0.5f});
  const auto none = after_one_step({.lr = 0.05f, .weight_decay = 0.0f});
  const auto matrices =
      after_one_step({.lr = 0.05f, .weight_decay = 0.5f, .decay = ctg::optim::decay_leaves::matrices});
  const bool ok = matrices.first == every.first && matrices.second == none.second && matrices.second != every.second;
  std::printf("adamw decay of matrices only: %s\n", ok ? "the matrix decayed, the vector not" : "WRONG");
  return ok;
}
// F. safetensors on a GPU store: saved from the GPU, loaded into a CPU
// store, bit for bit; and back from a CPU store's file onto the GPU.
bool safetensors_both_ways(const ctg::cuda::device& gpu) {
  auto train = ctg::value_and_grad(ctg::sum(ctg::square(ctg::tanh(ctg::matmul(SX{}, W{}) + SV{}))));
  auto gs = ctg::make_store(gpu, train);
  auto cs = ctg::make_store(ctg::cpu::device{1}, train);
  ctg::nn::init_params(gs, 3, 0.5);
  ctg::nn::init_params(cs, 4, 0.5);
  const auto dir = std::filesystem::temp_directory_path();
  ctg::io::save_safetensors(dir / "ctg_cuda_gpu.safetensors", gs);
  ctg::io::save_safetensors(dir / "ctg_cuda_cpu.safetensors", cs);
  std::vector<float> w(64 * 64), v(64);
  gs.download(W{}, std::span<float>(w));
  gs.download(SV{}, std::span<float>(v));
  // (Read with download: store.param<L>() in a .cu file's non-template
  // function trips nvcc's host pass, as ctg::feed<L> does.)
  std::vector<float> cpu_w(w.size()), cpu_v(v.size()), got_w(w.size()), got_v(v.size());
  cs.download(W{}, std::span<float>(cpu_w));
  cs.download(SV{}, std::span<float>(cpu_v));
  ctg::io::load_safetensors(dir / "ctg_cuda_gpu.safetensors", cs);
  cs.download(W{}, std::span<float>(got_w));
  cs.download(SV{}, std::span<float>(got_v));
  const bool to_cpu = got_w == w && got_v == v;
  ctg::io::load_safetensors(dir / "ctg_cuda_cpu.safetensors", gs);
  gs.download(W{}, std::span<float>(w));
  gs.download(SV{}, std::span<float>(v));
  const bool to_gpu = w == cpu_w && v == cpu_v;
  std::filesystem::remove(dir / "ctg_cuda_gpu.safetensors");
  std::filesystem::remove(dir / "ctg_cuda_cpu.safetensors");
  std::printf("safetensors: GPU -> CPU %s, CPU -> GPU %s\n", to_cpu ? "same bits" : "DIFFER", to_gpu ? "same bits" : "DIFFER");
  return to_cpu && to_gpu && w != std::vector<float>(w.size(), 0.0f);
}
}  // namespace

int main() {
  return run_device_test([](const ctg::cuda::device& gpu) {
    bool ok = nested_dropout_bits(gpu);
    ok = nested_kept_area(gpu) && ok;
    ok = shared_store_eval(gpu) && ok;
    ok = load_drops_grads(gpu) && ok;
    ok = decay_of_matrices(gpu) && ok;
    ok = safetensors_both_ways(gpu) && ok;
    return ok;
  });
}
