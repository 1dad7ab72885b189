// ctg::math's float exp, log, tanh, erf (include/ctg/core/math.hpp): max error
// in ulps against the C library's double functions over dense sweeps of the
// float inputs, and the special values. The bounds are the stated targets,
// not what the implementation happens to reach:
//   exp, log <= 2 ulp   tanh <= 3 ulp   erf <= 4 ulp
// An error is |got - exact| / ulp(exact), ulp taken in the float binade of the
// exact value (2^-149 for subnormals); +-inf counts as +-2^128 so a result that
// overflows a hair early or late is an ordinary 1-ulp error, not an infinite one.
//
// Sweeps: every `stride`-th float bit pattern over the whole relevant range
// (stride is small and odd: every binade gets ~10^5 points, with all low
// mantissa bits varying), plus every float in windows where the formulas
// switch or the result changes scale (crossovers, overflow and underflow edges,
// log near 1). Release (NDEBUG) checks ~10^8 inputs in ~3 s; other builds a 16th.

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include <ctg/core/float_bits.hpp>
#include <ctg/core/math.hpp>

namespace {
using ctg::detail::f32_bits;
using ctg::detail::f32_from_bits;
using u32 = std::uint32_t;

#ifdef NDEBUG
constexpr u32 stride = 67;
#else
constexpr u32 stride = 67 * 16 + 2;  // still odd
#endif

constexpr double exp_bound = 2.0, log_bound = 2.0, tanh_bound = 3.0, erf_bound = 4.0;

double ulp_error(float got, double want) {
  if (std::isnan(got) || std::isnan(want)) return std::isnan(got) && std::isnan(want) ? 0.0 : 1e300;
  // +-inf, and exact values beyond +-2^128 (which round to +-inf), count as +-2^128
  const double g = std::isinf(got) ? std::copysign(0x1p128, got) : static_cast<double>(got);
  const double w = std::fabs(want) > 0x1p128 ? std::copysign(0x1p128, want) : want;
  int e = 0;
  std::frexp(w, &e);  // |w| in [2^(e-1), 2^e): float ulp 2^(e-24)
  const double ulp = w == 0.0 ? 0x1p-149 : std::ldexp(1.0, std::max(e - 24, -149));
  return std::fabs(g - w) / ulp;
}

struct worst {
  double ulp = 0;
  float x = 0, got = 0;
  double want = 0;
  std::uint64_t count = 0;
  std::string str() const {
    char buf[160];
    std::snprintf(buf, sizeof buf, "max %.3f ulp at x = %a (%.9g): got %.9g, exact %.12g; %llu inputs", ulp,
                  static_cast<double>(x), static_cast<double>(x), static_cast<double>(got), want,
                  static_cast<unsigned long long>(count));
    return buf;
  }
};

// Every `step`-th bit pattern in [lo, hi] (bits of non-negative floats, or of
// negative ones: the range must not cross a sign). `f` runs over a batch
// first, so the compiler may vectorize it as in the real loops.
template <class F, class Ref>
void sweep(worst& w, u32 lo, u32 hi, u32 step, F f, Ref ref) {
  constexpr std::size_t batch = 4096;
  std::vector<float> xs(batch), ys(batch);
  std::uint64_t b = lo;
  while (b <= hi) {
    std::size_t n = 0;
    for (; n < batch && b <= hi; ++n, b += step) xs[n] = f32_from_bits(static_cast<u32>(b));
    for (std::size_t i = 0; i < n; ++i) ys[i] = f(xs[i]);
    for (std::size_t i = 0; i < n; ++i) {
      const double want = ref(static_cast<double>(xs[i]));
      const double e = ulp_error(ys[i], want);
      if (e > w.ulp) w = {e, xs[i], ys[i], want, w.count};
    }
    w.count += n;
  }
}
// Every float within `radius` bit patterns of v (same sign as v).
template <class F, class Ref>
void window(worst& w, float v, u32 radius, F f, Ref ref) {
  const u32 c = f32_bits(v), base = c & 0x80000000u, mag = c & 0x7FFFFFFFu;
  const u32 lo = mag > radius ? mag - radius : 0u, hi = mag + radius;
  sweep(w, base | lo, base | hi, 1, f, ref);
}

bool same_bits(float a, float b) { return f32_bits(a) == f32_bits(b); }
const float inf = std::numeric_limits<float>::infinity();
const float qnan = std::numeric_limits<float>::quiet_NaN();
// NaN in gives NaN out; which NaN is not specified (x86 keeps the input's
// payload through arithmetic, NVIDIA GPUs give a canonical NaN).
const float nan_payload = f32_from_bits(0x7FC01234u);
const float neg_nan = f32_from_bits(0xFFC00005u);
const float snan = f32_from_bits(0x7F800001u);

auto fexp = [](float x) { return ctg::math::exp(x); };
auto flog = [](float x) { return ctg::math::log(x); };
auto ftanh = [](float x) { return ctg::math::tanh(x); };
auto ferf = [](float x) { return ctg::math::erf(x); };
auto rexp = [](double x) { return std::exp(x); };
auto rlog = [](double x) { return std::log(x); };
auto rtanh = [](double x) { return std::tanh(x); };
auto rerf = [](double x) { return std::erf(x); };
}  // namespace

