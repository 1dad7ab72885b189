#pragma once
// Learning-rate schedules: a callable from the 0-based step index to the lr.
//
//   ctg::optim::warmup_cosine sched{.peak_lr = 3e-4f, .min_lr = 3e-5f, .warmup_steps = 100, .total_steps = 10000};
//   sched.validate();                              // optional: operator() validates too
//   opt.step(store, sched(opt.steps()));           // opt.steps() = updates done so far
//
// warmup_cosine(step), with W = warmup_steps, T = total_steps, computed in
// double and rounded to f32 once:
//   step < W          peak_lr * (step + 1) / W                        (linear; reaches peak_lr at step W - 1)
//   W <= step < T     min_lr + (peak_lr - min_lr) * (1 + cos(pi * (step - W) / (T - W))) / 2
//                                                                      (peak_lr at step W, towards min_lr)
//   step >= T         min_lr
// W = 0 means no warmup (the cosine starts at step 0); W = T means warmup only.
// Valid: 0 <= min_lr <= peak_lr (both finite), 0 <= W <= T, T > 0, and a step
// >= 0; anything else throws ctg::error naming the field, the expected and the
// found value.
#include <cmath>
#include <cstdint>
#include <string>

#include <ctg/core/error.hpp>

namespace ctg::optim {

struct warmup_cosine {
  float peak_lr = 0.0f;
  float min_lr = 0.0f;
  std::int64_t warmup_steps = 0;
  std::int64_t total_steps = 0;

  void validate() const {
    auto fail = [](const std::string& what, const std::string& expected, const std::string& found) {
      throw error("ctg: warmup_cosine: " + what + " must be " + expected + ", found " + found);
    };
    if (!(std::isfinite(peak_lr) && peak_lr >= 0.0f)) fail("peak_lr", "finite and >= 0", std::to_string(peak_lr));
    if (!(std::isfinite(min_lr) && min_lr >= 0.0f)) fail("min_lr", "finite and >= 0", std::to_string(min_lr));
    if (min_lr > peak_lr)
      fail("min_lr", "<= peak_lr (" + std::to_string(peak_lr) + ")", std::to_string(min_lr));
    if (total_steps <= 0) fail("total_steps", "> 0", std::to_string(total_steps));
    if (warmup_steps < 0) fail("warmup_steps", ">= 0", std::to_string(warmup_steps));
    if (warmup_steps > total_steps)
      fail("warmup_steps", "<= total_steps (" + std::to_string(total_steps) + ")", std::to_string(warmup_steps));
  }

  float operator()(std::int64_t step) const {
    validate();
    if (step < 0) throw error("ctg: warmup_cosine: step must be >= 0, found " + std::to_string(step));
    const double peak = peak_lr, lo = min_lr;
    if (step < warmup_steps)
      return static_cast<float>(peak * static_cast<double>(step + 1) / static_cast<double>(warmup_steps));
    if (step >= total_steps) return min_lr;
    const double progress =
        static_cast<double>(step - warmup_steps) / static_cast<double>(total_steps - warmup_steps);
    constexpr double pi = 3.14159265358979323846;
    return static_cast<float>(lo + (peak - lo) * (1.0 + std::cos(pi * progress)) / 2.0);
  }
};

}  // namespace ctg::optim
