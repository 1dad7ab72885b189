// ctg's element types: layout, traits, constexpr use, and every conversion
// against an independent reference written from the format definitions
// (dtype_test_util.hpp). Runs without CUDA; dtype_vs_cuda.cpp compares with
// CUDA's own conversion functions.

#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <concepts>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <string_view>
#include <type_traits>

#include <ctg/core/dtypes.hpp>

#include "dtype_test_util.hpp"

using ctg::bf16;
using ctg::e4m3;
using ctg::e5m2;
using ctg::f16;
using ctg_test::bits_of;
using ctg_test::float_of;
using ctg_test::hex;

// ---- layout ------------------------------------------------------------------

template <class T, std::size_t N>
constexpr bool storage_ok() {
  return sizeof(T) == N && std::is_trivially_copyable_v<T> && std::is_trivial_v<T> &&
         std::is_standard_layout_v<T> && std::has_unique_object_representations_v<T>;
}
static_assert(storage_ok<bf16, 2>());
static_assert(storage_ok<f16, 2>());
static_assert(storage_ok<e4m3, 1>());
static_assert(storage_ok<e5m2, 1>());
static_assert(std::is_same_v<decltype(bf16::bits), std::uint16_t>);
static_assert(std::is_same_v<decltype(f16::bits), std::uint16_t>);
static_assert(std::is_same_v<decltype(e4m3::bits), std::uint8_t>);
static_assert(std::is_same_v<decltype(e5m2::bits), std::uint8_t>);

// conversions are explicit both ways
static_assert(!std::is_convertible_v<float, bf16> && std::is_constructible_v<bf16, float>);
static_assert(!std::is_convertible_v<bf16, float> && std::is_constructible_v<float, bf16>);
static_assert(!std::is_convertible_v<float, e4m3> && !std::is_convertible_v<e4m3, float>);

// storage types have no arithmetic and no operator== (compare .bits)
template <class T>
concept has_plus = requires(T a, T b) { a + b; };
static_assert(!has_plus<bf16> && !has_plus<f16>);
static_assert(!std::equality_comparable<bf16> && !std::equality_comparable<f16>);
static_assert(!std::totally_ordered<bf16> && !std::totally_ordered<f16>);

// ---- element_type, is_fp8_v, to_float / from_float ------------------------------

static_assert(std::is_same_v<ctg::f32, float> && std::is_same_v<ctg::f64, double>);
static_assert(ctg::element_type<ctg::f32> && ctg::element_type<ctg::f64> && ctg::element_type<bf16> &&
              ctg::element_type<f16> && ctg::element_type<e4m3> && ctg::element_type<e5m2>);
static_assert(!ctg::element_type<int> && !ctg::element_type<const float> && !ctg::element_type<std::uint16_t> &&
              !ctg::element_type<long double>);
static_assert(ctg::is_fp8_v<e4m3> && ctg::is_fp8_v<e5m2>);
static_assert(!ctg::is_fp8_v<bf16> && !ctg::is_fp8_v<f16> && !ctg::is_fp8_v<float> && !ctg::is_fp8_v<double>);

// ---- constexpr -----------------------------------------------------------------

