// Compile-cost probe: an FP8 (delayed scaling) transformer's training step
// with and without activation checkpointing, in one translation unit.
#include <ctg/ctg.hpp>
#include <ctg/optim/optim.hpp>

struct recompute_cfg {
  static constexpr ctg::dim_t vocab = 96, max_seq = 64, dim = 64, heads = 4, head_dim = 16, hidden = 172;
  static constexpr std::size_t layers = 2;
};
struct keep_cfg : recompute_cfg {
  static constexpr ctg::checkpointing checkpoint = ctg::checkpointing::none;
};
using Ids = ctg::input<"ids", ctg::i32, ctg::dyn, ctg::dyn>;
using Pos = ctg::input<"pos", ctg::i32, ctg::dyn>;
using Tg = ctg::input<"targets", ctg::i32, ctg::dyn, ctg::dyn>;
using P = ctg::precision::fp8<ctg::precision::delayed<>>;

template <class Cfg>
float train(std::span<const ctg::i32> ids, std::span<const ctg::i32> pos, std::span<const ctg::i32> targets,
            std::size_t batch, std::size_t seq) {
  using M = ctg::nn::transformer<Cfg, P>;
  auto step = ctg::value_and_grad(M::loss(Ids{}, Pos{}, Tg{}));
  ctg::cpu::device dev;
  auto store = ctg::make_store(dev, step);
  ctg::nn::init_params(store, 1);
  ctg::optim::adamw opt(store);
  const float loss = step(store, ctg::feed<Ids>(ids, batch, seq), ctg::feed<Pos>(pos, seq),
                          ctg::feed<Tg>(targets, batch, seq));
  opt.step(store);
  return loss;
}
template float train<recompute_cfg>(std::span<const ctg::i32>, std::span<const ctg::i32>, std::span<const ctg::i32>,
                                    std::size_t, std::size_t);
template float train<keep_cfg>(std::span<const ctg::i32>, std::span<const ctg::i32>, std::span<const ctg::i32>,
                               std::size_t, std::size_t);
