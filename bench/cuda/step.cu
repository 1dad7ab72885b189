// Training steps on the GPU (exec/cuda/store.cuh, optim/cuda/adamw.cuh):
// forward, backward, global-norm clipping and AdamW of nn::transformer, for
// two sizes, bf16 autocast (and f32 for the smaller), each layer recomputed
// in backward (checkpointing::every_layer, the default) or kept (ckpt_none),
// GPT-2's keeping all but attention's scores (ckpt_scores:
// checkpointing::attention_scores), and GPT-2's with every value kept and
// attention fused (attention_kernel::fused, ctg::causal_attention).
// Two warm-up steps, then each step timed to its end (the step waits for its
// loss, AdamW for its norm): prints one line per case,
//   <size>/<policy>[/ckpt_none|/ckpt_scores][/fused_attention][/no_graphs] ms <median> tokens/s <t> kept_MiB <k> loss <l> graph_replays <r>
// bench/vs_pytorch_gpu.py runs this beside PyTorch. Steps replay as CUDA
// graphs (exec/cuda/step_graphs.cuh); each bf16 case runs again with them
// off (/no_graphs) in the same process, to measure what they gain.
//   build/default/bench/bench_cuda_step [--size realistic|gpt2] [--steps N] [--profile]
// --profile: the bf16 step with every value kept (GPT-2's also with attention
// fused), its groups timed one by one (exec/group_profile.hpp) over N steps:
// a table of each group's time, bytes per second and a product's operations
// per second, slowest first.
// Sizes (keep in sync with bench/torch_transformer.py):
//   realistic: vocab 256, 4 layers of width 256 (8 heads of 32, SwiGLU 688), batch 8 x 128
//   gpt2: GPT-2 small's shape: vocab 50304, 12 layers of width 768 (12 heads of 64,
//         SwiGLU 2048: an MLP of GPT-2's parameter count), batch 8 x 1024
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <ctg/ctg.hpp>
#include <ctg/exec/cuda/store.cuh>
#include <ctg/io/graph_text.hpp>
#include <ctg/optim/cuda/adamw.cuh>

#include "common.cuh"

