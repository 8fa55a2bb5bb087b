// sprig/optim/adamw.hpp — AdamW (Loshchilov & Hutter), as torch.optim.AdamW.
//
// At step t (1-based, the optimizer's step counter), per element with gradient g:
//   w  = w * (1 - lr * weight_decay)                  (decoupled decay; decay == true only)
//   m  = beta1 * m + (1 - beta1) * g                  (state[0])
//   v  = beta2 * v + (1 - beta2) * g^2                (state[1])
//   w  = w - lr * (m / (1 - beta1^n)) / (sqrt(v / (1 - beta2^n)) + eps)
// where n, the step count of the bias corrections, depends on the policy for slots born
// during training (AdamWOptions::bias_correction):
//   per_slot (default): n counts the slot's updates since its moments were last both
//     exactly zero, this one included (per slot, of sparse parameters: in the parameter's
//     16-bit step_counts where every count fits, that is where both corrections round to 1
//     in T by n = 65535, as at beta2 <= 0.9997 in float; else in state[2]): a slot born
//     during training (m = v = 0, as SlotLog leaves it) or one that has only seen zero
//     gradients is treated as a fresh parameter, so a weight grown at step t0 makes a first
//     update of the size of any first Adam update (about lr). Slots whose moments have been
//     nonzero since step 1 have n = t, so the counts are created only once a live slot has zero
//     moments at a step t > 1 (a topology change, typically): until then the parameter holds
//     2 values per slot and trains bitwise as with `global`. Either form of the counts gives
//     the same bits; the other form, met in a parameter (a checkpoint keeps them as state[2]),
//     is converted on the next update.
//   global: n = t for every slot (RigL's reference code): a weight grown at t0 > 1 starts
//     with m = v = 0 but is corrected with t, so its first update is
//     lr * (1 - beta1) / sqrt(1 - beta2) (3.2 lr at betas (0.9, 0.999)), largest where the
//     grow rule put it: where the gradient is largest.
// Dense parameters never grow: they always use n = t and hold 2 state values per element.
// Sparse parameters are updated on live slots only; m, v and n follow slot moves, relocation
// and compaction through SparseParameter::apply() and are saved by checkpoints.
//
// Cost: O(live slots) per sparse parameter, O(size) per dense one, on OpenMP threads for large
// parameters (live_ranges.hpp); state is created (zero) on first use: 2 values per slot, and
// a 16-bit count (or a third value) once per_slot needs counts on a sparse parameter (one more
// pass over the moments per step until then). The per-slot corrections come from a table of
// (1 - beta^n)^-1 per n, grown with the step count until both corrections round to 1 in T
// (n about 1.7e4 for float at beta2 0.999; at most kMaxCorrectionSteps entries).
// Threads: each element is updated by one thread with the same arithmetic, so the result is
// bitwise identical for any thread count. The loops are kernels/optimizer_update.hpp's, in
// SIMD registers (on the dispatch target in a dispatching build). The arithmetic is in T, the bias corrections in
// double (rounded to T once per n).
#pragma once

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <span>
#include <vector>

#include "../core/concepts.hpp"
#include "../core/error.hpp"
#include "../kernels/optimizer_update.hpp"
#include "../nn/parameter.hpp"
#include "live_ranges.hpp"
#include "optimizer_base.hpp"

namespace sprig {

// Which step count corrects the moments of a slot born during training (top of this file).
enum class AdamWBiasCorrection : std::uint8_t { per_slot = 0, global = 1 };

// torch.optim.AdamW's defaults, and the per-slot bias correction of grown weights. Set by
// name: AdamW<float> opt({.lr = 1e-3, .weight_decay = 0}).
struct AdamWOptions {
  double lr = 1e-3;            // >= 0; set_lr changes it (a schedule: lr_schedule.hpp)
  double beta1 = 0.9;          // in [0, 1): decay of the first moment m
  double beta2 = 0.999;        // in [0, 1): decay of the second moment v
  double eps = 1e-8;           // > 0: added to sqrt(v) in the denominator
  double weight_decay = 1e-2;  // >= 0: decoupled, for parameters with decay == true
  AdamWBiasCorrection bias_correction = AdamWBiasCorrection::per_slot;
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
    if (options.bias_correction != AdamWBiasCorrection::per_slot &&
        options.bias_correction != AdamWBiasCorrection::global)
      throw ArgumentError(detail::message("AdamW: bias_correction ", static_cast<int>(options.bias_correction),
                                          " is neither per_slot (0) nor global (1)"));
    // the corrections fall monotonically to 1: both are 1 at 65535 iff the table ends by then
    narrow_counts_ = correction(options.beta1, static_cast<double>(kNarrowCountTop)) == T(1) &&
                     correction(options.beta2, static_cast<double>(kNarrowCountTop)) == T(1);
  }

