// ctg's conversions against CUDA's own host conversion functions, bit for bit:
// cuda_bf16.h (__float2bfloat16, __bfloat162float), cuda_fp16.h (__float2half,
// __half2float), cuda_fp8.h (__nv_cvt_float_to_fp8 with __NV_SATFINITE, and
// __nv_cvt_fp8_to_halfraw followed by __half2float). Compiled by the host C++
// compiler with the toolkit's headers; without them the program exits 77
// (skipped).

#include <doctest/doctest.h>

#include <cstdint>
#include <cstdlib>
#include <string>

#include <ctg/core/dtypes.hpp>

#include "dtype_test_util.hpp"

#if CTG_HAVE_CUDA_HEADERS

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

using ctg_test::bits_of;
using ctg_test::hex;

namespace {

template <class T>
struct cuda_conv;

template <>
struct cuda_conv<ctg::bf16> {
  static std::uint32_t enc(float x) { return __nv_bfloat16_raw(__float2bfloat16(x)).x; }
  static float dec(std::uint32_t b) {
    __nv_bfloat16_raw r;
    r.x = static_cast<unsigned short>(b);
    return __bfloat162float(__nv_bfloat16(r));
  }
};
template <>
struct cuda_conv<ctg::f16> {
  static std::uint32_t enc(float x) { return __half_raw(__float2half(x)).x; }
  static float dec(std::uint32_t b) {
    __half_raw r;
    r.x = static_cast<unsigned short>(b);
    return __half2float(__half(r));
  }
};
template <__nv_fp8_interpretation_t K>
struct cuda_fp8_conv {
  static std::uint32_t enc(float x) { return __nv_cvt_float_to_fp8(x, __NV_SATFINITE, K); }
  static float dec(std::uint32_t b) {
    return __half2float(__half(__nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(b), K)));
  }
};
template <>
struct cuda_conv<ctg::e4m3> : cuda_fp8_conv<__NV_E4M3> {};
template <>
struct cuda_conv<ctg::e5m2> : cuda_fp8_conv<__NV_E5M2> {};

template <class T>
void check_against_cuda(const std::string& name) {
  using cuda = cuda_conv<T>;
  const ctg_test::format fmt = ctg_test::format_of<T>();
  const std::uint32_t patterns = 1u << fmt.storage_bits;

  // every narrow pattern: to f32, and to f32 and back
  std::uint64_t decode_bad = 0, roundtrip_bad = 0;
  for (std::uint32_t c = 0; c < patterns; ++c) {
    const float f = static_cast<float>(T::from_bits(static_cast<decltype(T::bits)>(c)));
    const float cf = cuda::dec(c);
    if (bits_of(f) != bits_of(cf)) {
      if (++decode_bad <= 5) FAIL_CHECK(name << " decode " << hex(c) << ": ctg " << hex(bits_of(f)) << ", CUDA " << hex(bits_of(cf)));
    }
    const std::uint32_t back = T(f).bits;
    const std::uint32_t cback = cuda::enc(cf);
    if (back != cback) {
      if (++roundtrip_bad <= 5) FAIL_CHECK(name << " round trip " << hex(c) << ": ctg " << hex(back) << ", CUDA " << hex(cback));
    }
  }
  CHECK(decode_bad == 0);
  CHECK(roundtrip_bad == 0);

  // f32 -> narrow over the sample
  const ctg_test::value_table table(fmt);
  std::uint64_t encode_bad = 0, compared = 0;
  const ctg_test::sample_counts n = ctg_test::for_each_sample(table, [&](float x) {
    ++compared;
    const std::uint32_t got = T(x).bits;
    const std::uint32_t want = cuda::enc(x);
    if (got != want) {
      if (++encode_bad <= 5) FAIL_CHECK(name << " encode f32 " << hex(bits_of(x)) << ": ctg " << hex(got) << ", CUDA " << hex(want));
    }
  });
  CHECK(encode_bad == 0);
  CHECK(compared == n.total());
  MESSAGE(name << " vs CUDA host functions: " << patterns << " patterns decoded + round-tripped (mismatches "
               << decode_bad << " / " << roundtrip_bad << "); " << n.total() << " f32 inputs encoded ("
               << n.structured << " structured, " << n.focused << " focused random, " << n.stride
               << " stride over 2^32), mismatches " << encode_bad);
}

}  // namespace

TEST_CASE("bf16 conversions match cuda_bf16.h") { check_against_cuda<ctg::bf16>("bf16"); }
TEST_CASE("f16 conversions match cuda_fp16.h") { check_against_cuda<ctg::f16>("f16"); }
TEST_CASE("e4m3 conversions match cuda_fp8.h (satfinite)") { check_against_cuda<ctg::e4m3>("e4m3"); }
TEST_CASE("e5m2 conversions match cuda_fp8.h (satfinite)") { check_against_cuda<ctg::e5m2>("e5m2"); }

#else

TEST_CASE("CUDA conversion headers") {
  MESSAGE("CUDA toolkit headers not found: comparison with CUDA's conversions skipped");
  std::exit(77);
}

#endif
