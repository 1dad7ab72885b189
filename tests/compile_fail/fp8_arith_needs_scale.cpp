// Compile-fail pair: fp8 values carry no scale of their own, so arithmetic directly on
// ctg::e4m3 operands must not compile. The corrected twin converts to float first.
// expect-error: ctg: fp8 needs a scale
// expect-error-count: 1
#include <ctg/core/dtypes.hpp>

int main() {
  ctg::e4m3 a{1.0f}, b{2.0f};
#ifndef CTG_CORRECTED
  auto c = a + b;
  (void)c;
  return 0;
#else
  float c = float(a) + float(b);
  return c == 3.0f ? 0 : 1;
#endif
}
