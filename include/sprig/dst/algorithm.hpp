// sprig/dst/algorithm.hpp — the interface of a topology (drop/grow) algorithm, and
// dst::apply_step, the call a training loop makes after backward.
//
// A SparsityAlgorithm changes the sparsity pattern of a model's sparse layers on the update
// steps of its UpdateSchedule. Per update and per layer it drops the k = floor(f(t) * live)
// live weights of smallest magnitude and grows connections at positions a subclass chooses
// among those not kept (grow_linear_positions), then replays the slot moves on the layer's
// gradient and optimizer state (SparseParameter::apply), so a survivor keeps its state and a
// new weight starts at value 0 with zero state. A subclass is a short class: it names itself,
// chooses where to grow and, optionally, how many weights each layer grows (grow_counts, for
// redistribution). With constant_fan_in the drop and the grow are per row instead, so every
// row keeps its count (grow_linear_positions_per_row). docs/dst.md gives the exact semantics
// and the deviations from the reference implementations.
//
// Training loop (see apply_step below):
//     forward; loss; backward;
//     dst::apply_step(algorithm, optimizer, model, t);   // optimizer step and/or topology update
//
// Randomness comes from CounterRng(seed, layer, step), never from a shared stream: the same
// seed and data give the same topology for any thread count (with the portable GEMM; see
// needs_gradients for OpenBLAS).
#pragma once

#include <algorithm>
#include <chrono>
#include <concepts>
#include <cmath>
#include <cstdint>
#include <iterator>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "../core/bfloat16.hpp"
#include "../core/rng.hpp"
#include "../core/slot_log.hpp"
#include "../kernels/bfloat16_convert.hpp"
#include "../kernels/dense_gradient.hpp"
#include "../nn/model.hpp"
#include "../nn/sequential.hpp"
#include "drop_grow.hpp"
#include "schedule.hpp"
#include "split_scoring.hpp"

namespace sprig::dst {

// What one topology update did to one sparse layer.
struct LayerUpdate {
  std::int64_t live_before = 0;  // live weights (blocks, for a block-sparse layer) before the update
  std::int64_t live_after = 0;   // and after (equal unless the algorithm redistributes: SNFS)
  DropGrowStats stats;
  bool compacted = false;  // the layer's dead slots were compacted away after the update
};

// What one topology update did; step = -1 when the step did not update the topology.
struct UpdateReport {
  std::int64_t step = -1;
  double drop_fraction = 0.0;       // f(t) of the schedule
  double seconds = 0.0;             // wall time of the update (steady clock)
  std::vector<LayerUpdate> layers;  // one per sparse layer, in model order
};

template <Value T, ColumnIndex Index>
class SparsityAlgorithm;

// A TrainableModel (nn/model.hpp) whose value and index types are T and Index.
template <class M, class T, class Index>
concept ModelOf =
    TrainableModel<M> && std::same_as<typename M::value_type, T> && std::same_as<typename M::index_type, Index>;

// The algorithm type that serves a model.
template <TrainableModel M>
using AlgorithmFor = SparsityAlgorithm<typename M::value_type, typename M::index_type>;

// One optimizer step and/or topology update for training step t (defined below).
template <Value T, ColumnIndex Index, class Optimizer, ModelOf<T, Index> M>
void apply_step(SparsityAlgorithm<T, Index>& algorithm, Optimizer& optimizer, M& model, std::int64_t t,
                UpdateReport* report = nullptr);

// The base of Static, SET, RigL, SNFS and GraNet. Not thread-safe: one algorithm serves one
// model from one thread (the kernels inside parallelize themselves).
template <Value T, ColumnIndex Index>
class SparsityAlgorithm {
public:
  using LayerRef = SparseLayerRef<T, Index>;

  // Throws ArgumentError if the schedule is invalid (UpdateSchedule::validate).
  SparsityAlgorithm(UpdateSchedule schedule, std::uint64_t seed) : schedule_(schedule), seed_(seed) {
    schedule_.validate();
  }
  virtual ~SparsityAlgorithm() = default;

