// Compile-fail pair: static dims whose element count passes 2^56 (here
// 2^62). Their product wrapped silently: a leaf of 2^62 elements in a
// 64-byte arena. The corrected twin holds a size that fits.
// expect-error: ctg: a tensor's static dims hold more than 2\^56 elements
// expect-error-count: 1
#include <ctg/ctg.hpp>

#ifndef CTG_CORRECTED
using W = ctg::param<"w", ctg::f32, ctg::dim_t{1} << 31, ctg::dim_t{1} << 31>;
#else
using W = ctg::param<"w", ctg::f32, ctg::dim_t{1} << 11, ctg::dim_t{1} << 11>;
#endif

int main() {
  auto step = ctg::value_and_grad(ctg::sum(W{}));
  (void)step;
}
