// sprig/nn/parameter_memory.hpp — parameter_memory: the bytes a model's parameters hold, by
// kind, from for_each_parameter alone.
#pragma once

#include <cstdint>

#include "trainable_model.hpp"

namespace sprig {

// Bytes of a model's parameters by kind, from for_each_parameter alone (so any TrainableModel has
// it). weights: every stored array of the weights (sparse: all PaddedCSR arrays, padding
// and reserve included); dense_weights: the same parameters stored dense (rows x cols
// values each); gradients and optimizer_state: capacities of grad and of the state
// vectors (and step counts). Activations and scratch are the model's own (its memory_bytes(), if it has one).
struct ParameterMemory {
  std::int64_t weights = 0;
  std::int64_t dense_weights = 0;
  std::int64_t gradients = 0;
  std::int64_t optimizer_state = 0;
  std::int64_t parameters = 0;        // live weights (sparse: live_count(); dense: rows x cols)
  std::int64_t dense_parameters = 0;  // rows x cols summed over all parameters
};

// O(parameters); reads only.
template <TrainableModel M>
ParameterMemory parameter_memory(const M& model) {
  using T = typename M::value_type;
  ParameterMemory m;
  model.for_each_parameter([&](const auto& p) {
    std::int64_t rows = 0, cols = 0;
    if constexpr (requires { p.matrix.storage_size(); }) {
      rows = p.matrix.rows();
      cols = p.matrix.cols();
      m.parameters += p.live_count();
    } else {
      rows = p.rows;
      cols = p.cols;
      m.parameters += rows * cols;
    }
    m.weights += p.weight_bytes();
    m.dense_weights += rows * cols * static_cast<std::int64_t>(sizeof(T));
    m.dense_parameters += rows * cols;
    m.gradients += static_cast<std::int64_t>(p.grad.capacity() * sizeof(T));
    for (const auto& s : p.state) m.optimizer_state += static_cast<std::int64_t>(s.capacity() * sizeof(T));
    if constexpr (requires { p.step_counts; })
      m.optimizer_state += static_cast<std::int64_t>(p.step_counts.capacity() * sizeof(std::uint16_t));
  });
  return m;
}

}  // namespace sprig
