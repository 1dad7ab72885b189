// One training step (forward, backward, global-norm clipping, AdamW) of a
// realistic-size transformer on the CPU: width 256, 4 layers, 8 heads of 32,
// SwiGLU 688, vocab 256, batch 8 x 128 tokens. f32 and autocast<bf16>, each
// layer recomputed in backward (checkpointing::every_layer, the default) or
// kept (ckpt_none); the argument is the thread count (cpu::device{threads}).
// Two warm-up steps run before the timed loop (the first step allocates and
// touches every buffer: ~2x a steady step), and the iteration count is fixed.
// bench/vs_pytorch_cpu.py --size realistic runs this and the same step in PyTorch.
//   build/default/bench/bench_realistic_lm_step [--benchmark_filter=/threads:1]
// Counter kept_B/token: activation bytes kept for backward (store.kept_bytes).
#include <benchmark/benchmark.h>

#include <ctg/ctg.hpp>
#include <ctg/optim/optim.hpp>
#include <vector>

namespace {
// Keep in sync with bench/vs_pytorch_cpu.py (SIZES["realistic"]).
struct realistic_config {
  static constexpr ctg::dim_t vocab = 256, max_seq = 128, dim = 256, heads = 8, head_dim = 32, hidden = 688;
  static constexpr std::size_t layers = 4;
};
struct realistic_config_kept : realistic_config {
  static constexpr ctg::nn::checkpointing checkpoint = ctg::nn::checkpointing::none;
};
constexpr std::size_t batch = 8, seq = 128;

using Ids = ctg::input<"ids", ctg::i32, ctg::dyn, ctg::dyn>;
using Pos = ctg::input<"pos", ctg::i32, ctg::dyn>;
using Tg = ctg::input<"targets", ctg::i32, ctg::dyn, ctg::dyn>;

template <class Policy, class Cfg>
void BM_train_step(benchmark::State& state) {
  using M = ctg::nn::transformer<Cfg, Policy>;
  auto step = ctg::value_and_grad(M::loss(Ids{}, Pos{}, Tg{}));
  auto store = ctg::make_store(ctg::cpu::device{static_cast<unsigned>(state.range(0))}, step);
  ctg::nn::init_params(store, 1);
  ctg::optim::adamw opt(store, {.lr = 1e-3f, .weight_decay = 0.1f, .max_grad_norm = 1.0f});
  std::vector<ctg::i32> ids(batch * seq), targets(batch * seq), pos(seq);
  for (std::size_t i = 0; i < ids.size(); ++i) {
    ids[i] = static_cast<ctg::i32>((i * 7 + 3) % Cfg::vocab);
    targets[i] = static_cast<ctg::i32>((i * 7 + 10) % Cfg::vocab);
  }
  for (std::size_t t = 0; t < seq; ++t) pos[t] = static_cast<ctg::i32>(t);
  auto one = [&] {
    const float loss = step(store, ctg::feed<Ids>(ids, batch, seq), ctg::feed<Pos>(pos, seq),
                            ctg::feed<Tg>(targets, batch, seq));
    opt.step(store);
    return loss;
  };
  for (int w = 0; w < 2; ++w) one();  // warm-up: allocation and first touch
  for (auto _ : state) benchmark::DoNotOptimize(one());
  state.counters["tokens/s"] = benchmark::Counter(static_cast<double>(batch * seq), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["kept_B/token"] = static_cast<double>(store.kept_bytes()) / static_cast<double>(batch * seq);
}

void threads(benchmark::internal::Benchmark* b) {
  b->ArgName("threads")->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(5);
}
using f32 = ctg::precision::full<ctg::f32>;
using bf16 = ctg::precision::autocast<ctg::bf16>;
BENCHMARK(BM_train_step<f32, realistic_config>)->Name("realistic_lm_step/f32")->Apply(threads);
BENCHMARK(BM_train_step<f32, realistic_config_kept>)->Name("realistic_lm_step/f32/ckpt_none")->Apply(threads);
BENCHMARK(BM_train_step<bf16, realistic_config>)->Name("realistic_lm_step/bf16")->Apply(threads);
BENCHMARK(BM_train_step<bf16, realistic_config_kept>)->Name("realistic_lm_step/bf16/ckpt_none")->Apply(threads);
}  // namespace

BENCHMARK_MAIN();