static_assert(bf16(1.0f).bits == 0x3F80);
static_assert(bf16(-2.5f).bits == 0xC020);
static_assert(bf16(1.0f + 0x1p-8f).bits == 0x3F80);              // tie, 0x3F80 even: down
static_assert(bf16(1.0f + 0x1p-8f + 0x1p-23f).bits == 0x3F81);   // above the tie: up
static_assert(bf16(1.0f + 3 * 0x1p-8f).bits == 0x3F82);          // tie, 0x3F81 odd: up
static_assert(static_cast<float>(bf16::from_bits(0x4049)) == 3.140625f);
static_assert(f16(65504.0f).bits == 0x7BFF);
static_assert(f16(65519.0f).bits == 0x7BFF);
static_assert(f16(65520.0f).bits == 0x7C00);                       // overflow threshold rounds to inf
static_assert(f16(0x1p-24f).bits == 0x0001 && f16(0x1p-25f).bits == 0x0000 && f16(-0x1p-25f).bits == 0x8000);
static_assert(f16(0x1.8p-25f).bits == 0x0001);
static_assert(static_cast<float>(f16::from_bits(0x3C01)) == 1.0f + 0x1p-10f);
static_assert(static_cast<float>(f16::from_bits(0x0001)) == 0x1p-24f);
static_assert(e4m3(448.0f).bits == 0x7E && e4m3(464.0f).bits == 0x7E && e4m3(1e30f).bits == 0x7E);
static_assert(e4m3(-std::numeric_limits<float>::infinity()).bits == 0xFE);
static_assert(e4m3(std::numeric_limits<float>::quiet_NaN()).bits == 0x7F);
static_assert(e4m3(0x1p-9f).bits == 0x01 && e4m3(0x1p-10f).bits == 0x00 && e4m3(0x1.8p-9f).bits == 0x02);
static_assert(static_cast<float>(e4m3::from_bits(0x7E)) == 448.0f);
static_assert(static_cast<float>(e4m3::from_bits(0x08)) == 0x1p-6f);
static_assert(e5m2(57344.0f).bits == 0x7B && e5m2(61440.0f).bits == 0x7B);
static_assert(e5m2(std::numeric_limits<float>::infinity()).bits == 0x7B);   // satfinite
static_assert(e5m2(-std::numeric_limits<float>::infinity()).bits == 0xFB);
static_assert(e5m2(-std::numeric_limits<float>::quiet_NaN()).bits == 0x7F);
static_assert(static_cast<float>(e5m2::from_bits(0x7C)) == std::numeric_limits<float>::infinity());
static_assert(static_cast<float>(e5m2::from_bits(0x01)) == 0x1p-16f);
static_assert(ctg::to_float(e5m2::from_bits(0x3C)) == 1.0f);
static_assert(ctg::to_float(1.25) == 1.25f && ctg::to_float(2.5f) == 2.5f);
static_assert(ctg::from_float<f16>(1.0f).bits == 0x3C00);
static_assert(ctg::from_float<e4m3>(-1.0f).bits == 0xB8);
static_assert(ctg::from_float<double>(0.1f) == static_cast<double>(0.1f));
static_assert(ctg::from_float<float>(0.1f) == 0.1f);
static_assert(std::is_same_v<decltype(ctg::from_float<bf16>(1.0f)), bf16>);
static_assert(std::is_same_v<decltype(ctg::to_float(bf16{})), float>);
static_assert(bf16{}.bits == 0 && e5m2{}.bits == 0);

// ---- traits: constants from the format specifications ------------------------------

