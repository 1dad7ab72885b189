// A mistake inside a stacked block is reported once, as the same block
// unrolled reports it: the stack makes no node of a failed block. (Its
// block graphs, built on the failed node, added a cascade of internal
// errors: "no matching function for call to rule", "no type named
// children".) The program goes on as a user's would. The corrected twin
// gives the bias the block's width.
// expect-error: ctg: shape mismatch: the operands do not broadcast
// expect-error-count: 1
#include <ctg/ctg.hpp>
#include <vector>

template <ctg::fixed_string Prefix>
struct block {
  template <ctg::expr X>
  constexpr auto operator()(X x) const {
    using W = ctg::param<Prefix + ".w", ctg::f32, 8, 8>;
#ifndef CTG_CORRECTED
    using B = ctg::param<Prefix + ".b", ctg::f32, 5>;
#else
    using B = ctg::param<Prefix + ".b", ctg::f32, 8>;
#endif
    return x + ctg::tanh(ctg::matmul(x, W{}) + B{});
  }
};

int main() {
  using X = ctg::input<"x", ctg::f32, ctg::dyn, 8>;
  auto loss = ctg::sum(ctg::square(ctg::nn::stack<4, block>(X{})));
  auto step = ctg::value_and_grad(loss);
  ctg::cpu::device dev;
  auto store = ctg::make_store(dev, step);
  ctg::nn::init_params(store, 1);
  std::vector<float> x(2 * 8, 0.5f);
  float l = step(store, ctg::feed<X>(x, 2));
  (void)l;
}
