#include "sprig/data/batches.hpp"
#include "sprig/io/batches.hpp"  // the old path forwards for one release (docs/changes.md)

#include <catch2/catch.hpp>

#include "observed_new.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <map>
#include <new>
#include <numeric>
#include <vector>

// Counts heap allocations while `g_count` is set: gathering a batch must not allocate.
namespace {
std::atomic<bool> g_count{false};
std::atomic<long> g_allocations{0};
}  // namespace

void sprig_test_observe_new(std::size_t) noexcept {
  if (g_count.load(std::memory_order_relaxed)) ++g_allocations;
}

namespace {

using sprig::DataLayout;
using sprig::LastBatch;

bool is_permutation_of_iota(std::vector<std::int64_t> v) {
  std::sort(v.begin(), v.end());
  for (std::size_t i = 0; i < v.size(); ++i)
    if (v[i] != static_cast<std::int64_t>(i)) return false;
  return true;
}

// A data set whose value at (example n, feature f) is a known function, stored in the
// requested layout with a padded row stride so strided views are exercised.
template <class T>
struct Synthetic {
  std::int64_t n, features;
  DataLayout layout;
  sprig::Matrix<T> storage;
  std::vector<std::int32_t> labels;

  static T value(std::int64_t example, std::int64_t f) { return static_cast<T>(example * 1000 + f) + T(0.5); }

  Synthetic(std::int64_t n_, std::int64_t features_, DataLayout layout_) : n(n_), features(features_), layout(layout_) {
    const std::int64_t rows = layout == DataLayout::example_major ? n : features;
    const std::int64_t cols = layout == DataLayout::example_major ? features : n;
    storage = sprig::Matrix<T>(rows, cols, cols + 3, T(-1));
    for (std::int64_t e = 0; e < n; ++e)
      for (std::int64_t f = 0; f < features; ++f)
        (layout == DataLayout::example_major ? storage(e, f) : storage(f, e)) = value(e, f);
    for (std::int64_t e = 0; e < n; ++e) labels.push_back(static_cast<std::int32_t>((e * 7) % 10));
  }
};

}  // namespace

TEST_CASE("epoch_permutation is a seeded permutation, different per epoch and seed", "[io][batches]") {
  for (std::int64_t n : {0, 1, 2, 17, 1000}) {
    const auto p = sprig::epoch_permutation(n, 42, 0);
    REQUIRE(static_cast<std::int64_t>(p.size()) == n);
    CHECK(is_permutation_of_iota(p));
    CHECK(p == sprig::epoch_permutation(n, 42, 0));
    if (n >= 17) {  // 17! > 10^14: equal orders by chance are out of the question
      CHECK(p != sprig::epoch_permutation(n, 42, 1));
      CHECK(p != sprig::epoch_permutation(n, 43, 0));
      std::vector<std::int64_t> iota(static_cast<std::size_t>(n));
      std::iota(iota.begin(), iota.end(), 0);
      CHECK(p != iota);
    }
  }
  CHECK_THROWS_AS(sprig::epoch_permutation(-1, 0, 0), sprig::ArgumentError);
}

TEST_CASE("epoch_permutation is uniform over permutations", "[io][batches]") {
  // n = 4: 24 permutations, 24000 epochs, expected 1000 each. A biased shuffle (Sattolo,
  // the naive swap with any position) leaves some orders at 0 or skews them by > 10%;
  // the binomial standard deviation is ~31, so 6 sigma is ~190.
  std::map<std::vector<std::int64_t>, int> counts;
  const int epochs = 24000;
  for (int e = 0; e < epochs; ++e) ++counts[sprig::epoch_permutation(4, 7, static_cast<std::uint64_t>(e))];
  REQUIRE(counts.size() == 24);
  const double expected = epochs / 24.0;
  const double sigma = std::sqrt(expected * (1 - 1 / 24.0));
  double chi2 = 0;
  for (const auto& [perm, c] : counts) {
    CHECK(std::abs(c - expected) < 6 * sigma);
    chi2 += (c - expected) * (c - expected) / expected;
  }
  // 23 degrees of freedom: P(chi2 > 60) ~ 4e-5.
  CHECK(chi2 < 60);
}