  // A short lower-case name ("static", "set", "rigl", "snfs"), used in messages and files.
  virtual std::string_view name() const = 0;
  // RigL does not apply the gradient of an update step (as its reference implementation).
  virtual bool skips_optimizer_on_update() const { return false; }
  // Whether step t changes the topology.
  virtual bool is_update_step(std::int64_t t) const { return schedule_.is_update_step(t); }
  // Whether an update reads the layers' input X and output gradient dY of the step (RigL and
  // SNFS grow where |dY X^T| is largest): then a forward and a backward must precede it.
  // That product is a dense GEMM; with SPRIG_USE_CBLAS its bits, and so the order of
  // near-ties in the top-k, may depend on the BLAS's thread count (kernels/dense_gemm.hpp).
  virtual bool needs_gradients() const { return false; }
  // Whether the grow rules reach X and dY only through top_dense_gradient and
  // top_dense_gradient_per_row (RigL, SNFS, GraNet): then update() passes a layer's bf16 input
  // and output gradient as they are, and the streamed products widen them a few batch columns
  // at a time, so no widened copy of a whole operand exists (up to in x B + out x B of T a
  // layer). The default, false, widens them whole for grow rules that read them.
  virtual bool streams_gradients() const { return false; }

  const UpdateSchedule& schedule() const noexcept { return schedule_; }
  std::uint64_t seed() const noexcept { return seed_; }
  // A layer whose dead slots (left behind by relocated rows) exceed this fraction of its
  // storage is compacted after the update (O(storage)). 0: whenever any are left, so after
  // every update the weights, gradient and optimizer state hold only the rows' capacities and
  // a DST run needs no more memory than a fixed topology; larger keeps relocated rows' old
  // storage until that fraction is dead.
  double compact_threshold = 0.0;
  // Constant fan-in (SRigL, Lasby et al. 2024): every output row keeps its live count through
  // every update. Row i drops the per_row = floor(f(t) * n) weights of smallest |w| of that
  // row (n: the common live count of the layer's rows, so the layer drops rows * per_row, at
  // most f(t) * nnz) and grows exactly per_row positions in the same row, chosen by
  // grow_linear_positions_per_row; grow_counts is not consulted. Precondition, checked at
  // every update before any layer changes: supports_constant_fan_in(), and every row of every
  // sparse layer holds the same live count (dst/fan_in.hpp draws such layers); otherwise
  // ArgumentError. Saved in checkpoints (a load sets it as saved).
  bool constant_fan_in = false;

  // Sparse layers (by SparseLayerRef::sparse_index) that keep their mask bit for bit: updates
  // skip them (nothing dropped or grown, no gradient needed, the rules and their counts see
  // only the other layers), which update as usual. Saved in checkpoints (a load sets them as
  // saved). Throws ArgumentError for a negative or repeated index; an index the model does not
  // have is an ArgumentError at the next update. O(n log n).
  void set_excluded_layers(std::vector<std::int64_t> sparse_indices) {
    std::sort(sparse_indices.begin(), sparse_indices.end());
    for (std::size_t q = 0; q < sparse_indices.size(); ++q) {
      if (sparse_indices[q] < 0)
        throw ArgumentError(sprig::detail::message(name(), ": excluded layer ", sparse_indices[q], " is negative"));
      if (q > 0 && sparse_indices[q] == sparse_indices[q - 1])
        throw ArgumentError(sprig::detail::message(name(), ": sparse layer ", sparse_indices[q], " is excluded twice"));
    }
    excluded_ = std::move(sparse_indices);
  }
  // Ascending.
  const std::vector<std::int64_t>& excluded_layers() const noexcept { return excluded_; }
  bool excluded(std::int64_t sparse_index) const noexcept {
    return std::binary_search(excluded_.begin(), excluded_.end(), sparse_index);
  }

  // What a subclass was built with beyond schedule and seed (GraNet: its per-layer
  // sparsities), as numbers: a checkpoint records them and a load into an algorithm built
  // with other ones is rejected. Default: none.
  virtual std::vector<double> configuration() const { return {}; }
  // Whether grow_linear_positions_per_row is implemented (Static, SET, RigL; not SNFS, whose
  // redistribution between layers changes row counts).
  virtual bool supports_constant_fan_in() const { return false; }
  // Whether the algorithm updates block-sparse layers (SparseLayerRef::blocks) on the block grid
  // (every built-in one): a block is dropped by its Frobenius norm, grown by the sum of |dL/dW|
  // over its entries (RigL, SNFS, GraNet), and starts at zero with zero state; constant_fan_in
  // keeps every block row's count. update() throws ArgumentError, before any layer changes, for
  // a block layer otherwise.
  virtual bool supports_blocks() const { return false; }

