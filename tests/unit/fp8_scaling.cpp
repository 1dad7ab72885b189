// FP8 per-tensor scaling (include/ctg/precision/fp8_scaling.hpp): the scale
// rule, the delayed-scaling history update against hand-derived steps, the
// current-scaling rule, and quantize -> dequantize error bounds over dense
// sweeps. Every expected history and scale below is derived by hand in the
// comments next to it, never produced by the code under test.

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <vector>

#include <ctg/core/float_bits.hpp>
#include <ctg/precision/fp8_scaling.hpp>

namespace {
namespace prec = ctg::precision;
using ctg::detail::f32_bits;
using ctg::detail::f32_from_bits;
using ctg::dtype_traits;
using ctg::e4m3;
using ctg::e5m2;

const float inf = std::numeric_limits<float>::infinity();
const float qnan = std::numeric_limits<float>::quiet_NaN();
constexpr float flt_max = std::numeric_limits<float>::max();

bool same_value(float a, float b) { return (std::isnan(a) && std::isnan(b)) || a == b; }

static_assert(prec::fp8_max_v<e4m3> == 448.0f && prec::fp8_max_v<e5m2> == 57344.0f);
static_assert(prec::scale_from_amax(7.0f, 448.0f, 0, 1.0f) == 64.0f);
static_assert(prec::delayed<>::history == 1024 && prec::delayed<>::margin == 0 &&
              prec::delayed<>::algo == prec::amax_algo::max && prec::current<>::margin == 0);

template <std::size_t H>
struct step {
  float amax;          // this step's amax, written to slot 0 before the update
  float history[H];    // history after the update
  float scale;         // scale after the update
};

template <std::size_t H, std::size_t N>
void run_steps(const step<H> (&steps)[N], float fp8_max, int margin, prec::amax_algo algo, float scale_factor) {
  float history[H] = {};
  float scale = 1.0f;
  for (std::size_t s = 0; s < N; ++s) {
    CAPTURE(s + 1);  // step number as in the comments
    history[0] = steps[s].amax;
    prec::delayed_update(history, H, scale, fp8_max, margin, algo);
    for (std::size_t i = 0; i < H; ++i) {
      CAPTURE(i);
      CHECK(same_value(history[i], steps[s].history[i]));
    }
    // A kept initial scale (1) is not affected by the margin; computed ones are.
    const float want = steps[s].scale == 1.0f ? 1.0f : steps[s].scale * scale_factor;
    CHECK(scale == want);
  }
}
}  // namespace

TEST_CASE("scale_from_amax: fp8_max / amax / 2^margin; kept when amax is 0, negative, inf or NaN") {
  CHECK(prec::scale_from_amax(7.0f, 448.0f, 0, 5.0f) == 64.0f);
  CHECK(prec::scale_from_amax(7.0f, 448.0f, 1, 5.0f) == 32.0f);
  CHECK(prec::scale_from_amax(7.0f, 448.0f, 3, 5.0f) == 8.0f);
  CHECK(prec::scale_from_amax(3.5f, 57344.0f, 0, 5.0f) == 16384.0f);
  // 448 / 3 = 149.333...: the nearest float, one rounding.
  CHECK(prec::scale_from_amax(3.0f, 448.0f, 0, 5.0f) == 149.333333f);
  CHECK(prec::scale_from_amax(0.0f, 448.0f, 0, 5.0f) == 5.0f);
  CHECK(prec::scale_from_amax(-0.0f, 448.0f, 0, 5.0f) == 5.0f);
  CHECK(prec::scale_from_amax(-2.0f, 448.0f, 0, 5.0f) == 5.0f);
  CHECK(prec::scale_from_amax(inf, 448.0f, 0, 5.0f) == 5.0f);
  CHECK(prec::scale_from_amax(-inf, 448.0f, 0, 5.0f) == 5.0f);
  CHECK(prec::scale_from_amax(qnan, 448.0f, 0, 5.0f) == 5.0f);
  CHECK(prec::scale_from_amax(-qnan, 448.0f, 0, 5.0f) == 5.0f);
  // Large finite amax: 448 / 2^120 = 1.75 * 2^-112, exact.
  CHECK(prec::scale_from_amax(0x1p120f, 448.0f, 0, 5.0f) == 0x1.cp-112f);
  CHECK(prec::scale_from_amax(flt_max, 448.0f, 0, 5.0f) > 0.0f);
  // Tiny amax: 448 / 2^-149 overflows f32; TE then uses FLT_MAX.
  CHECK(prec::scale_from_amax(0x1p-149f, 448.0f, 0, 5.0f) == flt_max);
  // 448 / 2^-120 = 1.75 * 2^128 overflows; with margin 1 it is 1.75 * 2^127, finite.
  CHECK(prec::scale_from_amax(0x1p-120f, 448.0f, 0, 5.0f) == flt_max);
  CHECK(prec::scale_from_amax(0x1p-120f, 448.0f, 1, 5.0f) == 0x1.cp127f);
}

