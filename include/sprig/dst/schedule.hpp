// sprig/dst/schedule.hpp — when the topology changes and by how much (RigL's schedule).
//
// As in the reference RigL optimizers: step t (the 0-based index of the training step, whose
// gradient has just been computed) updates when t_begin <= t <= t_end and t - t_begin is a
// multiple of delta_t. The fraction of a layer's live weights dropped at an update decays by
// cosine over the update window: f(t) = alpha / 2 * (1 + cos(pi * min(t, D) / D)) with
// D = t_end - t_begin (TF's cosine_decay(alpha, t, D); with t_begin = 0 this is
// alpha / 2 * (1 + cos(pi * t / t_end))).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numbers>

#include "../core/error.hpp"

namespace sprig::dst {

// When and how much the topology changes. Plain data; all members are O(1) and pure.
struct UpdateSchedule {
  std::int64_t delta_t = 100;  // steps between topology updates
  std::int64_t t_begin = 0;    // first step that may update
  std::int64_t t_end = 0;      // last step that may update (default: 75% of the run)
  double alpha = 0.3;          // initial drop fraction

  // RigL's defaults for a run of `total_steps` steps: update every delta_t steps until 75%.
  // Throws ArgumentError as validate() does.
  static UpdateSchedule for_run(std::int64_t total_steps, std::int64_t delta_t = 100, double alpha = 0.3) {
    UpdateSchedule s;
    s.delta_t = delta_t;
    s.t_end = static_cast<std::int64_t>(0.75 * static_cast<double>(total_steps));
    s.alpha = alpha;
    s.validate();
    return s;
  }

  // Throws ArgumentError unless delta_t >= 1, 0 <= t_begin <= t_end and 0 <= alpha <= 1.
  void validate() const {
    if (delta_t < 1) throw ArgumentError(sprig::detail::message("UpdateSchedule: delta_t ", delta_t, " must be >= 1"));
    if (t_begin < 0 || t_end < t_begin)
      throw ArgumentError(sprig::detail::message("UpdateSchedule: need 0 <= t_begin <= t_end, got t_begin ", t_begin,
                                                 " and t_end ", t_end));
    if (!(alpha >= 0.0 && alpha <= 1.0))
      throw ArgumentError(sprig::detail::message("UpdateSchedule: alpha ", alpha, " outside [0, 1]"));
  }

  // Whether step t updates the topology.
  bool is_update_step(std::int64_t t) const noexcept {
    return t >= t_begin && t <= t_end && (t - t_begin) % delta_t == 0;
  }

  // The drop fraction at step t (meaningful on update steps): alpha at t_begin, decaying by
  // cosine to 0 at t_end. Note: progress is min(t, D) / D, with t the absolute step (as
  // the reference code), so with t_begin > 0 the decay does not start at t_begin.
  double drop_fraction(std::int64_t t) const noexcept {
    const std::int64_t window = t_end - t_begin;
    if (window <= 0) return alpha;
    const double progress = static_cast<double>(std::min(t, window)) / static_cast<double>(window);
    return alpha / 2.0 * (1.0 + std::cos(std::numbers::pi * progress));
  }
};

}  // namespace sprig::dst