TEST_CASE("dtype_traits match the format specifications") {
  using ctg::dtype_traits;
  static_assert(std::string_view(dtype_traits<ctg::f32>::name) == "f32");
  static_assert(std::string_view(dtype_traits<ctg::f64>::name) == "f64");
  static_assert(std::string_view(dtype_traits<bf16>::name) == "bf16");
  static_assert(std::string_view(dtype_traits<f16>::name) == "f16");
  static_assert(std::string_view(dtype_traits<e4m3>::name) == "e4m3");
  static_assert(std::string_view(dtype_traits<e5m2>::name) == "e5m2");

  CHECK(dtype_traits<ctg::f32>::bits == 32);
  CHECK(dtype_traits<ctg::f64>::bits == 64);
  CHECK(dtype_traits<bf16>::bits == 16);
  CHECK(dtype_traits<f16>::bits == 16);
  CHECK(dtype_traits<e4m3>::bits == 8);
  CHECK(dtype_traits<e5m2>::bits == 8);

  CHECK(dtype_traits<ctg::f32>::has_infinity);
  CHECK(dtype_traits<ctg::f64>::has_infinity);
  CHECK(dtype_traits<bf16>::has_infinity);
  CHECK(dtype_traits<f16>::has_infinity);
  CHECK_FALSE(dtype_traits<e4m3>::has_infinity);
  CHECK(dtype_traits<e5m2>::has_infinity);

  CHECK_FALSE(dtype_traits<ctg::f32>::is_fp8);
  CHECK_FALSE(dtype_traits<ctg::f64>::is_fp8);
  CHECK_FALSE(dtype_traits<bf16>::is_fp8);
  CHECK_FALSE(dtype_traits<f16>::is_fp8);
  CHECK(dtype_traits<e4m3>::is_fp8);
  CHECK(dtype_traits<e5m2>::is_fp8);

  // f32 / f64: IEEE 754 binary32 / binary64, as <limits> has them
  CHECK(dtype_traits<ctg::f32>::max == std::numeric_limits<float>::max());
  CHECK(dtype_traits<ctg::f32>::lowest == std::numeric_limits<float>::lowest());
  CHECK(dtype_traits<ctg::f32>::min_normal == std::numeric_limits<float>::min());
  CHECK(dtype_traits<ctg::f32>::epsilon == std::numeric_limits<float>::epsilon());
  CHECK(dtype_traits<ctg::f32>::denorm_min == std::numeric_limits<float>::denorm_min());
  CHECK(dtype_traits<ctg::f64>::max == std::numeric_limits<double>::max());
  CHECK(dtype_traits<ctg::f64>::lowest == std::numeric_limits<double>::lowest());
  CHECK(dtype_traits<ctg::f64>::min_normal == std::numeric_limits<double>::min());
  CHECK(dtype_traits<ctg::f64>::epsilon == std::numeric_limits<double>::epsilon());
  static_assert(std::is_same_v<std::remove_cv_t<decltype(dtype_traits<ctg::f64>::max)>, double>);

  // bf16: max = (2 - 2^-7) * 2^127 = 3.38953139e38
  CHECK(dtype_traits<bf16>::max == 3.38953139e38f);
  CHECK(static_cast<double>(dtype_traits<bf16>::max) == (2.0 - std::ldexp(1.0, -7)) * std::ldexp(1.0, 127));
  CHECK(dtype_traits<bf16>::lowest == -3.38953139e38f);
  CHECK(dtype_traits<bf16>::min_normal == 1.17549435e-38f);
  CHECK(dtype_traits<bf16>::epsilon == 0.0078125f);
  // f16 (IEEE binary16)
  CHECK(dtype_traits<f16>::max == 65504.0f);
  CHECK(dtype_traits<f16>::lowest == -65504.0f);
  CHECK(dtype_traits<f16>::min_normal == 6.10351562e-05f);
  CHECK(dtype_traits<f16>::epsilon == 0.0009765625f);
  CHECK(dtype_traits<f16>::denorm_min == 5.96046448e-08f);
  // OCP FP8 E4M3FN
  CHECK(dtype_traits<e4m3>::max == 448.0f);
  CHECK(dtype_traits<e4m3>::lowest == -448.0f);
  CHECK(dtype_traits<e4m3>::min_normal == 0.015625f);
  CHECK(dtype_traits<e4m3>::epsilon == 0.125f);
  CHECK(dtype_traits<e4m3>::denorm_min == 0.001953125f);
  // OCP FP8 E5M2
  CHECK(dtype_traits<e5m2>::max == 57344.0f);
  CHECK(dtype_traits<e5m2>::lowest == -57344.0f);
  CHECK(dtype_traits<e5m2>::min_normal == 6.10351562e-05f);
  CHECK(dtype_traits<e5m2>::epsilon == 0.25f);
  CHECK(dtype_traits<e5m2>::denorm_min == 1.52587891e-05f);
}

// The traits must also agree with what the conversions do.
template <class T>
void check_traits_against_conversions() {
  using tr = ctg::dtype_traits<T>;
  const float max = tr::max;
  CHECK(static_cast<float>(T(max)) == max);
  CHECK(static_cast<float>(T(tr::lowest)) == tr::lowest);
  CHECK(static_cast<float>(T(tr::min_normal)) == tr::min_normal);
  CHECK(static_cast<float>(T(tr::denorm_min)) == tr::denorm_min);
  CHECK(static_cast<float>(T(1.0f + tr::epsilon)) == 1.0f + tr::epsilon);
  CHECK(static_cast<float>(T(1.0f + tr::epsilon / 2)) == 1.0f);  // tie to even
  const float above = static_cast<float>(T(max * 1.5f));
  if (tr::is_fp8) CHECK(above == max);
  else CHECK(above == std::numeric_limits<float>::infinity());
}

TEST_CASE("dtype_traits agree with the conversions") {
  check_traits_against_conversions<bf16>();
  check_traits_against_conversions<f16>();
  check_traits_against_conversions<e4m3>();
  check_traits_against_conversions<e5m2>();
}

// ---- every conversion against the reference --------------------------------------

