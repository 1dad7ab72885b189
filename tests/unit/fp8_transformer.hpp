#pragma once
// Shared by fp8_transformer_*.cpp. B4 on a model: a small transformer under
// the precision::fp8 policy (every weight product in FP8) with residual
// dropout, trained with AdamW for 6 steps with checkpointing::none and with
// checkpointing::every_layer (each block recomputed in backward) or
// attention_scores (attention's scores recomputed). Losses,
// gradients, parameters, amax histories and scales must be bitwise equal at
// every step. Also: the memory query (store.plan, before any run) equals what
// a run keeps, and checkpointing keeps fewer bytes per token.
#include <cstring>
#include <string>

#include <ctg/optim/optim.hpp>

#include "grad_check.hpp"
#include "same_state.hpp"

namespace fp8_b4 {
using ctg::dyn;
using ctg::i32;
namespace pr = ctg::precision;
using ctg::nn::checkpointing;

template <checkpointing C>
struct config {
  static constexpr ctg::dim_t vocab = 11, max_seq = 6, dim = 8, heads = 2, head_dim = 4, hidden = 12;
  static constexpr std::size_t layers = 2;
  static constexpr checkpointing checkpoint = C;
  static constexpr double dropout = 0.25;
};
using Ids = ctg::input<"ids", i32, dyn, dyn>;
using Pos = ctg::input<"pos", i32, dyn>;
using Tg = ctg::input<"targets", i32, dyn, dyn>;

template <class Recipe, checkpointing C>
auto train_step() {
  using model = ctg::nn::transformer<config<C>, pr::fp8<Recipe>>;
  return ctg::value_and_grad(model::loss(Ids{}, Pos{}, Tg{}));
}

// Stored FP8 state leaves of a step (stacked: one leaf holds every layer's).
template <class Step>
constexpr std::size_t count_state() {
  return []<class... Ls>(ctg::tl::list<Ls...>) {
    return (std::size_t(0) + ... + std::size_t(Ls::role == ctg::leaf_role::state));
  }(ctg::leaves_t<typename Step::nodes>{});
}

// One step on batch 3 x 5 tokens.
constexpr int batch = 3, T = 5;
template <class Step, class Store>
float run(Step& step, Store& st, const std::vector<i32>& ids, const std::vector<i32>& tg) {
  static const std::vector<i32> pos{0, 1, 2, 3, 4};
  return step(st, ctg::feed<Ids>(ids, batch, T), ctg::feed<Pos>(pos, T), ctg::feed<Tg>(tg, batch, T));
}
template <class Store>
std::size_t plan(Store& st, const std::vector<i32>& ids, const std::vector<i32>& tg) {
  static const std::vector<i32> pos{0, 1, 2, 3, 4};
  return st.plan(ctg::feed<Ids>(ids, batch, T), ctg::feed<Pos>(pos, T), ctg::feed<Tg>(tg, batch, T));
}

using same_state::check_same_state;

// Sum of |x - 1| over every ".scale" state leaf: how far the scales moved from their start.
template <class Store>
double scale_movement(Store& s) {
  double m = 0;
  [&]<class... Ls>(ctg::tl::list<Ls...>) {
    auto one = [&]<class L>(std::type_identity<L>) {
      if constexpr (L::role == ctg::leaf_role::state)
        if (std::string_view(L::name.c_str()).ends_with(".scale"))
          for (float v : s.template param<L>()) m += std::abs(double(v) - 1.0);
    };
    (one(std::type_identity<Ls>{}), ...);
  }(ctg::leaves_t<typename Store::step_type::nodes>{});
  return m;
}

template <class Recipe, checkpointing Ckpt = checkpointing::every_layer>
void b4_on_transformer() {
  auto kept_step = train_step<Recipe, checkpointing::none>();
  auto ckpt_step = train_step<Recipe, Ckpt>();
  using K = decltype(kept_step);
  static_assert(std::is_same_v<typename K::wrt, typename decltype(ckpt_step)::wrt>);
  ctg::cpu::device dev;
  auto a = ctg::make_store(dev, kept_step);
  auto b = ctg::make_store(dev, ckpt_step);
  a.seed(2026);
  b.seed(2026);
  ctg::nn::init_params(a, 4, 0.3);
  ctg::nn::init_params(b, 4, 0.3);
  ctg::optim::adamw_config oc;
  oc.lr = 0.02f;
  oc.max_grad_norm = 1.0f;
  ctg::optim::adamw opt_a(a, oc);
  ctg::optim::adamw opt_b(b, oc);

  // The FP8 state is in the store (delayed: 3 quantizers x 2 leaves per weight
  // product), and dropout is on: another seed gives another loss.
  static_assert(count_state<K>() == (std::is_same_v<Recipe, pr::current<>> ? 0 : 2 * 3 * 8));
  {
    auto c = ctg::make_store(dev, kept_step);
    ctg::nn::init_params(c, 4, 0.3);
    auto one = [&](std::uint64_t seed) {
      c.seed(seed);
      c.set_steps_run(0);
      return run(kept_step, c, std::vector<i32>(15, 3), std::vector<i32>(15, 5));
    };
    CHECK(one(1) != one(2));
  }

  gc::rng r(17);
  constexpr int steps = 6;
  std::vector<float> losses;
  for (int s = 0; s < steps; ++s) {
    std::vector<i32> ids(batch * T), tg(batch * T);
    for (std::size_t i = 0; i < ids.size(); ++i) {
      ids[i] = static_cast<i32>(r.uniform(0, 11)) % 11;
      tg[i] = static_cast<i32>(r.uniform(0, 11)) % 11;
    }
    tg[4] = -100;
    const std::size_t planned_a = plan(a, ids, tg), planned_b = plan(b, ids, tg);
    const float la = run(kept_step, a, ids, tg), lb = run(ckpt_step, b, ids, tg);
    CHECK(a.kept_bytes() == planned_a);
    CHECK(b.kept_bytes() == planned_b);
    INFO("step " << s);
    CHECK(std::memcmp(&la, &lb, sizeof la) == 0);
    losses.push_back(la);
    opt_a.step(a);
    opt_b.step(b);
    check_same_state(a, b);
  }
  // The comparison is not vacuous: delayed scales moved, training moved the loss,
  // and checkpointing changed what was kept.
  if constexpr (!std::is_same_v<Recipe, pr::current<>>) CHECK(scale_movement(a) > 0);
  CHECK(losses.back() != losses.front());
  CHECK(b.kept_bytes() < a.kept_bytes());
  MESSAGE("losses over " << steps << " steps: " << losses.front() << " .. " << losses.back()
                         << "; kept bytes per token " << a.kept_bytes() / (batch * T) << " (none) vs "
                         << b.kept_bytes() / (batch * T)
                         << std::string(Ckpt == checkpointing::every_layer ? " (every_layer)" : " (attention_scores)"));
}
}  // namespace fp8_b4