TEST_CASE("amax_combine: the larger part; any NaN part gives the canonical NaN, in any order") {
  using ctg::fp8_scaling::amax_combine;
  using ctg::detail::f32_bits;
  using ctg::detail::f32_from_bits;
  CHECK(amax_combine(0.0f, 3.0f) == 3.0f);
  CHECK(amax_combine(5.0f, 3.0f) == 5.0f);
  CHECK(amax_combine(5.0f, std::numeric_limits<float>::infinity()) == std::numeric_limits<float>::infinity());
  // Two NaNs of other payloads, either order, after numbers or before: one
  // result (the CPU's loop kept the last NaN's payload; a GPU the largest).
  const float n1 = f32_from_bits(0x7FC00005u), n2 = f32_from_bits(0x7FC00001u);
  for (const float first : {n1, n2})
    for (const float second : {n1, n2, 7.0f}) {
      CHECK(f32_bits(amax_combine(amax_combine(0.0f, first), second)) == 0x7FFFFFFFu);
      CHECK(f32_bits(amax_combine(amax_combine(2.0f, second), first)) == 0x7FFFFFFFu);
    }
}

TEST_CASE("delayed_update, History 4, algo max: hand-derived steps (margin 0 and 1)") {
  // e4m3, fp8_max 448, scale starts at 1, history at 0. Each step: slot 0 = amax;
  // amax_used = max over the 4 slots (NaN skipped); scale = 448 / amax_used or kept;
  // then roll(-1) (new[i] = old[i+1], new[3] = old[0]) and slot 0 = 0.
  const float big = 0x1p120f;          // large finite amax
  const float big_scale = 0x1.cp-112f;  // 448 / 2^120 = 1.75 * 2^-112
  const step<4> steps[] = {
      // 1: [0,0,0,0] max 0 -> kept 1.            roll [0,0,0,0]
      {0.0f, {0, 0, 0, 0}, 1.0f},
      // 2: [7,0,0,0] max 7 -> 448/7 = 64.        roll [0,0,0,7] -> slot0=0 [0,0,0,7]
      {7.0f, {0, 0, 0, 7}, 64.0f},
      // 3: [inf,0,0,7] max inf -> kept 64.       roll [0,0,7,inf]
      {inf, {0, 0, 7, inf}, 64.0f},
      // 4: [0,0,7,inf] max inf -> kept 64.       roll [0,7,inf,0] -> [0,7,inf,0]
      {0.0f, {0, 7, inf, 0}, 64.0f},
      // 5: [NaN,7,inf,0] max inf -> kept 64.     roll [7,inf,0,NaN] -> [0,inf,0,NaN]
      {qnan, {0, inf, 0, qnan}, 64.0f},
      // 6: [0,inf,0,NaN] max inf -> kept 64.     roll [inf,0,NaN,0] -> [0,0,NaN,0] (inf gone)
      {0.0f, {0, 0, qnan, 0}, 64.0f},
      // 7: [0,0,NaN,0] max 0 (NaN skipped) -> kept 64.  roll [0,NaN,0,0] -> [0,NaN,0,0]
      {0.0f, {0, qnan, 0, 0}, 64.0f},
      // 8: [3.5,NaN,0,0] max 3.5 -> 448/3.5 = 128.  roll [NaN,0,0,3.5] -> [0,0,0,3.5]
      {3.5f, {0, 0, 0, 3.5f}, 128.0f},
      // 9: [2^120,0,0,3.5] max 2^120 -> 1.75*2^-112.  roll [0,0,3.5,2^120]
      {big, {0, 0, 3.5f, big}, big_scale},
      // 10: [14,0,3.5,2^120] max 2^120 -> same.  roll [0,3.5,2^120,14]
      {14.0f, {0, 3.5f, big, 14}, big_scale},
      // 11: [0,3.5,2^120,14] max 2^120 -> same.  roll [3.5,2^120,14,0] -> [0,2^120,14,0]
      {0.0f, {0, big, 14, 0}, big_scale},
      // 12: [0,2^120,14,0] max 2^120 -> same.    roll [2^120,14,0,0] -> [0,14,0,0]
      {0.0f, {0, 14, 0, 0}, big_scale},
      // 13: amax 0 but history [0,14,0,0] max 14 -> 448/14 = 32 (a new scale on a zero step).
      //     roll [14,0,0,0] -> [0,0,0,0]
      {0.0f, {0, 0, 0, 0}, 32.0f},
      // 14: [0,0,0,0] max 0 -> kept 32.
      {0.0f, {0, 0, 0, 0}, 32.0f},
  };
  SUBCASE("margin 0") { run_steps(steps, 448.0f, 0, prec::amax_algo::max, 1.0f); }
  // Margin 1: every computed scale halves (448/2^1 / amax); kept scales carry the halved value.
  SUBCASE("margin 1") { run_steps(steps, 448.0f, 1, prec::amax_algo::max, 0.5f); }
}

