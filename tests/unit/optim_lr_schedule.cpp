// warmup_cosine: values at the key steps against the formula evaluated here,
// hand-computed values, monotonicity, edge configurations and bad values.
#include "error_message.hpp"
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <numbers>
#include <string>

#include <ctg/optim/lr_schedule.hpp>

namespace {
using test_util::message_of;

// The documented formula, written out independently in long double.
double formula(double peak, double lo, std::int64_t w, std::int64_t t, std::int64_t s) {
  if (s < w) return peak * static_cast<long double>(s + 1) / static_cast<long double>(w);
  if (s >= t) return lo;
  const long double pi = 3.141592653589793238462643383279502884L;
  const long double x = static_cast<long double>(s - w) / static_cast<long double>(t - w);
  return static_cast<double>(lo + 0.5L * (peak - lo) * (1.0L + std::cos(pi * x)));
}
}  // namespace

TEST_CASE("warmup_cosine: hand-computed values at the key steps") {
  const ctg::optim::warmup_cosine s{.peak_lr = 1.0f, .min_lr = 0.0f, .warmup_steps = 10, .total_steps = 110};
  CHECK(s(0) == doctest::Approx(0.1));
  CHECK(s(4) == doctest::Approx(0.5));
  CHECK(s(9) == 1.0f);      // warmup reaches the peak at step W - 1
  CHECK(s(10) == 1.0f);     // the cosine starts at the peak
  CHECK(s(35) == doctest::Approx(0.8535533905932737));  // (1 + cos(pi/4)) / 2
  CHECK(s(60) == doctest::Approx(0.5));                 // half way
  CHECK(s(85) == doctest::Approx(0.1464466094067262));  // (1 + cos(3pi/4)) / 2
  CHECK(s(109) == doctest::Approx(0.5 * (1 + std::cos(std::numbers::pi * 99.0 / 100.0))));
  CHECK(s(110) == 0.0f);
  CHECK(s(1000000) == 0.0f);
}

TEST_CASE("warmup_cosine: every step of several configurations against the formula") {
  const struct {
    float peak, lo;
    std::int64_t w, t;
  } cases[] = {{3e-4f, 3e-5f, 100, 1000}, {1e-3f, 0.0f, 0, 50}, {2e-2f, 1e-3f, 7, 7}, {5e-4f, 5e-4f, 3, 40},
               {1.0f, 0.25f, 1, 2}};
  for (const auto& c : cases) {
    const ctg::optim::warmup_cosine s{.peak_lr = c.peak, .min_lr = c.lo, .warmup_steps = c.w, .total_steps = c.t};
    float prev = 0.0f;
    for (std::int64_t step = 0; step < c.t + 20; ++step) {
      const float v = s(step);
      INFO("peak " << c.peak << " min " << c.lo << " warmup " << c.w << " total " << c.t << " step " << step);
      CHECK(v == doctest::Approx(formula(c.peak, c.lo, c.w, c.t, step)).epsilon(1e-6));
      CHECK(v <= c.peak);
      CHECK(v >= (step < c.w ? 0.0f : c.lo));
      if (step > 0 && step < c.w) CHECK(v >= prev);   // rising during warmup
      if (step > c.w) CHECK(v <= prev);               // falling afterwards
      prev = v;
    }
  }
}

TEST_CASE("warmup_cosine: no warmup starts at the peak; warmup == total ends at the peak, then min") {
  const ctg::optim::warmup_cosine a{.peak_lr = 2.0f, .min_lr = 0.5f, .warmup_steps = 0, .total_steps = 4};
  CHECK(a(0) == 2.0f);
  CHECK(a(2) == doctest::Approx(1.25));
  CHECK(a(4) == 0.5f);
  const ctg::optim::warmup_cosine b{.peak_lr = 2.0f, .min_lr = 0.5f, .warmup_steps = 4, .total_steps = 4};
  CHECK(b(0) == 0.5f);
  CHECK(b(3) == 2.0f);
  CHECK(b(4) == 0.5f);
}

TEST_CASE("warmup_cosine: bad values throw ctg::error naming the field and both values") {
  using wc = ctg::optim::warmup_cosine;
  auto msg = [](wc s) { return message_of([&] { s.validate(); }); };
  const std::string over = msg({.peak_lr = 1.0f, .min_lr = 0.0f, .warmup_steps = 11, .total_steps = 10});
  CHECK(over.find("warmup_steps") != std::string::npos);
  CHECK(over.find("11") != std::string::npos);
  CHECK(over.find("10") != std::string::npos);
  CHECK(msg({.peak_lr = 1.0f, .min_lr = 0.0f, .warmup_steps = -1, .total_steps = 10}).find("warmup_steps") !=
        std::string::npos);
  CHECK(msg({.peak_lr = 1.0f, .min_lr = 0.0f, .warmup_steps = 0, .total_steps = 0}).find("total_steps") !=
        std::string::npos);
  CHECK(msg({.peak_lr = 1.0f, .min_lr = 0.0f, .warmup_steps = 0, .total_steps = -5}).find("total_steps") !=
        std::string::npos);
  const std::string minpeak = msg({.peak_lr = 1.0f, .min_lr = 2.0f, .warmup_steps = 0, .total_steps = 10});
  CHECK(minpeak.find("min_lr") != std::string::npos);
  CHECK(minpeak.find("peak_lr") != std::string::npos);
  CHECK(msg({.peak_lr = -1.0f, .min_lr = -2.0f, .warmup_steps = 0, .total_steps = 10}).find("peak_lr") !=
        std::string::npos);
  CHECK(msg({.peak_lr = std::numeric_limits<float>::quiet_NaN(), .min_lr = 0.0f, .warmup_steps = 0,
             .total_steps = 10})
            .find("peak_lr") != std::string::npos);
  CHECK(msg({.peak_lr = std::numeric_limits<float>::infinity(), .min_lr = 0.0f, .warmup_steps = 0,
             .total_steps = 10})
            .find("peak_lr") != std::string::npos);
  // operator() validates too, and rejects a negative step.
  const wc bad{.peak_lr = 1.0f, .min_lr = 0.0f, .warmup_steps = 20, .total_steps = 10};
  CHECK(message_of([&] { (void)bad(0); }).find("warmup_steps") != std::string::npos);
  const wc good{.peak_lr = 1.0f, .min_lr = 0.0f, .warmup_steps = 2, .total_steps = 10};
  CHECK_NOTHROW(good.validate());
  CHECK(message_of([&] { (void)good(-1); }).find("step") != std::string::npos);
}
