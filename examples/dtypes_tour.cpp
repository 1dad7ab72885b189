// dtypes_tour: how a few f32 values round to ctg's narrow element types.
// For each value: the nearest bf16, f16, e4m3 and e5m2 (round-to-nearest-even; fp8
// saturates to +-max, NaN stays NaN), shown as the value it stands for and its bits in hex.
//   build/default/examples/dtypes_tour [value...]
#include <ctg/ctg.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <vector>

namespace {

template <class T>
void cell(float x, int hex_digits) {
  const T v(x);
  std::printf("  %12.6g 0x%0*X", static_cast<double>(ctg::to_float(v)), hex_digits,
              static_cast<unsigned>(v.bits));
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<float> values;
  for (int i = 1; i < argc; ++i) {
    char* end = nullptr;
    values.push_back(std::strtof(argv[i], &end));
    if (end == argv[i] || *end != '\0') {  // ("abc" read as 0, "1.5junk" as 1.5)
      std::fprintf(stderr, "dtypes_tour: '%s' is not a number\nusage: dtypes_tour [value ...]\n", argv[i]);
      return 2;
    }
  }
  if (values.empty()) {
    values = {0.0f,     -0.0f,   1.0f,     0.1f,    1.0f / 3.0f, 3.14159265f, -2.5f,
              1.0e-3f,  448.0f,  500.0f,   1000.0f, 65504.0f,    70000.0f,    1.0e-8f,
              std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()};
  }

  std::printf("ctg dtypes tour: f32 -> nearest representable value [bits]\n");
  std::printf("%14s  %19s  %19s  %17s  %17s\n", "f32", "bf16", "f16", "e4m3", "e5m2");
  for (const float x : values) {
    std::printf("%14.8g", static_cast<double>(x));
    cell<ctg::bf16>(x, 4);
    cell<ctg::f16>(x, 4);
    cell<ctg::e4m3>(x, 2);
    cell<ctg::e5m2>(x, 2);
    std::printf("\n");
  }
  std::printf("\nlimits: %s max %g, %s max %g, %s max %g, %s max %g\n",
              ctg::dtype_traits<ctg::bf16>::name, static_cast<double>(ctg::dtype_traits<ctg::bf16>::max),
              ctg::dtype_traits<ctg::f16>::name, static_cast<double>(ctg::dtype_traits<ctg::f16>::max),
              ctg::dtype_traits<ctg::e4m3>::name, static_cast<double>(ctg::dtype_traits<ctg::e4m3>::max),
              ctg::dtype_traits<ctg::e5m2>::name, static_cast<double>(ctg::dtype_traits<ctg::e5m2>::max));
  std::printf("e4m3 has no infinity: values beyond 448 saturate to 448; e5m2 saturates at 57344.\n");
  return 0;
}
