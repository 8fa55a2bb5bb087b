// sprig/dist/data_parallel.hpp — data-parallel training over a Communicator: every rank
// holds the whole model, trains on its shard of the global batch, and after backward every
// gradient is averaged across ranks, so every rank takes the same optimizer step and the
// weights stay bit-identical on all of them.
//
//     sprig::dist::DataParallel dp(comm, model);             // checks the ranks' topologies agree
//     const auto s = sprig::dist::shard(global_batch, comm);  // this rank's columns of the batch
//     ... forward on those columns; the loss (a mean over the shard) into model.output_grad()
//     dp.backward();                                          // backward + gradient average
//     dp.apply_step(algorithm, optimizer, t);                 // as dst::apply_step, on every rank
//
// What travels: for a sparse layer only the gradient at its live slots (the topology is the
// same on every rank, so slots line up), packed row by row: the live weights' count of values,
// never the padding, the dead slots left by relocated rows, or the dense size. The packing
// copy costs a pass over those values, and the padding it leaves out grows as RigL relocates
// rows (docs/design.md, "Measurements behind the code").
// Sparse gradients and dense arrays smaller than Options::bucket_bytes are packed into
// buckets of about that size, a larger sparse one into a buffer of its own, and a larger
// dense one is summed in place. By default each is summed with a blocking allreduce after
// backward. With Options::overlap and a model whose backward reports each finished layer
// (Sequential::backward(layer_done)), a layer's buckets are started non-blocking as soon as its
// gradients are final, and their sum overlaps the backward of the layers below it. Overlap is
// off by default: with one core per rank and shared memory the sum's arithmetic runs on the
// backward's core anyway, and Open MPI's non-blocking allreduce is the slower algorithm
// (docs/scaling.md). Where an MPI progresses sums in the background (a network offload, a
// progress thread), compare both settings.
//
// The topology stays identical on every rank by construction: weights are identical (same
// averaged gradient, same optimizer), magnitudes drop alike, SET's randomness is a
// counter-based function of (seed, layer, step), and an algorithm that grows by gradient
// (RigL, SNFS, GraNet) sees the gradient of the global batch: before an update each sparse layer's
// input X [in x b] and output gradient dY [out x b] are all-gathered into [in x G] and
// [out x G] (columns in rank order, so they are the single process's batch), and dY is scaled
// by 1/size (a shard's loss is a mean over b = G/size columns). That moves (in + out) x G
// values per layer per update, against 2 x out x in for a sum-allreduce of the dense gradient
// dY X^T (fewer whenever G < out x in / (in + out) x 2, e.g. G < 1638 for 1024 x 4096).
// With Options::split_scoring (the default) rank r of N ranks the dense gradient of its N-th
// of each layer's rows only, and the ranks all-gather their best candidates (about k of 16
// bytes in all per layer, after a sum of 65536 counts) and merge them alike: the ranking's
// compute per rank drops by N, and every rank grows the positions one process would
// (dst/split_scoring.hpp); without it every rank ranks every row. After every topology update
// (and at construction) a hash of every sparse weight's slot layout is all-gathered and
// compared: a mismatch throws sprig::Error on every rank, naming the ranks that differ. Never
// silent divergence.
//
// Equivalence: N ranks with global batch G give the losses and topology of one process with
// batch G up to floating-point reassociation (the gradient sum over the batch is split at the
// shard boundaries); tests/test_dist_data_parallel.cpp states the tolerance.
// Threads: one thread per rank calls into a DataParallel; kernels inside thread themselves.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "../core/aligned_allocator.hpp"
#include "../core/error.hpp"
#include "../core/matrix.hpp"
#include "../dst/algorithm.hpp"
#include "../io/atomic_file.hpp"
#include "../io/binary_format.hpp"
#include "../io/checkpoint.hpp"
#include "../nn/model.hpp"
#include "../optim/live_ranges.hpp"
#include "communicator.hpp"