  // Splits the dense-gradient ranking of top_dense_gradient(_per_row) (RigL, SNFS, GraNet) over
  // the processes of `split`, each ranking its share of every layer's rows; the grown positions
  // are the unsplit ones (dst/split_scoring.hpp). nullptr (the default): every row here. Not
  // owned; dist::DataParallel attaches its own for each gradient-driven update.
  void set_split_scoring(SplitScoring* split) noexcept { split_ = split; }
  SplitScoring* split_scoring() const noexcept { return split_; }

  // Total time spent in topology updates and how many there were (counted by update()).
  double total_seconds() const noexcept { return total_seconds_; }
  std::int64_t updates() const noexcept { return updates_; }
  // Restores the two statistics above (a checkpoint saves them).
  void restore_counters(std::int64_t updates, double seconds) noexcept {
    updates_ = updates;
    total_seconds_ = seconds;
  }

  // Slot moves of an update are replayed on the layer's state in chunks of this many events:
  // 4096 (96 KiB of log) bound the update's scratch; larger chunks were no faster.
  static constexpr std::size_t kLogChunk = std::size_t{1} << 12;

  // Drops and grows in every layer at step t; call only on update steps (apply_step does
  // that). layers: the model's sparse_layers(), each with its sparse_index; when
  // needs_gradients(), each with the input and output gradient of a forward and backward
  // (only their shapes can be checked, not that they are from step t).
  // Throws ArgumentError, before any layer changes, when two layers share a sparse_index
  // (check_sparse_layers), a needed gradient is missing, grow_counts is malformed or
  // constant_fan_in's precondition fails; and ArgumentError if a
  // weight is NaN (magnitudes cannot be ranked) or a subclass's grow rule breaks its contract:
  // then that layer is unchanged (weights, topology, gradient, state) and the layers before
  // it have been updated. Cost per layer: O(storage + k log k) for the drop and the random
  // grow, plus for RigL/SNFS the dense gradient dY X^T (rows x cols x B multiply-adds,
  // streamed in row blocks, never stored whole). Deterministic for a seed (see the top of
  // this file).
  UpdateReport update(std::span<const LayerRef> layers, std::int64_t t) {
    return update_(layers, t, "SparsityAlgorithm::update");
  }

protected:
  // How many weights each layer drops at update step t (fraction = the schedule's f(t)); by
  // default floor(fraction * live) (RigL, SET, SNFS). Each must lie in [0, live] (update()
  // throws ArgumentError otherwise). Not consulted under constant_fan_in.
  virtual std::vector<std::int64_t> drop_counts(std::span<const LayerRef> layers, std::int64_t /*t*/, double fraction) {
    std::vector<std::int64_t> k(layers.size());
    for (std::size_t l = 0; l < layers.size(); ++l)
      k[l] =
          static_cast<std::int64_t>(std::floor(fraction * static_cast<double>(layers[l].layer->weight.matrix.nnz())));
    return k;
  }
  // Whether a layer is compacted after its update; by default when its dead slots (left
  // behind by relocated rows) exceed compact_threshold of its storage.
  virtual bool should_compact(const PaddedCSR<T, Index>& W) const {
    return W.dead_slots() > compact_threshold * static_cast<double>(W.storage_size());
  }
  // A rule's own preconditions on the layers an update changes, checked before anything changes
  // (apply_step: before the optimizer): throws ArgumentError naming `caller`. Default: none.
  virtual void check_layers(std::span<const LayerRef>, const char* /*caller*/) const {}

  // How many connections each layer grows; by default as many as it dropped (the live count
  // of every layer is preserved).
  virtual std::vector<std::int64_t> grow_counts(std::span<const LayerRef>,
                                                const std::vector<std::int64_t>& drop_counts) {
    return drop_counts;
  }
  // Where this layer grows: exactly k linear positions (row * cols + col), strictly ascending
  // (so distinct), each in [0, rows * cols), none of them kept (kept = live and not in
  // `dropped`; a just-dropped position may be returned, and then stays with its value and
  // state). update() checks all of this in every build type before the layer changes and
  // throws ArgumentError naming the algorithm, the layer and the first offending position.
  // With needs_gradients(), layer.input and layer.output_grad are in T (a model's bf16 ones
  // widened), here and in grow_linear_positions_per_row, unless streams_gradients();
  // drop_counts and grow_counts see the layers as given.
  virtual std::vector<std::int64_t> grow_linear_positions(const LayerRef& layer, const DropSet& dropped, std::int64_t k,
                                                          CounterRng& rng) = 0;

