#pragma once
// Element types, their traits, and conversions to and from f32.

#include <concepts>
#include <cstdint>
#include <type_traits>

#include <ctg/core/bf16.hpp>
#include <ctg/core/config.hpp>
#include <ctg/core/f16.hpp>
#include <ctg/core/fp8.hpp>

CTG_HOT_BEGIN

namespace ctg {

using f32 = float;
using f64 = double;  // reference type for gradient checks

// Token ids and targets: index tensors are inputs read by gather, one_hot and
// cross_entropy; they never enter arithmetic.
using i32 = std::int32_t;
template <class T>
concept index_type = std::same_as<T, i32>;

template <class T>
concept element_type = std::same_as<T, f32> || std::same_as<T, f64> || std::same_as<T, bf16> ||
                       std::same_as<T, f16> || std::same_as<T, e4m3> || std::same_as<T, e5m2>;

// dtype_traits<T>: name, storage bits, has_infinity, is_fp8, and the format's
// max (largest finite), lowest (-max), min_normal, epsilon (2^-mantissa_bits,
// the gap between 1 and the next value), plus mantissa_bits and denorm_min
// (smallest positive subnormal). f64's limits are doubles, the others floats.
template <class T>
struct dtype_traits;

template <>
struct dtype_traits<f32> {
  static constexpr const char* name = "f32";
  static constexpr int bits = 32;
  static constexpr int mantissa_bits = 23;
  static constexpr bool has_infinity = true;
  static constexpr bool is_fp8 = false;
  static constexpr float max = 0x1.fffffep127f;
  static constexpr float lowest = -0x1.fffffep127f;
  static constexpr float min_normal = 0x1p-126f;
  static constexpr float denorm_min = 0x1p-149f;
  static constexpr float epsilon = 0x1p-23f;
};

template <>
struct dtype_traits<f64> {
  static constexpr const char* name = "f64";
  static constexpr int bits = 64;
  static constexpr int mantissa_bits = 52;
  static constexpr bool has_infinity = true;
  static constexpr bool is_fp8 = false;
  static constexpr double max = 0x1.fffffffffffffp1023;
  static constexpr double lowest = -0x1.fffffffffffffp1023;
  static constexpr double min_normal = 0x1p-1022;
  static constexpr double denorm_min = 0x1p-1074;
  static constexpr double epsilon = 0x1p-52;
};

template <>
struct dtype_traits<bf16> {
  static constexpr const char* name = "bf16";
  static constexpr int bits = 16;
  static constexpr int mantissa_bits = 7;
  static constexpr bool has_infinity = true;
  static constexpr bool is_fp8 = false;
  static constexpr float max = 0x1.fep127f;  // 3.38953139e38
  static constexpr float lowest = -0x1.fep127f;
  static constexpr float min_normal = 0x1p-126f;
  static constexpr float denorm_min = 0x1p-133f;
  static constexpr float epsilon = 0x1p-7f;
};

template <>
struct dtype_traits<f16> {
  static constexpr const char* name = "f16";
  static constexpr int bits = 16;
  static constexpr int mantissa_bits = 10;
  static constexpr bool has_infinity = true;
  static constexpr bool is_fp8 = false;
  static constexpr float max = 65504.0f;
  static constexpr float lowest = -65504.0f;
  static constexpr float min_normal = 0x1p-14f;
  static constexpr float denorm_min = 0x1p-24f;
  static constexpr float epsilon = 0x1p-10f;
};

template <>
struct dtype_traits<e4m3> {
  static constexpr const char* name = "e4m3";
  static constexpr int bits = 8;
  static constexpr int mantissa_bits = 3;
  static constexpr bool has_infinity = false;
  static constexpr bool is_fp8 = true;
  static constexpr float max = 448.0f;
  static constexpr float lowest = -448.0f;
  static constexpr float min_normal = 0x1p-6f;
  static constexpr float denorm_min = 0x1p-9f;
  static constexpr float epsilon = 0x1p-3f;
};

template <>
struct dtype_traits<e5m2> {
  static constexpr const char* name = "e5m2";
  static constexpr int bits = 8;
  static constexpr int mantissa_bits = 2;
  static constexpr bool has_infinity = true;
  static constexpr bool is_fp8 = true;
  static constexpr float max = 57344.0f;
  static constexpr float lowest = -57344.0f;
  static constexpr float min_normal = 0x1p-14f;
  static constexpr float denorm_min = 0x1p-16f;
  static constexpr float epsilon = 0x1p-2f;
};

// to_float: exact for the narrow types; f64 is rounded to nearest f32.
template <class T>
  requires element_type<T>
CTG_HD CTG_FORCEINLINE constexpr float to_float(T v) noexcept {
  if constexpr (std::is_same_v<T, f32>) {
    return v;
  } else {
    return static_cast<float>(v);
  }
}

// from_float: round-to-nearest-even; fp8 saturates to ±max, NaN stays NaN.
template <class T>
  requires element_type<T>
CTG_HD CTG_FORCEINLINE constexpr T from_float(float v) noexcept {
  if constexpr (std::is_same_v<T, f32>) {
    return v;
  } else if constexpr (std::is_same_v<T, f64>) {
    return static_cast<double>(v);
  } else {
    return T(v);
  }
}

}  // namespace ctg

CTG_HOT_END
