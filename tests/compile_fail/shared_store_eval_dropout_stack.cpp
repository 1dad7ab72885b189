// An evaluation step sharing a training store whose dropout is inside a
// stack's block (where a transformer's are): must not compile, as a top-level
// dropout does not. (Only the top-level nodes were looked at: a
// transformer's own logits, not its evaluation's, compiled, and its masks
// changed with the training step count.) The corrected twin evaluates the
// block without dropout.
// expect-error: ctg: a step sharing a training store runs without dropout
// expect-error-count: 1
#include <ctg/ctg.hpp>

using X = ctg::input<"x", ctg::f32, ctg::dyn, 8>;

template <bool Dropout>
struct blocks {
  template <ctg::fixed_string Prefix>
  struct block {
    template <ctg::expr In>
    constexpr auto operator()(In x) const {
      auto h = x + ctg::tanh(ctg::matmul(x, ctg::param<Prefix + ".w", ctg::f32, 8, 8>{}));
      if constexpr (Dropout) return ctg::dropout<"drop">(h, ctg::lit<0.1>);
      else return h;
    }
  };
};

int main() {
  auto train = ctg::value_and_grad(ctg::mean(ctg::square(ctg::nn::stack<2, blocks<true>::block>(X{}))));
#ifndef CTG_CORRECTED
  auto eval = ctg::forward(ctg::nn::stack<2, blocks<true>::block>(X{}));  // the mistake
#else
  auto eval = ctg::forward(ctg::nn::stack<2, blocks<false>::block>(X{}));
#endif
  ctg::cpu::device dev;
  auto store = ctg::make_store(dev, train, eval);
  (void)store;
}