  // Under constant_fan_in, where this layer grows: exactly per_row positions in every row, as
  // ascending linear positions, with the other requirements of grow_linear_positions (update()
  // checks all of them, the count of every row included). The default throws ArgumentError:
  // an algorithm that supports constant fan-in overrides it and supports_constant_fan_in().
  virtual std::vector<std::int64_t> grow_linear_positions_per_row(const LayerRef&, const DropSet&, std::int64_t,
                                                                  CounterRng&) {
    throw ArgumentError(sprig::detail::message(name(), ": grow_linear_positions_per_row is not implemented"));
  }

  // The streamed |dense gradient| top-k of a layer (dL/dW = dY X^T, computed in row blocks of
  // about 1 MiB with a dense GEMM, large enough for an efficient GEMM and small against the
  // layer, never stored whole), as ascending linear positions: RigL's grow rule, reused by
  // others. Needs the layer's input and output gradient (checked by update()).
  // For a block-sparse layer the positions are on the block grid, ranked by each block's sum
  // of |dL/dW| over its entries.
  // With set_split_scoring, this process ranks its share of the rows and the shares are merged.
  std::vector<std::int64_t> top_dense_gradient(const LayerRef& layer, const DropSet& dropped, std::int64_t k) {
    const auto& W = layer.layer->weight.matrix;
    auto gradient = [&](std::int64_t r0, std::int64_t, MatrixView<T> out) { gradient_rows(layer, r0, out); };
    if (!split_ || split_->parts() == 1)
      return top_gradient_linear_positions(W, dropped, k, gradient_block_rows(layer), gradient, gradient_block_);
    const auto mine = top_gradient_candidates(W, dropped, k, gradient_block_rows(layer), gradient, gradient_block_,
                                              split_rows(W.rows(), *split_));
    return gather_top_candidates<T>(*split_, mine, k, split_candidates_);
  }
  // top_dense_gradient within each row: the per_row largest |dL/dW| of every row among its
  // columns not kept (RigL's grow rule under constant fan-in), streamed (and split) the same way.
  std::vector<std::int64_t> top_dense_gradient_per_row(const LayerRef& layer, const DropSet& dropped,
                                                       std::int64_t per_row) {
    const auto& W = layer.layer->weight.matrix;
    auto gradient = [&](std::int64_t r0, std::int64_t, MatrixView<T> out) { gradient_rows(layer, r0, out); };
    if (!split_ || split_->parts() == 1)
      return top_gradient_linear_positions_per_row(W, dropped, per_row, gradient_block_rows(layer), gradient,
                                                   gradient_block_);
    const auto mine = top_gradient_linear_positions_per_row(W, dropped, per_row, gradient_block_rows(layer), gradient,
                                                            gradient_block_, split_rows(W.rows(), *split_));
    // parts in row order: ascending
    return gather_positions<T>(*split_, mine, W.rows() * W.cols(), split_candidates_);
  }

private:
  // The layer with its input and output gradient in T: bf16 ones (SparseLayerRef::input_bf16,
  // output_grad_bf16) widened into widened_input_ / widened_grad_, valid until the next call.
  // What the grow rules see.
  const LayerRef& with_float_input(const LayerRef& layer) {
    if (!layer.input_bf16.data() && !layer.output_grad_bf16.data()) return layer;
    widened_layer_ = layer;
    widened_layer_.input = layer.float_input(widened_input_);
    widened_layer_.input_bf16 = {};
    widened_layer_.output_grad = layer.float_output_grad(widened_grad_);
    widened_layer_.output_grad_bf16 = {};
    return widened_layer_;
  }

  // Rows of the layer's grid per block of the streamed dense gradient: about 2^18 elements
  // of dY X^T (R x in of them per grid row of a block layer).
  static std::int64_t gradient_block_rows(const LayerRef& layer) {
    const std::int64_t per_row =
        layer.blocks ? layer.blocks->block_height() * layer.in_features() : layer.in_features();
    return std::max<std::int64_t>(1,
                                  std::min<std::int64_t>(layer.layer->weight.matrix.rows(),
                                                         (std::int64_t{1} << 18) / std::max<std::int64_t>(1, per_row)));
  }