namespace sprig::dist {

// This rank's columns [begin, begin + size) of a global batch of G columns: rank r of N takes
// [r G / N, (r + 1) G / N). Throws ArgumentError unless G >= N and G % N == 0 (equal shards:
// the average of the shards' mean gradients is then the global batch's mean gradient).
struct Shard {
  std::int64_t begin = 0;
  std::int64_t size = 0;
};
inline Shard shard(std::int64_t global_batch, const Communicator& comm) {
  const std::int64_t n = comm.size();
  if (global_batch < n || global_batch % n != 0)
    throw ArgumentError(sprig::detail::message("dist::shard: a global batch of ", global_batch,
                                               " columns does not split into ", n, " equal shards (one per rank)"));
  const std::int64_t b = global_batch / n;
  return {comm.rank() * b, b};
}

namespace detail {
// A 64-bit hash of 64-bit words (splitmix64's finaliser over a running xor): order-sensitive.
inline std::uint64_t mix(std::uint64_t h, std::uint64_t w) noexcept {
  std::uint64_t z = (h ^ w) + 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
template <class Int>
std::uint64_t mix_all(std::uint64_t h, std::span<const Int> words) noexcept {
  for (Int w : words) h = mix(h, static_cast<std::uint64_t>(static_cast<std::int64_t>(w)));
  return h;
}
inline std::uint64_t hash_bytes(std::span<const std::byte> bytes) noexcept {
  std::uint64_t h = mix(0, bytes.size());
  std::size_t k = 0;
  for (; k + 8 <= bytes.size(); k += 8) {
    std::uint64_t w;
    std::memcpy(&w, bytes.data() + k, 8);
    h = mix(h, w);
  }
  std::uint64_t tail = 0;
  std::memcpy(&tail, bytes.data() + k, bytes.size() - k);
  return mix(h, tail);
}
template <class P>
const auto& pattern_of(const P& p) {
  if constexpr (requires { p.matrix.pattern(); })
    return p.matrix.pattern();  // BlockSparseParameter: the block grid
  else
    return p.matrix;
}
}  // namespace detail

// A hash of every sparse parameter's slot layout, in for_each_parameter order: shape, and per
// row its start, live count and the live slots' columns (dead slots and padding are not
// hashed). Two models hash alike iff (up to 2^-64) their per-slot arrays line up. O(storage).
template <TrainableModel M>
std::uint64_t topology_hash(const M& model) {
  std::uint64_t h = detail::mix(0, 0x73707269677470ull);
  model.for_each_parameter([&](const auto& p) {
    if constexpr (requires { p.matrix.storage_size(); }) {
      const auto& W = detail::pattern_of(p);
      h = detail::mix(detail::mix(h, static_cast<std::uint64_t>(W.rows())), static_cast<std::uint64_t>(W.cols()));
      const auto cols = W.col_indices();
      for (std::int64_t i = 0; i < W.rows(); ++i) {
        const std::int64_t s = W.row_start(i), n = W.row_nnz(i);
        h = detail::mix(detail::mix(h, static_cast<std::uint64_t>(s)), static_cast<std::uint64_t>(n));
        h = detail::mix_all(h, cols.subspan(static_cast<std::size_t>(s), static_cast<std::size_t>(n)));
      }
    }
  });
  return h;
}

// Throws sprig::Error on every rank (naming `where`, each differing rank and its hash) unless
// every rank's `value` is equal. One all-gather of 8 bytes a rank.
inline void check_same_on_every_rank(Communicator& comm, std::uint64_t value, const char* what,
                                     const std::string& where) {
  std::vector<std::uint64_t> all(static_cast<std::size_t>(comm.size()));
  comm.allgather(std::as_bytes(std::span<const std::uint64_t>(&value, 1)), std::as_writable_bytes(std::span(all)));
  std::string differ;
  for (std::size_t r = 1; r < all.size(); ++r)
    if (all[r] != all[0]) differ += sprig::detail::message(", rank ", r, " has ", all[r]);
  if (!differ.empty())
    throw Error(sprig::detail::message(where, ": the ", what, " differs across ranks (rank 0 has ", all[0], differ,
                                       "): the ranks no longer train the same model"));
}

// What a DataParallel has done so far (this rank's view).
struct CommunicationStats {
  std::int64_t steps = 0;              // gradient averages
  std::int64_t gradient_bytes = 0;     // bytes of gradient summed: live slots of sparse, all of dense
  double gradient_wait_seconds = 0.0;  // time blocked in gradient sums (what overlap hid excluded)
  std::int64_t gather_bytes = 0;  // bytes of X, dY and split scoring's candidates received for gradient-driven updates
  double gather_seconds = 0.0;    // (the candidates' gather includes the wait for the slowest rank's ranking)
  std::int64_t topology_checks = 0;
  double check_seconds = 0.0;  // hashing and comparing topologies
  double seconds() const noexcept { return gradient_wait_seconds + gather_seconds + check_seconds; }
};

template <TrainableModel M>
class DataParallel {
public:
  using T = typename M::value_type;
  using Index = typename M::index_type;

