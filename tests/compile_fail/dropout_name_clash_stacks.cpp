// Compile-fail pair: two nn::stack's of one block in one graph. A stack
// names its block "layers.{i}", so layer k of both stacks has one dropout
// name, and both would drop the same elements; the step must not compile,
// as two dropouts of one name outside stacks do not. The corrected twin is
// one stack of both stacks' layers.
// expect-error: ctg: two dropouts share one name
// expect-note: Name = [^ ]*"layers.[{]i[}].drop"
// expect-error-count: 1
#include <ctg/ctg.hpp>

using X = ctg::input<"x", ctg::f32, ctg::dyn, 16>;

template <ctg::fixed_string Prefix>
struct block {
  template <ctg::expr H>
  constexpr auto operator()(H h) const {
    return ctg::dropout<Prefix + ".drop">(ctg::tanh(h), ctg::lit<0.1>) * ctg::param<Prefix + ".w", ctg::f32, 16>{};
  }
};

int main() {
#ifndef CTG_CORRECTED
  auto y = ctg::nn::stack<2, block>(ctg::nn::stack<2, block>(X{}));  // the mistake: 2 + 2 layers as two stacks
#else
  auto y = ctg::nn::stack<4, block>(X{});
#endif
  auto step = ctg::value_and_grad(ctg::mean(ctg::square(y)));
  ctg::cpu::device dev;
  auto store = ctg::make_store(dev, step);
  (void)store;
}
