// bench_padded_csr: structural operations of PaddedCSR<float, Index> on a 4096 x 4096
// matrix at density 0.1 (90% sparse), int32 and int16 column indices.
//
// InsertDelete/*: one iteration = 10^6 random operations, alternating a delete and an
// insert so the density stays at 0.1. The "per_op" counter is the CPU time of a single
// operation. Variants:
//   O1          erase_slot(row, random live slot) and insert_new(row, col) of a position
//               the caller knows is absent (a 2 MB bit mask plays the DST algorithm's
//               knowledge); this is the O(1) path.
//   O1_log      the same, recording every change in a SlotLog and replaying it on one
//               per-slot state array (what an optimizer pays per topology change).
//   checked     erase(row, col) and insert(row, col): each scans the row (~410 live
//               entries) for the column, the O(row_nnz) price of not knowing the slot.
// Each includes its random-number draws (a few ns). Rows that outgrow their capacity are
// relocated, so the matrix slowly accumulates dead slots across iterations, as in training
// between compactions.
//
// Init/*, Compact/*: from_dense, random_density, random_per_row (exactly 410 per row) and
// compact() for the same size.
//
// Run with --benchmark_repetitions=N to get mean/median/stddev (the machine is noisy).
#include <sprig/core/padded_csr.hpp>

#include <benchmark/benchmark.h>

#include <cstdint>
#include <vector>

