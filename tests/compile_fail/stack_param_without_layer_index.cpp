// A stacked block whose parameter name lacks "{i}" would be one weight shared
// by every layer without anyone asking for it: it does not compile.
// The corrected twin names the parameter per layer.
// expect-error: ctg: a stacked block's parameter names must contain \{i\}
// expect-error-count: 1
#include <ctg/ctg.hpp>

template <ctg::fixed_string Prefix>
struct block {
  template <ctg::expr X>
  constexpr auto operator()(X x) const {
    using P = ctg::precision::full<ctg::f32>;
#ifndef CTG_CORRECTED
    return x + ctg::nn::linear<"shared", 8, P>(x);
#else
    return x + ctg::nn::linear<Prefix + ".proj", 8, P>(x);
#endif
  }
};

int main() {
  using X = ctg::input<"x", ctg::f32, ctg::dyn, 8>;
  auto loss = ctg::sum(ctg::square(ctg::nn::stack<4, block>(X{})));
  auto step = ctg::value_and_grad(loss);
  (void)step;
}