  // out = rows [r0, r0 + out.rows()) of dL/dW on the layer's grid: dY X^T, or for a block
  // layer the sum of |dY X^T| over each block's in-matrix entries (kernels/dense_gradient.hpp).
  void gradient_rows(const LayerRef& layer, std::int64_t r0, MatrixView<T> out) {
    const bool narrow = layer.input_bf16.data() || layer.output_grad_bf16.data();
    if (!layer.blocks && !narrow) return dense_gradient_rows<T>(layer.output_grad, layer.input, r0, out);
    if (!narrow)
      return block_gradient_sums<T>(layer.output_grad, layer.input, layer.blocks->block_height(),
                                    layer.blocks->block_width(), r0, out, block_gradient_);
    if (!layer.blocks) return widened_product_rows(layer, r0, out);
    const std::int64_t R = layer.blocks->block_height(), e0 = r0 * R;
    block_gradient_.resize(std::min(layer.output_grad_rows(), (r0 + out.rows()) * R) - e0, layer.input_rows());
    widened_product_rows(layer, e0, block_gradient_.view());
    block_abs_sums<T>(block_gradient_.view(), R, layer.blocks->block_width(), out);
  }

  // out = rows [e0, e0 + out.rows()) of dY X^T for a layer whose X or dY is bf16.
  void widened_product_rows(const LayerRef& layer, std::int64_t e0, MatrixView<T> out) {
    widened_gradient_rows<T>(layer.output_grad, layer.output_grad_bf16, layer.input, layer.input_bf16, e0, out,
                             widened_input_, widened_grad_);
  }

  // Throws ArgumentError naming `caller` if a layer is block-sparse and the algorithm does not
  // support blocks. O(layers).
  void check_blocks(std::span<const LayerRef> layers, const char* caller) const {
    for (const LayerRef& l : layers)
      if (l.blocks && !supports_blocks())
        throw ArgumentError(sprig::detail::message(caller, ": sparse layer ", l.sparse_index, " (", l.out_features(),
                                                   "x", l.in_features(), " in ", l.blocks->block_height(), "x",
                                                   l.blocks->block_width(), " blocks) is block-sparse, and ", name(),
                                                   " does not update block-sparse layers (supports_blocks())"));
  }

  template <Value U, ColumnIndex I, class Optimizer, ModelOf<U, I> M>
  friend void apply_step(SparsityAlgorithm<U, I>&, Optimizer&, M&, std::int64_t, UpdateReport*);

  // Throws ArgumentError naming `caller` unless every layer holds an input [cols x B] and an
  // output gradient [rows x B], B >= 1, when the algorithm needs them.
  void check_gradients(std::span<const LayerRef> layers, const char* caller) const {
    if (!needs_gradients()) return;
    for (const LayerRef& l : layers) {
      const std::int64_t rows = l.out_features(), cols = l.in_features();
      const std::int64_t xr = l.input_rows(), xc = l.input_cols(), yr = l.output_grad_rows(), yc = l.output_grad_cols();
      if (xr == cols && yr == rows && xc == yc && xc > 0) continue;
      const bool none = xr * xc == 0 && yr * yc == 0;
      throw ArgumentError(sprig::detail::message(
          caller, ": ", name(), " needs the input and output gradient of sparse layer ", l.sparse_index,
          " (model layer ", l.position, ", ", rows, "x", cols, ") from a forward and backward on this step; ",
          none ? std::string("none was recorded")
               : sprig::detail::message("the input recorded is ", xr, "x", xc, " and the output gradient ", yr, "x", yc,
                                        ", expected ", cols, "xB and ", rows, "xB"),
          " (call forward and backward before an update step)"));
    }
  }