TEST_CASE("delayed_update, History 2, most_recent: hand-derived steps") {
  // e5m2, fp8_max 57344 = 1.75 * 2^15, scale starts at 1. amax_used = slot 0 only.
  // With H = 2 the roll swaps the slots and slot 0 is zeroed: after = [0, this step's amax].
  const step<2> steps[] = {
      // 1: [0,0] recent 0 -> kept 1.
      {0.0f, {0, 0}, 1.0f},
      // 2: [7,0] recent 7 -> 57344/7 = 8192.
      {7.0f, {0, 7}, 8192.0f},
      // 3: [0,7] recent 0 -> kept 8192 (slot 1's 7 is not looked at).
      {0.0f, {0, 0}, 8192.0f},
      // 4: [inf,0] -> kept 8192.
      {inf, {0, inf}, 8192.0f},
      // 5: [NaN,inf] -> kept 8192.
      {qnan, {0, qnan}, 8192.0f},
      // 6: [2^100,NaN] -> 1.75*2^15 / 2^100 = 1.75 * 2^-85.
      {0x1p100f, {0, 0x1p100f}, 0x1.cp-85f},
      // 7: [3.5,2^100] recent 3.5 -> 57344/3.5 = 16384 (the larger slot 1 is ignored).
      {3.5f, {0, 3.5f}, 16384.0f},
      // 8: [0,3.5] recent 0 -> kept 16384.
      {0.0f, {0, 0}, 16384.0f},
  };
  SUBCASE("margin 0") { run_steps(steps, 57344.0f, 0, prec::amax_algo::most_recent, 1.0f); }
  SUBCASE("margin 1") { run_steps(steps, 57344.0f, 1, prec::amax_algo::most_recent, 0.5f); }
}

TEST_CASE("delayed_update, History 1: slot 0 is used, then zeroed") {
  float h[1] = {14.0f};
  float scale = 1.0f;
  prec::delayed_update(h, 1, scale, 448.0f, 0, prec::amax_algo::max);
  CHECK(h[0] == 0.0f);
  CHECK(scale == 32.0f);  // 448 / 14
}

TEST_CASE("current_scale: torchao tensorwise, fp8_max / max(amax, 1e-12)") {
  CHECK(prec::current_scale(7.0f, 448.0f, 0) == 64.0f);
  CHECK(prec::current_scale(7.0f, 448.0f, 1) == 32.0f);
  CHECK(prec::current_scale(3.5f, 57344.0f, 0) == 16384.0f);
  // amax 0 is clamped to 1e-12: 448e12, rounded once to f32.
  CHECK(prec::current_scale(0.0f, 448.0f, 0) == static_cast<float>(448.0 / 1e-12));
  CHECK(std::isnan(prec::current_scale(qnan, 448.0f, 0)));
  CHECK(prec::current_scale(std::numeric_limits<float>::infinity(), 448.0f, 0) == 0.0f);
}