namespace {
using Ids = ctg::input<"ids", ctg::i32, ctg::dyn, ctg::dyn>;
using Pos = ctg::input<"pos", ctg::i32, ctg::dyn>;
using Tg = ctg::input<"targets", ctg::i32, ctg::dyn, ctg::dyn>;

template <ctg::checkpointing C>
struct realistic {
  static constexpr ctg::dim_t vocab = 256, max_seq = 128, dim = 256, heads = 8, head_dim = 32, hidden = 688;
  static constexpr std::size_t layers = 4;
  static constexpr ctg::checkpointing checkpoint = C;
  static constexpr int batch = 8, seq = 128;
};
template <ctg::checkpointing C, ctg::nn::attention_kernel A = ctg::nn::attention_kernel::composed>
struct gpt2 {
  static constexpr ctg::dim_t vocab = 50304, max_seq = 1024, dim = 768, heads = 12, head_dim = 64, hidden = 2048;
  static constexpr std::size_t layers = 12;
  static constexpr ctg::checkpointing checkpoint = C;
  static constexpr ctg::nn::attention_kernel attention = A;
  static constexpr int batch = 8, seq = 1024;
};

// The batch every case feeds: token ids, targets and positions.
template <class Cfg>
struct batch {
  static constexpr int B = Cfg::batch, T = Cfg::seq;
  std::vector<int> ids = std::vector<int>(B * T), tg = std::vector<int>(B * T), pos = std::vector<int>(T);
  batch() {
    for (int i = 0; i < B * T; ++i) {
      ids[i] = static_cast<int>((i * 7 + 3) % Cfg::vocab);
      tg[i] = static_cast<int>((i * 7 + 10) % Cfg::vocab);
    }
    for (int t = 0; t < T; ++t) pos[t] = t;
  }
  template <class Step, class Store>
  float run(Step& step, Store& store) const {
    return step(store, ctg::feed(Ids{}, ids, B, T), ctg::feed(Pos{}, pos, T), ctg::feed(Tg{}, tg, B, T));
  }
};

template <class Policy, class Cfg>
void measure(const ctg::cuda::device& gpu, const char* name, int steps, bool graphs = true) {
  using M = ctg::nn::transformer<Cfg, Policy>;
  auto step = ctg::value_and_grad(M::loss(Ids{}, Pos{}, Tg{}));
  auto store = ctg::make_store(gpu, step);
  store.workspace().graphs().enable(graphs);
  ctg::nn::init_params(store, 1);
  ctg::optim::adamw opt(store, {.lr = 1e-3f, .weight_decay = 0.1f, .max_grad_norm = 1.0f});
  const batch<Cfg> fed;
  const int B = Cfg::batch, T = Cfg::seq;
  float loss = 0;
  auto one = [&] {
    loss = fed.run(step, store);
    opt.step(store);
    gpu.synchronize();
  };
  for (int w = 0; w < 2; ++w) one();
  std::vector<double> ms;
  for (int s = 0; s < steps; ++s) {
    const auto t0 = std::chrono::steady_clock::now();
    one();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  const double median = ms[ms.size() / 2];
  std::printf("%s%s ms %.3f tokens/s %.0f kept_MiB %.1f loss %.4f graph_replays %llu\n", name,
              graphs ? "" : "/no_graphs", median, B * T / (median * 1e-3),
              static_cast<double>(store.kept_bytes()) / (1 << 20), loss,
              static_cast<unsigned long long>(store.workspace().graphs().replays()));
  std::fflush(stdout);
}

// Each group of the step timed alone over `steps` steps (after 2 warm-ups).
template <class Policy, class Cfg>
void profile(const ctg::cuda::device& gpu, const char* name, int steps) {
  using M = ctg::nn::transformer<Cfg, Policy>;
  auto step = ctg::value_and_grad(M::loss(Ids{}, Pos{}, Tg{}));
  auto store = ctg::make_store(gpu, step);
  ctg::nn::init_params(store, 1);
  const batch<Cfg> fed;
  auto one = [&] { fed.run(step, store); };
  for (int w = 0; w < 2; ++w) one();
  store.profile_groups(true);
  for (int s = 0; s < steps; ++s) one();
  std::printf("%s: each group timed alone, %d steps (forward, backward; no optimizer)\n%s\n", name, steps,
              ctg::io::group_profile_text(store).c_str());
  std::fflush(stdout);
}
}  // namespace

int main(int argc, char** argv) {
  std::string size = "all";
  int steps = 10;
  bool profiled = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--profile")) profiled = true;
    else if (!std::strcmp(argv[i], "--size") && i + 1 < argc) size = argv[++i];
    else if (!std::strcmp(argv[i], "--steps") && i + 1 < argc) steps = std::max(1, std::atoi(argv[++i]));
  }
  return bench_cuda::run_on_gpu([&](const ctg::cuda::device& gpu) {
    using f32 = ctg::precision::full<ctg::f32>;
    using bf16 = ctg::precision::autocast<ctg::bf16>;
    constexpr auto every = ctg::checkpointing::every_layer, none = ctg::checkpointing::none,
                   scores = ctg::checkpointing::attention_scores;
    if (profiled) {
      if (size == "all" || size == "realistic") profile<bf16, realistic<none>>(gpu, "realistic/bf16/ckpt_none", steps);
      if (size == "all" || size == "gpt2") {
        profile<bf16, gpt2<none>>(gpu, "gpt2/bf16/ckpt_none", steps);
        profile<bf16, gpt2<none, ctg::nn::attention_kernel::fused>>(gpu, "gpt2/bf16/ckpt_none/fused_attention", steps);
      }
      return;
    }
    std::printf("median of %d steps after 2 warm-ups\n", steps);
    if (size == "all" || size == "realistic") {
      measure<f32, realistic<every>>(gpu, "realistic/f32", steps);
      measure<bf16, realistic<every>>(gpu, "realistic/bf16", steps);
      measure<bf16, realistic<none>>(gpu, "realistic/bf16/ckpt_none", steps);
      measure<bf16, realistic<every>>(gpu, "realistic/bf16", steps, false);
      measure<bf16, realistic<none>>(gpu, "realistic/bf16/ckpt_none", steps, false);
    }
    if (size == "all" || size == "gpt2") {
      measure<bf16, gpt2<every>>(gpu, "gpt2/bf16", steps);
      measure<bf16, gpt2<none>>(gpu, "gpt2/bf16/ckpt_none", steps);
      measure<bf16, gpt2<scores>>(gpu, "gpt2/bf16/ckpt_scores", steps);
      measure<bf16, gpt2<none, ctg::nn::attention_kernel::fused>>(gpu, "gpt2/bf16/ckpt_none/fused_attention", steps);
      measure<bf16, gpt2<none>>(gpu, "gpt2/bf16/ckpt_none", steps, false);
    }
  });
}