  // The longest correction table: per-slot step counts saturate here (reached only with
  // beta2 > 0.99999, where (1 - beta2^n)^-1 has not rounded to 1 yet).
  static constexpr std::int64_t kMaxCorrectionSteps = std::int64_t{1} << 22;

  const AdamWOptions& options() const noexcept { return options_; }

  // Whether per_slot keeps its counts in a sparse parameter's 16-bit step_counts (every
  // count fits: both corrections are 1 in T by n = 65535) rather than in state[2].
  bool narrow_counts() const noexcept { return narrow_counts_; }

  // Updates one parameter with its current gradient at step step_count() (>= 1; step() counts
  // the step, a caller of update() calls begin_step() first). Throws ArgumentError at
  // step_count() 0, ShapeError if grad or state is not aligned with the parameter's slots
  // (before anything is written). With per_slot, a sparse parameter without counts (never
  // needed yet, or state from a `global` optimizer or an older checkpoint) gets them at the
  // first step where a live slot has zero moments: step_count() - 1 for every slot with
  // nonzero moments, what `global` would have used.
  template <class P>
    requires requires(P& p) {
      p.state;
      p.grad;
    }
  void update(P& p) {
    if (this->step_count() < 1)
      throw ArgumentError("AdamW::update: step_count() is 0; call begin_step() (or step()) first");
    if constexpr (requires { p.matrix.storage_size(); }) {
      if (options_.bias_correction == AdamWBiasCorrection::per_slot) return update_per_slot(p);
    }
    detail::ensure_state("AdamW::update", p, 2);
    update_global(p);
  }

private:
  friend class detail::OptimizerBase<AdamW<T>>;
  using Base = detail::OptimizerBase<AdamW<T>>;

  // The bias correction (1 - beta^n)^-1 in double, rounded to T once. The one expression both
  // policies use, so a per-slot count equal to the step gives the bits of `global`.
  static T correction(double beta, double n) { return static_cast<T>(1.0 / (1.0 - std::pow(beta, n))); }

  // Extends the correction tables to n = min(t, saturation, kMaxCorrectionSteps); entry n
  // is correction() at n, so equal counts give equal bits. O(new
  // entries).
  void extend_corrections(std::int64_t t) {
    if (correction1_.empty()) {
      correction1_.push_back(T(1));  // n = 0 is never used (a count is >= 1 when read)
      correction2_.push_back(T(1));
    }
    while (!saturated_ && std::ssize(correction1_) <= std::min(t, kMaxCorrectionSteps)) {
      const double n = static_cast<double>(correction1_.size());
      const T c1 = correction(options_.beta1, n), c2 = correction(options_.beta2, n);
      correction1_.push_back(c1);
      correction2_.push_back(c2);
      saturated_ = (c1 == T(1) && c2 == T(1)) || std::ssize(correction1_) > kMaxCorrectionSteps;
    }
  }

  // Every slot corrected with the global step t (state[0], state[1] exist).
  template <class P>
  void update_global(P& p) {
    const double t = static_cast<double>(this->step_count());
    const T lr = static_cast<T>(options_.lr);
    const T b1 = static_cast<T>(options_.beta1), b2 = static_cast<T>(options_.beta2);
    const T eps = static_cast<T>(options_.eps);
    const T c1 = correction(options_.beta1, t), c2 = correction(options_.beta2, t);
    const T shrink = p.decay ? static_cast<T>(1.0 - options_.lr * options_.weight_decay) : T(1);
    T* wp = Base::template values<T>(p).data();
    const T* gp = p.grad.data();
    T* mp = p.state[0].data();
    T* vp = p.state[1].data();
    const detail::AdamWStep<T> k{lr, b1, b2, eps, shrink};
    const auto kernel = detail::adamw_update_kernel<T>();
    detail::for_each_live_range(p, [&](std::int64_t b, std::int64_t e) {
      kernel(k, c1, c2, wp + b, gp + b, mp + b, vp + b, e - b);
    });
  }

  static constexpr std::int64_t kNarrowCountTop = 65535;  // the largest 16-bit count
  static constexpr std::size_t kWideCounts = 2;           // the state vector of counts that do not fit

  // Whether p holds counts in state[kWideCounts] (in T).
  template <class P>
  static bool has_wide_counts(const P& p) noexcept {
    return p.state.size() > kWideCounts && !p.state[kWideCounts].empty();
  }

