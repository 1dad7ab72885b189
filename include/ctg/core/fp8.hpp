#pragma once
// FP8 storage types, OCP 8-bit floating point:
//   e4m3  E4M3FN: 1 sign, 4 exponent (bias 7), 3 mantissa bits. Max 448, no
//         infinity, NaN = S.1111.111 (one per sign).
//   e5m2  1 sign, 5 exponent (bias 15), 2 mantissa bits. Max 57344, has
//         infinity (S.11111.00), NaN = S.11111.{01,10,11}.
// Conversions from f32 round to nearest even and saturate (satfinite): every
// finite value beyond ±max and ±inf become ±max; NaN stays NaN (0x7F). This is
// bit for bit cuda_fp8.h's __nv_cvt_float_to_fp8(x, __NV_SATFINITE, ...).
// Conversions to f32 are exact; NaN becomes 0x7FFFFFFF (as cuda_fp8.h's
// __nv_cvt_fp8_to_halfraw followed by __half2float).
//
// An fp8 value alone is only a payload: the real value is payload / scale.
// So arithmetic and comparisons on e4m3/e5m2 do not compile; the message
// contains "ctg: fp8 needs a scale".

#include <compare>
#include <cstdint>
#include <type_traits>

#include <ctg/core/config.hpp>
#include <ctg/core/float_bits.hpp>

CTG_HOT_BEGIN

namespace ctg {

namespace detail {

// On a GPU of compute capability 8.9 or newer the conversions are one
// instruction, cvt.rn.satfinite (and back, two cvt): what cuda_fp8.h's
// __nv_cvt_float_to_fp8 runs there, so the same bits as the code below
// (which tests compare with cuda_fp8.h: unit.dtype_vs_cuda,
// cuda.dtype_roundtrip). The code below takes about 50 instructions to
// fp8, which bounded a quantize kernel's speed.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
#define CTG_FP8_CONVERT_INSTRUCTION 1
template <bool E4m3>
__device__ CTG_FORCEINLINE std::uint8_t f32_to_fp8_bits_by_cvt(float f) {
  unsigned short pair;  // (the instruction converts two values; f's goes in the low byte)
  if constexpr (E4m3) asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(pair) : "f"(0.0f), "f"(f));
  else asm("cvt.rn.satfinite.e5m2x2.f32 %0, %1, %2;" : "=h"(pair) : "f"(0.0f), "f"(f));
  return static_cast<std::uint8_t>(pair & 0xFFu);
}
// And back: to f16 (exact), then to f32 (exact; NaN 0x7FFFFFFF), as
// cuda_fp8.h's __nv_cvt_fp8_to_halfraw and __half2float run there.
template <bool E4m3>
__device__ CTG_FORCEINLINE float fp8_bits_to_f32_by_cvt(std::uint8_t b) {
  const unsigned short in = b;
  unsigned int pair;  // (two f16 from two fp8; b's is the low half)
  if constexpr (E4m3) asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(pair) : "h"(in));
  else asm("cvt.rn.f16x2.e5m2x2 %0, %1;" : "=r"(pair) : "h"(in));
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(static_cast<unsigned short>(pair & 0xFFFFu)));
  return f;
}
#endif

CTG_HD CTG_FORCEINLINE constexpr std::uint8_t f32_to_e4m3_bits(float f) noexcept {
#ifdef CTG_FP8_CONVERT_INSTRUCTION
  if (!__builtin_is_constant_evaluated()) return f32_to_fp8_bits_by_cvt<true>(f);
#endif
  const std::uint32_t u = f32_bits(f);
  const std::uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return 0x7Fu;  // NaN, sign dropped (as CUDA)
  std::uint32_t r = rne_magnitude<3, 7>(a);
  if (r > 0x7Eu) r = 0x7Eu;  // satfinite: 448
  return static_cast<std::uint8_t>(((u >> 24) & 0x80u) | r);
}

