// sprig/data/batches.hpp — seeded shuffled mini-batches, gathered feature-major.
//
// An epoch's order is a permutation of [0, N) that is a pure function of (seed, epoch):
// Fisher-Yates driven by CounterRng(seed, epoch, kShuffleStream). The same seed and
// epoch give the same order on every run and thread count; different epochs or seeds give
// independent orders; epoch e can be replayed directly (resume) without replaying 0..e-1.
//
// A batch is gathered into caller-owned storage: X [features x B] (feature-major, the
// layout sprig's kernels take) and its labels. Nothing is allocated per batch; the only
// allocation is the permutation (N indices), made once at construction.
//
// The source may be example-major ([N x features], one example per contiguous row, as
// IDX files and load_idx_images store it) or feature-major ([features x N]). Example-major
// is the fast one to gather from: a batch reads B contiguous rows, where a feature-major
// source costs one cache line per (feature, example) pair (several times slower for
// Fashion-MNIST at B = 128).
//
// Everything here runs on the calling thread; results depend on (seed, epoch) alone.
#pragma once

#include <type_traits>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <span>
#include <vector>

#include "../core/concepts.hpp"
#include "../core/error.hpp"
#include "../core/matrix.hpp"
#include "../core/rng.hpp"

namespace sprig {

// How a data set matrix is laid out.
enum class DataLayout {
  example_major,  // [N x features]: row n is example n
  feature_major,  // [features x N]: column n is example n
};

// What to do with the last N mod B examples of an epoch.
enum class LastBatch {
  keep,  // a final, smaller batch
  drop,  // skipped (every batch has exactly B examples)
};

// Stream key that separates the shuffle from other users of the same seed
// (CounterRng(seed, layer, step) for weights and DST).
inline constexpr std::uint64_t kShuffleStream = 0x5348'5546'464C'4531ULL;  // "SHUFFLE1"

// Writes the epoch's permutation of [0, out.size()) into out: out[k] is the example at
// position k. Uniform over all permutations (Fisher-Yates with unbiased draws). O(N), no
// allocation, no throw.
inline void epoch_permutation(std::span<std::int64_t> out, std::uint64_t seed, std::uint64_t epoch) {
  std::iota(out.begin(), out.end(), std::int64_t{0});
  CounterRng rng(seed, epoch, kShuffleStream);
  for (std::size_t i = out.size(); i > 1; --i) {
    const auto j = static_cast<std::size_t>(rng.uniform_below(i));
    std::swap(out[i - 1], out[j]);
  }
}

// The same into a new vector of n entries; throws ArgumentError if n < 0.
inline std::vector<std::int64_t> epoch_permutation(std::int64_t n, std::uint64_t seed, std::uint64_t epoch) {
  if (n < 0) throw ArgumentError(detail::message("epoch_permutation: negative size ", n));
  std::vector<std::int64_t> out(static_cast<std::size_t>(n));
  epoch_permutation(out, seed, epoch);
  return out;
}

// dst[:, b] = example indices[b] of src, for b in [0, indices.size()). dst is
// [features x indices.size()] (any row stride) and must not overlap src. O(features x B).
// Throws ShapeError for a dst of another shape, ArgumentError for an index outside [0, N)
// (both before anything is written).
template <Value T>
void gather_examples(std::type_identity_t<ConstMatrixView<T>> src, DataLayout layout,
                     std::span<const std::int64_t> indices, std::type_identity_t<MatrixView<T>> dst) {
  const bool by_row = layout == DataLayout::example_major;
  const std::int64_t n = by_row ? src.rows() : src.cols();
  const std::int64_t features = by_row ? src.cols() : src.rows();
  const auto batch = static_cast<std::int64_t>(indices.size());
  if (dst.rows() != features || dst.cols() != batch)
    throw ShapeError(detail::message("gather_examples: source has ", features, " features, ", batch,
                                     " indices, so dst must be ", features, "x", batch, " but is ", dst.rows(), "x",
                                     dst.cols()));
  for (std::int64_t b = 0; b < batch; ++b)
    if (indices[static_cast<std::size_t>(b)] < 0 || indices[static_cast<std::size_t>(b)] >= n)
      throw ArgumentError(detail::message("gather_examples: index ", indices[static_cast<std::size_t>(b)],
                                          " at position ", b, " is outside [0, ", n, ")"));
  if (!by_row) {
    for (std::int64_t f = 0; f < features; ++f) {
      const T* s = src.row(f);
      T* d = dst.row(f);
      for (std::int64_t b = 0; b < batch; ++b) d[b] = s[indices[static_cast<std::size_t>(b)]];
    }
    return;
  }
  // Example-major: a transpose of the selected rows, in tiles of 8 examples x 256
  // features so the 8 source rows stream while each destination write covers 8
  // consecutive elements of a row.
  constexpr std::int64_t tile_b = 8;
  constexpr std::int64_t tile_f = 256;
  for (std::int64_t b0 = 0; b0 < batch; b0 += tile_b) {
    const std::int64_t nb = std::min(tile_b, batch - b0);
    const T* rows[tile_b];
    for (std::int64_t k = 0; k < nb; ++k) rows[k] = src.row(indices[static_cast<std::size_t>(b0 + k)]);
    for (std::int64_t f0 = 0; f0 < features; f0 += tile_f) {
      const std::int64_t f1 = std::min(features, f0 + tile_f);
      for (std::int64_t f = f0; f < f1; ++f) {
        T* d = dst.row(f) + b0;
        for (std::int64_t k = 0; k < nb; ++k) d[k] = rows[k][f];
      }
    }
  }
}

// How MiniBatches cuts an epoch.
struct BatchOptions {
  std::int64_t batch_size = 128;
  bool shuffle = true;  // false: examples in order 0..N-1 every epoch (evaluation)
  LastBatch last = LastBatch::keep;
  std::uint64_t seed = 0;
};

// One gathered batch: views into the caller's storage, `size()` examples wide.
template <Value T, class Label>
struct Batch {
  MatrixView<T> x;                         // [features x size()]
  std::span<Label> labels;                 // size()
  std::span<const std::int64_t> examples;  // which source examples, in batch order

