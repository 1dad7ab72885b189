// Item 8 of issue 15: the formats a recipe may take are the recipe's. A
// per-tensor recipe with e5m2 forward operands (pure e5m2 training, which
// TransformerEngine rejects too) must not compile. The corrected twin takes
// precision::hybrid (e4m3 forward, e5m2 gradients).
// expect-error: ctg: fp8 format: a per-tensor recipe quantizes forward operands
// expect-error-count: 1
#include <ctg/ctg.hpp>

namespace pr = ctg::precision;
using X = ctg::input<"x", ctg::f32, ctg::dyn, 16>;
using W = ctg::param<"w", ctg::f32, 16, 16>;
#ifndef CTG_CORRECTED
using Formats = pr::fp8_formats<ctg::e5m2, ctg::e5m2>;  // the mistake
#else
using Formats = pr::hybrid;
#endif
using Policy = pr::fp8<pr::delayed<16, 0, pr::amax_algo::max, Formats>>;

int main() {
  auto loss = ctg::mean(ctg::square(ctg::cast<ctg::f32>(pr::weight_matmul<Policy>(X{}, W{}))));
  auto step = ctg::value_and_grad(loss);
  ctg::cpu::device dev;
  auto store = ctg::make_store(dev, step);
  (void)store;
}