CTG_HD CTG_FORCEINLINE constexpr std::uint8_t f32_to_e5m2_bits(float f) noexcept {
#ifdef CTG_FP8_CONVERT_INSTRUCTION
  if (!__builtin_is_constant_evaluated()) return f32_to_fp8_bits_by_cvt<false>(f);
#endif
  const std::uint32_t u = f32_bits(f);
  const std::uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return 0x7Fu;  // NaN, sign dropped (as CUDA)
  std::uint32_t r = rne_magnitude<2, 15>(a);
  if (r > 0x7Bu) r = 0x7Bu;  // satfinite: 57344, also for ±inf
  return static_cast<std::uint8_t>(((u >> 24) & 0x80u) | r);
}

// fp8 -> f32 is exact. Branch-free, as f16_bits_to_f32: a subnormal m * 2^(1-bias-M) is
// computed as 2^(1-bias) * (1 + m/2^M) - 2^(1-bias), exactly.
CTG_HD CTG_FORCEINLINE constexpr float e4m3_bits_to_f32(std::uint8_t b) noexcept {
#ifdef CTG_FP8_CONVERT_INSTRUCTION
  if (!__builtin_is_constant_evaluated()) return fp8_bits_to_f32_by_cvt<true>(b);
#endif
  const std::uint32_t sign = (static_cast<std::uint32_t>(b) & 0x80u) << 24;
  const std::uint32_t e = (b >> 3) & 0xFu;
  const std::uint32_t m = b & 0x7u;
  const std::uint32_t eb = e == 0 ? 121u : e + 120u;
  const float mag = f32_from_bits((eb << 23) | (m << 20)) - (e == 0 ? 0x1p-6f : 0.0f);
  return f32_from_bits((b & 0x7Fu) == 0x7Fu ? f32_canonical_nan_bits : (sign | f32_bits(mag)));
}

CTG_HD CTG_FORCEINLINE constexpr float e5m2_bits_to_f32(std::uint8_t b) noexcept {
#ifdef CTG_FP8_CONVERT_INSTRUCTION
  if (!__builtin_is_constant_evaluated()) return fp8_bits_to_f32_by_cvt<false>(b);
#endif
  const std::uint32_t sign = (static_cast<std::uint32_t>(b) & 0x80u) << 24;
  const std::uint32_t e = (b >> 2) & 0x1Fu;
  const std::uint32_t m = b & 0x3u;
  const std::uint32_t eb = e == 0 ? 113u : e + 112u;
  const float mag = f32_from_bits((eb << 23) | (m << 21)) - (e == 0 ? 0x1p-14f : 0.0f);
  const std::uint32_t special = m != 0 ? f32_canonical_nan_bits : (sign | 0x7F800000u);
  return f32_from_bits(e == 0x1Fu ? special : (sign | f32_bits(mag)));
}
#undef CTG_FP8_CONVERT_INSTRUCTION

}  // namespace detail

struct e4m3 {
  std::uint8_t bits;

  constexpr e4m3() = default;
  CTG_FORCEINLINE explicit constexpr CTG_HD e4m3(float f) noexcept : bits(detail::f32_to_e4m3_bits(f)) {}
  CTG_FORCEINLINE static constexpr CTG_HD e4m3 from_bits(std::uint8_t b) noexcept {
    e4m3 r{};
    r.bits = b;
    return r;
  }
  CTG_FORCEINLINE explicit constexpr CTG_HD operator float() const noexcept { return detail::e4m3_bits_to_f32(bits); }
};

struct e5m2 {
  std::uint8_t bits;

  constexpr e5m2() = default;
  CTG_FORCEINLINE explicit constexpr CTG_HD e5m2(float f) noexcept : bits(detail::f32_to_e5m2_bits(f)) {}
  CTG_FORCEINLINE static constexpr CTG_HD e5m2 from_bits(std::uint8_t b) noexcept {
    e5m2 r{};
    r.bits = b;
    return r;
  }
  CTG_FORCEINLINE explicit constexpr CTG_HD operator float() const noexcept { return detail::e5m2_bits_to_f32(bits); }
};

template <class T>
inline constexpr bool is_fp8_v = std::is_same_v<std::remove_cv_t<T>, e4m3> || std::is_same_v<std::remove_cv_t<T>, e5m2>;