  std::int64_t size() const noexcept { return x.cols(); }
};

// Shuffled mini-batches over a labelled data set, viewed (not copied): the source matrix
// and labels must outlive the MiniBatches. The constructor allocates the N-entry order and
// throws ShapeError if labels.size() != N, ArgumentError if batch_size <= 0; the batch
// accessors throw ArgumentError for a batch index outside [0, batches_per_epoch()). Not
// thread-safe for start_epoch; the const accessors may be called concurrently.
//
//   MiniBatches<float> batches(data.images, DataLayout::example_major, data.labels, {.batch_size = 128, .seed = 7});
//   Matrix<float> x(batches.features(), 128);
//   std::vector<std::int32_t> y(128);
//   for (std::uint64_t epoch = 0; epoch < epochs; ++epoch) {
//     batches.start_epoch(epoch);
//     for (std::int64_t k = 0; k < batches.batches_per_epoch(); ++k) {
//       auto batch = batches.gather(k, x, y);  // batch.x is [784 x batch.size()]
//       ...
//     }
//   }
template <Value T, class Label = std::int32_t>
class MiniBatches {
public:
  MiniBatches(ConstMatrixView<T> data, DataLayout layout, std::span<const Label> labels, BatchOptions options)
      : data_(data), layout_(layout), labels_(labels), options_(options) {
    const std::int64_t n = examples();
    if (static_cast<std::int64_t>(labels.size()) != n)
      throw ShapeError(detail::message("MiniBatches: ", n, " examples but ", labels.size(), " labels"));
    if (options.batch_size <= 0)
      throw ArgumentError(detail::message("MiniBatches: batch_size ", options.batch_size, " must be positive"));
    order_.resize(static_cast<std::size_t>(n));
    start_epoch(0);
  }

