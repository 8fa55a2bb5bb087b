// sprig/nn/layer_clock.hpp — LayerClock: wall-clock seconds summed per layer and pass
// (forward, backward) of a Sequential's step, added by the model itself while the clock is
// attached (Sequential::set_layer_clock), so a profile times the step that runs, not a copy
// of it. (A GPT times its phases with a GPTPhaseClock, nn/phase_clock.hpp.)
//
// A timed layer costs two steady_clock reads (tens of nanoseconds); a model with no clock
// attached tests a null pointer. Timing changes no result. Not thread-safe: the model adds
// from its calling thread, after its kernels' threads have joined. The clock grows the first
// time a layer index is timed (it allocates then, and never after for that index); time()
// passes fn's exceptions through (the layer then gets nothing).
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace sprig {

class LayerClock {
public:
  enum class Pass : std::uint8_t { forward, backward };

  // One past the highest layer index timed since construction (reset() keeps it).
  std::size_t layers() const noexcept { return seconds_.size(); }
  // Seconds summed for layer k's pass since construction or reset(), and its timed calls; 0
  // for a layer never timed.
  double seconds(std::size_t k, Pass p) const noexcept { return k < layers() ? seconds_[k][index(p)] : 0.0; }
  std::int64_t calls(std::size_t k, Pass p) const noexcept { return k < layers() ? calls_[k][index(p)] : 0; }
  // The seconds of every layer and pass together.
  double total_seconds() const noexcept {
    double s = 0.0;
    for (const auto& v : seconds_) s += v[0] + v[1];
    return s;
  }
  void reset() noexcept {
    for (auto& v : seconds_) v = {};
    for (auto& c : calls_) c = {};
  }

  // Runs fn() and adds its wall-clock time to layer k's pass p.
  template <class Fn>
  void time(std::size_t k, Pass p, Fn&& fn) {
    if (k >= layers()) {
      seconds_.resize(k + 1);
      calls_.resize(k + 1);
    }
    const auto t0 = std::chrono::steady_clock::now();
    std::forward<Fn>(fn)();
    seconds_[k][index(p)] += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ++calls_[k][index(p)];
  }

private:
  static constexpr std::size_t index(Pass p) noexcept { return static_cast<std::size_t>(p); }
  std::vector<std::array<double, 2>> seconds_;
  std::vector<std::array<std::int64_t, 2>> calls_;
};

}  // namespace sprig
