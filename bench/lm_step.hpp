#pragma once
// One training step of nn::transformer<Cfg, Policy> on the CPU (forward,
// backward, global-norm clipping, AdamW), timed by Google Benchmark; the
// benchmark's argument is the thread count (cpu::device{threads}). Two
// warm-up steps run before the timed loop: the first step allocates and
// touches every buffer (~2x a steady step), and a first step slower than the
// minimum time would otherwise be the only, cold, iteration.
// Counters: tokens/s, fusion groups, kept_B/token (activation bytes kept for
// backward, store.kept_bytes()). Used by bench/tiny_lm_step.cpp and
// bench/realistic_lm_step.cpp.
#include <benchmark/benchmark.h>

#include <ctg/ctg.hpp>
#include <vector>

namespace lm_bench {
using Ids = ctg::input<"ids", ctg::i32, ctg::dyn, ctg::dyn>;
using Pos = ctg::input<"pos", ctg::i32, ctg::dyn>;
using Tg = ctg::input<"targets", ctg::i32, ctg::dyn, ctg::dyn>;

// Cfg with every layer's values kept (no recompute in backward).
template <class Cfg>
struct kept : Cfg {
  static constexpr ctg::nn::checkpointing checkpoint = ctg::nn::checkpointing::none;
};
// Cfg with every layer's values kept but attention's of the scores' size.
template <class Cfg>
struct scores_recomputed : Cfg {
  static constexpr ctg::nn::checkpointing checkpoint = ctg::nn::checkpointing::attention_scores;
};

// Cfg with attention computed by ctg::causal_attention (attention_kernel::fused).
template <class Cfg>
struct fused_attention : Cfg {
  static constexpr ctg::nn::attention_kernel attention = ctg::nn::attention_kernel::fused;
};

template <class Policy, class Cfg, std::size_t Batch, std::size_t Seq>
void train_step(benchmark::State& state) {
  using M = ctg::nn::transformer<Cfg, Policy>;
  auto step = ctg::value_and_grad(M::loss(Ids{}, Pos{}, Tg{}));
  auto store = ctg::make_store(ctg::cpu::device{static_cast<unsigned>(state.range(0))}, step);
  ctg::nn::init_params(store, 1);
  ctg::optim::adamw opt(store, {.lr = 1e-3f, .weight_decay = 0.1f, .max_grad_norm = 1.0f});
  std::vector<ctg::i32> ids(Batch * Seq), targets(Batch * Seq), pos(Seq);
  for (std::size_t i = 0; i < ids.size(); ++i) {
    ids[i] = static_cast<ctg::i32>((i * 7 + 3) % Cfg::vocab);
    targets[i] = static_cast<ctg::i32>((i * 7 + 10) % Cfg::vocab);
  }
  for (std::size_t t = 0; t < Seq; ++t) pos[t] = static_cast<ctg::i32>(t);
  auto one = [&] {
    const float loss =
        step(store, ctg::feed<Ids>(ids, Batch, Seq), ctg::feed<Pos>(pos, Seq), ctg::feed<Tg>(targets, Batch, Seq));
    opt.step(store);
    return loss;
  };
  for (int w = 0; w < 2; ++w) one();  // warm-up: allocation and first touch
  for (auto _ : state) benchmark::DoNotOptimize(one());
  const double tokens = static_cast<double>(Batch * Seq);
  state.counters["tokens/s"] = benchmark::Counter(tokens, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["groups"] = static_cast<double>(ctg::group_count_v<decltype(step)>);
  state.counters["kept_B/token"] = static_cast<double>(store.kept_bytes()) / tokens;
}
}  // namespace lm_bench
