#include <sprig/dst/drop_grow.hpp>

#include <catch2/catch.hpp>

#include "drop_grow_test_support.hpp"
#include <algorithm>
#include <functional>
#include <limits>
#include <map>
#include <set>


using namespace sprig;
using namespace sprig::dst;
using namespace sprig::dst::testing;

using Pairs =
    std::tuple<std::pair<float, std::int16_t>, std::pair<float, std::int32_t>, std::pair<float, std::int64_t>,
               std::pair<double, std::int16_t>, std::pair<double, std::int32_t>, std::pair<double, std::int64_t>>;

namespace {

// The live positions (row * cols + col) kept by a drop step: live and not flagged.
template <class T, class I>
std::set<std::int64_t> kept_positions(const PaddedCSR<T, I>& W, const DropSet& drop) {
  std::set<std::int64_t> kept;
  W.for_each_live([&](std::int64_t i, std::int64_t c, T, std::int64_t s) {
    if (!drop.slot_flag[static_cast<std::size_t>(s)]) kept.insert(i * W.cols() + c);
  });
  return kept;
}

// select_drop's oracle: the k live positions of smallest (|w|, position), ascending.
template <class T, class I>
std::vector<std::int64_t> smallest_magnitude_positions(const PaddedCSR<T, I>& W, std::int64_t k) {
  std::vector<std::pair<T, std::int64_t>> all;  // (|w|, position)
  W.for_each_live([&](std::int64_t i, std::int64_t c, T v, std::int64_t) {
    all.push_back({std::abs(v), i * W.cols() + c});
  });
  std::sort(all.begin(), all.end());
  std::vector<std::int64_t> want;
  for (std::int64_t q = 0; q < k; ++q) want.push_back(all[static_cast<std::size_t>(q)].second);
  std::sort(want.begin(), want.end());
  return want;
}

// The gradient top-k's oracle: every position not kept whose gradient is not NaN, by |g|
// descending, then position ascending.
template <class T>
std::vector<ScoredPosition> gradient_oracle(const Matrix<T>& G, const std::set<std::int64_t>& kept) {
  std::vector<ScoredPosition> all;
  for (std::int64_t i = 0; i < G.rows(); ++i)
    for (std::int64_t c = 0; c < G.cols(); ++c)
      if (!kept.count(i * G.cols() + c) && !std::isnan(G(i, c))) all.push_back({std::abs(double(G(i, c))), i, c});
  std::stable_sort(all.begin(), all.end(), [](const auto& a, const auto& b) { return a.score > b.score; });
  return all;
}

// A block_gradient callback for top_gradient_positions that copies rows of G.
template <class T>
auto rows_of(const Matrix<T>& G) {
  return [&G](std::int64_t r0, std::int64_t n, MatrixView<T> out) {
    for (std::int64_t i = 0; i < n; ++i)
      for (std::int64_t c = 0; c < G.cols(); ++c) out(i, c) = G(r0 + i, c);
  };
}

}  // namespace

TEST_CASE("random_free_positions is uniform over the free positions", "[dst][set]") {
  // 6 x 5 layer with 8 live weights, 2 of them dropped: 24 free positions, draw 5 each time
  auto W = PaddedCSR<double, std::int32_t>::random_total(6, 5, 8, 4);
  const DropSet drop = select_drop(W, 2);
  const std::int64_t free = 30 - (8 - 2), k = 5, trials = 20000;
  std::vector<std::int64_t> hits(30, 0);
  for (std::int64_t t = 0; t < trials; ++t) {
    CounterRng rng(1, 2, static_cast<std::uint64_t>(t));
    const auto got = random_free_positions(W, drop, k, rng);
    REQUIRE(std::ssize(got) == k);
    std::set<std::int64_t> distinct;
    for (auto& p : got) distinct.insert(p.row * 5 + p.col);
    REQUIRE(std::ssize(distinct) == k);
    for (auto p : distinct) ++hits[p];
  }
  // each free position is chosen with probability k / free; 6 binomial standard deviations
  const double p = double(k) / double(free), mean = trials * p, sd = std::sqrt(trials * p * (1 - p));
  for (std::int64_t pos = 0; pos < 30; ++pos) {
    const bool kept =
        W.find(pos / 5, pos % 5) >= 0 && !std::binary_search(drop.positions.begin(), drop.positions.end(), pos);
    if (kept)
      CHECK(hits[pos] == 0);
    else
      CHECK(std::abs(double(hits[pos]) - mean) < 6 * sd);
  }
}