  // Moves counts kept in the other form (see the top of this file) into the one this
  // optimizer uses; whole numbers either way. O(slots) once, O(1) after.
  template <class P>
  void adopt_counts(P& p) const {
    if (narrow_counts_ && has_wide_counts(p)) {
      const auto& from = p.state[kWideCounts];
      p.step_counts.reserve(std::max(from.size(), p.grad.capacity()));
      p.step_counts.resize(from.size());
      for (std::size_t s = 0; s < from.size(); ++s)
        p.step_counts[s] = static_cast<std::uint16_t>(std::clamp(from[s], T(0), T(kNarrowCountTop)));
      p.state.resize(kWideCounts);
    } else if (!narrow_counts_ && !p.step_counts.empty()) {
      if (p.state.size() <= kWideCounts) p.state.resize(kWideCounts + 1);
      auto& to = p.state[kWideCounts];
      to.reserve(std::max(p.step_counts.size(), p.grad.capacity()));
      to.assign(p.step_counts.begin(), p.step_counts.end());
      AlignedVector<std::uint16_t>().swap(p.step_counts);
    }
  }

  template <class P>
  void update_per_slot(P& p) {
    adopt_counts(p);
    const bool had_counts = narrow_counts_ ? !p.step_counts.empty() : has_wide_counts(p);
    detail::ensure_state("AdamW::update", p, 2);
    const std::int64_t t = this->step_count();
    if (!had_counts) {
      // counts are needed once a live slot has zero moments after step 1; until then every
      // slot's count is t and the global correction is the same arithmetic
      std::atomic<bool> fresh{false};
      if (t > 1) {
        const T* mp = p.state[0].data();
        const T* vp = p.state[1].data();
        const auto zero_moments = detail::zero_moments_kernel<T>();
        detail::for_each_live_range(p, [&](std::int64_t b, std::int64_t e) {
          if (!fresh.load(std::memory_order_relaxed) && zero_moments(mp + b, vp + b, e - b))
            fresh.store(true, std::memory_order_relaxed);
        });
      }
      if (!fresh.load(std::memory_order_relaxed)) return update_global(p);
    }
    if (narrow_counts_ && p.step_counts.empty()) {
      p.step_counts.reserve(p.grad.capacity());  // the growth reserve, as ensure_state gives state
      p.step_counts.resize(p.grad.size());
    }
    if (!narrow_counts_) detail::ensure_state("AdamW::update", p, kWideCounts + 1);
    extend_corrections(t);
    // counts beyond the table's last entry read that entry: exact once saturated (every
    // later correction is 1 too), and a count never exceeds the step count otherwise; with
    // narrow counts the table is saturated by 65535, so every count fits 16 bits
    const std::int64_t last = std::ssize(correction1_) - 1;
    const T top = static_cast<T>(last);
    if (!had_counts) {  // zero-moment slots restart below
      const std::int64_t previous = std::min<std::int64_t>(t - 1, last);
      if (narrow_counts_)
        std::fill(p.step_counts.begin(), p.step_counts.end(), static_cast<std::uint16_t>(previous));
      else
        std::fill(p.state[kWideCounts].begin(), p.state[kWideCounts].end(), static_cast<T>(previous));
    }
    const T lr = static_cast<T>(options_.lr);
    const T b1 = static_cast<T>(options_.beta1), b2 = static_cast<T>(options_.beta2);
    const T eps = static_cast<T>(options_.eps);
    const T shrink = p.decay ? static_cast<T>(1.0 - options_.lr * options_.weight_decay) : T(1);
    T* wp = Base::template values<T>(p).data();
    const T* gp = p.grad.data();
    T* mp = p.state[0].data();
    T* vp = p.state[1].data();
    const detail::AdamWStep<T> k{lr, b1, b2, eps, shrink};
    const auto kernel = detail::adamw_counted_update_kernel<T>();
    if (!narrow_counts_) {
      T* np = p.state[kWideCounts].data();
      detail::for_each_live_range(p, [&](std::int64_t b, std::int64_t e) {
        kernel(k, correction1_.data(), correction2_.data(), top, wp + b, gp + b, mp + b, vp + b, np + b, e - b);
      });
      return;
    }
    // the same kernel on the counts widened to T a chunk at a time (whole numbers: exact), so
    // both forms give the same bits: the kernel's result does not depend on the split
    std::uint16_t* cp = p.step_counts.data();
    detail::for_each_live_range(p, [&](std::int64_t b, std::int64_t e) {
      constexpr std::int64_t kChunk = 512;
      alignas(64) T counts[kChunk];
      for (std::int64_t c = b; c < e; c += kChunk) {
        const std::int64_t len = std::min(kChunk, e - c);
        std::copy(cp + c, cp + c + len, counts);
        kernel(k, correction1_.data(), correction2_.data(), top, wp + c, gp + c, mp + c, vp + c, counts, len);
        for (std::int64_t s = 0; s < len; ++s) cp[c + s] = static_cast<std::uint16_t>(counts[s]);
      }
    });
  }

  AdamWOptions options_;
  std::vector<T> correction1_, correction2_;  // (1 - beta^n)^-1 in T, index n
  bool saturated_ = false;
  bool narrow_counts_ = true;
};

}  // namespace sprig
