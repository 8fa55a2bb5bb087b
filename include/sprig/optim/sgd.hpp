// sprig/optim/sgd.hpp — SGD with momentum, Nesterov momentum and (L2) weight decay.
//
// Per element, with g the gradient, w the weight and buf the momentum buffer (state[0]):
//   g   = g + weight_decay * w                (only for parameters with decay == true)
//   buf = momentum * buf + g                  (momentum > 0)
//   d   = nesterov ? g + momentum * buf : buf (d = g without momentum)
//   w   = w - lr * d
// This is PyTorch's torch.optim.SGD with dampening 0 (buf starts at 0, so its first step
// is buf = g, as in PyTorch). Sparse parameters are updated on live slots only; their
// buffer lives in SparseParameter::state and follows slot moves through apply(). A slot born
// during training (a grown weight) starts with a zero buffer, as in RigL's reference code; SGD
// has no step count, so that is the whole policy for grown weights (compare adamw.hpp).
//
// Cost: O(live slots) per sparse parameter, O(size) per dense one, on OpenMP threads for large
// parameters (live_ranges.hpp); the momentum buffer (one value per slot) is created, zero, on
// first use, only with momentum > 0. Threads: each element is updated by one thread with the
// same arithmetic, so the result is bitwise identical for any thread count. The loop is
// kernels/optimizer_update.hpp's, in SIMD registers (dispatched in a dispatching build).
#pragma once

#include <cstdint>
#include <span>

#include "../core/concepts.hpp"
#include "../core/error.hpp"
#include "../kernels/optimizer_update.hpp"
#include "../nn/parameter.hpp"
#include "live_ranges.hpp"
#include "optimizer_base.hpp"

namespace sprig {

// Set by name: SGD<float> opt({.lr = 0.1, .momentum = 0.9}).
struct SGDOptions {
  double lr = 0.01;           // >= 0; set_lr changes it (a schedule: lr_schedule.hpp)
  double momentum = 0.0;      // in [0, 1); 0: plain SGD, no buffer
  double weight_decay = 0.0;  // >= 0: L2, added to the gradient, for parameters with decay == true
  bool nesterov = false;      // Nesterov momentum (needs momentum > 0)
};

template <Value T>
class SGD : public detail::OptimizerBase<SGD<T>> {
public:
  using value_type = T;
  static constexpr const char* kName = "SGD";

  // Throws ArgumentError, naming the option and its value, for an option outside its range or
  // Nesterov without momentum.
  explicit SGD(SGDOptions options = {}) : options_(options) {
    if (!(options.lr >= 0.0)) throw ArgumentError(detail::message("SGD: lr ", options.lr, " must be >= 0"));
    if (!(options.momentum >= 0.0 && options.momentum < 1.0))
      throw ArgumentError(detail::message("SGD: momentum ", options.momentum, " outside [0, 1)"));
    if (!(options.weight_decay >= 0.0))
      throw ArgumentError(detail::message("SGD: weight_decay ", options.weight_decay, " must be >= 0"));
    if (options.nesterov && options.momentum == 0.0) throw ArgumentError("SGD: Nesterov momentum needs momentum > 0");
  }

  const SGDOptions& options() const noexcept { return options_; }

  // Updates one parameter with its current gradient (begin_step() is the caller's job; SGD
  // does not read the step count). Throws ShapeError if grad or state is not aligned with the
  // parameter's slots (before anything is written).
  template <class P>
    requires requires(P& p) {
      p.state;
      p.grad;
    }
  void update(P& p) {
    const bool use_momentum = options_.momentum != 0.0;
    detail::ensure_state("SGD::update", p, use_momentum ? 1 : 0);
    const std::span<T> w = Base::template values<T>(p);
    const T lr = static_cast<T>(options_.lr), mu = static_cast<T>(options_.momentum);
    const T wd = p.decay ? static_cast<T>(options_.weight_decay) : T(0);
    const detail::SGDStep<T> k{lr, mu, wd,
                               !use_momentum       ? detail::SGDKind::plain
                               : options_.nesterov ? detail::SGDKind::nesterov
                                                   : detail::SGDKind::momentum};
    T* wp = w.data();
    const T* gp = p.grad.data();
    T* bp = use_momentum ? p.state[0].data() : nullptr;
    const auto kernel = detail::sgd_update_kernel<T>();
    detail::for_each_live_range(p, [&](std::int64_t b, std::int64_t e) {
      kernel(k, wp + b, gp + b, bp ? bp + b : nullptr, e - b);
    });
  }

private:
  friend class detail::OptimizerBase<SGD<T>>;
  using Base = detail::OptimizerBase<SGD<T>>;

  SGDOptions options_;
};

}  // namespace sprig