TEMPLATE_TEST_CASE("MiniBatches visits every example once per epoch and gathers it exactly", "[io][batches]", float,
                   double) {
  using T = TestType;
  for (DataLayout layout : {DataLayout::example_major, DataLayout::feature_major}) {
    for (std::int64_t n : {1, 7, 64, 129}) {
      for (std::int64_t batch : {1, 3, 8, 64, 130}) {
        for (LastBatch last : {LastBatch::keep, LastBatch::drop}) {
          INFO("layout " << int(layout) << " n " << n << " batch " << batch << " last " << int(last));
          // 300 features span more than one 256-wide gather tile.
          const std::int64_t features = n == 7 ? 300 : 5 + n % 3;
          Synthetic<T> data(n, features, layout);
          sprig::MiniBatches<T> batches(data.storage, layout, data.labels,
                                        {.batch_size = batch, .last = last, .seed = 9});
          REQUIRE(batches.examples() == n);
          REQUIRE(batches.features() == features);
          const std::int64_t expected_batches = last == LastBatch::keep ? (n + batch - 1) / batch : n / batch;
          REQUIRE(batches.batches_per_epoch() == expected_batches);

          // Caller storage wider than a batch and with a padded stride; columns past
          // the batch must stay untouched.
          sprig::Matrix<T> x(features, batch + 2, batch + 5, T(-7));
          std::vector<std::int32_t> y(static_cast<std::size_t>(batch + 2), -7);
          for (std::uint64_t epoch = 0; epoch < 3; ++epoch) {
            batches.start_epoch(epoch);
            std::vector<int> seen(static_cast<std::size_t>(n), 0);
            std::int64_t total = 0, wrong = 0, clobbered = 0;
            for (std::int64_t k = 0; k < batches.batches_per_epoch(); ++k) {
              x.fill(T(-7));
              const auto b = batches.gather(k, x, y);
              const std::int64_t size = b.size();
              CHECK(size == std::min(batch, n - k * batch));
              CHECK(size == batches.batch_size(k));
              CHECK(b.x.rows() == features);
              CHECK(b.x.data() == x.data());
              REQUIRE(static_cast<std::int64_t>(b.labels.size()) == size);
              REQUIRE(static_cast<std::int64_t>(b.examples.size()) == size);
              for (std::int64_t j = 0; j < size; ++j) {
                const std::int64_t e = b.examples[static_cast<std::size_t>(j)];
                REQUIRE((e >= 0 && e < n));
                ++seen[static_cast<std::size_t>(e)];
                CHECK(b.labels[static_cast<std::size_t>(j)] == data.labels[static_cast<std::size_t>(e)]);
                for (std::int64_t f = 0; f < features; ++f) wrong += x(f, j) != Synthetic<T>::value(e, f);
              }
              for (std::int64_t f = 0; f < features; ++f)
                for (std::int64_t j = size; j < batch + 2; ++j) clobbered += x(f, j) != T(-7);
              total += size;
            }
            const std::int64_t covered = last == LastBatch::keep ? n : n - n % batch;
            CHECK(wrong == 0);
            CHECK(clobbered == 0);
            CHECK(total == covered);
            CHECK(std::count(seen.begin(), seen.end(), 1) == covered);
            CHECK(std::count(seen.begin(), seen.end(), 0) == n - covered);
          }
        }
      }
    }
  }
}

