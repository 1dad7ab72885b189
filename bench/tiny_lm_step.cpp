// One training step of the tiny transformer (forward, backward, gradient
// clipping and AdamW) on the CPU, the argument being the thread count
// (cpu::device{threads}): f32, autocast<bf16> and
// fp8<delayed<>> policies (FP8 is emulated on the CPU: no speedup expected),
// each layer recomputed in backward (the default) or kept (ckpt_none).
// Counter kept_B/token: activation bytes kept for backward (store.kept_bytes).
// bench/vs_pytorch_cpu.py runs this and the same step in PyTorch side by side.
//   build/default/bench/bench_tiny_lm_step
#include <benchmark/benchmark.h>

#include <ctg/ctg.hpp>
#include <ctg/optim/optim.hpp>
#include <vector>

namespace {
// Keep in sync with bench/vs_pytorch_cpu.py.
struct bench_config {
  static constexpr ctg::dim_t vocab = 96, max_seq = 64, dim = 64, heads = 4, head_dim = 16, hidden = 172;
  static constexpr std::size_t layers = 2;
};
struct bench_config_kept : bench_config {
  static constexpr ctg::nn::checkpointing checkpoint = ctg::nn::checkpointing::none;
};
constexpr std::size_t batch = 8, seq = 64;

using Ids = ctg::input<"ids", ctg::i32, ctg::dyn, ctg::dyn>;
using Pos = ctg::input<"pos", ctg::i32, ctg::dyn>;
using Tg = ctg::input<"targets", ctg::i32, ctg::dyn, ctg::dyn>;

template <class Policy, class Cfg = bench_config>
void BM_train_step(benchmark::State& state) {
  using M = ctg::nn::transformer<Cfg, Policy>;
  auto step = ctg::value_and_grad(M::loss(Ids{}, Pos{}, Tg{}));
  auto store = ctg::make_store(ctg::cpu::device{static_cast<unsigned>(state.range(0))}, step);
  ctg::nn::init_params(store, 1);
  ctg::optim::adamw opt(store, {.lr = 1e-3f, .weight_decay = 0.1f, .max_grad_norm = 1.0f});
  std::vector<ctg::i32> ids(batch * seq), targets(batch * seq), pos(seq);
  for (std::size_t i = 0; i < ids.size(); ++i) {
    ids[i] = static_cast<ctg::i32>((i * 7 + 3) % bench_config::vocab);
    targets[i] = static_cast<ctg::i32>((i * 7 + 10) % bench_config::vocab);
  }
  for (std::size_t t = 0; t < seq; ++t) pos[t] = static_cast<ctg::i32>(t);
  for (int w = 0; w < 2; ++w) {  // warm-up: allocation and first touch happen here, not in the timed loop
    step(store, ctg::feed<Ids>(ids, batch, seq), ctg::feed<Pos>(pos, seq), ctg::feed<Tg>(targets, batch, seq));
    opt.step(store);
  }
  for (auto _ : state) {
    const float loss = step(store, ctg::feed<Ids>(ids, batch, seq), ctg::feed<Pos>(pos, seq),
                            ctg::feed<Tg>(targets, batch, seq));
    opt.step(store);
    benchmark::DoNotOptimize(loss);
  }
  state.counters["tokens/s"] = benchmark::Counter(static_cast<double>(batch * seq), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["groups"] = static_cast<double>(ctg::group_count_v<decltype(step)>);
  state.counters["kept_B/token"] = static_cast<double>(store.kept_bytes()) / static_cast<double>(batch * seq);
}
void threads(benchmark::internal::Benchmark* b) {
  b->ArgName("threads")->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
}
BENCHMARK(BM_train_step<ctg::precision::full<ctg::f32>>)->Name("tiny_lm_step/f32")->Apply(threads);
BENCHMARK(BM_train_step<ctg::precision::autocast<ctg::bf16>>)->Name("tiny_lm_step/bf16")->Apply(threads);
BENCHMARK(BM_train_step<ctg::precision::autocast<ctg::bf16>, bench_config_kept>)->Name("tiny_lm_step/bf16/ckpt_none")->Apply(threads);
BENCHMARK(BM_train_step<ctg::precision::fp8<ctg::precision::delayed<>>>)->Name("tiny_lm_step/fp8")->Apply(threads);
}  // namespace

BENCHMARK_MAIN();