TEST_CASE("random_free_positions for more than half the free positions: uniform, and all of them at once",
          "[dst][set]") {
  // the same 6 x 5 layer, 17 of its 24 free positions each time (enumerated, not drawn)
  auto W = PaddedCSR<double, std::int32_t>::random_total(6, 5, 8, 4);
  const DropSet drop = select_drop(W, 2);
  const std::int64_t free = 24, k = 17, trials = 20000;
  std::vector<std::int64_t> hits(30, 0);
  for (std::int64_t t = 0; t < trials; ++t) {
    CounterRng rng(1, 3, static_cast<std::uint64_t>(t));
    const auto got = random_free_linear_positions(W, drop, k, rng);
    REQUIRE(std::ssize(got) == k);
    REQUIRE(std::is_sorted(got.begin(), got.end()));
    REQUIRE(std::adjacent_find(got.begin(), got.end()) == got.end());
    for (auto p : got) ++hits[static_cast<std::size_t>(p)];
  }
  const std::set<std::int64_t> kept = kept_positions(W, drop);
  const double p = double(k) / double(free), mean = trials * p, sd = std::sqrt(trials * p * (1 - p));
  for (std::int64_t pos = 0; pos < 30; ++pos) {
    if (kept.count(pos))
      CHECK(hits[static_cast<std::size_t>(pos)] == 0);
    else
      CHECK(std::abs(double(hits[static_cast<std::size_t>(pos)]) - mean) < 6 * sd);
  }
  // every weight of a full 300 x 1000 layer dropped, every position grown again: drawing
  // them took ever more rounds for the last ones (46 s)
  auto full = PaddedCSR<float, std::int32_t>::random_density(300, 1000, 1.0, 5);
  const DropSet all = select_drop(full, full.nnz());
  CounterRng rng(9);
  const auto every = random_free_linear_positions(full, all, full.nnz(), rng);
  REQUIRE(std::ssize(every) == full.nnz());
  for (std::int64_t q = 0; q < std::ssize(every); ++q) REQUIRE(every[static_cast<std::size_t>(q)] == q);
}

TEMPLATE_LIST_TEST_CASE("drop removes exactly the k smallest magnitudes", "[dst][drop]", Pairs) {
  using T = typename TestType::first_type;
  using I = typename TestType::second_type;
  auto W = PaddedCSR<T, I>::random_density(37, 29, 0.3, 11);
  // distinct magnitudes plus one planted tie
  std::int64_t n = 0;
  W.for_each_live([&](std::int64_t, std::int64_t, T, std::int64_t s) {
    ++n;
    W.values()[s] = T(n % 2 ? 1 : -1) * T(n % 50);  // ties in magnitude, both signs
  });
  for (std::int64_t k : {std::int64_t{0}, std::int64_t{1}, std::int64_t{17}, W.nnz()}) {
    const auto slots = smallest_magnitude_slots(W, k);
    REQUIRE(std::ssize(slots) == k);
    T max_dropped = 0;
    std::set<std::int64_t> chosen(slots.begin(), slots.end());
    REQUIRE(std::ssize(chosen) == k);
    for (auto s : slots) max_dropped = std::max(max_dropped, std::abs(W.values()[s]));
    W.for_each_live([&](std::int64_t, std::int64_t, T v, std::int64_t s) {
      if (!chosen.count(s)) CHECK(std::abs(v) >= max_dropped);
    });
  }
  CHECK_THROWS_AS(smallest_magnitude_slots(W, W.nnz() + 1), ArgumentError);
}