TEST_CASE("exp: max ulp error over [-104, 89] (overflow, gradual underflow)") {
  worst w;
  sweep(w, 0u, f32_bits(89.0f), stride, fexp, rexp);
  sweep(w, 0x80000000u, f32_bits(-104.0f), stride, fexp, rexp);
  window(w, 88.7228394f, 1u << 16, fexp, rexp);    // overflow edge
  window(w, -87.3365479f, 1u << 16, fexp, rexp);   // results turn subnormal
  window(w, -103.972084f, 1u << 16, fexp, rexp);   // results round to 0
  window(w, 0.34657359f, 1u << 16, fexp, rexp);    // reduction: n changes 0 -> 1
  window(w, -0.34657359f, 1u << 16, fexp, rexp);
  window(w, 1e-3f, 1u << 16, fexp, rexp);
  window(w, -1e-3f, 1u << 16, fexp, rexp);
  INFO(w.str());
  MESSAGE("exp: " << w.str());
  CHECK(w.count > 30'000'000 / (stride / 67));
  CHECK(w.ulp <= exp_bound);
}

TEST_CASE("exp: special values") {
  using ctg::math::exp;
  CHECK(exp(0.0f) == 1.0f);
  CHECK(exp(-0.0f) == 1.0f);
  CHECK(exp(inf) == inf);
  CHECK(same_bits(exp(-inf), 0.0f));
  CHECK(exp(89.0f) == inf);
  CHECK(exp(1000.0f) == inf);
  CHECK(exp(std::numeric_limits<float>::max()) == inf);
  CHECK(std::isfinite(exp(88.72f)));
  CHECK(same_bits(exp(-104.0f), 0.0f));
  CHECK(same_bits(exp(-1000.0f), 0.0f));
  CHECK(same_bits(exp(-std::numeric_limits<float>::max()), 0.0f));
  // gradual underflow: subnormal results are produced, not flushed
  CHECK(exp(-100.0f) > 0.0f);
  CHECK(exp(-100.0f) < std::numeric_limits<float>::min());
  CHECK(exp(-103.0f) > 0.0f);
  CHECK(std::isnan(exp(qnan)));
  CHECK(std::isnan(exp(nan_payload)));
  CHECK(std::isnan(exp(neg_nan)));
  CHECK(std::isnan(exp(snan)));
  CHECK(exp(1.0f) == 2.71828182f);
  CHECK(exp(std::numeric_limits<float>::denorm_min()) == 1.0f);
}

