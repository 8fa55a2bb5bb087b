// sprig/nn/layer_clock.hpp — LayerClock: wall-clock seconds summed per layer and pass
// (forward, backward) of a Sequential's step, added by the model itself while the clock is
// attached (Sequential::set_layer_clock), so a profile times the step that runs, not a copy
// of it. Each layer is a PhaseClock<Pass, 2> (nn/phase_clock.hpp, which a GPT's
// GPTPhaseClock is too), so both time and count alike.
//
// A timed layer costs two steady_clock reads (tens of nanoseconds); a model with no clock
// attached tests a null pointer. Timing changes no result. Not thread-safe: the model adds
// from its calling thread, after its kernels' threads have joined. The clock grows the first
// time a layer index is timed (it allocates then, and never after for that index); time()
// passes fn's exceptions through (the layer then gets nothing).
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "phase_clock.hpp"

namespace sprig {

class LayerClock {
public:
  enum class Pass : std::uint8_t { forward, backward };
  using Layer = PhaseClock<Pass, 2>;

  // One past the highest layer index timed since construction (reset() keeps it).
  std::size_t layers() const noexcept { return layers_.size(); }
  // Seconds summed for layer k's pass since construction or reset(), and its timed calls; 0
  // for a layer never timed.
  double seconds(std::size_t k, Pass p) const noexcept { return k < layers() ? layers_[k].seconds(p) : 0.0; }
  std::int64_t calls(std::size_t k, Pass p) const noexcept { return k < layers() ? layers_[k].calls(p) : 0; }
  // The seconds of every layer and pass together.
  double total_seconds() const noexcept {
    double s = 0.0;
    for (const Layer& l : layers_) s += l.total_seconds();
    return s;
  }
  void reset() noexcept {
    for (Layer& l : layers_) l.reset();
  }

  // Layer k's clock, grown to hold it on first use.
  Layer& layer(std::size_t k) {
    if (k >= layers()) layers_.resize(k + 1);
    return layers_[k];
  }
  // Runs fn() and adds its wall-clock time to layer k's pass p.
  template <class Fn>
  void time(std::size_t k, Pass p, Fn&& fn) {
    layer(k).time(p, std::forward<Fn>(fn));
  }

private:
  std::vector<Layer> layers_;
};

}  // namespace sprig