TEMPLATE_LIST_TEST_CASE("drop/grow keeps the live count, zeroes new state, keeps survivors", "[dst][grow]", Pairs) {
  using T = typename TestType::first_type;
  using I = typename TestType::second_type;
  CounterRng rng(3);
  auto W = PaddedCSR<T, I>::random_density(23, 31, 0.2, 5, 0.0);  // no padding: growth relocates rows
  // per-slot state tagged with the weight's position
  auto tag = [&](std::int64_t i, std::int64_t c) { return T(i * W.cols() + c + 1); };
  std::vector<T> state(static_cast<std::size_t>(W.storage_size()), T(0));
  W.for_each_live([&](std::int64_t i, std::int64_t c, T, std::int64_t s) { state[s] = tag(i, c); });
  for (int round = 0; round < 20; ++round) {
    const std::int64_t live_before = W.nnz();
    const std::int64_t k = live_before / 4;
    std::map<std::int64_t, T> before;
    W.for_each_live([&](std::int64_t i, std::int64_t c, T v, std::int64_t) { before[i * W.cols() + c] = v; });
    const DropSet drop = select_drop(W, k);
    const std::set<std::int64_t> dropped(drop.positions.begin(), drop.positions.end());
    const DropSlots listed = drop_slots(W, drop);
    CHECK(positions_of(W, listed.slots) == [&] {  // rows/positions agree with the slot lookup
      std::vector<std::int64_t> p;
      for (std::size_t q = 0; q < listed.slots.size(); ++q)
        p.push_back(listed.rows[q] * W.cols() + W.col_indices()[listed.slots[q]]);
      return p;
    }());
    // grow: random free positions, plus (every other round) a just-dropped one
    auto grow = random_free_positions(W, drop, k, rng);
    for (auto& p : grow) {
      const bool live = W.find(p.row, p.col) >= 0;
      CHECK((!live || dropped.count(p.row * W.cols() + p.col)));  // never a kept position
    }
    if (round % 2 == 0 && k > 0) {
      const std::int64_t pos = drop.positions.front();
      bool present = false;
      for (auto& p : grow) present |= p.row * W.cols() + p.col == pos;
      if (!present) grow.back() = {0.0, pos / W.cols(), pos % W.cols()};
    }
    SlotLog log;
    const auto stats = apply_drop_grow(W, drop, std::span<const ScoredPosition>(grow), log);
    log.apply(state);
    W.check_invariants();
    CHECK(W.nnz() == live_before);
    CHECK(stats.dropped == stats.grown);
    CHECK(stats.dropped + stats.regrown == k);
    std::set<std::int64_t> grown_pos;
    for (auto& p : grow) grown_pos.insert(p.row * W.cols() + p.col);
    W.for_each_live([&](std::int64_t i, std::int64_t c, T v, std::int64_t s) {
      const std::int64_t pos = i * W.cols() + c;
      if (before.count(pos)) {  // survivor or regrown: value and state untouched
        CHECK(v == before[pos]);
        CHECK(state[s] == tag(i, c));
        CHECK((!dropped.count(pos) || grown_pos.count(pos)));
      } else {  // newly grown: zero value and state
        CHECK(grown_pos.count(pos) == 1);
        CHECK(v == T(0));
        CHECK(state[s] == T(0));
        state[s] = tag(i, c);  // from now on it is an ordinary weight
        W.values()[s] = T(0.5) + T(round);
      }
    });
    for (std::int64_t s = 0; s < W.storage_size(); ++s)
      if (W.col_indices()[s] < 0) CHECK(state[s] == T(0));
  }
}

TEMPLATE_LIST_TEST_CASE("streamed gradient top-k equals brute force over the dense gradient", "[dst][rigl]", Pairs) {
  using T = typename TestType::first_type;
  using I = typename TestType::second_type;
  CounterRng rng(9);
  for (int trial = 0; trial < 10; ++trial) {
    const std::int64_t M = 1 + rng.uniform_below(40), K = 1 + rng.uniform_below(40);
    auto W = PaddedCSR<T, I>::random_density(M, K, 0.25, 100 + trial);
    Matrix<T> G(M, K);
    for (std::int64_t i = 0; i < M; ++i)
      for (std::int64_t c = 0; c < K; ++c) G(i, c) = T(static_cast<double>(rng.uniform_below(7)) - 3.0);  // ties
    const DropSet drop = select_drop(W, W.nnz() / 3);
    const std::int64_t k = drop.size();
    // brute force: every not-kept position, sorted by |g| desc then position
    std::vector<ScoredPosition> all = gradient_oracle(G, kept_positions(W, drop));
    all.resize(static_cast<std::size_t>(std::min<std::int64_t>(k, std::ssize(all))));
    Matrix<T> block;
    const std::int64_t block_rows = 1 + rng.uniform_below(7);
    const auto got = top_gradient_positions(W, drop, k, block_rows, rows_of(G), block);
    REQUIRE(got.size() == all.size());
    for (std::size_t q = 0; q < got.size(); ++q) {
      CHECK(got[q].row == all[q].row);
      CHECK(got[q].col == all[q].col);
    }
    CHECK(block.rows() <= block_rows);  // memory bounded by the block
  }
}