  struct Options {
    // Gradient arrays smaller than this are packed into buckets of about this size; larger
    // ones are summed in place. 1 MiB: a few messages for a model of many small layers.
    std::int64_t bucket_bytes = std::int64_t{1} << 20;
    // Start each layer's sums non-blocking while backward goes on (when the model reports
    // finished layers) instead of one blocking sum per bucket after backward; see the top of
    // this file for why it is off by default.
    bool overlap = false;
    // Split the ranking of a gradient-driven update's dense gradients over the ranks (the top
    // of this file). Off: every rank ranks every row, for comparison.
    bool split_scoring = true;
  };

  // Checks that the model's sparse_layers() repeat no sparse_index (check_sparse_layers:
  // ArgumentError, on every rank alike) and that every rank holds the same topology
  // (check_topology). The communicator and the model must outlive this object. stats() count from after this check: it also waits for
  // the slowest rank to arrive, a start-up cost rather than a step's.
  DataParallel(Communicator& comm, M& model, Options options = {}) : comm_(comm), model_(model), options_(options) {
    if (options_.bucket_bytes < 1)
      throw ArgumentError(sprig::detail::message("DataParallel: bucket_bytes ", options_.bucket_bytes, " < 1"));
    check_sparse_layers<T, Index>(model_.sparse_layers(), "DataParallel");  // before any collective
    check_topology("DataParallel");
    stats_ = {};
  }

  Communicator& communicator() noexcept { return comm_; }
  const CommunicationStats& stats() const noexcept { return stats_; }
  void reset_stats() noexcept { stats_ = {}; }

  // model.backward(), then every gradient averaged over the ranks (during backward with
  // Options::overlap, as the top of this file says). Throws what backward and the communicator throw.
  void backward() {
    if constexpr (requires {
                    model_.backward([](std::size_t) {});
                    model_.for_each_parameter_of(std::size_t{0}, [](auto&) {});
                  }) {
      if (options_.overlap) {
        begin_average(/*blocking=*/false);
        model_.backward([this](std::size_t k) {
          model_.for_each_parameter_of(k, [this](auto& p) { add(p); });
          flush_bucket();
          for (std::int64_t id : in_flight_) comm_.test(id);  // lets MPI progress them
        });
        finish_average();
        return;
      }
    }
    model_.backward();
    average_gradients();
  }

  // Averages every gradient over the ranks, for a caller that ran backward itself: one
  // blocking sum per bucket.
  void average_gradients() {
    begin_average(/*blocking=*/true);
    model_.for_each_parameter([this](auto& p) { add(p); });
    finish_average();
  }

  // The mean over ranks of a per-rank value (a shard's loss). One allreduce of 8 bytes.
  double average(double local) {
    comm_.allreduce_sum(std::span<double>(&local, 1));
    return local / static_cast<double>(comm_.size());
  }
  // The sum over ranks of a per-rank count (correct predictions).
  std::int64_t sum(std::int64_t local) {
    comm_.allreduce_sum(std::span<std::int64_t>(&local, 1));
    return local;
  }

  // dst::apply_step on every rank, after backward(): the optimizer step and/or the topology
  // update of step t; for an algorithm that needs gradients, on the global batch's X and dY
  // (the top of this file); after an update, check_topology. Throws what dst::apply_step
  // throws, and sprig::Error when the ranks' topologies differ after the update.
  template <class Optimizer>
  void apply_step(dst::SparsityAlgorithm<T, Index>& algorithm, Optimizer& optimizer, std::int64_t t,
                  dst::UpdateReport* report = nullptr) {
    if (!algorithm.is_update_step(t)) {
      optimizer.step(model_);
      return;
    }
    if (algorithm.needs_gradients() && comm_.size() > 1) {
      GlobalBatch global{model_, gather_layers(algorithm)};
      struct Attach {  // the split for this update only, also when it throws
        dst::SparsityAlgorithm<T, Index>& a;
        dst::SplitScoring* before = a.split_scoring();
        ~Attach() { a.set_split_scoring(before); }
      } attach{algorithm};
      if (options_.split_scoring) algorithm.set_split_scoring(&split_);
      dst::apply_step(algorithm, optimizer, global, t, report);
    } else {
      dst::apply_step(algorithm, optimizer, model_, t, report);
    }
    check_topology(sprig::detail::message("DataParallel::apply_step (update at step ", t, ")"));
  }