// ---- quantize -> dequantize ------------------------------------------------

namespace {

struct rt_stats {
  std::uint64_t normal = 0, subnormal = 0, saturated = 0, failures = 0;
  double worst_rel = 0;  // worst relative error in the normal range
};

// Bounds, with u = 2^-24 the f32 unit roundoff, M the format's mantissa bits:
//  y = fl(x * scale) = x*s*(1+d1); q = fp8(y); scale_inv = fl(1/s) = (1+d3)/s;
//  deq = fl(q * scale_inv) = q*(1+d3)*(1+d2)/s, each |d| <= u (0 when s is a power of two).
//  normal |y| in [min_normal, max]: |q - y| <= 2^-(M+1) |y|, so
//    |deq/x - 1| <= (1 + 2^-(M+1)) (1+u)^3 - 1.
//  subnormal |y| < min_normal: |q - y| <= denorm_min/2, |q|, |y| <= min_normal, so
//    |deq - x| <= (denorm_min/2 + 3u * min_normal (1+u)^2) / s.
//  |y| > max: q = +-max exactly.
template <class Fmt>
void round_trip(rt_stats& st, float x, float scale) {
  using tr = dtype_traits<Fmt>;
  const double u = std::ldexp(1.0, -24);
  const bool pow2 = (f32_bits(scale) & 0x7FFFFFu) == 0;
  const double slop = pow2 ? 0.0 : 1.0;
  const float scale_inv = 1.0f / scale;
  const Fmt q = prec::quantize<Fmt>(x, scale);
  const float deq = prec::dequantize<Fmt>(q, scale_inv);
  const float y = x * scale;
  const double ay = std::fabs(static_cast<double>(y));
  bool ok = true;
  if (ay > tr::max) {
    ++st.saturated;
    ok = ctg::to_float(q) == std::copysign(tr::max, x) && deq == std::copysign(tr::max, x) * scale_inv;
  } else if (ay >= tr::min_normal) {
    ++st.normal;
    const double rel = std::fabs(static_cast<double>(deq) - x) / std::fabs(static_cast<double>(x));
    const double bound = (1.0 + std::ldexp(1.0, -(tr::mantissa_bits + 1))) * std::pow(1.0 + slop * u, 3) - 1.0;
    if (rel > st.worst_rel) st.worst_rel = rel;
    ok = rel <= bound;
  } else {
    ++st.subnormal;
    const double err = std::fabs(static_cast<double>(deq) - x);
    const double bound =
        (tr::denorm_min / 2.0 + slop * 3.0 * u * tr::min_normal * (1.0 + u) * (1.0 + u)) / scale;
    ok = err <= bound;
  }
  if (!ok) {
    if (++st.failures <= 5) {
      std::printf("round trip failed: x=%a scale=%a y=%a q=%a deq=%a\n", static_cast<double>(x),
                  static_cast<double>(scale), static_cast<double>(y), static_cast<double>(ctg::to_float(q)),
                  static_cast<double>(deq));
    }
  }
}

// ~10^5 values per sign: every `stride`-th float bit pattern in [2^-40, 2^40),
// all mantissa bits varying, plus exact halfway points of the fp8 grid.
template <class Fmt>
rt_stats sweep(float scale) {
  rt_stats st;
  const std::uint32_t lo = f32_bits(0x1p-40f), hi = f32_bits(0x1p40f), stride = 6711;  // odd
  for (std::uint32_t b = lo; b < hi; b += stride) {
    const float x = f32_from_bits(b);
    round_trip<Fmt>(st, x, scale);
    round_trip<Fmt>(st, -x, scale);
  }
  // Ties: midpoints between consecutive positive fp8 values, mapped back by the scale.
  for (std::uint32_t c = 0; c + 1 < 0x7Fu; ++c) {
    const float a = ctg::to_float(Fmt::from_bits(static_cast<std::uint8_t>(c)));
    const float b = ctg::to_float(Fmt::from_bits(static_cast<std::uint8_t>(c + 1)));
    if (!std::isfinite(b)) break;
    const float mid = (a + b) * 0.5f / scale;
    round_trip<Fmt>(st, mid, scale);
    round_trip<Fmt>(st, -mid, scale);
  }
  return st;
}

template <class Fmt>
void check_sweeps(double rel_bound_pow2) {
  const float pow2_scales[] = {1.0f, 0x1p-7f, 0x1p5f, 0x1p-20f, 0x1p17f};
  const float other_scales[] = {448.0f / 3.7f, 1.0f / 3.0f, 57344.0f / 1234.5f, 0.7f, 12345.678f, 3.0e-5f};
  for (float s : pow2_scales) {
    CAPTURE(s);
    const rt_stats st = sweep<Fmt>(s);
    CHECK(st.failures == 0);
    CHECK(st.normal > 10000);
    CHECK(st.subnormal > 1000);
    CHECK(st.saturated > 10000);
    // Power-of-two scales: no f32 rounding at all, so half an fp8 ulp bounds the error.
    // The worst case is the tie just above a power of two, base * (1 + b) rounding down to
    // base (b = 2^-(M+1)): relative error b / (1 + b). The ties in the sweep reach it.
    CHECK(st.worst_rel <= rel_bound_pow2);
    CHECK(st.worst_rel == rel_bound_pow2 / (1.0 + rel_bound_pow2));
  }
  for (float s : other_scales) {
    CAPTURE(s);
    const rt_stats st = sweep<Fmt>(s);
    CHECK(st.failures == 0);
    CHECK(st.normal > 10000);
    CHECK(st.subnormal > 1000);
    CHECK(st.saturated > 10000);
  }
}

}  // namespace

