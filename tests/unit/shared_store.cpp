// One store for a training step and an evaluation step over the same leaves
// (issue 15, item 10): make_store(dev, train, eval). The evaluation step reads
// the training step's parameters and FP8 scales in place (it computes what a
// store holding a copy of them computes), and running it changes no state:
// the training run is bitwise the one that never evaluated.
#include <doctest/doctest.h>

#include <cstring>
#include <vector>

#include <ctg/ctg.hpp>

#include "same_state.hpp"

namespace {
using ctg::dyn;
namespace pr = ctg::precision;
using X = ctg::input<"x", ctg::f32, dyn, 8>;
using T = ctg::input<"t", ctg::f32, dyn, 4>;
using W1 = ctg::param<"w1", ctg::f32, 8, 8>;
using W2 = ctg::param<"w2", ctg::f32, 8, 4>;
using V = std::vector<float>;
using P = pr::fp8<pr::delayed<4>, ctg::f32>;
using XH = ctg::scaling::delayed<"w1.fp8_input", pr::delayed<4>>::history_leaf;

// The model, with dropout for training and without for evaluation (the same leaves).
template <double Drop>
auto logits() {
  auto h = ctg::tanh(pr::weight_matmul<P>(X{}, W1{}));
  if constexpr (Drop > 0) return ctg::matmul(ctg::dropout<"drop">(h, ctg::lit<Drop>), W2{});
  else return ctg::matmul(h, W2{});
}
auto train_step() { return ctg::value_and_grad(ctg::mean(ctg::square(logits<0.25>() - T{}))); }
auto eval_step() { return ctg::forward(logits<0.0>()); }

V data(std::size_t n, float phase) {
  V v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = std::sin(0.37f * static_cast<float>(i) + phase);
  return v;
}
}  // namespace

TEST_CASE("an evaluation step over a training store's leaves: no copy, no state changed") {
  auto train = train_step();
  auto eval = eval_step();
  ctg::cpu::device dev;
  auto store = ctg::make_store(dev, train, eval);  // train and evaluate over one set of leaves
  auto twin = ctg::make_store(dev, train);         // the same training, never evaluated
  ctg::nn::init_params(store, 5, 0.3);
  ctg::nn::init_params(twin, 5, 0.3);
  store.seed(17);
  twin.seed(17);
  ctg::optim::adamw opt(store, {.lr = 1e-2f});
  ctg::optim::adamw twin_opt(twin, {.lr = 1e-2f});
  const V xe = data(3 * 8, 2.0f);

  for (int s = 0; s < 4; ++s) {
    INFO("step " << s);
    const V x = data(5 * 8, static_cast<float>(s)), t = data(5 * 4, 0.5f * static_cast<float>(s));
    const float l = train(store, ctg::feed<X>(x, 5), ctg::feed<T>(t, 5));
    const float lt = train(twin, ctg::feed<X>(x, 5), ctg::feed<T>(t, 5));
    CHECK(std::memcmp(&l, &lt, sizeof l) == 0);
    opt.step(store);
    twin_opt.step(twin);

    // Evaluate: the same values as a store holding a copy of the leaves.
    const std::uint64_t steps = store.steps_run();
    const V history(store.param<XH>().begin(), store.param<XH>().end());
    eval(store, ctg::feed<X>(xe, 3));
    auto copy = ctg::make_store(dev, eval);  // every leaf the evaluation reads, copied (parameters, FP8 state)
    auto copy_leaf = [&]<class L>(std::type_identity<L>) {
      if constexpr (!L::fed && ctg::tl::contains<L, decltype(eval)::nodes>::value) {
        const auto from = store.param<L>();
        std::copy(from.begin(), from.end(), copy.param<L>().begin());
      }
    };
    [&]<class... Ls>(ctg::tl::list<Ls...>) { (copy_leaf(std::type_identity<Ls>{}), ...); }(
        ctg::leaves_t<decltype(train)::nodes>{});
    eval(copy, ctg::feed<X>(xe, 3));
    const auto a = store.value(eval), b = copy.value();
    REQUIRE(a.size() == 3 * 4);
    CHECK(std::memcmp(a.data(), b.data(), a.size_bytes()) == 0);
    // No step counted, no FP8 state updated.
    CHECK(store.steps_run() == steps);
    CHECK(V(store.param<XH>().begin(), store.param<XH>().end()) == history);
  }
  // The training run is the one that never evaluated: dropout masks (keyed by
  // the step count), FP8 states, parameters and gradients, bitwise.
  same_state::check_same_state(store, twin);
}