TEST_CASE("log: max ulp error over all positive floats (subnormals included)") {
  worst w;
  sweep(w, 1u, 0x7F7FFFFFu, stride, flog, rlog);
  window(w, 1.0f, 1u << 18, flog, rlog);          // log near 0: 1 +- 2^-6 (then some)
  window(w, 0.70710678f, 1u << 16, flog, rlog);  // mantissa range switch
  window(w, 1.41421356f, 1u << 16, flog, rlog);
  window(w, std::numeric_limits<float>::min(), 1u << 16, flog, rlog);  // subnormal/normal edge
  window(w, std::numeric_limits<float>::max(), 1u << 16, flog, rlog);
  window(w, std::numeric_limits<float>::denorm_min(), 1u << 16, flog, rlog);
  INFO(w.str());
  MESSAGE("log: " << w.str());
  CHECK(w.count > 30'000'000 / (stride / 67));
  CHECK(w.ulp <= log_bound);
}

TEST_CASE("log: special values") {
  using ctg::math::log;
  CHECK(same_bits(log(1.0f), 0.0f));
  CHECK(log(0.0f) == -inf);
  CHECK(log(-0.0f) == -inf);
  CHECK(log(inf) == inf);
  CHECK(std::isnan(log(-1.0f)));
  CHECK(std::isnan(log(-std::numeric_limits<float>::denorm_min())));
  CHECK(std::isnan(log(-inf)));
  CHECK(std::isnan(log(qnan)));
  CHECK(std::isnan(log(nan_payload)));
  CHECK(std::isnan(log(neg_nan)));
  CHECK(std::isnan(log(snan)));
  CHECK(log(std::numeric_limits<float>::denorm_min()) == doctest::Approx(-103.278929903).epsilon(1e-7));
  CHECK(log(std::numeric_limits<float>::max()) == doctest::Approx(88.7228391117).epsilon(1e-7));
  CHECK(log(2.0f) == 0.693147182f);
}

TEST_CASE("tanh: max ulp error over [0, 10], odd symmetry") {
  worst w;
  sweep(w, 0u, f32_bits(10.0f), stride, ftanh, rtanh);
  window(w, 0.5493061443f, 1u << 16, ftanh, rtanh);  // formula switch
  window(w, 0.17328680f, 1u << 16, ftanh, rtanh);    // expm1 reduction: n changes 0 -> 1
  window(w, 9.01091334f, 1u << 16, ftanh, rtanh);    // rounds to 1 from here
  window(w, 1e-3f, 1u << 16, ftanh, rtanh);
  sweep(w, 0x80000000u, f32_bits(-10.0f), stride * 16 + 2, ftanh, rtanh);
  INFO(w.str());
  MESSAGE("tanh: " << w.str());
  CHECK(w.count > 15'000'000 / (stride / 67));
  CHECK(w.ulp <= tanh_bound);
  std::uint64_t asym = 0;
  for (u32 b = 0; b <= 0x7F800000u; b += 9973) {
    const float x = f32_from_bits(b);
    asym += !same_bits(ctg::math::tanh(-x), -ctg::math::tanh(x));
  }
  CHECK(asym == 0);
}

TEST_CASE("tanh: special values") {
  using ctg::math::tanh;
  CHECK(same_bits(tanh(0.0f), 0.0f));
  CHECK(same_bits(tanh(-0.0f), -0.0f));
  CHECK(tanh(inf) == 1.0f);
  CHECK(tanh(-inf) == -1.0f);
  CHECK(tanh(9.5f) == 1.0f);
  CHECK(tanh(-9.5f) == -1.0f);
  CHECK(tanh(1e30f) == 1.0f);
  CHECK(tanh(8.0f) < 1.0f);
  CHECK(same_bits(tanh(std::numeric_limits<float>::denorm_min()), std::numeric_limits<float>::denorm_min()));
  CHECK(tanh(1e-20f) == 1e-20f);
  CHECK(std::isnan(tanh(qnan)));
  CHECK(std::isnan(tanh(nan_payload)));
  CHECK(std::isnan(tanh(neg_nan)));
  CHECK(std::isnan(tanh(snan)));
}

