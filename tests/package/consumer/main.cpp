// The package tests' consumer: includes the umbrella header and uses a little of the API.
#include <ctg/ctg.hpp>

#include <cstdio>

int main() {
  constexpr ctg::bf16 b(1.5f);
  static_assert(ctg::to_float(b) == 1.5f);
  const ctg::e4m3 q(1000.0f);  // saturates to 448
  const float back = ctg::to_float(q);
  std::printf("ctg consumer: e4m3(1000) = %g [0x%02X]\n", static_cast<double>(back),
              static_cast<unsigned>(q.bits));
  return back == 448.0f ? 0 : 1;
}
