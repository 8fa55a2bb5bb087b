// sprig/optim/lr_schedule.hpp — learning-rate schedules: lr as a function of the 0-based
// index t of the step about to be taken (t = optimizer.step_count() before step()):
//     opt.set_lr(schedule(opt.step_count()));
//     opt.step(model);
//
// Each schedule checks its parameters in its constructor (ArgumentError, naming the
// schedule and the offending value) and keeps them private, read through accessors, so a
// schedule that exists is valid: operator() is then noexcept, O(1), and a pure function of t
// (a negative t is taken as 0). Schedules hold no state and may be shared between threads.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "../core/error.hpp"

namespace sprig {

namespace detail {
inline void check_lr(const char* fn, const char* name, double lr) {
  if (!(lr >= 0.0 && std::isfinite(lr)))
    throw ArgumentError(message(fn, ": ", name, " ", lr, " must be finite and >= 0"));
}
}  // namespace detail

// lr(t) = lr. Throws ArgumentError unless lr is finite and >= 0.
class ConstantLR {
public:
  explicit ConstantLR(double lr = 1e-3) : lr_(lr) { detail::check_lr("ConstantLR", "lr", lr); }
  double lr() const noexcept { return lr_; }
  double operator()(std::int64_t) const noexcept { return lr_; }

private:
  double lr_;
};

// lr(t) = lr * gamma^floor(t / step_size). Throws ArgumentError unless step_size > 0 (the
// divisor of operator()), lr finite and >= 0, gamma finite and >= 0.
class StepLR {
public:
  StepLR(double lr, std::int64_t step_size, double gamma) : lr_(lr), step_size_(step_size), gamma_(gamma) {
    if (step_size <= 0) throw ArgumentError(detail::message("StepLR: step_size ", step_size, " must be > 0"));
    detail::check_lr("StepLR", "lr", lr);
    detail::check_lr("StepLR", "gamma", gamma);
  }
  double lr() const noexcept { return lr_; }
  std::int64_t step_size() const noexcept { return step_size_; }
  double gamma() const noexcept { return gamma_; }
  double operator()(std::int64_t t) const noexcept {
    return lr_ * std::pow(gamma_, static_cast<double>(std::max<std::int64_t>(t, 0) / step_size_));
  }

private:
  double lr_;
  std::int64_t step_size_;
  double gamma_;
};

// Linear warmup then cosine decay to min_lr:
//   t <  warmup:  lr * (t + 1) / warmup
//   t >= warmup:  min_lr + (lr - min_lr) * (1 + cos(pi * p)) / 2,
//                 p = (t - warmup) / (total - warmup), clamped to [0, 1]
// so lr(warmup) = lr and lr(t >= total) = min_lr. Throws ArgumentError unless
// 0 <= warmup < total (total - warmup is a divisor), lr and min_lr finite and >= 0.
class CosineWarmupLR {
public:
  CosineWarmupLR(double lr, std::int64_t warmup, std::int64_t total, double min_lr = 0.0)
      : lr_(lr), warmup_(warmup), total_(total), min_lr_(min_lr) {
    if (warmup < 0 || total <= warmup)
      throw ArgumentError(detail::message("CosineWarmupLR: need 0 <= warmup (", warmup, ") < total (", total, ")"));
    detail::check_lr("CosineWarmupLR", "lr", lr);
    detail::check_lr("CosineWarmupLR", "min_lr", min_lr);
  }
  double lr() const noexcept { return lr_; }
  std::int64_t warmup() const noexcept { return warmup_; }
  std::int64_t total() const noexcept { return total_; }
  double min_lr() const noexcept { return min_lr_; }
  double operator()(std::int64_t t) const noexcept {
    t = std::max<std::int64_t>(t, 0);
    if (t < warmup_) return lr_ * static_cast<double>(t + 1) / static_cast<double>(warmup_);
    const double p = std::clamp(static_cast<double>(t - warmup_) / static_cast<double>(total_ - warmup_), 0.0, 1.0);
    return min_lr_ + (lr_ - min_lr_) * 0.5 * (1.0 + std::cos(3.14159265358979323846 * p));
  }

private:
  double lr_;
  std::int64_t warmup_;
  std::int64_t total_;
  double min_lr_;
};

}  // namespace sprig