  std::int64_t examples() const noexcept { return layout_ == DataLayout::example_major ? data_.rows() : data_.cols(); }
  std::int64_t features() const noexcept { return layout_ == DataLayout::example_major ? data_.cols() : data_.rows(); }
  const BatchOptions& options() const noexcept { return options_; }
  std::uint64_t epoch() const noexcept { return epoch_; }

  // Number of batches in an epoch: ceil(N / B) when the last partial batch is kept,
  // floor(N / B) when it is dropped.
  std::int64_t batches_per_epoch() const noexcept {
    const std::int64_t n = examples(), b = options_.batch_size;
    return options_.last == LastBatch::keep ? (n + b - 1) / b : n / b;
  }

  // Examples in batch k: B, except a kept last partial batch.
  std::int64_t batch_size(std::int64_t k) const {
    check_batch(k, "batch_size");
    return std::min(options_.batch_size, examples() - k * options_.batch_size);
  }

  // Sets the order for `epoch` (a permutation from (seed, epoch), or 0..N-1 when not
  // shuffling). No allocation.
  void start_epoch(std::uint64_t epoch) {
    epoch_ = epoch;
    if (options_.shuffle)
      epoch_permutation(order_, options_.seed, epoch);
    else
      std::iota(order_.begin(), order_.end(), std::int64_t{0});
  }

  // The current epoch's order: order()[p] is the example at position p.
  std::span<const std::int64_t> order() const noexcept { return order_; }

  // Which examples batch k of the current epoch holds.
  std::span<const std::int64_t> batch_examples(std::int64_t k) const {
    const std::int64_t size = batch_size(k);
    return std::span<const std::int64_t>(order_).subspan(static_cast<std::size_t>(k * options_.batch_size),
                                                         static_cast<std::size_t>(size));
  }

  // Gathers batch k of the current epoch into the first batch_size(k) columns of x
  // ([features x >= batch_size(k)]) and the first batch_size(k) entries of labels.
  // Returns views of exactly the filled part. O(features x B); throws ShapeError if x or
  // labels are too small.
  Batch<T, Label> gather(std::int64_t k, MatrixView<T> x, std::span<Label> labels) const {
    const auto which = batch_examples(k);
    const auto size = static_cast<std::int64_t>(which.size());
    if (x.rows() != features() || x.cols() < size || static_cast<std::int64_t>(labels.size()) < size)
      throw ShapeError(detail::message("MiniBatches::gather: batch ", k, " needs x of ", features(), "x", size,
                                       " or wider and ", size, " labels, got x ", x.rows(), "x", x.cols(), " and ",
                                       labels.size(), " labels"));
    MatrixView<T> xb = x.block(0, 0, features(), size);
    gather_examples<T>(data_, layout_, which, xb);
    for (std::int64_t b = 0; b < size; ++b)
      labels[static_cast<std::size_t>(b)] = labels_[static_cast<std::size_t>(which[static_cast<std::size_t>(b)])];
    return {xb, labels.first(static_cast<std::size_t>(size)), which};
  }
  Batch<T, Label> gather(std::int64_t k, Matrix<T>& x, std::vector<Label>& labels) const {
    return gather(k, x.view(), std::span<Label>(labels));
  }

private:
  void check_batch(std::int64_t k, const char* who) const {
    if (k < 0 || k >= batches_per_epoch())
      throw ArgumentError(
          detail::message("MiniBatches::", who, ": batch ", k, " is outside [0, ", batches_per_epoch(), ")"));
  }

  ConstMatrixView<T> data_;
  DataLayout layout_;
  std::span<const Label> labels_;
  BatchOptions options_;
  std::uint64_t epoch_ = 0;
  std::vector<std::int64_t> order_;
};

}  // namespace sprig
