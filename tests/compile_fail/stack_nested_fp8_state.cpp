// A stack inside a stacked block whose layers hold FP8 delayed scaling
// states: only a top-level stack's states are updated after a step, so the
// inner stack's scales stayed 1 and its amax histories 0, silently. One
// ctg: error at the outer stack. The corrected twin scales the inner
// stack's products from each tensor's own amax (current scaling: no state).
// expect-error: ctg: a stack inside a stacked block cannot hold FP8 delayed scaling states
// expect-error-count: 1
#include <ctg/ctg.hpp>

namespace pr = ctg::precision;
using X = ctg::input<"x", ctg::f32, ctg::dyn, 8>;
using P = pr::fp8<pr::delayed<4>, ctg::f32>;
#ifndef CTG_CORRECTED
using Inner = P;  // the mistake
#else
using Inner = pr::fp8<pr::current<>, ctg::f32>;
#endif

template <ctg::fixed_string Prefix>
struct inner {
  template <class In>
  constexpr auto operator()(In x) const {
    return x + ctg::tanh(pr::weight_matmul<Inner>(x, ctg::param<Prefix + ".inner.w", ctg::f32, 8, 8>{}));
  }
};
template <ctg::fixed_string Prefix>
struct outer {
  template <class In>
  constexpr auto operator()(In x) const {
    auto y = x + ctg::tanh(pr::weight_matmul<P>(x, ctg::param<Prefix + ".outer.w", ctg::f32, 8, 8>{}));
    return ctg::nn::stack<2, inner>(y);
  }
};

int main() {
  auto step = ctg::value_and_grad(ctg::sum(ctg::nn::stack<2, outer>(X{})));
  ctg::cpu::device dev;
  auto store = ctg::make_store(dev, step);
  ctg::nn::init_params(store, 1);
}
