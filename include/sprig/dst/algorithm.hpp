// sprig/dst/algorithm.hpp — the interface of a topology (drop/grow) algorithm.
//
// A SparsityAlgorithm changes the sparsity pattern of a model's sparse layers on the update
// steps of its UpdateSchedule. Per update and per layer it drops the k = floor(f(t) * live)
// live weights of smallest magnitude and grows connections at positions a subclass chooses
// among those not kept (grow_linear_positions), then replays the slot moves on the layer's gradient
// and optimizer state (SparseParameter::apply), so a survivor keeps its state and a new weight
// starts from zero. A subclass is a short class: it names itself, chooses where to grow and,
// optionally, how many weights each layer grows (grow_counts, for redistribution).
//
// Training loop (see apply_step below):
//     forward; loss; backward;
//     dst::apply_step(algorithm, optimizer, model, t);   // optimizer step and/or topology update
//
// Randomness comes from CounterRng(seed, layer, step): the same seed and data give the same
// topology for any thread count.
#pragma once

#include <chrono>
#include <cmath>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "../core/rng.hpp"
#include "../core/slot_log.hpp"
#include "../nn/sequential.hpp"
#include "drop_grow.hpp"
#include "schedule.hpp"

namespace sprig::dst {

struct LayerUpdate {
  std::int64_t live_before = 0;
  std::int64_t live_after = 0;
  DropGrowStats stats;
  bool compacted = false;
};

struct UpdateReport {
  std::int64_t step = -1;
  double drop_fraction = 0.0;
  double seconds = 0.0;
  std::vector<LayerUpdate> layers;
};

template <Value T, ColumnIndex Index>
class SparsityAlgorithm {
public:
  using LayerRef = SparseLayerRef<T, Index>;

  SparsityAlgorithm(UpdateSchedule schedule, std::uint64_t seed) : schedule_(schedule), seed_(seed) {
    schedule_.validate();
  }
  virtual ~SparsityAlgorithm() = default;

  virtual std::string_view name() const = 0;
  // RigL does not apply the gradient of an update step (as its reference implementation).
  virtual bool skips_optimizer_on_update() const { return false; }
  // Whether step t changes the topology.
  virtual bool is_update_step(std::int64_t t) const { return schedule_.is_update_step(t); }

  const UpdateSchedule& schedule() const noexcept { return schedule_; }
  std::uint64_t seed() const noexcept { return seed_; }
  // A layer whose dead slots (left behind by relocated rows) exceed this fraction of its
  // storage is compacted after the update.
  double compact_threshold = 0.2;

  // Total time spent in topology updates and how many there were.
  double total_seconds() const noexcept { return total_seconds_; }
  std::int64_t updates() const noexcept { return updates_; }
  // Restores the two statistics above (a checkpoint saves them).
  void restore_counters(std::int64_t updates, double seconds) noexcept {
    updates_ = updates;
    total_seconds_ = seconds;
  }

  // Slot moves of an update are replayed on the layer's state in chunks of this many events.
  // 4096 (96 KiB of log) are as fast as 32768 were and took 0.7 MB off the peak resident
  // memory of the 90%-sparse 784-1024-1024-10 MLP (bench/train_step).
  static constexpr std::size_t kLogChunk = std::size_t{1} << 12;

