#pragma once
// Is `got` at most one unit in the last place of T away from `want`? Both
// are T values (f32, bf16, f16), compared as the doubles they are; the unit
// is T's at the larger magnitude. NaN matches NaN only.
#include <algorithm>
#include <cmath>
#include <type_traits>

#include <ctg/core/dtype_rules.hpp>

namespace test_ulp {

template <class T>
constexpr int significand_bits() {
  if constexpr (std::is_same_v<T, ctg::bf16>) return 8;
  else if constexpr (std::is_same_v<T, ctg::f16>) return 11;
  else if constexpr (std::is_same_v<T, ctg::f64>) return 53;
  else return 24;
}

template <class T>
bool within_one_ulp(T got, T want) {
  const double a = static_cast<double>(ctg::load_as<T>(got)), b = static_cast<double>(ctg::load_as<T>(want));
  if (a != a || b != b) return a != a && b != b;
  if (a == b) return true;
  int e = 0;
  (void)std::frexp(std::max(std::fabs(a), std::fabs(b)), &e);  // magnitude in [2^(e-1), 2^e)
  return std::fabs(a - b) <= std::ldexp(1.0, e - significand_bits<T>());
}

}  // namespace test_ulp
