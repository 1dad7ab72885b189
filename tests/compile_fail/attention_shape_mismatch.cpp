// Compile-fail pair: causal_attention with a v of another head dim than q
// and k ([B, T, 16] vs [B, T, 8]). The fused kernels take one shape for all
// three: a compile error at the user's call. The corrected twin projects v
// to 16 features too.
// expect-error: ctg: shape mismatch: causal_attention's q, k and v
// expect-error-count: 1
#include <ctg/ctg.hpp>
#include <vector>

using X = ctg::input<"x", ctg::f32, ctg::dyn, ctg::dyn, 32>;
using Wq = ctg::param<"wq", ctg::f32, 32, 16>;
using Wk = ctg::param<"wk", ctg::f32, 32, 16>;
#ifndef CTG_CORRECTED
using Wv = ctg::param<"wv", ctg::f32, 32, 8>;  // the mistake: values of 8 features
#else
using Wv = ctg::param<"wv", ctg::f32, 32, 16>;
#endif

int main() {
  auto o = ctg::causal_attention(ctg::matmul(X{}, Wq{}), ctg::matmul(X{}, Wk{}), ctg::matmul(X{}, Wv{}));
  auto step = ctg::value_and_grad(ctg::mean(ctg::square(o)), ctg::wrt<Wq, Wk, Wv>);
  // The user's next lines add no errors of their own.
  ctg::cpu::device dev;
  auto store = ctg::make_store(dev, step);
  std::vector<float> x(2 * 5 * 32, 0.5f);
  float l = step(store, ctg::feed<X>(x, 2, 5));
  (void)l;
}