TEMPLATE_LIST_TEST_CASE(
    "streamed gradient top-k: NaN never chosen, kept positions never chosen, many cuts, k above the candidates",
    "[dst][rigl]", Pairs) {
  using T = typename TestType::first_type;
  using I = typename TestType::second_type;
  CounterRng rng(31);
  for (int trial = 0; trial < 8; ++trial) {
    const std::int64_t M = 20 + rng.uniform_below(100), K = 20 + rng.uniform_below(100);
    auto W = PaddedCSR<T, I>::random_density(M, K, 0.3, 500 + trial);
    const DropSet drop = select_drop(W, W.nnz() / 4);
    const std::set<std::int64_t> kept = kept_positions(W, drop);
    // gradients over 60 binades, zeros (whole zero rows too), ties, NaN and infinities, and
    // the largest magnitudes at kept positions (which must still be skipped)
    Matrix<T> G(M, K);
    for (std::int64_t i = 0; i < M; ++i) {
      const bool zero_row = rng.uniform_below(8) == 0;
      for (std::int64_t c = 0; c < K; ++c) {
        const auto kind = rng.uniform_below(30);
        T g;
        if (zero_row || kind == 0)
          g = T(0);
        else if (kind == 1)
          g = std::numeric_limits<T>::quiet_NaN();
        else if (kind == 2)
          g = -std::numeric_limits<T>::infinity();
        else if (kind < 6)
          g = T(rng.uniform_below(3));
        else
          g = static_cast<T>(std::ldexp(rng.uniform(0.5, 1.0), static_cast<int>(rng.uniform_below(60)) - 50));
        if (kept.count(i * K + c) && rng.uniform_below(2)) g = T(1e30);
        G(i, c) = rng.uniform_below(2) ? g : -g;
      }
    }
    const std::vector<ScoredPosition> all = gradient_oracle(G, kept);
    const auto gradient = rows_of(G);
    // k from 1 (a cut on every row) to more than there are candidates
    for (std::int64_t k : {std::int64_t{1}, std::int64_t{7}, drop.size(), std::ssize(all) / 2, std::ssize(all) + 5}) {
      Matrix<T> block;
      const std::int64_t block_rows = 1 + rng.uniform_below(9);
      const auto got = top_gradient_positions(W, drop, k, block_rows, gradient, block);
      const std::size_t want = static_cast<std::size_t>(std::min<std::int64_t>(k, std::ssize(all)));
      REQUIRE(got.size() == want);
      for (std::size_t q = 0; q < want; ++q) {
        REQUIRE(got[q].row == all[q].row);
        REQUIRE(got[q].col == all[q].col);
        REQUIRE(got[q].score == all[q].score);
      }
      // the linear form: the same positions, ascending
      const auto linear = top_gradient_linear_positions(W, drop, k, block_rows, gradient, block);
      std::vector<std::int64_t> expect;
      for (std::size_t q = 0; q < want; ++q) expect.push_back(all[q].row * K + all[q].col);
      std::sort(expect.begin(), expect.end());
      REQUIRE(linear == expect);
    }
  }
}

TEMPLATE_LIST_TEST_CASE("select_drop equals the sorted (|w|, position) oracle, ties and relocated rows included",
                        "[dst][drop]", Pairs) {
  using T = typename TestType::first_type;
  using I = typename TestType::second_type;
  CounterRng rng(21);
  for (int trial = 0; trial < 12; ++trial) {
    const std::int64_t M = 1 + rng.uniform_below(30), K = 1 + rng.uniform_below(30);
    auto W = PaddedCSR<T, I>::random_density(M, K, 0.1 + 0.1 * (trial % 5), 300 + trial, 0.0);
    // grow a few rows past their capacity so regions leave row order, then few magnitudes
    // (many ties, both signs)
    for (int g = 0; g < 5; ++g) {
      const std::int64_t i = rng.uniform_below(M), c = rng.uniform_below(K);
      if (W.find(i, c) < 0) W.insert(i, c, T(1));
    }
    W.for_each_live([&](std::int64_t, std::int64_t, T, std::int64_t s) {
      W.values()[s] = T(static_cast<double>(rng.uniform_below(5)) - 2.0);
    });
    for (std::int64_t k : {std::int64_t{0}, std::int64_t{1}, W.nnz() / 3, W.nnz()}) {
      const DropSet d = select_drop(W, k);
      const std::vector<std::int64_t> want = smallest_magnitude_positions(W, k);
      REQUIRE(d.positions == want);
      REQUIRE(d.size() == k);
      const DropSlots listed = drop_slots(W, d);
      REQUIRE(std::ssize(listed.slots) == k);
      REQUIRE(std::is_sorted(listed.slots.begin(), listed.slots.end(), std::greater<>()));
      std::int64_t flagged = 0;
      for (auto f : d.slot_flag) flagged += f;
      CHECK(flagged == k);
      for (std::size_t q = 0; q < listed.slots.size(); ++q) {
        const std::int64_t s = listed.slots[q], r = listed.rows[q];
        CHECK(d.slot_flag[static_cast<std::size_t>(s)] == 1);
        CHECK(s >= W.row_start(r));
        CHECK(s < W.row_start(r) + W.row_nnz(r));
        CHECK(std::binary_search(want.begin(), want.end(), r * K + W.col_indices()[s]));
      }
    }
  }
}

