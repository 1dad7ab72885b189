// Compile-fail pair: two dropouts with one name in one graph. A dropout's
// name keys its random stream, so both would drop the same elements (a
// copy-pasted name silently correlates two masks); the step must not
// compile. The corrected twin names the second dropout differently.
// expect-error: ctg: two dropouts share one name
// expect-note: Name = [^ ]*"drop"
// expect-error-count: 1
#include <ctg/ctg.hpp>

using X = ctg::input<"x", ctg::f32, ctg::dyn, 16>;
using W = ctg::param<"w", ctg::f32, 16, 16>;

int main() {
  auto h = ctg::dropout<"drop">(ctg::matmul(X{}, W{}), ctg::lit<0.1>);
#ifndef CTG_CORRECTED
  auto y = ctg::dropout<"drop">(ctg::tanh(h), ctg::lit<0.1>);  // the mistake: copy-pasted name
#else
  auto y = ctg::dropout<"drop2">(ctg::tanh(h), ctg::lit<0.1>);
#endif
  auto step = ctg::value_and_grad(ctg::mean(ctg::square(y)));
  ctg::cpu::device dev;
  auto store = ctg::make_store(dev, step);
  (void)store;
}
