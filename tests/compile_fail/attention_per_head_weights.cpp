// Compile-fail pair: attention's weights in a per-head layout ([H, d, Dh], as
// some code bases store them) where ctg takes nn.Linear's [H*Dh, d]. The
// element counts agree, so only the shapes can tell; the step must not
// compile, with one error at the call. The corrected twin declares [H*Dh, d].
// expect-error: ctg: shape mismatch: attention's weights wq, wk, wv and wo are each
// expect-error-count: 1
#include <ctg/ctg.hpp>

using X = ctg::input<"x", ctg::f32, ctg::dyn, 5, 16>;  // [batch, T, d]
#ifndef CTG_CORRECTED
using Wq = ctg::param<"attn.wq", ctg::f32, 2, 16, 8>;  // the mistake: [H, d, Dh]
#else
using Wq = ctg::param<"attn.wq", ctg::f32, 16, 16>;
#endif
using Wk = ctg::param<"attn.wk", ctg::f32, 16, 16>;
using Wv = ctg::param<"attn.wv", ctg::f32, 16, 16>;
using Wo = ctg::param<"attn.wo", ctg::f32, 16, 16>;

int main() {
  auto y = ctg::nn::causal_self_attention<2, ctg::precision::full<ctg::f32>>(X{}, Wq{}, Wk{}, Wv{}, Wo{});
  auto loss = ctg::mean(ctg::square(y));
  auto step = ctg::value_and_grad(loss);
  // The user's next lines add no errors of their own.
  ctg::cpu::device dev;
  auto store = ctg::make_store(dev, step);
  (void)store;
}