  // Throws ArgumentError naming `caller` unless the algorithm supports constant fan-in and
  // every row of every layer holds the same live count. O(rows).
  void check_constant_fan_in(std::span<const LayerRef> layers, const char* caller) const {
    if (!supports_constant_fan_in())
      throw ArgumentError(sprig::detail::message(
          caller, ": ", name(), " does not support constant_fan_in",
          name() == "snfs" ? " (it redistributes weights between layers, which changes row counts)" : ""));
    for (const LayerRef& l : layers) {
      const auto& W = l.layer->weight.matrix;
      for (std::int64_t i = 1; i < W.rows(); ++i)
        if (W.row_nnz(i) != W.row_nnz(0))
          throw ArgumentError(sprig::detail::message(
              caller, ": ", name(), " with constant_fan_in needs every row of sparse layer ", l.sparse_index, " (",
              W.rows(), "x", W.cols(), ") to hold the same live count, but row 0 holds ", W.row_nnz(0), " and row ", i,
              " holds ", W.row_nnz(i),
              " (draw the layer with dst::constant_fan_in_linear or redraw the model with "
              "dst::redraw_constant_fan_in, dst/fan_in.hpp)"));
    }
  }

  // Throws ArgumentError naming `caller` unless grow_counts gave one count >= 0 per layer.
  void check_grow_counts(std::span<const LayerRef> layers, const std::vector<std::int64_t>& grow,
                         const char* caller) const {
    if (grow.size() != layers.size())
      throw ArgumentError(sprig::detail::message(caller, ": ", name(), "'s grow_counts returned ", grow.size(),
                                                 " counts for ", layers.size(), " sparse layers"));
    for (std::size_t l = 0; l < grow.size(); ++l)
      if (grow[l] < 0)
        throw ArgumentError(sprig::detail::message(caller, ": ", name(), "'s grow_counts returned ", grow[l],
                                                   " for sparse layer ", layers[l].sparse_index, " (must be >= 0)"));
  }

  // Throws ArgumentError naming `caller`, the algorithm, the layer and the first offending
  // position (row, col) unless `pos` is what grow_linear_positions promises: exactly k
  // positions, strictly ascending, in [0, rows * cols), none kept; with per_row >= 0 (constant
  // fan-in), also exactly per_row in every row. Rows are walked along the ascending positions
  // (no division per position) and the kept columns of each row that grows are marked once
  // (KeptColumns): O(k + rows + nnz of the rows in `pos`) time and cols x 8 bytes, never a
  // search per position.
  void check_grow_positions(const LayerRef& layer, const DropSet& drop, std::span<const std::int64_t> pos,
                            std::int64_t k, std::int64_t per_row, const char* caller) const {
    const auto& W = layer.layer->weight.matrix;
    const std::int64_t cols = W.cols(), total = W.rows() * cols;
    auto fail = [&](const auto&... why) {
      throw ArgumentError(sprig::detail::message(caller, ": ", name(), "'s grow_linear_positions",
                                                 per_row >= 0 ? "_per_row" : "", " for sparse layer ",
                                                 layer.sparse_index, " (", W.rows(), "x", cols, ") ", why...));
    };
    auto at = [cols](std::int64_t p) {
      // floor division, so that a negative position reads as a negative row
      const std::int64_t r = p >= 0 ? p / cols : -((-p + cols - 1) / cols);
      return sprig::detail::message("position ", p, " = (", r, ", ", p - r * cols, ")");
    };
    if (std::ssize(pos) != k) fail("returned ", pos.size(), " positions, expected exactly ", k);
    KeptColumns<T, Index> kept(W, drop);
    std::int64_t prev = -1, row = 0, row_start = 0, in_row = 0;
    auto next_row = [&] {
      if (per_row >= 0 && in_row != per_row)
        fail("returned ", in_row, " positions in row ", row, ", expected exactly ", per_row, " in every row");
      ++row;
      row_start += cols;
      in_row = 0;
    };
    for (std::size_t q = 0; q < pos.size(); ++q) {
      const std::int64_t p = pos[q];
      if (p < 0 || p >= total) fail("returned ", at(p), ", outside [0, rows * cols = ", total, ")");
      if (p <= prev)
        fail("returned ", at(p), " at index ", q, " after ", at(prev), ": positions must be strictly ascending (",
             p == prev ? "a repeated position" : "descending", ")");
      while (p >= row_start + cols) next_row();
      if (kept.kept(row, p - row_start)) fail("returned ", at(p), ", which is live and not dropped (kept)");
      ++in_row;
      prev = p;
    }
    if (per_row >= 0)
      while (row < W.rows()) next_row();
  }

