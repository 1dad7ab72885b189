// make_store(dev, train, eval...) takes each forward step once: two forward
// steps of the same expression are one step (one type), which would share
// one runner and one value. Given twice, one ctg: error at make_store (it
// was two errors from libstdc++'s std::get at the step's first use). The
// corrected twin gives the step once.
// expect-error: ctg: make_store was given one forward step twice
// expect-error-count: 1
#include <vector>

#include <ctg/ctg.hpp>

using X = ctg::input<"x", ctg::f32, ctg::dyn, 4>;
using W = ctg::param<"w", ctg::f32, 4, 4>;

int main() {
  auto train = ctg::value_and_grad(ctg::mean(ctg::square(ctg::matmul(X{}, W{}))));
  auto on_validation = ctg::forward(ctg::matmul(X{}, W{}));
  auto on_test = ctg::forward(ctg::matmul(X{}, W{}));  // (the same expression: the same step)
  ctg::cpu::device dev;
#ifndef CTG_CORRECTED
  auto store = ctg::make_store(dev, train, on_validation, on_test);  // the mistake
#else
  auto store = ctg::make_store(dev, train, on_validation);
#endif
  std::vector<float> x(8, 1.0f);
  on_test(store, ctg::feed<X>(x, 2));
  std::vector<float> out(store.value_count(on_test));  // (a GPU store's way to read a value)
  store.download_value(on_test, std::span<float>(out));
  return static_cast<int>(store.value(on_test).size() + out.size());
}
