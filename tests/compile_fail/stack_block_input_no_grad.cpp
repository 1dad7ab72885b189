// A stacked block that reads its input only through no_grad gives the
// layers below it no gradient: a stack runs its layers' backward through
// that input, so it does not compile, with a plain message (it gave two
// internal errors: "no type named children in no_gradient"). The corrected
// twin keeps the gradient (unrolled layers, nn::unrolled, would take the
// no_grad as written).
// expect-error: ctg: a stacked block's output must depend on its input with a gradient
// expect-error-count: 1
#include <ctg/ctg.hpp>

template <ctg::fixed_string Prefix>
struct block {
  template <ctg::expr X>
  constexpr auto operator()(X x) const {
    using P = ctg::precision::full<ctg::f32>;
#ifndef CTG_CORRECTED
    return ctg::tanh(ctg::nn::linear<Prefix + ".proj", 8, P>(ctg::no_grad(x)));
#else
    return ctg::tanh(ctg::nn::linear<Prefix + ".proj", 8, P>(x));
#endif
  }
};

int main() {
  using W0 = ctg::param<"w0", ctg::f32, 3, 8>;
  auto loss = ctg::sum(ctg::square(ctg::nn::stack<2, block>(W0{} * ctg::lit<1.0>)));
  auto step = ctg::value_and_grad(loss);
  (void)step;
}