  // Throws sprig::Error on every rank unless every rank's topology_hash is the same.
  void check_topology(const std::string& where) {
    const auto start = Clock::now();
    check_same_on_every_rank(comm_, topology_hash(model_), "topology hash", where);
    ++stats_.topology_checks;
    stats_.check_seconds += seconds_since(start);
  }

private:
  using Clock = std::chrono::steady_clock;
  static double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

  // The ranks as the parts of a split scoring: gather() is two all-gathers (the counts, then
  // the bytes padded to the largest count; its bytes count in stats().gather_bytes), sum() an
  // allreduce.
  class RankSplit final : public dst::SplitScoring {
  public:
    explicit RankSplit(DataParallel& dp) : dp_(dp) {}
    int part() const noexcept override { return dp_.comm_.rank(); }
    int parts() const noexcept override { return dp_.comm_.size(); }
    void gather(std::span<const std::byte> mine, std::vector<std::byte>& all) override {
      const auto start = Clock::now();
      Communicator& comm = dp_.comm_;
      const auto n = static_cast<std::size_t>(comm.size());
      const auto count = static_cast<std::int64_t>(mine.size());
      counts_.resize(n);
      comm.allgather(std::as_bytes(std::span(&count, 1)), std::as_writable_bytes(std::span(counts_)));
      const auto width = static_cast<std::size_t>(*std::max_element(counts_.begin(), counts_.end()));
      padded_.resize(width);  // (the buffers keep their capacity: no page faults on every update)
      std::copy(mine.begin(), mine.end(), padded_.begin());
      received_.resize(width * n);
      comm.allgather(padded_, received_);
      std::size_t total = 0;
      for (std::int64_t c : counts_) total += static_cast<std::size_t>(c);
      all.resize(total);
      for (std::size_t r = 0, at = 0; r < n; at += static_cast<std::size_t>(counts_[r]), ++r)
        std::copy_n(received_.begin() + static_cast<std::ptrdiff_t>(r * width), counts_[r], all.begin() + at);
      dp_.stats_.gather_bytes += static_cast<std::int64_t>(width * (n - 1));
      dp_.stats_.gather_seconds += seconds_since(start);
    }

    void sum(std::span<std::int64_t> counts) override {
      const auto start = Clock::now();
      dp_.comm_.allreduce_sum(counts);
      dp_.stats_.gather_seconds += seconds_since(start);
    }

  private:
    DataParallel& dp_;
    std::vector<std::int64_t> counts_;
    std::vector<std::byte> padded_, received_;
  };

  // The model as dst::apply_step sees it during a gradient-driven update: its parameters, and
  // its sparse layers with the global batch's X and dY.
  struct GlobalBatch {
    using value_type = T;
    using index_type = Index;
    M& model;
    std::vector<SparseLayerRef<T, Index>> layers;
    template <class Fn>
    void for_each_parameter(Fn&& fn) {
      model.for_each_parameter(fn);
    }
    template <class Fn>
    void for_each_parameter(Fn&& fn) const {
      std::as_const(model).for_each_parameter(fn);
    }
    std::vector<SparseLayerRef<T, Index>> sparse_layers() { return layers; }
  };

  // The model's sparse layers with X and dY all-gathered over the ranks (excluded layers keep
  // their own views: the update skips them).
  std::vector<SparseLayerRef<T, Index>> gather_layers(const dst::SparsityAlgorithm<T, Index>& algorithm) {
    const auto start = Clock::now();
    auto layers = model_.sparse_layers();
    inputs_.resize(layers.size());
    output_grads_.resize(layers.size());
    const T scale = T(1) / static_cast<T>(comm_.size());
    for (std::size_t l = 0; l < layers.size(); ++l) {
      if (algorithm.excluded(static_cast<std::int64_t>(layers[l].sparse_index))) continue;
      layers[l].input = gather_columns(layers[l].float_input(widened_), inputs_[l], T(1));
      layers[l].input_bf16 = {};  // (gathered in T: the update reads input)
      layers[l].output_grad = gather_columns(layers[l].float_output_grad(widened_), output_grads_[l], scale);
      layers[l].output_grad_bf16 = {};
    }
    stats_.gather_seconds += seconds_since(start);
    return layers;
  }

