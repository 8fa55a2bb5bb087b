// sprig/optim/optimizer_base.hpp — what every optimizer shares: the learning rate (read and
// set, validated), the step counter a checkpoint saves, one step over a whole model, and the
// values array of a parameter. Derived (CRTP) provides kName ("SGD", the prefix of its error
// messages), options_ with a double lr, and update(P&) for one parameter. All members run on
// the calling thread except what update() threads itself; an optimizer serves one thread at
// a time.
#pragma once

#include <cstdint>
#include <span>

#include "../core/error.hpp"

namespace sprig::detail {

template <class Derived>
class OptimizerBase {
public:
  // The learning rate of the next step. set_lr throws ArgumentError unless lr >= 0.
  double lr() const noexcept { return self().options_.lr; }
  void set_lr(double lr) {
    if (!(lr >= 0.0)) throw ArgumentError(message(Derived::kName, "::set_lr: lr ", lr, " must be >= 0"));
    self().options_.lr = lr;
  }

  // Steps taken so far (begin_step() calls). Part of the optimizer's state: a checkpoint
  // saves it and restores it with set_step_count(), which throws ArgumentError for t < 0.
  std::int64_t step_count() const noexcept { return step_; }
  void set_step_count(std::int64_t t) {
    if (t < 0) throw ArgumentError(message(Derived::kName, "::set_step_count: ", t, " < 0"));
    step_ = t;
  }
  void begin_step() noexcept { ++step_; }

  // One step on every parameter of a model (anything with for_each_parameter): begin_step(),
  // then update() on each parameter in the model's order. O(the model's live slots). Throws
  // what update() throws; the step is then counted and the parameters before the failing one
  // are updated (update checks a parameter before writing it).
  template <class Model>
  void step(Model& model) {
    begin_step();
    model.for_each_parameter([this](auto& p) { self().update(p); });
  }

protected:
  // The values a parameter's update writes: a sparse weight's slot values (padding and dead
  // slots included; updates touch live slots only) or a dense parameter's values.
  template <class T, class P>
  static std::span<T> values(P& p) {
    if constexpr (requires { p.matrix.values(); })
      return p.matrix.values();
    else
      return std::span<T>(p.value);
  }

private:
  Derived& self() noexcept { return static_cast<Derived&>(*this); }
  const Derived& self() const noexcept { return static_cast<const Derived&>(*this); }

  std::int64_t step_ = 0;
};

}  // namespace sprig::detail
