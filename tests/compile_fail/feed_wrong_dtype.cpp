// Compile-fail pair: a std::vector<float> fed to an f64 input is one error
// naming the rule (ctg converts nothing it is fed), not a list of feed
// overloads. The corrected twin feeds doubles.
// expect-error: ctg: feed<X> takes data of X's element type
// expect-error-count: 1
#include <vector>

#include <ctg/ctg.hpp>

using X = ctg::input<"x", double, ctg::dyn, 4>;
using W = ctg::param<"w", double, 4, 2>;

int main() {
  auto step = ctg::value_and_grad(ctg::sum(ctg::matmul(X{}, W{})));
  ctg::cpu::device dev;
  auto store = ctg::make_store(dev, step);
#ifndef CTG_CORRECTED
  const std::vector<float> x(8, 1.0f);
#else
  const std::vector<double> x(8, 1.0);
#endif
  step(store, ctg::feed<X>(x, 2));
  step(store, ctg::feed(X{}, x, 2));
}