  // out = [rows x (size * b)]: rank r's local [rows x b] at columns [r b, (r + 1) b), times
  // scale. Returns a view of out; an empty local view stays empty (update() reports it).
  ConstMatrixView<T> gather_columns(ConstMatrixView<T> local, Matrix<T>& out, T scale) {
    const std::int64_t rows = local.rows(), b = local.cols(), n = comm_.size();
    if (rows * b == 0) return local;
    pack_.resize(static_cast<std::size_t>(rows * b));
    for (std::int64_t i = 0; i < rows; ++i) std::copy_n(local.row(i), b, pack_.data() + i * b);
    unpack_.resize(static_cast<std::size_t>(rows * b * n));
    comm_.allgather(std::as_bytes(std::span<const T>(pack_)), std::as_writable_bytes(std::span<T>(unpack_)));
    stats_.gather_bytes += static_cast<std::int64_t>(sizeof(T)) * rows * b * (n - 1);
    out.resize(rows, b * n);
    for (std::int64_t r = 0; r < n; ++r)
      for (std::int64_t i = 0; i < rows; ++i) {
        const T* src = unpack_.data() + (r * rows + i) * b;
        T* dst = out.row(i) + r * b;
        for (std::int64_t c = 0; c < b; ++c) dst[c] = src[c] * scale;
      }
    return out.view();
  }

  // ---- gradient average: buckets -------------------------------------------------------
  struct Packed {
    T* grad;
    std::size_t count;
    std::size_t bucket;  // index into buckets_
    std::size_t offset;
  };

  // Starts an average whose buckets are summed as they close (blocking) or started
  // non-blocking and awaited in finish_average.
  void begin_average(bool blocking) {
    blocking_ = blocking;
    comm_.wait_all();
    in_flight_.clear();
    in_place_.clear();
    packed_.clear();
    used_buckets_ = 0;
    open_count_ = 0;
  }

  template <class P>
  void add(P& p) {
    T* g = p.grad.data();
    constexpr bool sparse = requires { p.live_count(); };
    std::size_t n = p.grad.size();
    if constexpr (sparse) n = static_cast<std::size_t>(p.live_count());  // what travels: live slots only
    if (n == 0) return;
    stats_.gradient_bytes += static_cast<std::int64_t>(n * sizeof(T));
    if (comm_.size() == 1) return;
    const bool large = static_cast<std::int64_t>(n * sizeof(T)) >= options_.bucket_bytes;
    if (large && !sparse) {
      in_place_.push_back({g, n});
      if (blocking_)
        timed_sum(std::span<T>(g, n));
      else
        in_flight_.push_back(comm_.start_allreduce_sum(std::span<T>(g, n)));
      return;
    }
    // a large sparse gradient gets a buffer of its own (the open bucket is sent first)
    if (open_count_ > 0 && (large || static_cast<std::int64_t>((open_count_ + n) * sizeof(T)) > options_.bucket_bytes))
      flush_bucket();
    if (open_count_ == 0) {
      if (used_buckets_ == buckets_.size()) buckets_.emplace_back();
      buckets_[used_buckets_].resize(std::max(n, static_cast<std::size_t>(options_.bucket_bytes) / sizeof(T) + 1));
    }
    AlignedVector<T>& bucket = buckets_[used_buckets_];
    if (bucket.size() < open_count_ + n) bucket.resize(open_count_ + n);
    sprig::detail::for_each_live_range<false>(p, [&](std::int64_t b, std::int64_t e) {  // in slot order
      const auto count = static_cast<std::size_t>(e - b);
      std::copy(g + b, g + e, bucket.data() + open_count_);
      packed_.push_back({g + b, count, used_buckets_, open_count_});
      open_count_ += count;
    });
    if (large) flush_bucket();
  }

  void flush_bucket() {
    if (open_count_ == 0) return;
    const std::span<T> bucket(buckets_[used_buckets_].data(), open_count_);
    if (blocking_)
      timed_sum(bucket);
    else
      in_flight_.push_back(comm_.start_allreduce_sum(bucket));
    ++used_buckets_;
    open_count_ = 0;
  }