TEMPLATE_LIST_TEST_CASE("select_drop on magnitudes spread over many binades equals the sorted oracle", "[dst][drop]",
                        Pairs) {
  // Thousands of weights whose magnitudes span 2^-40..2^10 (and zeros, infinities, ties at
  // a few quantised values): the k-th smallest falls in every kind of histogram bucket,
  // from one holding a single weight to one holding most of them.
  using T = typename TestType::first_type;
  using I = typename TestType::second_type;
  CounterRng rng(23);
  for (int trial = 0; trial < 6; ++trial) {
    const std::int64_t M = 40 + rng.uniform_below(60), K = 50 + rng.uniform_below(60);
    auto W = PaddedCSR<T, I>::random_density(M, K, 0.5, 700 + trial);
    W.for_each_live([&](std::int64_t, std::int64_t, T, std::int64_t s) {
      const auto kind = rng.uniform_below(20);
      T v;
      if (trial == 5)
        v = T(1) + T(rng.uniform_below(3)) * std::numeric_limits<T>::epsilon();  // one bucket
      else if (kind == 0)
        v = T(0);
      else if (kind == 1)
        v = std::numeric_limits<T>::infinity();
      else if (kind < 5)
        v = T(rng.uniform_below(4)) / T(8);
      else
        v = static_cast<T>(std::ldexp(rng.uniform(0.5, 1.0), static_cast<int>(rng.uniform_below(50)) - 40));
      W.values()[s] = rng.uniform_below(2) ? v : -v;
    });
    for (std::int64_t k : {std::int64_t{1}, W.nnz() / 10, W.nnz() / 2, W.nnz() - 1, W.nnz()}) {
      const DropSet d = select_drop(W, k);
      const std::vector<std::int64_t> want = smallest_magnitude_positions(W, k);
      REQUIRE(d.positions == want);
      std::int64_t flagged = 0;
      W.for_each_live([&](std::int64_t i, std::int64_t c, T, std::int64_t s) {
        const bool dropped = std::binary_search(want.begin(), want.end(), i * K + c);
        CHECK(d.slot_flag[static_cast<std::size_t>(s)] == (dropped ? 1 : 0));
        flagged += d.slot_flag[static_cast<std::size_t>(s)];
      });
      CHECK(flagged == k);
    }
  }
}

TEST_CASE("select_drop rejects NaN weights with their position", "[dst][drop]") {
  auto W = PaddedCSR<float, std::int32_t>::random_density(8, 8, 0.5, 3);
  W.values()[W.row_start(2)] = std::numeric_limits<float>::quiet_NaN();
  CHECK_THROWS_WITH(select_drop(W, 3), Catch::Contains("NaN") && Catch::Contains("(2, "));
}

TEST_CASE("sort_below sorts like std::sort (radix passes over the position bits)", "[dst]") {
  CounterRng rng(77);
  for (int trial = 0; trial < 60; ++trial) {
    // small layers (std::sort below 2^11 positions, duplicates too), then 2^11..2^15 positions
    // in layers of 2^10 to about 2^36 positions: 1 to 4 radix passes, the last one partial
    const bool large = trial >= 40;
    const std::int64_t rows =
        large ? 1 + rng.uniform_below(std::uint64_t{1} << rng.uniform_below(19)) : 1 + rng.uniform_below(50);
    const std::int64_t cols =
        large ? (std::int64_t{1} << 10) + rng.uniform_below(std::uint64_t{1} << 17) : 1 + rng.uniform_below(50);
    const std::int64_t n = large ? (std::int64_t{1} << 11) + rng.uniform_below(std::uint64_t{1} << 15)
                                 : rng.uniform_below(static_cast<std::uint64_t>(3 * rows * cols));
    std::vector<std::int64_t> pos(static_cast<std::size_t>(n));
    for (auto& p : pos) p = static_cast<std::int64_t>(rng.uniform_below(static_cast<std::uint64_t>(rows * cols)));
    auto want = pos;
    std::sort(want.begin(), want.end());
    sort_below(pos, rows * cols);
    REQUIRE(pos == want);
  }
}
