// A step takes each input's data as a feed, which names its leaf and its
// dyn sizes: data passed bare must not compile, with one ctg: error (it was
// "no type named 'leaf' in std::vector<float>" inside the store). The
// corrected twin wraps it in ctg::feed<X>.
// expect-error: ctg: a step takes each input's data as a feed
// expect-error-count: 1
#include <vector>

#include <ctg/ctg.hpp>

using X = ctg::input<"x", ctg::f32, ctg::dyn, 4>;
using W = ctg::param<"w", ctg::f32, 4, 2>;

int main() {
  auto step = ctg::value_and_grad(ctg::sum(ctg::matmul(X{}, W{})));
  ctg::cpu::device dev;
  auto store = ctg::make_store(dev, step);
  std::vector<float> x(8, 1.0f);
#ifndef CTG_CORRECTED
  step(store, x);  // the mistake
#else
  step(store, ctg::feed<X>(x, 2));
#endif
}
