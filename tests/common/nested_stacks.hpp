#pragma once
// Stacks inside stacked blocks, shared by the CPU tests (unit.dropout,
// unit.nn_stack) and the device test of the same behaviour
// (cuda.shared_core):
//   plain_drop, two_inner   a dropout of p = 0.5 as a block; two of them
//                           stacked, as a block
//   nested_losses<Outer, Inner, P>(dev)
//                           four AdamW steps' losses of two outer layers of
//                           two inner layers of x + tanh(x w) (with dropout
//                           of P after each inner layer where P > 0), in a
//                           mix of checkpointing
#include <cmath>
#include <vector>

#include <ctg/ctg.hpp>

namespace nested_stacks {

template <ctg::fixed_string Prefix>
struct plain_drop {
  template <ctg::expr E>
  constexpr auto operator()(E x) const {
    return ctg::dropout<"drop">(x, ctg::lit<0.5>);
  }
};
template <ctg::fixed_string Prefix>
struct two_inner {
  template <ctg::expr E>
  constexpr auto operator()(E x) const {
    return ctg::nn::stack<2, plain_drop>(x);
  }
};

template <ctg::checkpointing InnerCkpt, double P>
struct nested_blocks {
  template <ctg::fixed_string O>
  struct outer {
    template <ctg::fixed_string I>
    struct inner {
      template <ctg::expr X>
      constexpr auto operator()(X x) const {
        auto y = x + ctg::tanh(ctg::matmul(x, ctg::param<O + ".sub." + I + ".w", ctg::f32, 4, 4>{}));
        if constexpr (P > 0) return ctg::dropout<"d">(y, ctg::lit<P>);
        else return y;
      }
    };
    template <ctg::expr X>
    constexpr auto operator()(X x) const {
      return ctg::nn::stack<2, inner, InnerCkpt>(x);
    }
  };
};
using NX = ctg::input<"x", ctg::f32, ctg::dyn, 4>;

template <ctg::checkpointing Outer, ctg::checkpointing Inner, double P = 0.0, class Device>
std::vector<float> nested_losses(const Device& dev) {
  auto step = ctg::value_and_grad(
      ctg::sum(ctg::nn::stack<2, nested_blocks<Inner, P>::template outer, Outer>(NX{}) * ctg::lit<0.5>));
  auto store = ctg::make_store(dev, step);
  ctg::nn::init_params(store, 7, 0.5);
  ctg::optim::adamw opt(store, {.lr = 0.05f});
  std::vector<float> x(12);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.9f * static_cast<float>(i + 1));
  std::vector<float> losses;
  for (int s = 0; s < 4; ++s) {
    losses.push_back(step(store, ctg::feed(NX{}, x, 3)));
    opt.step(store);
  }
  return losses;
}

}  // namespace nested_stacks