TEST_CASE("quantize -> dequantize, e4m3: relative error <= 2^-4 (normal), |err| <= 2^-10/scale (subnormal), saturates") {
  check_sweeps<e4m3>(0x1p-4);
}

TEST_CASE("quantize -> dequantize, e5m2: relative error <= 2^-3 (normal), |err| <= 2^-17/scale (subnormal), saturates") {
  check_sweeps<e5m2>(0x1p-3);
}

TEST_CASE("quantize: specials and exact grid values") {
  // +-inf and values far beyond the range saturate to +-max (satfinite), NaN stays NaN.
  CHECK(ctg::to_float(prec::quantize<e4m3>(inf, 1.0f)) == 448.0f);
  CHECK(ctg::to_float(prec::quantize<e4m3>(-inf, 1.0f)) == -448.0f);
  CHECK(ctg::to_float(prec::quantize<e5m2>(inf, 1.0f)) == 57344.0f);
  CHECK(ctg::to_float(prec::quantize<e5m2>(-1e30f, 1.0f)) == -57344.0f);
  CHECK(std::isnan(ctg::to_float(prec::quantize<e4m3>(qnan, 1.0f))));
  CHECK(std::isnan(ctg::to_float(prec::quantize<e5m2>(qnan, 1.0f))));
  // amax maps to fp8_max under scale_from_amax's scale: 7 * 64 = 448.
  const float s = prec::scale_from_amax(7.0f, 448.0f, 0, 1.0f);
  CHECK(ctg::to_float(prec::quantize<e4m3>(7.0f, s)) == 448.0f);
  CHECK(prec::dequantize(prec::quantize<e4m3>(-7.0f, s), 1.0f / s) == -7.0f);
  // Smallest subnormals: e4m3 2^-9, e5m2 2^-16; half of them (ties to even) round to 0.
  CHECK(ctg::to_float(prec::quantize<e4m3>(0x1p-9f, 1.0f)) == 0x1p-9f);
  CHECK(ctg::to_float(prec::quantize<e4m3>(0x1p-10f, 1.0f)) == 0.0f);
  CHECK(ctg::to_float(prec::quantize<e5m2>(0x1p-16f, 1.0f)) == 0x1p-16f);
  CHECK(ctg::to_float(prec::quantize<e5m2>(0x1p-17f, 1.0f)) == 0.0f);
}
