// sprig/optim/adamw.hpp — AdamW (Loshchilov & Hutter), as torch.optim.AdamW.
//
// At step t (1-based, the optimizer's step counter), per element with gradient g:
//   w  = w * (1 - lr * weight_decay)                  (decoupled decay; decay == true only)
//   m  = beta1 * m + (1 - beta1) * g                  (state[0])
//   v  = beta2 * v + (1 - beta2) * g^2                (state[1])
//   w  = w - lr * (m / (1 - beta1^t)) / (sqrt(v / (1 - beta2^t)) + eps)
// The bias corrections use the global step t; a weight grown at step t0 > 1 starts with
// m = v = 0 and is corrected with t like everyone else (as in RigL's reference code).
// Sparse parameters are updated on live slots only; m and v follow slot moves through
// SparseParameter::apply().
//
// Cost: O(live slots) per sparse parameter, O(size) per dense one, on OpenMP threads for large
// parameters (live_ranges.hpp); m and v are created (zero) on first use, 2 values per slot.
// Threads: each element is updated by one thread with the same arithmetic, so the result is
// bitwise identical for any thread count. The arithmetic is in T, the bias corrections in
// double (rounded to T once per step).
#pragma once

#include <cmath>
#include <cstdint>
#include <span>

#include "../core/concepts.hpp"
#include "../core/error.hpp"
#include "../nn/parameter.hpp"
#include "live_ranges.hpp"
#include "optimizer_base.hpp"

namespace sprig {

// torch.optim.AdamW's defaults. Set by name: AdamW<float> opt({.lr = 1e-3, .weight_decay = 0}).
struct AdamWOptions {
  double lr = 1e-3;            // >= 0; set_lr changes it (a schedule: lr_schedule.hpp)
  double beta1 = 0.9;          // in [0, 1): decay of the first moment m
  double beta2 = 0.999;        // in [0, 1): decay of the second moment v
  double eps = 1e-8;           // > 0: added to sqrt(v) in the denominator
  double weight_decay = 1e-2;  // >= 0: decoupled, for parameters with decay == true
};

template <Value T>
class AdamW : public detail::OptimizerBase<AdamW<T>> {
public:
  using value_type = T;
  static constexpr const char* kName = "AdamW";

  // Throws ArgumentError, naming the option and its value, for an option outside its range.
  explicit AdamW(AdamWOptions options = {}) : options_(options) {
    if (!(options.lr >= 0.0)) throw ArgumentError(detail::message("AdamW: lr ", options.lr, " must be >= 0"));
    if (!(options.beta1 >= 0.0 && options.beta1 < 1.0))
      throw ArgumentError(detail::message("AdamW: beta1 ", options.beta1, " outside [0, 1)"));
    if (!(options.beta2 >= 0.0 && options.beta2 < 1.0))
      throw ArgumentError(detail::message("AdamW: beta2 ", options.beta2, " outside [0, 1)"));
    if (!(options.eps > 0.0)) throw ArgumentError(detail::message("AdamW: eps ", options.eps, " must be > 0"));
    if (!(options.weight_decay >= 0.0))
      throw ArgumentError(detail::message("AdamW: weight_decay ", options.weight_decay, " must be >= 0"));
  }

  const AdamWOptions& options() const noexcept { return options_; }

  // Updates one parameter with its current gradient at step step_count() (>= 1; step() counts
  // the step, a caller of update() calls begin_step() first). Throws ArgumentError at
  // step_count() 0, ShapeError if grad or state is not aligned with the parameter's slots
  // (before anything is written).
  template <class P>
    requires requires(P& p) { p.state; p.grad; }
  void update(P& p) {
    if (this->step_count() < 1)
      throw ArgumentError("AdamW::update: step_count() is 0; call begin_step() (or step()) first");
    detail::ensure_state("AdamW::update", p, 2);
    const double t = static_cast<double>(this->step_count());
    const T lr = static_cast<T>(options_.lr);
    const T b1 = static_cast<T>(options_.beta1), b2 = static_cast<T>(options_.beta2);
    const T eps = static_cast<T>(options_.eps);
    const T c1 = static_cast<T>(1.0 / (1.0 - std::pow(options_.beta1, t)));
    const T c2 = static_cast<T>(1.0 / (1.0 - std::pow(options_.beta2, t)));
    const T shrink = p.decay ? static_cast<T>(1.0 - options_.lr * options_.weight_decay) : T(1);
    T* __restrict wp = Base::template values<T>(p).data();
    const T* __restrict gp = p.grad.data();
    T* __restrict mp = p.state[0].data();
    T* __restrict vp = p.state[1].data();
    detail::for_each_live_range(p, [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t s = b; s < e; ++s) {
        const T g = gp[s];
        mp[s] = b1 * mp[s] + (T(1) - b1) * g;
        vp[s] = b2 * vp[s] + (T(1) - b2) * g * g;
        wp[s] = wp[s] * shrink - lr * (mp[s] * c1) / (std::sqrt(vp[s] * c2) + eps);
      }
    });
  }

private:
  friend class detail::OptimizerBase<AdamW<T>>;
  using Base = detail::OptimizerBase<AdamW<T>>;

  AdamWOptions options_;
};

}  // namespace sprig