  // The layers an update changes: `layers` without the excluded ones (into `storage`).
  // Throws ArgumentError if an excluded index is not among the model's sparse layers.
  std::span<const LayerRef> active_layers(std::span<const LayerRef> layers, std::vector<LayerRef>& storage,
                                          const char* caller) const {
    if (excluded_.empty()) return layers;
    for (std::int64_t e : excluded_)
      if (std::none_of(layers.begin(), layers.end(),
                       [e](const LayerRef& l) { return static_cast<std::int64_t>(l.sparse_index) == e; }))
        throw ArgumentError(sprig::detail::message(caller, ": ", name(), " excludes sparse layer ", e,
                                                   " but the model has ", layers.size(), " sparse layers"));
    storage.clear();
    for (const LayerRef& l : layers)
      if (!excluded(static_cast<std::int64_t>(l.sparse_index))) storage.push_back(l);
    return storage;
  }

  // Everything an update of `layers` (the model's sparse_layers()) checks before any layer
  // changes; returns the layers it changes (active_layers, into `storage`). Throws
  // ArgumentError naming `caller` as update() documents.
  std::span<const LayerRef> check_update_(std::span<const LayerRef> layers, std::vector<LayerRef>& storage,
                                          const char* caller) const {
    check_sparse_layers(layers, caller);
    const std::span<const LayerRef> active = active_layers(layers, storage, caller);
    check_blocks(active, caller);
    check_layers(active, caller);
    check_gradients(active, caller);
    if (constant_fan_in) check_constant_fan_in(active, caller);
    return active;
  }

  UpdateReport update_(std::span<const LayerRef> layers, std::int64_t t, const char* caller) {
    std::vector<LayerRef> storage;
    return update_checked_(layers, check_update_(layers, storage, caller), t, caller);
  }

  // The update of `active` (what check_update_ returned for `layers`, which it has checked);
  // the excluded layers are reported unchanged.
  UpdateReport update_checked_(std::span<const LayerRef> layers, std::span<const LayerRef> active, std::int64_t t,
                               const char* caller) {
    if (active.size() == layers.size()) return update_active_(layers, t, caller);
    UpdateReport r = update_active_(active, t, caller);
    std::vector<LayerUpdate> all(layers.size());
    for (std::size_t l = 0, a = 0; l < layers.size(); ++l) {
      if (a < active.size() && active[a].sparse_index == layers[l].sparse_index) {
        all[l] = r.layers[a++];
      } else {
        all[l].live_before = all[l].live_after = layers[l].layer->weight.matrix.nnz();
      }
    }
    r.layers = std::move(all);
    return r;
  }

