// transpose swaps the last two dims: of a rank-1 tensor it must not compile,
// with one error (the product that read it added an out-of-bounds array
// subscript and a "no matching function"). The corrected twin multiplies
// by the column as a [4, 1] matrix.
// expect-error: ctg: transpose needs a tensor of rank 2 or more
// expect-error-count: 1
#include <ctg/ctg.hpp>

using X = ctg::input<"x", ctg::f32, ctg::dyn, 4>;
#ifndef CTG_CORRECTED
using B = ctg::param<"b", ctg::f32, 4>;  // the mistake: a vector, transposed
#else
using B = ctg::param<"b", ctg::f32, 1, 4>;
#endif

int main() {
  auto y = ctg::matmul(X{}, ctg::transpose(B{}));
  auto step = ctg::value_and_grad(ctg::mean(ctg::square(y)));
  ctg::cpu::device dev;
  auto store = ctg::make_store(dev, step);
  (void)store;
}