TEST_CASE("MiniBatches order is deterministic for a seed and differs across epochs and seeds", "[io][batches]") {
  Synthetic<float> data(100, 3, DataLayout::example_major);
  auto order = [&](std::uint64_t seed, std::uint64_t epoch, bool shuffle = true) {
    sprig::MiniBatches<float> b(data.storage, DataLayout::example_major, data.labels,
                                {.batch_size = 10, .shuffle = shuffle, .seed = seed});
    b.start_epoch(epoch);
    return std::vector<std::int64_t>(b.order().begin(), b.order().end());
  };
  CHECK(order(1, 0) == order(1, 0));
  CHECK(order(1, 3) == sprig::epoch_permutation(100, 1, 3));  // epoch e replays without 0..e-1
  CHECK(order(1, 0) != order(1, 1));
  CHECK(order(1, 0) != order(2, 0));
  std::vector<std::int64_t> iota(100);
  std::iota(iota.begin(), iota.end(), 0);
  CHECK(order(1, 5, false) == iota);

  // Restarting an epoch on one object reproduces it.
  sprig::MiniBatches<float> b(data.storage, DataLayout::example_major, data.labels, {.batch_size = 10, .seed = 1});
  b.start_epoch(2);
  const std::vector<std::int64_t> first(b.order().begin(), b.order().end());
  b.start_epoch(5);
  b.start_epoch(2);
  CHECK(std::vector<std::int64_t>(b.order().begin(), b.order().end()) == first);
}

TEST_CASE("MiniBatches allocates nothing per epoch or batch", "[io][batches]") {
  Synthetic<float> data(1000, 20, DataLayout::example_major);
  sprig::MiniBatches<float> batches(data.storage, DataLayout::example_major, data.labels, {.batch_size = 64});
  sprig::Matrix<float> x(20, 64);
  std::vector<std::int32_t> y(64);
  g_allocations = 0;
  g_count = true;
  for (std::uint64_t epoch = 0; epoch < 3; ++epoch) {
    batches.start_epoch(epoch);
    for (std::int64_t k = 0; k < batches.batches_per_epoch(); ++k) (void)batches.gather(k, x, y);
  }
  g_count = false;
  CHECK(g_allocations.load() == 0);
}

TEST_CASE("MiniBatches and gather_examples reject bad arguments", "[io][batches]") {
  Synthetic<double> data(10, 4, DataLayout::feature_major);
  using MB = sprig::MiniBatches<double>;
  std::vector<std::int32_t> nine(9);
  CHECK_THROWS_AS(MB(data.storage, DataLayout::feature_major, nine, {.batch_size = 4}), sprig::ShapeError);
  CHECK_THROWS_AS(MB(data.storage, DataLayout::feature_major, data.labels, {.batch_size = 0}), sprig::ArgumentError);
  // The same matrix read as example-major has 4 examples, not 10.
  CHECK_THROWS_AS(MB(data.storage, DataLayout::example_major, data.labels, {.batch_size = 4}), sprig::ShapeError);

  MB batches(data.storage, DataLayout::feature_major, data.labels, {.batch_size = 4});
  sprig::Matrix<double> x(4, 4);
  std::vector<std::int32_t> y(4);
  CHECK_THROWS_AS(batches.gather(3, x, y), sprig::ArgumentError);  // 3 batches: 4 + 4 + 2
  CHECK_THROWS_AS(batches.gather(-1, x, y), sprig::ArgumentError);
  sprig::Matrix<double> narrow(4, 3), tall(5, 4);
  CHECK_THROWS_AS(batches.gather(0, narrow, y), sprig::ShapeError);
  CHECK_THROWS_AS(batches.gather(0, tall, y), sprig::ShapeError);
  std::vector<std::int32_t> few(3);
  CHECK_THROWS_AS(batches.gather(0, x, few), sprig::ShapeError);
  CHECK(batches.gather(2, narrow, few).size() == 2);  // the last batch fits narrower storage

  const std::vector<std::int64_t> bad{0, 10};
  sprig::Matrix<double> out(4, 2);
  CHECK_THROWS_AS(sprig::gather_examples<double>(data.storage, DataLayout::feature_major, bad, out),
                  sprig::ArgumentError);
  const std::vector<std::int64_t> negative{-1};
  sprig::Matrix<double> one(4, 1);
  CHECK_THROWS_AS(sprig::gather_examples<double>(data.storage, DataLayout::feature_major, negative, one),
                  sprig::ArgumentError);
}

TEST_CASE("MiniBatches over an empty data set has no batches", "[io][batches]") {
  sprig::Matrix<float> empty(0, 5);
  std::vector<std::int32_t> none;
  sprig::MiniBatches<float> batches(empty, DataLayout::example_major, none, {.batch_size = 8});
  CHECK(batches.batches_per_epoch() == 0);
  CHECK(batches.order().empty());
}