template <class T>
void check_against_reference(const std::string& name) {
  const ctg_test::format fmt = ctg_test::format_of<T>();
  const ctg_test::value_table table(fmt);
  const std::uint32_t patterns = 1u << fmt.storage_bits;

  // narrow -> f32, every pattern; and narrow -> f32 -> narrow
  std::uint64_t decode_bad = 0, roundtrip_bad = 0;
  for (std::uint32_t c = 0; c < patterns; ++c) {
    const T v = T::from_bits(static_cast<decltype(T::bits)>(c));
    const float f = static_cast<float>(v);
    if (bits_of(f) != ctg_test::ref_to_f32_bits(fmt, c)) {
      if (++decode_bad <= 5) FAIL_CHECK(name << " decode " << hex(c) << " -> " << hex(bits_of(f)));
    }
    const std::uint32_t back = T(f).bits;
    const std::uint32_t expect = table.encode(f);
    if (back != expect) {
      if (++roundtrip_bad <= 5) FAIL_CHECK(name << " roundtrip " << hex(c) << " -> " << hex(back));
    }
    // and the reference itself: finite non-NaN patterns round-trip exactly
    const ctg_test::decoded d = ctg_test::ref_decode(fmt, c);
    if (d.k == ctg_test::kind::finite) CHECK(expect == c);
  }
  CHECK(decode_bad == 0);
  CHECK(roundtrip_bad == 0);

  // f32 -> narrow over the sample
  std::uint64_t encode_bad = 0, compared = 0;
  const ctg_test::sample_counts n = ctg_test::for_each_sample(table, [&](float x) {
    ++compared;
    const std::uint32_t got = T(x).bits;
    const std::uint32_t want = table.encode(x);
    if (got != want) {
      if (++encode_bad <= 5) FAIL_CHECK(name << " encode f32 " << hex(bits_of(x)) << ": got " << hex(got) << " want " << hex(want));
    }
  });
  CHECK(encode_bad == 0);
  CHECK(compared == n.total());
  MESSAGE(name << " vs reference: " << patterns << " patterns decoded + round-tripped (mismatches " << decode_bad
               << " / " << roundtrip_bad << "); " << n.total() << " f32 inputs encoded (" << n.structured
               << " structured, " << n.focused << " focused random, " << n.stride
               << " stride over 2^32), mismatches " << encode_bad);
}

TEST_CASE("bf16 conversions match the reference") { check_against_reference<bf16>("bf16"); }
TEST_CASE("f16 conversions match the reference") { check_against_reference<f16>("f16"); }
TEST_CASE("e4m3 conversions match the reference") { check_against_reference<e4m3>("e4m3"); }
TEST_CASE("e5m2 conversions match the reference") { check_against_reference<e5m2>("e5m2"); }

// The reference must be able to disagree: a deliberately wrong encoder (round
// half away from zero) is caught by the same sample.
TEST_CASE("the reference comparison detects a wrong rounding mode") {
  const ctg_test::value_table table(ctg_test::bf16_format);
  std::uint64_t caught = 0;
  ctg_test::for_each_sample(table, [&](float x) {
    const std::uint32_t u = bits_of(x);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return;
    const std::uint32_t wrong = (u + 0x8000u) >> 16;  // ties away from zero
    if (wrong != table.encode(x)) ++caught;
  });
  CHECK(caught > 1000);
}

TEST_CASE("special values") {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  CHECK(bf16(inf).bits == 0x7F80);
  CHECK(bf16(-inf).bits == 0xFF80);
  CHECK(bf16(nan).bits == 0x7FFF);
  CHECK(bf16(-nan).bits == 0x7FFF);
  CHECK(bf16(-0.0f).bits == 0x8000);
  CHECK(bits_of(static_cast<float>(bf16::from_bits(0xFFA1))) == 0xFFA10000u);  // payload kept
  CHECK(f16(inf).bits == 0x7C00);
  CHECK(f16(float_of(0xFF800001u)).bits == 0x7FFF);
  CHECK(bits_of(static_cast<float>(f16::from_bits(0xFE01))) == 0x7FFFFFFFu);
  CHECK(e4m3(-0.0f).bits == 0x80);
  CHECK(bits_of(static_cast<float>(e4m3::from_bits(0xFF))) == 0x7FFFFFFFu);
  CHECK(bits_of(static_cast<float>(e5m2::from_bits(0xFD))) == 0x7FFFFFFFu);
  CHECK(static_cast<float>(e5m2::from_bits(0xFC)) == -inf);
  CHECK(e5m2(-1e9f).bits == 0xFB);
  CHECK(e4m3(-1e-30f).bits == 0x80);
}