TEST_CASE("erf: max ulp error over [0, 4.5], odd symmetry") {
  worst w;
  sweep(w, 0u, f32_bits(4.5f), stride, ferf, rerf);
  window(w, 1.0f, 1u << 17, ferf, rerf);          // formula switch
  window(w, 3.91920584f, 1u << 16, ferf, rerf);   // rounds to 1 from here
  window(w, 4.0f, 1u << 16, ferf, rerf);          // clamp of the tail polynomial
  window(w, 1e-3f, 1u << 16, ferf, rerf);
  sweep(w, 0x80000000u, f32_bits(-4.5f), stride * 16 + 2, ferf, rerf);
  INFO(w.str());
  MESSAGE("erf: " << w.str());
  CHECK(w.count > 15'000'000 / (stride / 67));
  CHECK(w.ulp <= erf_bound);
  std::uint64_t asym = 0;
  for (u32 b = 0; b <= 0x7F800000u; b += 9973) {
    const float x = f32_from_bits(b);
    asym += !same_bits(ctg::math::erf(-x), -ctg::math::erf(x));
  }
  CHECK(asym == 0);
}

TEST_CASE("erf: special values") {
  using ctg::math::erf;
  CHECK(same_bits(erf(0.0f), 0.0f));
  CHECK(same_bits(erf(-0.0f), -0.0f));
  CHECK(erf(inf) == 1.0f);
  CHECK(erf(-inf) == -1.0f);
  CHECK(erf(4.0f) == 1.0f);
  CHECK(erf(-5.0f) == -1.0f);
  CHECK(erf(1e30f) == 1.0f);
  CHECK(erf(3.8f) < 1.0f);
  CHECK(erf(1e-30f) == doctest::Approx(1.1283791671e-30).epsilon(1e-7));
  // 2/sqrt(pi) times the least subnormal rounds to it
  CHECK(erf(std::numeric_limits<float>::denorm_min()) == std::numeric_limits<float>::denorm_min());
  CHECK(std::isnan(erf(qnan)));
  CHECK(std::isnan(erf(nan_payload)));
  CHECK(std::isnan(erf(neg_nan)));
  CHECK(std::isnan(erf(snan)));
}

TEST_CASE("sigmoid uses exp: saturation and symmetry point") {
  using ctg::math::sigmoid;
  CHECK(sigmoid(0.0f) == 0.5f);
  CHECK(sigmoid(-inf) == 0.0f);
  CHECK(sigmoid(inf) == 1.0f);
  CHECK(sigmoid(-200.0f) == 0.0f);
  CHECK(sigmoid(200.0f) == 1.0f);
  CHECK(std::isnan(sigmoid(qnan)));
  for (float x = -20.0f; x <= 20.0f; x += 0.37f) {
    const double want = 1.0 / (1.0 + std::exp(-static_cast<double>(x)));
    CHECK(ulp_error(sigmoid(x), want) <= 4.0);
  }
  CHECK(sigmoid(0.0) == 0.5);  // the double overload stays the library's
}

TEST_CASE("abs clears the sign bit: abs(-0) is +0 (1 / abs(-0) is +inf, as PyTorch), in f32 and f64") {
  using ctg::math::abs;
  CHECK(!std::signbit(abs(-0.0f)));
  CHECK(1.0f / abs(-0.0f) == inf);
  CHECK(!std::signbit(abs(-0.0)));
  CHECK(1.0 / abs(-0.0) == std::numeric_limits<double>::infinity());
  CHECK(abs(-inf) == inf);
  CHECK(abs(-0x1p-149f) == 0x1p-149f);  // the smallest subnormal
  CHECK(abs(-3.5) == 3.5);
  CHECK(abs(2.25f) == 2.25f);
  CHECK(std::isnan(abs(neg_nan)));
  CHECK(!std::signbit(abs(neg_nan)));
}
