// Compile-cost probe: the tiny transformer's training step (forward, backward,
// AdamW) with CTG_LAYERS blocks in one ctg::nn::stack (default 2).
#include <ctg/ctg.hpp>
#include <ctg/optim/optim.hpp>

#ifndef CTG_LAYERS
#define CTG_LAYERS 2
#endif

struct cfg {
  static constexpr ctg::dim_t vocab = 96, max_seq = 64, dim = 64, heads = 4, head_dim = 16, hidden = 172;
  static constexpr std::size_t layers = CTG_LAYERS;
};
using Ids = ctg::input<"ids", ctg::i32, ctg::dyn, ctg::dyn>;
using Pos = ctg::input<"pos", ctg::i32, ctg::dyn>;
using Tg = ctg::input<"targets", ctg::i32, ctg::dyn, ctg::dyn>;

float train(std::span<const ctg::i32> ids, std::span<const ctg::i32> pos, std::span<const ctg::i32> targets,
            std::size_t batch, std::size_t seq) {
  using M = ctg::nn::transformer<cfg, ctg::precision::autocast<ctg::bf16>>;
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