  // Drops and grows in every layer at step t (call only on update steps).
  UpdateReport update(std::span<const LayerRef> layers, std::int64_t t) {
    const auto start = std::chrono::steady_clock::now();
    UpdateReport report;
    report.step = t;
    report.drop_fraction = schedule_.drop_fraction(t);
    const std::size_t n = layers.size();
    std::vector<std::int64_t> drop_counts(n);
    for (std::size_t l = 0; l < n; ++l)
      drop_counts[l] = static_cast<std::int64_t>(
          std::floor(report.drop_fraction * static_cast<double>(layers[l].layer->weight.weight.nnz())));
    const std::vector<std::int64_t> grow = grow_counts(layers, drop_counts);
    report.layers.resize(n);
    // One layer at a time, and its slot moves replayed on its state in chunks of
    // kLogChunk events: the update's scratch is that of one layer, not of the model.
    for (std::size_t l = 0; l < n; ++l) {
      auto& param = layers[l].layer->weight;
      LayerUpdate& u = report.layers[l];
      u.live_before = param.weight.nnz();
      const DropSet drop = select_drop(param.weight, drop_counts[l]);
      CounterRng rng(seed_, layers[l].sparse_index, static_cast<std::uint64_t>(t));
      std::vector<std::int64_t> grow_at = grow_linear_positions(layers[l], drop, grow[l], rng);
      SlotLog log;
      log.set_sink(kLogChunk, [&param](const SlotLog& chunk) { param.apply(chunk); });
      u.stats = apply_drop_grow_at(param.weight, drop, std::move(grow_at), log);
      log.flush();
      if (param.weight.dead_slots() > compact_threshold * static_cast<double>(param.weight.storage_size())) {
        param.weight.compact(&log);
        log.flush();
        u.compacted = true;
      }
      u.live_after = param.weight.nnz();
    }
    report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    total_seconds_ += report.seconds;
    ++updates_;
    return report;
  }

protected:
  // How many connections each layer grows; by default as many as it dropped (the live count
  // of every layer is preserved).
  virtual std::vector<std::int64_t> grow_counts(std::span<const LayerRef>, const std::vector<std::int64_t>& drop_counts) {
    return drop_counts;
  }
  // k positions, distinct, none of them kept (live and not in `dropped`), for this layer, as
  // ascending linear positions (row * cols + col): what the update consumes.
  virtual std::vector<std::int64_t> grow_linear_positions(const LayerRef& layer, const DropSet& dropped, std::int64_t k,
                                                          CounterRng& rng) = 0;

  // The streamed |dense gradient| top-k of a layer (dL/dW = dY X^T, computed in row blocks of
  // about 1 MiB with a dense GEMM, large enough for an efficient GEMM and small against the
  // layer, never stored whole), as ascending linear positions: RigL's grow rule, reused by
  // others.
  std::vector<std::int64_t> top_dense_gradient(const LayerRef& layer, const DropSet& dropped, std::int64_t k) {
    const auto& W = layer.layer->weight.weight;
    const std::int64_t block_rows =
        std::max<std::int64_t>(1, std::min<std::int64_t>(W.rows(), (std::int64_t{1} << 18) / std::max<std::int64_t>(1, W.cols())));
    const ConstMatrixView<T> dY = layer.output_grad, X = layer.input;
    return top_gradient_linear_positions(
        W, dropped, k, block_rows,
        [&](std::int64_t r0, std::int64_t rows, MatrixView<T> out) {
          gemm<T>(Trans::no, Trans::yes, T(1), dY.block(r0, 0, rows, dY.cols()), X, T(0), out);
        },
        gradient_block_);
  }

private:
  UpdateSchedule schedule_;
  std::uint64_t seed_;
  double total_seconds_ = 0.0;
  std::int64_t updates_ = 0;
  Matrix<T> gradient_block_;
};

// One optimizer step and/or topology update for training step t, in the reference order:
// the optimizer first, then the topology (so survivors carry this step's update), except that
// an algorithm that skips the optimizer on update steps (RigL) only changes the topology.
template <Value T, ColumnIndex Index, class Optimizer>
void apply_step(SparsityAlgorithm<T, Index>& algorithm, Optimizer& optimizer, Sequential<T, Index>& model,
                std::int64_t t, UpdateReport* report = nullptr) {
  if (!algorithm.is_update_step(t)) {
    optimizer.step(model);
    return;
  }
  if (!algorithm.skips_optimizer_on_update()) optimizer.step(model);
  const auto layers = model.sparse_layers();
  UpdateReport r = algorithm.update(layers, t);
  if (report) *report = std::move(r);
}

}  // namespace sprig::dst
