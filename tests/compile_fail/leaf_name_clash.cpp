// Compile-fail pair: two different leaves with the same name in one graph. Leaves are
// identified by their compile-time name, so a copy-pasted name with a different shape
// (or dtype, or role) would make two tensors fight over one slot; the step must not
// compile. The corrected twin names the second projection differently.
// expect-error: ctg: two different leaves share one name
// expect-error-count: 1
#include <ctg/ctg.hpp>

using X = ctg::input<"x", ctg::f32, ctg::dyn, 16>;
using Wq = ctg::param<"attn.wq", ctg::f32, 16, 16>;
#ifndef CTG_CORRECTED
using Wo = ctg::param<"attn.wq", ctg::f32, 16, 8>;  // the mistake: copy-pasted name
#else
using Wo = ctg::param<"attn.wo", ctg::f32, 16, 8>;
#endif

int main() {
  auto y = ctg::matmul(ctg::tanh(ctg::matmul(X{}, Wq{})), Wo{});
  auto loss = ctg::mean(ctg::square(y));
  auto step = ctg::value_and_grad(loss, ctg::wrt<Wq, Wo>);
  ctg::cpu::device dev;
  auto store = ctg::make_store(dev, step);
  (void)store;
}