namespace {

constexpr std::int64_t kN = 4096;
constexpr double kDensity = 0.1;
constexpr std::int64_t kOps = 1'000'000;

__extension__ using UInt128 = unsigned __int128;

// xorshift64*: cheap enough not to dominate an O(1) operation.
struct FastRng {
  std::uint64_t s;
  std::uint64_t next() {
    s ^= s >> 12;
    s ^= s << 25;
    s ^= s >> 27;
    return s * 0x2545F4914F6CDD1DULL;
  }
  std::int64_t below(std::int64_t n) {
    return static_cast<std::int64_t>((static_cast<UInt128>(next()) * static_cast<std::uint64_t>(n)) >> 64);
  }
};

// Live positions of a kN x kN matrix as bits.
struct Mask {
  std::vector<std::uint64_t> bits = std::vector<std::uint64_t>(static_cast<std::size_t>(kN * kN / 64), 0);
  bool test(std::int64_t i, std::int64_t c) const {
    return (bits[static_cast<std::size_t>((i * kN + c) >> 6)] >> ((i * kN + c) & 63)) & 1U;
  }
  void flip(std::int64_t i, std::int64_t c) {
    bits[static_cast<std::size_t>((i * kN + c) >> 6)] ^= std::uint64_t{1} << ((i * kN + c) & 63);
  }
};

enum class Mode { o1, o1_log, checked };

template <class Index, Mode mode>
void InsertDelete(benchmark::State& state) {
  using M = sprig::PaddedCSR<float, Index>;
  M W = M::random_density(kN, kN, kDensity, 1);
  Mask mask;
  W.for_each_live([&](std::int64_t i, std::int64_t c, float, std::int64_t) { mask.flip(i, c); });
  std::vector<float> slot_state(static_cast<std::size_t>(W.storage_size()), 0.0f);
  sprig::SlotLog log;
  FastRng rng{0x9E3779B97F4A7C15ULL};
  const auto cols = [&] { return W.col_indices(); };
  for (auto _ : state) {
    for (std::int64_t op = 0; op < kOps; op += 2) {
      // Delete a uniformly chosen live entry of a random non-empty row.
      std::int64_t i = rng.below(kN);
      while (W.row_nnz(i) == 0) i = rng.below(kN);
      const std::int64_t slot = W.row_start(i) + rng.below(W.row_nnz(i));
      const std::int64_t c_del = cols()[static_cast<std::size_t>(slot)];
      mask.flip(i, c_del);
      // Insert at a uniformly chosen absent position (rejection: 90% of positions are).
      std::int64_t r, c;
      do {
        r = rng.below(kN);
        c = rng.below(kN);
      } while (mask.test(r, c));
      mask.flip(r, c);
      if constexpr (mode == Mode::checked) {
        W.erase(i, c_del);
        W.insert(r, c, 0.5f);
      } else if constexpr (mode == Mode::o1) {
        W.erase_slot(i, slot);
        W.insert_new(r, c, 0.5f);
      } else {
        log.reset();
        W.erase_slot(i, slot, &log);
        W.insert_new(r, c, 0.5f, &log);
        log.apply(slot_state);
      }
    }
  }
  benchmark::DoNotOptimize(W.values().data());
  state.counters["per_op"] =
      benchmark::Counter(static_cast<double>(kOps),
                         benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
  state.counters["dead_slot_%"] = 100.0 * static_cast<double>(W.dead_slots()) / static_cast<double>(W.storage_size());
}

template <class Index>
void InitFromDense(benchmark::State& state) {
  using M = sprig::PaddedCSR<float, Index>;
  const sprig::Matrix<float> dense = M::random_density(kN, kN, kDensity, 2).to_dense();
  for (auto _ : state) {
    M W = M::from_dense(dense.view());
    benchmark::DoNotOptimize(W.values().data());
  }
}

template <class Index>
void InitRandomDensity(benchmark::State& state) {
  using M = sprig::PaddedCSR<float, Index>;
  std::uint64_t seed = 3;
  for (auto _ : state) {
    M W = M::random_density(kN, kN, kDensity, seed++);
    benchmark::DoNotOptimize(W.values().data());
  }
}

template <class Index>
void InitRandomPerRow(benchmark::State& state) {
  using M = sprig::PaddedCSR<float, Index>;
  std::uint64_t seed = 3;
  for (auto _ : state) {
    M W = M::random_per_row(kN, kN, 410, seed++);
    benchmark::DoNotOptimize(W.values().data());
  }
}

// compact() of a matrix after 10^6 insert/delete operations (relocated rows, dead slots).
template <class Index>
void CompactAfterChurn(benchmark::State& state) {
  using M = sprig::PaddedCSR<float, Index>;
  M churned = M::random_density(kN, kN, kDensity, 4);
  FastRng rng{12345};
  for (std::int64_t op = 0; op < kOps / 2; ++op) {
    std::int64_t i = rng.below(kN);
    while (churned.row_nnz(i) == 0) i = rng.below(kN);
    churned.erase_slot(i, churned.row_start(i) + rng.below(churned.row_nnz(i)));
    const std::int64_t r = rng.below(kN), c = rng.below(kN);
    if (churned.find(r, c) < 0) churned.insert_new(r, c, 1.0f);
  }
  state.counters["dead_slot_%"] =
      100.0 * static_cast<double>(churned.dead_slots()) / static_cast<double>(churned.storage_size());
  sprig::SlotLog log;
  for (auto _ : state) {
    state.PauseTiming();
    M W = churned;
    log.reset();
    state.ResumeTiming();
    W.compact(&log);
    benchmark::DoNotOptimize(W.values().data());
  }
}

}  // namespace

BENCHMARK_TEMPLATE(InsertDelete, std::int32_t, Mode::o1)->Name("InsertDelete/O1/int32")->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(InsertDelete, std::int16_t, Mode::o1)->Name("InsertDelete/O1/int16")->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(InsertDelete, std::int32_t, Mode::o1_log)
    ->Name("InsertDelete/O1_log/int32")
    ->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(InsertDelete, std::int16_t, Mode::o1_log)
    ->Name("InsertDelete/O1_log/int16")
    ->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(InsertDelete, std::int32_t, Mode::checked)
    ->Name("InsertDelete/checked/int32")
    ->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(InsertDelete, std::int16_t, Mode::checked)
    ->Name("InsertDelete/checked/int16")
    ->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(InitFromDense, std::int32_t)->Name("Init/from_dense/int32")->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(InitFromDense, std::int16_t)->Name("Init/from_dense/int16")->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(InitRandomDensity, std::int32_t)->Name("Init/random_density/int32")->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(InitRandomDensity, std::int16_t)->Name("Init/random_density/int16")->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(InitRandomPerRow, std::int32_t)->Name("Init/random_per_row/int32")->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(InitRandomPerRow, std::int16_t)->Name("Init/random_per_row/int16")->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(CompactAfterChurn, std::int32_t)->Name("Compact/after_churn/int32")->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(CompactAfterChurn, std::int16_t)->Name("Compact/after_churn/int16")->Unit(benchmark::kMillisecond);

BENCHMARK_MAIN();
