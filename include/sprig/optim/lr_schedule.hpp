// sprig/optim/lr_schedule.hpp — learning-rate schedules: lr as a function of the 0-based
// index t of the step about to be taken (t = optimizer.step_count() before step()).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "../core/error.hpp"

namespace sprig {

// lr(t) = lr.
struct ConstantLR {
  double lr = 1e-3;
  double operator()(std::int64_t) const noexcept { return lr; }
};

// lr(t) = lr * gamma^floor(t / step_size)  (step_size > 0).
struct StepLR {
  double lr = 0.1;
  std::int64_t step_size = 1;
  double gamma = 0.1;
  StepLR(double base, std::int64_t size, double g) : lr(base), step_size(size), gamma(g) {
    if (size <= 0) throw ArgumentError(detail::message("StepLR: step_size ", size, " must be > 0"));
  }
  double operator()(std::int64_t t) const noexcept {
    return lr * std::pow(gamma, static_cast<double>(std::max<std::int64_t>(t, 0) / step_size));
  }
};

// Linear warmup then cosine decay to min_lr:
//   t <  warmup:  lr * (t + 1) / warmup
//   t >= warmup:  min_lr + (lr - min_lr) * (1 + cos(pi * p)) / 2,
//                 p = (t - warmup) / (total - warmup), clamped to [0, 1]
// so lr(warmup) = lr and lr(t >= total) = min_lr.
struct CosineWarmupLR {
  double lr = 1e-3;
  std::int64_t warmup = 0;
  std::int64_t total = 1;
  double min_lr = 0.0;
  CosineWarmupLR(double base, std::int64_t warmup_steps, std::int64_t total_steps, double min = 0.0)
      : lr(base), warmup(warmup_steps), total(total_steps), min_lr(min) {
    if (warmup_steps < 0 || total_steps <= warmup_steps)
      throw ArgumentError(detail::message("CosineWarmupLR: need 0 <= warmup (", warmup_steps, ") < total (",
                                          total_steps, ")"));
  }
  double operator()(std::int64_t t) const noexcept {
    if (t < warmup) return lr * static_cast<double>(t + 1) / static_cast<double>(warmup);
    const double p = std::clamp(static_cast<double>(t - warmup) / static_cast<double>(total - warmup), 0.0, 1.0);
    return min_lr + (lr - min_lr) * 0.5 * (1.0 + std::cos(3.14159265358979323846 * p));
  }
};

}  // namespace sprig
