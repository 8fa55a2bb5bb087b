// sprig/nn/phase_clock.hpp — PhaseClock<Phase, N>: wall-clock seconds summed per phase of a
// model's step, added by the model itself while the clock is attached (GPT::set_phase_clock),
// so a profile times the step that runs, not a copy of it.
//
// Phase is an enum with the values 0 .. N - 1. A timed call costs two steady_clock reads (tens
// of nanoseconds); a model with no clock attached tests a null pointer. Timing changes no
// result. Not thread-safe: the model adds from its calling thread, after its kernels' threads
// have joined. Nothing allocates; time() passes fn's exceptions through (the phase then gets
// nothing).
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <utility>

namespace sprig {

template <class Phase, std::size_t N>
class PhaseClock {
public:
  static constexpr std::size_t kPhases = N;

  // Seconds summed for phase p (< N) since construction or reset(), and its timed calls.
  double seconds(Phase p) const noexcept { return seconds_[index(p)]; }
  std::int64_t calls(Phase p) const noexcept { return calls_[index(p)]; }
  // The seconds of every phase together.
  double total_seconds() const noexcept {
    double s = 0.0;
    for (const double v : seconds_) s += v;
    return s;
  }
  void reset() noexcept {
    seconds_.fill(0.0);
    calls_.fill(0);
  }

  // Runs fn() and adds its wall-clock time to phase p (< N).
  template <class Fn>
  void time(Phase p, Fn&& fn) {
    const auto t0 = std::chrono::steady_clock::now();
    std::forward<Fn>(fn)();
    seconds_[index(p)] += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ++calls_[index(p)];
  }

private:
  static constexpr std::size_t index(Phase p) noexcept { return static_cast<std::size_t>(p); }
  std::array<double, N> seconds_{};
  std::array<std::int64_t, N> calls_{};
};

namespace detail {
// fn() timed into phase p of clock, or fn() alone where clock is null.
template <class Clock, class Phase, class Fn>
void timed(Clock* clock, Phase p, Fn&& fn) {
  if (clock)
    clock->time(p, std::forward<Fn>(fn));
  else
    std::forward<Fn>(fn)();
}
}  // namespace detail

}  // namespace sprig