  void timed_sum(std::span<T> data) {
    const auto start = Clock::now();
    comm_.allreduce_sum(data);
    stats_.gradient_wait_seconds += seconds_since(start);
  }

  void finish_average() {
    flush_bucket();
    const auto wait_start = Clock::now();
    comm_.wait_all();
    stats_.gradient_wait_seconds += seconds_since(wait_start);
    in_flight_.clear();
    ++stats_.steps;
    if (comm_.size() == 1) return;
    const T scale = T(1) / static_cast<T>(comm_.size());
    for (const Packed& q : packed_) {
      const T* src = buckets_[q.bucket].data() + q.offset;
      for (std::size_t k = 0; k < q.count; ++k) q.grad[k] = src[k] * scale;
    }
    for (const auto& [g, n] : in_place_)
      for (std::size_t k = 0; k < n; ++k) g[k] *= scale;
  }

  Communicator& comm_;
  M& model_;
  Options options_;
  CommunicationStats stats_;
  std::vector<AlignedVector<T>> buckets_;
  std::size_t used_buckets_ = 0;
  std::size_t open_count_ = 0;  // entries packed into buckets_[used_buckets_] so far
  std::vector<Packed> packed_;
  std::vector<std::pair<T*, std::size_t>> in_place_;
  std::vector<std::int64_t> in_flight_;
  bool blocking_ = false;  // this average's mode, set by begin_average
  std::vector<Matrix<T>> inputs_, output_grads_;
  Matrix<T> widened_;  // a bf16 input widened before its gather
  AlignedVector<T> pack_, unpack_;
  RankSplit split_{*this};
};

// ---- checkpoints -----------------------------------------------------------------------

// save_training_state in a data-parallel run: rank 0 writes the file (atomically, as
// io/checkpoint.hpp does, with the run settings if given); the other ranks wait at a barrier
// until it is complete. The ranks'
// states are identical (the top of this file), so rank 0's is the run's. Throws on every rank
// if rank 0 fails to write (then the file is unchanged).
template <class Optimizer, TrainableModel M>
void save_training_state(Communicator& comm, const std::filesystem::path& path, const M& model,
                         const Optimizer& optimizer, const TrainingProgress& progress,
                         const dst::AlgorithmFor<M>* algorithm = nullptr, const RunSettings& settings = {}) {
  std::int64_t failed = 0;
  std::string why;
  if (comm.rank() == 0) {
    try {
      sprig::save_training_state(path, model, optimizer, progress, algorithm, settings);
    } catch (const std::exception& e) {
      failed = 1;
      why = e.what();
    }
  }
  comm.allreduce_sum(std::span<std::int64_t>(&failed, 1));
  if (failed)
    throw Error(comm.rank() == 0
                    ? why
                    : sprig::detail::message("dist::save_training_state: rank 0 failed to write ", path.string()));
}

// load_training_state on every rank: each reads `path`, the ranks check that they read the
// same bytes (a hash all-gathered: a node with a stale or different copy is named), then each
// restores it. All or nothing on every rank: if any rank cannot read the file or holds a
// different one, every rank throws (FormatError from the rank that failed, sprig::Error on the
// others) and no rank's model changes before the check.
template <class Optimizer, TrainableModel M>
TrainingProgress load_training_state(Communicator& comm, const std::filesystem::path& path, M& model,
                                     Optimizer& optimizer, dst::AlgorithmFor<M>* algorithm = nullptr) {
  std::vector<std::byte> bytes;
  std::int64_t failed = 0;
  std::string why;
  try {
    bytes = sprig::detail::ckpt::read_file(path);
  } catch (const std::exception& e) {
    failed = 1;
    why = e.what();
  }
  std::int64_t failures = failed;
  comm.allreduce_sum(std::span<std::int64_t>(&failures, 1));
  if (failures) {
    if (failed) throw FormatError(why);
    throw Error(
        sprig::detail::message("dist::load_training_state: ", failures, " rank(s) could not read ", path.string()));
  }
  check_same_on_every_rank(comm, detail::hash_bytes(bytes), "checkpoint file",
                           "dist::load_training_state(" + path.string() + ")");
  return sprig::decode_training_state(std::span<const std::byte>(bytes), path.string(), model, optimizer, algorithm);
}

}  // namespace sprig::dist
