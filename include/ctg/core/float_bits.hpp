#pragma once
// Bit-level helpers shared by the narrow element types (bf16, f16, fp8).
// Host and device code use the same functions (CTG_HD), all constexpr.

#include <cstdint>
#include <type_traits>

#include <ctg/core/config.hpp>

CTG_HOT_BEGIN

namespace ctg::detail {

// std::bit_cast is a host function; nvcc would need --expt-relaxed-constexpr
// to call it from device code. __builtin_bit_cast works in g++, clang and
// nvcc (host and device) and is usable in constant expressions.
template <class To, class From>
  requires(sizeof(To) == sizeof(From) && std::is_trivially_copyable_v<To> &&
           std::is_trivially_copyable_v<From>)
CTG_HD CTG_FORCEINLINE constexpr To hd_bit_cast(const From& from) noexcept {
  return __builtin_bit_cast(To, from);
}

CTG_HD CTG_FORCEINLINE constexpr std::uint32_t f32_bits(float f) noexcept { return hd_bit_cast<std::uint32_t>(f); }
CTG_HD CTG_FORCEINLINE constexpr float f32_from_bits(std::uint32_t u) noexcept { return hd_bit_cast<float>(u); }

// The quiet NaN every narrow -> f32 conversion except bf16's returns for a
// NaN input (what cuda_fp16.h's __half2float returns on host and device).
inline constexpr std::uint32_t f32_canonical_nan_bits = 0x7FFFFFFFu;

// Rounds the magnitude of a finite or infinite (not NaN) f32, given as its
// bits without the sign, to a binary format with `M` stored mantissa bits
// and exponent bias `Bias`, round-to-nearest-even, with gradual underflow.
// The exponent is unbounded above: the result is the narrow magnitude code
// (biased exponent << M | mantissa) as if the format had more exponents, so
// the caller decides what overflow becomes (infinity or saturation).
template <int M, int Bias>
CTG_HD CTG_FORCEINLINE constexpr std::uint32_t rne_magnitude(std::uint32_t a) noexcept {
  static_assert(M >= 1 && M <= 22 && Bias >= 1 && Bias <= 127);
  std::uint32_t e = a >> 23;  // biased f32 exponent (255 for inf: overflows)
  std::uint32_t sig = a & 0x7FFFFFu;
  if (e != 0) {
    sig |= 0x800000u;  // implicit bit
  } else {
    e = 1;  // f32 subnormal: same scale as exponent 1, no implicit bit
  }
  const int te = static_cast<int>(e) - 127 + Bias;  // target biased exponent
  std::uint32_t base = 0;
  int shift = 23 - M;
  if (te >= 1) {
    // normal: the implicit bit, shifted to bit M, adds the last 1 to the exponent
    base = static_cast<std::uint32_t>(te - 1) << M;
  } else {
    shift += 1 - te;  // subnormal in the target: drop more bits
    if (shift >= 25) return 0;  // below half the smallest subnormal: sig < 2^24 <= half
  }
  const std::uint32_t r = base + (sig >> shift);
  const std::uint32_t rem = sig & ((1u << shift) - 1u);
  const std::uint32_t half = 1u << (shift - 1);
  // a carry out of the mantissa correctly bumps the exponent
  return r + ((rem > half || (rem == half && (r & 1u) != 0u)) ? 1u : 0u);
}

}  // namespace ctg::detail

CTG_HOT_END
