#pragma once
// Shared by the dtype tests: an independent reference for the narrow formats
// (decode by formula, encode by nearest search over all representable values)
// and the f32 input sample every conversion test runs over.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include <ctg/core/dtypes.hpp>

namespace ctg_test {

inline std::uint32_t bits_of(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
inline float float_of(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
inline std::string hex(std::uint32_t u) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%X", u);
  return buf;
}

// A binary floating-point format written down from its definition.
struct format {
  int storage_bits;  // 16 or 8
  int exp_bits;
  int man_bits;
  int bias;
  bool ieee_specials;  // all-ones exponent = inf (mantissa 0) / NaN; else (E4M3FN) only S.1111.111 is NaN
  bool saturate;       // f32 -> narrow saturates to ±max (fp8 satfinite)
  std::uint32_t nan_out;  // the code a NaN input becomes (CUDA's convention)
};

inline constexpr format bf16_format{16, 8, 7, 127, true, false, 0x7FFF};
inline constexpr format f16_format{16, 5, 10, 15, true, false, 0x7FFF};
inline constexpr format e4m3_format{8, 4, 3, 7, false, true, 0x7F};
inline constexpr format e5m2_format{8, 5, 2, 15, true, true, 0x7F};

template <class T>
constexpr format format_of() {
  if constexpr (std::is_same_v<T, ctg::bf16>) return bf16_format;
  else if constexpr (std::is_same_v<T, ctg::f16>) return f16_format;
  else if constexpr (std::is_same_v<T, ctg::e4m3>) return e4m3_format;
  else return e5m2_format;
}

enum class kind { finite, inf, nan };

struct decoded {
  kind k;
  double value;  // signed; for inf, ±infinity
};

// Decode by the textbook formula: (-1)^s * 2^(e-bias) * (1 + m/2^M), or
// (-1)^s * 2^(1-bias) * (m/2^M) for e == 0.
inline decoded ref_decode(const format& f, std::uint32_t code) {
  const std::uint32_t sign = (code >> (f.storage_bits - 1)) & 1u;
  const std::uint32_t e = (code >> f.man_bits) & ((1u << f.exp_bits) - 1u);
  const std::uint32_t m = code & ((1u << f.man_bits) - 1u);
  const std::uint32_t e_max = (1u << f.exp_bits) - 1u;
  const double s = sign ? -1.0 : 1.0;
  if (f.ieee_specials && e == e_max) {
    if (m == 0) return {kind::inf, s * std::numeric_limits<double>::infinity()};
    return {kind::nan, std::numeric_limits<double>::quiet_NaN()};
  }
  if (!f.ieee_specials && e == e_max && m == (1u << f.man_bits) - 1u) {
    return {kind::nan, std::numeric_limits<double>::quiet_NaN()};
  }
  const double frac = static_cast<double>(m) / std::ldexp(1.0, f.man_bits);
  if (e == 0) return {kind::finite, s * std::ldexp(frac, 1 - f.bias)};
  return {kind::finite, s * std::ldexp(1.0 + frac, static_cast<int>(e) - f.bias)};
}

// Every finite non-negative value of a format, ascending, with its code, plus
// one virtual entry past max (max + one ulp, code max+1) so that rounding
// near the top is decided like everywhere else.
struct value_table {
  format f;
  std::vector<double> values;
  std::vector<std::uint32_t> codes;
  std::uint32_t max_code = 0;
  std::uint32_t inf_code = 0;  // only meaningful when ieee_specials

  explicit value_table(const format& fmt) : f(fmt) {
    const std::uint32_t half = 1u << (f.storage_bits - 1);  // sign bit
    for (std::uint32_t c = 0; c < half; ++c) {
      const decoded d = ref_decode(f, c);
      if (d.k != kind::finite) continue;
      values.push_back(d.value);
      codes.push_back(c);
    }
    // decoding by code order must be ascending: check rather than sort
    for (std::size_t i = 1; i < values.size(); ++i) {
      if (!(values[i - 1] < values[i])) throw std::logic_error("value_table: not ascending");
    }
    max_code = codes.back();
    const double ulp_at_max = std::ldexp(1.0, static_cast<int>(max_code >> f.man_bits) - f.bias - f.man_bits);
    values.push_back(values.back() + ulp_at_max);
    codes.push_back(max_code + 1);
    inf_code = ((1u << f.exp_bits) - 1u) << f.man_bits;
  }

  double max() const { return values[values.size() - 2]; }

  // Nearest representable value, ties to the even code (even mantissa),
  // found by binary search over all values.
  std::uint32_t encode(float x) const {
    if (std::isnan(x)) return f.nan_out;
    const std::uint32_t sign = std::signbit(x) ? (1u << (f.storage_bits - 1)) : 0u;
    const double a = std::fabs(static_cast<double>(x));
    std::uint32_t code;
    if (a >= values.back()) {
      code = max_code + 1;  // beyond every midpoint: the virtual entry
    } else {
      const auto it = std::upper_bound(values.begin(), values.end(), a);
      const std::size_t hi = static_cast<std::size_t>(it - values.begin());
      const std::size_t lo = hi - 1;
      const double mid = (values[lo] + values[hi]) / 2;  // exact in double
      if (a < mid) code = codes[lo];
      else if (a > mid) code = codes[hi];
      else code = (codes[lo] % 2 == 0) ? codes[lo] : codes[hi];
    }
    if (code > max_code) code = f.saturate ? max_code : inf_code;
    return sign | code;
  }
};

// Expected f32 bits when converting a narrow code to f32: the exact value;
// NaN: bf16 keeps its bits (it is the top half of an f32), every other
// format gives 0x7FFFFFFF (CUDA's convention).
inline std::uint32_t ref_to_f32_bits(const format& f, std::uint32_t code) {
  const decoded d = ref_decode(f, code);
  if (d.k == kind::nan) return f.storage_bits == 16 && f.exp_bits == 8 ? code << 16 : 0x7FFFFFFFu;
  const float v = static_cast<float>(d.value);  // exact: every narrow value is an f32
  if (static_cast<double>(v) != d.value) throw std::logic_error("narrow value not exact in f32");
  return bits_of(v);
}

// ---- the f32 input sample ------------------------------------------------

struct sample_counts {
  std::uint64_t structured = 0;  // values, midpoints, ±1/±2 ulp around them, specials
  std::uint64_t focused = 0;     // random, exponents near the format's range
  std::uint64_t stride = 0;      // stride through all 2^32 f32 bit patterns
  std::uint64_t total() const { return structured + focused + stride; }
};

inline constexpr std::uint64_t stride_count = 10'000'000;
inline constexpr std::uint64_t focused_count = 2'000'000;

inline std::uint64_t splitmix64(std::uint64_t& s) {
  std::uint64_t z = (s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Calls fn(float) for every input of the sample for format f. Includes:
// every representable value and every rounding midpoint (exactly, and ±1, ±2
// f32 ulps around each), both signs; the subnormal boundaries of f32; ±0,
// ±inf, NaNs with several payloads; values around max and the overflow
// threshold (these are midpoints too); a fixed-seed random sweep over f32
// patterns whose exponent lies near the format's range; and a stride through
// all 2^32 f32 patterns.
template <class Fn>
sample_counts for_each_sample(const value_table& t, Fn&& fn) {
  sample_counts n;
  auto around = [&](float x) {
    const std::uint32_t u = bits_of(x);
    for (int d = -2; d <= 2; ++d) {
      const std::int64_t v = static_cast<std::int64_t>(u & 0x7FFFFFFFu) + d;
      if (v < 0 || v > 0x7F800000) continue;  // stay among non-negative non-NaN patterns
      const std::uint32_t a = static_cast<std::uint32_t>(v);
      fn(float_of(a));
      fn(float_of(a | 0x80000000u));
      n.structured += 2;
    }
  };
  for (std::size_t i = 0; i + 1 < t.values.size(); ++i) {
    around(static_cast<float>(t.values[i]));
    const double mid = (t.values[i] + t.values[i + 1]) / 2;
    const float midf = static_cast<float>(mid);
    if (static_cast<double>(midf) != mid) throw std::logic_error("midpoint not exact in f32");
    around(midf);
  }
  around(static_cast<float>(t.values.back()));  // max + 1 ulp of the format
  const std::uint32_t specials[] = {
      0x00000000u, 0x00000001u, 0x00000002u, 0x003FFFFFu, 0x00400000u, 0x007FFFFFu,
      0x00800000u, 0x00800001u, 0x7F7FFFFFu, 0x7F7FFFFEu, 0x7F800000u, 0x7F800001u,
      0x7F800002u, 0x7FBFFFFFu, 0x7FC00000u, 0x7FC00001u, 0x7FD55555u, 0x7FFFFFFEu,
      0x7FFFFFFFu, 0x7FA00000u, 0x7F80FF00u, 0x7FEEDEADu, 0x3F800000u, 0x3F800001u,
  };
  for (std::uint32_t s : specials) {
    fn(float_of(s));
    fn(float_of(s | 0x80000000u));
    n.structured += 2;
  }
  // focused: exponent within [emin - man_bits - 4, emax + 4] of the format
  {
    std::uint64_t seed = 0x5EEDF00Dull + static_cast<std::uint64_t>(t.f.man_bits);
    const int emax = static_cast<int>(t.max_code >> t.f.man_bits) - t.f.bias;
    const int elo = 1 - t.f.bias - t.f.man_bits - 4;
    const int ehi = emax + 4;
    const int span = ehi - elo + 1;
    for (std::uint64_t i = 0; i < focused_count; ++i) {
      const std::uint64_t r = splitmix64(seed);
      int e = elo + static_cast<int>((r >> 40) % static_cast<std::uint64_t>(span)) + 127;
      e = std::clamp(e, 0, 254);
      const std::uint32_t u = (static_cast<std::uint32_t>(r >> 63) << 31) |
                              (static_cast<std::uint32_t>(e) << 23) |
                              (static_cast<std::uint32_t>(r) & 0x7FFFFFu);
      fn(float_of(u));
    }
    n.focused = focused_count;
  }
  // stride: an odd stride visits stride_count distinct patterns spread over 2^32
  {
    std::uint32_t u = 0x12345679u;
    for (std::uint64_t i = 0; i < stride_count; ++i) {
      fn(float_of(u));
      u += 0x9E3779B1u;  // odd, ~2^32 / golden ratio
    }
    n.stride = stride_count;
  }
  return n;
}

}  // namespace ctg_test