  // Precondition: check_update_ has passed on `layers` (the update changes every one of them).
  UpdateReport update_active_(std::span<const LayerRef> layers, std::int64_t t, const char* caller) {
    const auto start = std::chrono::steady_clock::now();
    UpdateReport report;
    report.step = t;
    report.drop_fraction = schedule_.drop_fraction(t);
    const std::size_t n = layers.size();
    // per_row[l] >= 0: the count each row of layer l drops and grows (constant fan-in)
    std::vector<std::int64_t> drop_counts(n), per_row(n, -1);
    for (std::size_t l = 0; l < n; ++l) {
      const auto& W = layers[l].layer->weight.matrix;
      if (constant_fan_in) {
        per_row[l] = static_cast<std::int64_t>(
            std::floor(report.drop_fraction * static_cast<double>(W.rows() > 0 ? W.row_nnz(0) : 0)));
        drop_counts[l] = per_row[l] * W.rows();
      }
    }
    if (!constant_fan_in) {
      drop_counts = this->drop_counts(layers, t, report.drop_fraction);
      for (std::size_t l = 0; l < n; ++l) {
        const std::int64_t live = layers[l].layer->weight.matrix.nnz();
        if (drop_counts.size() != n || drop_counts[l] < 0 || drop_counts[l] > live)
          throw ArgumentError(sprig::detail::message(
              caller, ": ", name(), "'s drop_counts gave ", drop_counts.size(), " counts for ", n, " sparse layers",
              drop_counts.size() == n ? sprig::detail::message(", and ", drop_counts[l], " for sparse layer ",
                                                               layers[l].sparse_index, " of ", live, " live weights")
                                      : std::string()));
      }
    }
    const std::vector<std::int64_t> grow = constant_fan_in ? drop_counts : grow_counts(layers, drop_counts);
    check_grow_counts(layers, grow, caller);
    report.layers.resize(n);
    // One layer at a time, and its slot moves replayed on its state in chunks of
    // kLogChunk events: the update's scratch is that of one layer, not of the model.
    for (std::size_t l = 0; l < n; ++l) {
      auto& param = layers[l].layer->weight;
      LayerUpdate& u = report.layers[l];
      u.live_before = param.matrix.nnz();
      const DropSet drop = per_row[l] >= 0 ? select_drop_per_row(param.matrix, per_row[l], caller)
                                           : select_drop(param.matrix, drop_counts[l], caller);
      CounterRng rng(seed_, layers[l].sparse_index, static_cast<std::uint64_t>(t));
      const LayerRef& grow_layer = needs_gradients() && !streams_gradients() ? with_float_input(layers[l]) : layers[l];
      std::vector<std::int64_t> grow_at = per_row[l] >= 0
                                              ? grow_linear_positions_per_row(grow_layer, drop, per_row[l], rng)
                                              : grow_linear_positions(grow_layer, drop, grow[l], rng);
      check_grow_positions(layers[l], drop, grow_at, grow[l], per_row[l], caller);
      SlotLog log;
      BlockTopology<T, Index>* blocks = layers[l].blocks;
      log.set_sink(kLogChunk, [&param, blocks](const SlotLog& chunk) {
        param.apply(chunk);
        if (blocks) blocks->apply_slot_moves(chunk);
      });
      u.stats = apply_drop_grow_at(param.matrix, drop, std::move(grow_at), log);
      log.flush();
      if (should_compact(param.matrix)) {
        param.matrix.compact(&log);
        log.flush();
        u.compacted = true;
      }
      if (blocks) blocks->adopt_pattern(param.matrix);
      u.live_after = param.matrix.nnz();
    }
    report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    total_seconds_ += report.seconds;
    ++updates_;
    return report;
  }

  UpdateSchedule schedule_;
  std::uint64_t seed_;
  std::vector<std::int64_t> excluded_;  // ascending sparse indices
  double total_seconds_ = 0.0;
  std::int64_t updates_ = 0;
  Matrix<T> gradient_block_;
  Matrix<T> block_gradient_;  // scratch of block_gradient_sums
  Matrix<T> widened_input_;   // a bf16 input in T (with_float_input; a chunk of it when streamed)
  Matrix<T> widened_grad_;    // a bf16 output gradient in T (the same)
  LayerRef widened_layer_;    // the layer with that input
  SplitScoring* split_ = nullptr;
  SplitCandidates<T> split_candidates_;  // a split scoring's buffers (an update gathers layer after layer)
};

// One optimizer step and/or topology update for training step t (0-based), after forward
// and backward, on any TrainableModel (Sequential, GPT, a user's class: nn/model.hpp), in the
// reference order: the optimizer first, then the topology (so survivors
// carry this step's update), except that an algorithm that skips the optimizer on update steps
// (RigL) only changes the topology. `report`, if given, receives the update's report on an
// update step and is left untouched otherwise.
// Throws ArgumentError before anything changes when the model's sparse_layers() repeat a
// sparse_index, the algorithm needs gradients (RigL, SNFS) and the model holds no
// forward/backward, or constant_fan_in's precondition fails (each checked once, before the
// optimizer step); whatever optimizer.step and update() throw.
// Cost: the optimizer step, plus update() on update steps. Deterministic as update() is.
template <Value T, ColumnIndex Index, class Optimizer, ModelOf<T, Index> M>
void apply_step(SparsityAlgorithm<T, Index>& algorithm, Optimizer& optimizer, M& model, std::int64_t t,
                UpdateReport* report) {
  if (!algorithm.is_update_step(t)) {
    optimizer.step(model);
    return;
  }
  constexpr const char* caller = "dst::apply_step";
  const auto all = model.sparse_layers();
  std::vector<SparseLayerRef<T, Index>> storage;
  const auto active = algorithm.check_update_(all, storage, caller);  // before the optimizer changes anything
  if (!algorithm.skips_optimizer_on_update()) optimizer.step(model);
  UpdateReport r = algorithm.update_checked_(all, active, t, caller);
  if (report) *report = std::move(r);
}

}  // namespace sprig::dst