// ---- arithmetic and comparisons on fp8 payloads: a compile error ----------
// Constrained templates (found by argument-dependent lookup whenever either
// operand is e4m3/e5m2) whose bodies fail a static_assert when used. Their
// declared return types keep the error to this one message.

namespace detail {
template <class T>
inline constexpr bool fp8_dependent_false = false;
}  // namespace detail

#define CTG_FP8_NEEDS_SCALE_MSG(op)                                                               \
  "ctg: fp8 needs a scale: operator" op " on an e4m3/e5m2 payload is meaningless without its f32 " \
  "scale (real = payload / scale); convert to f32 with the scale (or use a scaled fp8 tensor) "   \
  "and compute in f32"

#define CTG_FP8_DENY_BINARY(op, ret, value)                                                       \
  template <class L, class R>                                                                     \
    requires(is_fp8_v<L> || is_fp8_v<R>)                                                          \
  ret operator op(const L&, const R&) {                                                           \
    static_assert(detail::fp8_dependent_false<L>, CTG_FP8_NEEDS_SCALE_MSG(#op));                  \
    return value;                                                                                 \
  }

#define CTG_FP8_DENY_COMPOUND(op)                                                                 \
  template <class L, class R>                                                                     \
    requires(is_fp8_v<L>)                                                                         \
  L& operator op(L& l, const R&) {                                                                \
    static_assert(detail::fp8_dependent_false<L>, CTG_FP8_NEEDS_SCALE_MSG(#op));                  \
    return l;                                                                                     \
  }

#define CTG_FP8_DENY_UNARY(op)                                                                    \
  template <class T>                                                                              \
    requires(is_fp8_v<T>)                                                                         \
  float operator op(const T&) {                                                                   \
    static_assert(detail::fp8_dependent_false<T>, CTG_FP8_NEEDS_SCALE_MSG(#op));                  \
    return 0.0f;                                                                                  \
  }

#define CTG_FP8_DENY_INCDEC(op)                                                                   \
  template <class T>                                                                              \
    requires(is_fp8_v<T>)                                                                         \
  T& operator op(T& v) {                                                                          \
    static_assert(detail::fp8_dependent_false<T>, CTG_FP8_NEEDS_SCALE_MSG(#op));                  \
    return v;                                                                                     \
  }                                                                                               \
  template <class T>                                                                              \
    requires(is_fp8_v<T>)                                                                         \
  T operator op(T& v, int) {                                                                      \
    static_assert(detail::fp8_dependent_false<T>, CTG_FP8_NEEDS_SCALE_MSG(#op));                  \
    return v;                                                                                     \
  }

CTG_FP8_DENY_BINARY(+, float, 0.0f)
CTG_FP8_DENY_BINARY(-, float, 0.0f)
CTG_FP8_DENY_BINARY(*, float, 0.0f)
CTG_FP8_DENY_BINARY(/, float, 0.0f)
CTG_FP8_DENY_BINARY(==, bool, false)
CTG_FP8_DENY_BINARY(!=, bool, false)
CTG_FP8_DENY_BINARY(<, bool, false)
CTG_FP8_DENY_BINARY(>, bool, false)
CTG_FP8_DENY_BINARY(<=, bool, false)
CTG_FP8_DENY_BINARY(>=, bool, false)
CTG_FP8_DENY_BINARY(<=>, std::partial_ordering, std::partial_ordering::unordered)
CTG_FP8_DENY_COMPOUND(+=)
CTG_FP8_DENY_COMPOUND(-=)
CTG_FP8_DENY_COMPOUND(*=)
CTG_FP8_DENY_COMPOUND(/=)
CTG_FP8_DENY_UNARY(+)
CTG_FP8_DENY_UNARY(-)
CTG_FP8_DENY_INCDEC(++)
CTG_FP8_DENY_INCDEC(--)

#undef CTG_FP8_DENY_INCDEC
#undef CTG_FP8_DENY_UNARY
#undef CTG_FP8_DENY_COMPOUND
#undef CTG_FP8_DENY_BINARY
#undef CTG_FP8_NEEDS_SCALE_MSG

}  // namespace ctg

CTG_HOT_END
