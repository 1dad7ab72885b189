// Compile-cost probe: a GPT-like model as a user would write one: width 96,
// 3 layers, bf16 autocast, residual dropout, with its training step (AdamW)
// and its evaluation step (forward only, no dropout) in one translation unit.
#include <ctg/ctg.hpp>
#include <ctg/optim/optim.hpp>

struct train_cfg {
  static constexpr ctg::dim_t vocab = 256, max_seq = 128, dim = 96, heads = 4, head_dim = 24, hidden = 256;
  static constexpr std::size_t layers = 3;
  static constexpr double dropout = 0.1;
};
struct eval_cfg : train_cfg {
  static constexpr double dropout = 0.0;
};
using Ids = ctg::input<"ids", ctg::i32, ctg::dyn, ctg::dyn>;
using Pos = ctg::input<"pos", ctg::i32, ctg::dyn>;
using Tg = ctg::input<"targets", ctg::i32, ctg::dyn, ctg::dyn>;
using P = ctg::precision::autocast<ctg::bf16>;

float train(std::span<const ctg::i32> ids, std::span<const ctg::i32> pos, std::span<const ctg::i32> targets,
            std::size_t batch, std::size_t seq) {
  using M = ctg::nn::transformer<train_cfg, P>;
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

float evaluate(std::span<const ctg::i32> ids, std::span<const ctg::i32> pos, std::span<const ctg::i32> targets,
               std::size_t batch, std::size_t seq) {
  using M = ctg::nn::transformer<eval_cfg, P>;
  auto step = ctg::forward(M::loss(Ids{}, Pos{}, Tg{}));
  ctg::cpu::device dev;
  auto store = ctg::make_store(dev, step);
  return step(store, ctg::feed<Ids>(ids, batch, seq), ctg::feed<Pos>(pos, seq), ctg::feed<Tg>(targets, batch, seq));
}
