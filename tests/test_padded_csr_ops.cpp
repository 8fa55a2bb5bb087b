// Structural operations of PaddedCSR under long random sequences, against a std::map model,
// and the slot-move contract (SlotLog) that per-slot optimizer state relies on.
#include <sprig/core/padded_csr.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <random>
#include <set>
#include <tuple>
#include <utility>
#include <vector>

namespace {

using AllPairs =
    std::tuple<std::pair<float, std::int16_t>, std::pair<float, std::int32_t>, std::pair<float, std::int64_t>,
               std::pair<double, std::int16_t>, std::pair<double, std::int32_t>, std::pair<double, std::int64_t>>;

using Key = std::pair<std::int64_t, std::int64_t>;

// REQUIRE only when the condition fails: the same report, without the cost of recording
// millions of passing assertions in the per-step checks.
#define FAST_REQUIRE(...)                     \
  do {                                        \
    if (!(__VA_ARGS__)) REQUIRE(__VA_ARGS__); \
  } while (0)

// The model of a matrix under test plus two per-slot state arrays that must follow their
// weights through every SlotLog: each live slot carries tag(row, col), every other slot 0.
template <class T, class Index>
struct Harness {
  using Matrix = sprig::PaddedCSR<T, Index>;
  Matrix m;
  std::map<Key, T> model;
  std::vector<double> state;        // std::vector
  sprig::AlignedVector<T> state_t;  // AlignedVector, the type optimizers use
  std::mt19937_64 gen;
  std::uint64_t version = 0;

  Harness(Matrix matrix, std::uint64_t seed) : m(std::move(matrix)), gen(seed) {
    m.for_each_live([&](std::int64_t i, std::int64_t c, T v, std::int64_t) { model[{i, c}] = v; });
    state.assign(static_cast<std::size_t>(m.storage_size()), 0.0);
    state_t.assign(static_cast<std::size_t>(m.storage_size()), T(0));
    m.for_each_live([&](std::int64_t i, std::int64_t c, T, std::int64_t s) { set_tag(s, i, c); });
    version = m.topology_version();
  }

  // Exact in float for every shape used here (rows * cols < 2^24).
  double tag(std::int64_t i, std::int64_t c) const { return static_cast<double>(i * m.cols() + c + 1); }
  void set_tag(std::int64_t s, std::int64_t i, std::int64_t c) {
    state[static_cast<std::size_t>(s)] = tag(i, c);
    state_t[static_cast<std::size_t>(s)] = static_cast<T>(tag(i, c));
  }

  std::int64_t rand_below(std::int64_t n) { return std::uniform_int_distribution<std::int64_t>(0, n - 1)(gen); }
  T rand_value() {
    // Never 0: a live zero would be indistinguishable from padding in to_dense comparisons.
    T v = static_cast<T>(std::uniform_real_distribution<double>(0.5, 2.0)(gen));
    return rand_below(2) ? v : -v;
  }

  void replay(const sprig::SlotLog& log) {
    log.apply(state);
    log.apply(state_t);
  }

  // A newly born slot must start with zero state (then the test tags it).
  void born(std::int64_t s, std::int64_t i, std::int64_t c) {
    INFO("born slot " << s << " for (" << i << ", " << c << ")");
    REQUIRE(s >= 0);
    REQUIRE(s < std::ssize(state));
    REQUIRE(state[static_cast<std::size_t>(s)] == 0.0);
    REQUIRE(state_t[static_cast<std::size_t>(s)] == T(0));
    set_tag(s, i, c);
  }

  void expect_version_bumped() {
    REQUIRE(m.topology_version() > version);
    version = m.topology_version();
  }
  void expect_version_same() const { REQUIRE(m.topology_version() == version); }

  // Everything observable against the model and the state arrays.
  void verify() {
    REQUIRE_NOTHROW(m.check_invariants());
    const std::int64_t R = m.rows(), C = m.cols();
    FAST_REQUIRE(m.nnz() == std::ssize(model));
    if (R * C > 0) FAST_REQUIRE(m.density() == Approx(static_cast<double>(model.size()) / static_cast<double>(R * C)));

    // for_each_live: rows in order, each entry once, values as in the model, slot coherent.
    std::map<Key, T> seen;
    std::int64_t last_row = -1;
    std::vector<std::uint8_t> live(static_cast<std::size_t>(m.storage_size()), 0);
    m.for_each_live([&](std::int64_t i, std::int64_t c, T v, std::int64_t s) {
      FAST_REQUIRE(i >= last_row);
      last_row = i;
      FAST_REQUIRE(seen.emplace(Key{i, c}, v).second);
      FAST_REQUIRE(m.col_indices()[static_cast<std::size_t>(s)] == c);
      FAST_REQUIRE(m.values()[static_cast<std::size_t>(s)] == v);
      FAST_REQUIRE(s >= m.row_start(i));
      FAST_REQUIRE(s < m.row_start(i) + m.row_nnz(i));
      live[static_cast<std::size_t>(s)] = 1;
      // The state contract: the weight in slot s carries the state of (i, c).
      INFO("slot " << s << " holds (" << i << ", " << c << ")");
      FAST_REQUIRE(state[static_cast<std::size_t>(s)] == tag(i, c));
      FAST_REQUIRE(state_t[static_cast<std::size_t>(s)] == static_cast<T>(tag(i, c)));
    });
    FAST_REQUIRE(seen == model);

    // State arrays have the storage's size and are zero wherever no weight lives.
    FAST_REQUIRE(std::ssize(state) == m.storage_size());
    FAST_REQUIRE(std::ssize(state_t) == m.storage_size());
    for (std::size_t s = 0; s < live.size(); ++s)
      if (!live[s]) {
        INFO("non-live slot " << s);
        FAST_REQUIRE(state[s] == 0.0);
        FAST_REQUIRE(state_t[s] == T(0));
        FAST_REQUIRE(m.col_indices()[s] == Index(-1));
        FAST_REQUIRE(m.values()[s] == T(0));
      }

    // row(i) agrees with row_start/row_nnz.
    for (std::int64_t i = 0; i < R; ++i) {
      auto r = m.row(i);
      FAST_REQUIRE(r.start == m.row_start(i));
      FAST_REQUIRE(std::ssize(r.cols) == m.row_nnz(i));
      FAST_REQUIRE(std::ssize(r.values) == m.row_nnz(i));
    }

    // find: every live entry, and a few absent positions.
    for (const auto& [k, v] : model) {
      const std::int64_t s = m.find(k.first, k.second);
      FAST_REQUIRE(s >= 0);
      FAST_REQUIRE(m.col_indices()[static_cast<std::size_t>(s)] == k.second);
      FAST_REQUIRE(m.values()[static_cast<std::size_t>(s)] == v);
    }
    if (R * C > 0)
      for (int q = 0; q < 8; ++q) {
        const std::int64_t i = rand_below(R), c = rand_below(C);
        FAST_REQUIRE((m.find(i, c) >= 0) == (model.count({i, c}) == 1));
      }

    // to_csr: the model's (row, col) order is exactly CSR order.
    const auto csr = m.to_csr();
    FAST_REQUIRE(csr.rows == R);
    FAST_REQUIRE(csr.cols == C);
    FAST_REQUIRE(std::ssize(csr.row_ptr) == R + 1);
    FAST_REQUIRE(csr.row_ptr[0] == 0);
    FAST_REQUIRE(std::ssize(csr.col_indices) == m.nnz());
    FAST_REQUIRE(std::ssize(csr.values) == m.nnz());
    {
      auto it = model.begin();
      for (std::int64_t i = 0; i < R; ++i) {
        FAST_REQUIRE(csr.row_ptr[i + 1] - csr.row_ptr[i] == m.row_nnz(i));
        for (std::int64_t p = csr.row_ptr[i]; p < csr.row_ptr[i + 1]; ++p, ++it) {
          FAST_REQUIRE(it != model.end());
          FAST_REQUIRE(it->first == Key{i, static_cast<std::int64_t>(csr.col_indices[p])});
          FAST_REQUIRE(csr.values[p] == it->second);
        }
      }
      FAST_REQUIRE(it == model.end());
    }
  }

  void verify_dense() const {
    const auto d = m.to_dense();
    FAST_REQUIRE(d.rows() == m.rows());
    FAST_REQUIRE(d.cols() == m.cols());
    for (std::int64_t i = 0; i < m.rows(); ++i)
      for (std::int64_t c = 0; c < m.cols(); ++c) {
        auto it = model.find({i, c});
        FAST_REQUIRE(d(i, c) == (it == model.end() ? T(0) : it->second));
      }
  }

  // A random live slot of row i (row must be non-empty).
  std::int64_t random_live_slot(std::int64_t i) { return m.row_start(i) + rand_below(m.row_nnz(i)); }

  // A row index with at least one live entry, or -1.
  std::int64_t random_nonempty_row() {
    if (model.empty()) return -1;
    auto it = model.begin();
    std::advance(it, rand_below(std::ssize(model)));
    return it->first.first;
  }

  // ---- one random step ----------------------------------------------------------------

  void step() {
    const std::int64_t R = m.rows(), C = m.cols();
    sprig::SlotLog log;
    const int op = static_cast<int>(rand_below(100));
    if (op < 30) {  // insert / insert_new at a random position
      const std::int64_t i = rand_below(R), c = rand_below(C);
      const T v = rand_value();
      const bool was_live = model.count({i, c}) == 1;
      if (was_live) {
        INFO("insert of live (" << i << ", " << c << ")");
        REQUIRE_THROWS_AS(m.insert(i, c, v, &log), sprig::ArgumentError);
        REQUIRE(log.empty());
        expect_version_same();
        REQUIRE(m.values()[static_cast<std::size_t>(m.find(i, c))] == model[{i, c}]);
        return;
      }
      const std::int64_t s = rand_below(2) ? m.insert(i, c, v, &log) : m.insert_new(i, c, v, &log);
      expect_version_bumped();
      replay(log);
      born(s, i, c);
      model[{i, c}] = v;
      REQUIRE(m.find(i, c) == s);
    } else if (op < 45) {  // erase(row, col), live or not
      const std::int64_t i = rand_below(R), c = rand_below(C);
      const bool was_live = model.count({i, c}) == 1;
      REQUIRE(m.erase(i, c, &log) == was_live);
      if (was_live) {
        expect_version_bumped();
        model.erase({i, c});
      } else {
        expect_version_same();
        REQUIRE(log.empty());
      }
      replay(log);
    } else if (op < 57) {  // erase_slot of a live slot, or a rejected non-live one
      const std::int64_t i = random_nonempty_row();
      if (i < 0 || rand_below(8) == 0) {
        // Non-live: the first padding slot of a row (if any) or a live slot named under a
        // wrong row.
        const std::int64_t r = rand_below(R);
        std::int64_t bad = m.row_start(r) + m.row_nnz(r);
        if (bad >= m.row_start(r) + m.row_capacity(r)) bad = m.row_start(r) - 1;
        INFO("erase_slot of non-live slot " << bad << " in row " << r);
        REQUIRE_THROWS_AS(m.erase_slot(r, bad, &log), sprig::ArgumentError);
        REQUIRE(log.empty());
        expect_version_same();
        return;
      }
      const std::int64_t s = random_live_slot(i);
      const std::int64_t c = m.col_indices()[static_cast<std::size_t>(s)];
      const std::int64_t last = m.row_start(i) + m.row_nnz(i) - 1;
      REQUIRE(m.erase_slot(i, s, &log) == last);  // the freed slot is the row's old last one
      expect_version_bumped();
      model.erase({i, c});
      replay(log);
    } else if (op < 65) {  // erase_slots: a random subset of live slots, across rows
      std::vector<std::int64_t> all;
      m.for_each_live([&](std::int64_t, std::int64_t, T, std::int64_t s) { all.push_back(s); });
      std::shuffle(all.begin(), all.end(), gen);
      all.resize(static_cast<std::size_t>(rand_below(std::min<std::int64_t>(std::ssize(all), 12) + 1)));
      if (!all.empty() && rand_below(6) == 0) {  // a repeated slot: rejected, nothing changes
        all.push_back(all.front());
        REQUIRE_THROWS_AS(m.erase_slots(all, &log), sprig::ArgumentError);
        REQUIRE(log.empty());
        expect_version_same();
        return;
      }
      if (rand_below(6) == 0) {  // one non-live slot among live ones: rejected, nothing changes
        const std::int64_t r = rand_below(R);
        if (m.row_nnz(r) < m.row_capacity(r)) {
          all.push_back(m.row_start(r) + m.row_nnz(r));
          std::shuffle(all.begin(), all.end(), gen);
          REQUIRE_THROWS_AS(m.erase_slots(all, &log), sprig::ArgumentError);
          REQUIRE(log.empty());
          expect_version_same();
          return;
        }
      }
      std::vector<Key> keys;
      for (std::int64_t s : all) {
        const auto it = std::find_if(model.begin(), model.end(),
                                     [&](const auto& e) { return m.find(e.first.first, e.first.second) == s; });
        REQUIRE(it != model.end());
        keys.push_back(it->first);
      }
      m.erase_slots(all, &log);
      if (!all.empty()) expect_version_bumped();
      for (const Key& k : keys) model.erase(k);
      replay(log);
    } else if (op < 77) {  // rewrite_row with random distinct columns, sometimes past capacity
      const std::int64_t i = rand_below(R);
      std::int64_t n = rand_below(std::min<std::int64_t>(C, 2 * m.row_capacity(i) + 2) + 1);
      std::vector<Index> cols(static_cast<std::size_t>(C));
      for (std::int64_t c = 0; c < C; ++c) cols[static_cast<std::size_t>(c)] = static_cast<Index>(c);
      std::shuffle(cols.begin(), cols.end(), gen);
      cols.resize(static_cast<std::size_t>(n));
      std::vector<T> vals(static_cast<std::size_t>(n));
      for (T& v : vals) v = rand_value();
      if (n >= 2 && rand_below(6) == 0) {  // a duplicate column: rejected, nothing changes
        cols[0] = cols[1];
        REQUIRE_THROWS_AS(m.rewrite_row(i, std::span<const Index>(cols), std::span<const T>(vals), &log),
                          sprig::ArgumentError);
        REQUIRE(log.empty());
        expect_version_same();
        return;
      }
      m.rewrite_row(i, std::span<const Index>(cols), std::span<const T>(vals), &log);
      expect_version_bumped();
      for (auto it = model.lower_bound({i, 0}); it != model.end() && it->first.first == i;) it = model.erase(it);
      replay(log);
      // The row's state starts from zero; every rewritten entry is a newborn.
      REQUIRE(m.row_nnz(i) == n);
      for (std::int64_t q = 0; q < n; ++q) {
        const std::int64_t c = cols[static_cast<std::size_t>(q)];
        const std::int64_t s = m.find(i, c);
        REQUIRE(m.values()[static_cast<std::size_t>(s)] == vals[static_cast<std::size_t>(q)]);
        born(s, i, c);
        model[{i, c}] = vals[static_cast<std::size_t>(q)];
      }
    } else if (op < 85) {  // reserve_row: relocates exactly when the capacity must grow
      const std::int64_t i = rand_below(R);
      const std::int64_t old_cap = m.row_capacity(i), old_start = m.row_start(i);
      const std::int64_t want = rand_below(2 * old_cap + 3);
      m.reserve_row(i, want, &log);
      const std::int64_t expect_cap = std::max(old_cap, std::min(want, std::max(C, old_cap)));
      REQUIRE(m.row_capacity(i) == expect_cap);
      if (expect_cap > old_cap) {
        expect_version_bumped();
        REQUIRE(m.row_start(i) != old_start);
      } else {
        expect_version_same();
        REQUIRE(m.row_start(i) == old_start);
        REQUIRE(log.empty());
      }
      replay(log);
    } else if (op < 90) {  // compact, sometimes with a new padding ratio (0 included)
      const double ratios[] = {0.0, 0.2, 0.5, 1.0};
      const bool new_ratio = rand_below(2) == 0;
      const double ratio = new_ratio ? ratios[rand_below(4)] : m.padding_ratio();
      std::vector<std::pair<std::int64_t, std::vector<Index>>> before;  // in-row order is kept
      for (std::int64_t i = 0; i < R; ++i) {
        auto r = m.row(i);
        before.emplace_back(i, std::vector<Index>(r.cols.begin(), r.cols.end()));
      }
      if (new_ratio)
        m.compact(ratio, &log);
      else
        m.compact(&log);
      expect_version_bumped();
      REQUIRE(m.dead_slots() == 0);
      REQUIRE(m.padding_ratio() == ratio);
      std::int64_t expect_start = 0;
      for (std::int64_t i = 0; i < R; ++i) {
        REQUIRE(m.row_start(i) == expect_start);
        REQUIRE(m.row_capacity(i) ==
                std::max<std::int64_t>(1, static_cast<std::int64_t>(
                                              std::ceil(static_cast<double>(m.row_nnz(i)) * (1.0 + ratio)))));
        expect_start += m.row_capacity(i);
        auto r = m.row(i);
        REQUIRE(std::vector<Index>(r.cols.begin(), r.cols.end()) == before[static_cast<std::size_t>(i)].second);
      }
      REQUIRE(m.storage_size() == expect_start);
      replay(log);
    } else {  // value change: not a topology change
      const std::int64_t i = random_nonempty_row();
      if (i < 0) return;
      const std::int64_t s = random_live_slot(i);
      const T v = rand_value();
      m.values()[static_cast<std::size_t>(s)] = v;
      model[{i, static_cast<std::int64_t>(m.col_indices()[static_cast<std::size_t>(s)])}] = v;
      expect_version_same();
    }
  }
};

struct Config {
  std::int64_t rows, cols;
  double ratio;
  double density;
};

}  // namespace

TEMPLATE_LIST_TEST_CASE("PaddedCSR: random operation sequences agree with a map model and move slot state",
                        "[padded_csr][ops]", AllPairs) {
  using T = typename TestType::first_type;
  using Index = typename TestType::second_type;
  // Narrow rows (cols 1..6) fill completely and grow past capacity all the time; padding
  // ratio 0 leaves no slack at all, so every insert into a non-empty row relocates.
  const Config configs[] = {{9, 23, 0.2, 0.1}, {5, 6, 0.0, 0.5}, {1, 40, 0.0, 0.0},
                            {13, 3, 0.5, 0.3}, {6, 1, 0.2, 0.0}, {20, 64, 1.0, 0.05}};
  std::uint64_t seed = 1;
  for (const Config& cfg : configs) {
    for (int start = 0; start < 2; ++start, ++seed) {
      INFO("shape " << cfg.rows << "x" << cfg.cols << ", ratio " << cfg.ratio << ", density " << cfg.density
                    << ", start " << start << ", seed " << seed);
      auto m = start == 0
                   ? sprig::PaddedCSR<T, Index>(cfg.rows, cfg.cols, cfg.ratio)
                   : sprig::PaddedCSR<T, Index>::random_density(cfg.rows, cfg.cols, cfg.density, seed, cfg.ratio);
      Harness<T, Index> h(std::move(m), seed);
      h.verify();
      constexpr int kSteps = 2000;  // x 12 runs: 24000 steps per (T, Index)
      for (int t = 0; t < kSteps; ++t) {
        INFO("step " << t);
        h.step();
        h.verify();
        if (t % 97 == 0) h.verify_dense();
      }
      h.verify_dense();
    }
  }
}

TEMPLATE_LIST_TEST_CASE("PaddedCSR: growing a row past its capacity relocates it and its state follows",
                        "[padded_csr][ops][slots]", AllPairs) {
  using T = typename TestType::first_type;
  using Index = typename TestType::second_type;
  const std::int64_t R = 4, C = 50;
  Harness<T, Index> h(sprig::PaddedCSR<T, Index>::random_per_row(R, C, 3, 7), 11);
  h.verify();
  // Fill row 1 column by column: capacity 4 (ceil(3 * 1.2)) doubles to 8, 16, 32, 64.
  const std::int64_t start0 = h.m.row_start(1);
  std::int64_t relocations = 0, prev_start = start0;
  for (std::int64_t c = 0; c < C; ++c) {
    if (h.model.count({1, c})) continue;
    sprig::SlotLog log;
    const std::int64_t cap_before = h.m.row_capacity(1), nnz_before = h.m.row_nnz(1);
    const std::int64_t s = h.m.insert(1, c, T(1.5), &log);
    if (nnz_before == cap_before) {
      ++relocations;
      REQUIRE(h.m.row_capacity(1) == 2 * cap_before);
      REQUIRE(h.m.row_start(1) != prev_start);
      REQUIRE(h.m.dead_slots() > 0);
      REQUIRE_FALSE(log.empty());
    } else {
      REQUIRE(h.m.row_start(1) == prev_start);
    }
    prev_start = h.m.row_start(1);
    h.expect_version_bumped();
    h.replay(log);
    h.born(s, 1, c);
    h.model[{1, c}] = T(1.5);
    h.verify();
  }
  REQUIRE(h.m.row_nnz(1) == C);  // a fully dense row
  REQUIRE(relocations == 4);
  REQUIRE(h.m.row_start(1) != start0);

  // Memory grows with relocation; compact() reclaims the dead slots and shrinks it again.
  const std::int64_t grown = h.m.memory().values;
  sprig::SlotLog log;
  h.m.compact(&log);
  h.expect_version_bumped();
  h.replay(log);
  h.verify();
  REQUIRE(h.m.dead_slots() == 0);
  REQUIRE(h.m.memory().values < grown);
  REQUIRE(h.m.memory().values == h.m.storage_size() * static_cast<std::int64_t>(sizeof(T)));
  REQUIRE(h.m.memory().col_indices == h.m.storage_size() * static_cast<std::int64_t>(sizeof(Index)));
  REQUIRE(h.m.storage_size() == 3 * 4 + sprig::PaddedCSR<T, Index>::capacity_for(C, 0.2));

  // Erase everything in the dense row through erase_slot, always at the front slot, so the
  // last live slot moves into the hole each time.
  while (h.m.row_nnz(1) > 0) {
    sprig::SlotLog l;
    const std::int64_t s = h.m.row_start(1);
    const std::int64_t c = h.m.col_indices()[static_cast<std::size_t>(s)];
    h.m.erase_slot(1, s, &l);
    h.expect_version_bumped();
    h.model.erase({1, c});
    h.replay(l);
    h.verify();
  }
}

TEMPLATE_LIST_TEST_CASE("PaddedCSR: one log accumulated over many operations replays correctly",
                        "[padded_csr][ops][slots]", AllPairs) {
  using T = typename TestType::first_type;
  using Index = typename TestType::second_type;
  // Optimizers may replay a log only once per training step: the log of several operations,
  // including relocations and a compact in the middle, must compose.
  Harness<T, Index> h(sprig::PaddedCSR<T, Index>::random_density(8, 12, 0.3, 5, 0.0), 3);
  h.verify();
  for (int round = 0; round < 60; ++round) {
    sprig::SlotLog log;
    std::vector<Key> born_keys;
    for (int k = 0; k < 10; ++k) {
      const int op = static_cast<int>(h.rand_below(4));
      const std::int64_t i = h.rand_below(8), c = h.rand_below(12);
      if (op <= 1) {
        if (h.model.count({i, c})) continue;
        h.m.insert_new(i, c, T(2), &log);
        h.model[{i, c}] = T(2);
        born_keys.push_back({i, c});
      } else if (op == 2) {
        if (h.m.erase(i, c, &log)) {
          h.model.erase({i, c});
          born_keys.erase(std::remove(born_keys.begin(), born_keys.end(), Key{i, c}), born_keys.end());
        }
      } else if (k == 5) {
        h.m.compact(&log);
      }
    }
    h.replay(log);
    for (const Key& kk : born_keys) h.born(h.m.find(kk.first, kk.second), kk.first, kk.second);
    h.version = h.m.topology_version();
    h.verify();
  }
}

TEMPLATE_LIST_TEST_CASE(
    "PaddedCSR: reserve_rows moves the rows that lack room in one step, storage grows by exactly "
    "their capacities",
    "[padded_csr][ops][slots]", AllPairs) {
  using T = typename TestType::first_type;
  using Index = typename TestType::second_type;
  Harness<T, Index> h(sprig::PaddedCSR<T, Index>::random_per_row(6, 40, 5, 3), 17);
  h.verify();
  const std::int64_t storage = h.m.storage_size();
  const std::int64_t cap1 = h.m.row_capacity(1), cap4 = h.m.row_capacity(4), start2 = h.m.row_start(2);
  // row 1 and 4 need more room, row 2 already has it, row 3 asks for more than cols (clamped)
  const std::vector<std::pair<std::int64_t, std::int64_t>> want = {
      {1, cap1 + 7}, {2, h.m.row_capacity(2)}, {4, cap4 + 1}, {3, 1000}};
  sprig::SlotLog log;
  h.m.reserve_rows(want, &log);
  h.expect_version_bumped();
  REQUIRE(h.m.row_capacity(1) == cap1 + 7);
  REQUIRE(h.m.row_capacity(4) == cap4 + 1);
  REQUIRE(h.m.row_capacity(3) == 40);
  REQUIRE(h.m.row_start(2) == start2);
  REQUIRE(h.m.storage_size() == storage + (cap1 + 7) + (cap4 + 1) + 40);
  // no geometric over-allocation: exactly the new storage
  REQUIRE(h.m.memory().values == h.m.storage_size() * static_cast<std::int64_t>(sizeof(T)));
  std::int64_t resizes = 0;
  for (const auto& e : log.events()) resizes += e.kind == sprig::SlotLog::Kind::Resize;
  REQUIRE(resizes == 1);
  h.replay(log);
  h.verify();
  // nothing to do: no change, no version bump
  sprig::SlotLog none;
  h.m.reserve_rows(std::vector<std::pair<std::int64_t, std::int64_t>>{{1, 2}}, &none);
  REQUIRE(none.empty());
  h.expect_version_same();
  // bad input: row out of range, a row listed twice; the matrix is left as it was
  using List = std::vector<std::pair<std::int64_t, std::int64_t>>;
  REQUIRE_THROWS_AS(h.m.reserve_rows(List{{6, 3}}), sprig::ArgumentError);
  REQUIRE_THROWS_AS(h.m.reserve_rows(List{{-1, 3}}), sprig::ArgumentError);
  REQUIRE_THROWS_WITH(h.m.reserve_rows(List{{0, 30}, {0, 31}}), Catch::Contains("listed twice"));
  h.expect_version_same();
  h.verify();
}

TEMPLATE_LIST_TEST_CASE("PaddedCSR: relocating rows one by one grows storage by about 1/8, not 2x", "[padded_csr][ops]",
                        AllPairs) {
  using T = typename TestType::first_type;
  using Index = typename TestType::second_type;
  auto m = sprig::PaddedCSR<T, Index>::random_per_row(400, 64, 10, 5);
  const std::int64_t storage = m.storage_size();
  m.reserve_row(7, 20);  // one small relocation
  REQUIRE(m.storage_size() == storage + 20);
  REQUIRE(m.memory().values <= static_cast<std::int64_t>((storage + storage / 8 + 20) * sizeof(T)));
  m.check_invariants();
}

// group_columns: each row ordered by column block, stable within a block, the permutation
// handed to `follow` moving per-slot state with its weight; no change (and no version bump)
// for rows already in block order.
TEMPLATE_LIST_TEST_CASE("PaddedCSR: group_columns orders rows by column block, stably, and state follows",
                        "[padded_csr][ops][slots]", AllPairs) {
  using T = typename TestType::first_type;
  using Index = typename TestType::second_type;
  const std::int64_t R = 40, C = 300;
  Harness<T, Index> h(sprig::PaddedCSR<T, Index>::random_per_row(R, C, 30, 3), 5);
  // Scramble row order: erase moves a row's last slot into the hole, insert appends.
  for (int k = 0; k < 600; ++k) {
    sprig::SlotLog log;
    const std::int64_t i = h.rand_below(R), c = h.rand_below(C);
    if (h.model.count({i, c})) {
      h.m.erase(i, c, &log);
      h.model.erase({i, c});
      h.replay(log);
    } else {
      const T v = h.rand_value();
      const std::int64_t s = h.m.insert(i, c, v, &log);
      h.model[{i, c}] = v;
      h.replay(log);
      h.born(s, i, c);
    }
  }
  h.verify();
  h.expect_version_bumped();
  for (const int shift : {6, 3, 0}) {  // blocks of 64, 8, 1 columns (1: sorted by column)
    CAPTURE(shift);
    // the order within each block before, to check stability
    std::vector<std::vector<std::int64_t>> before(static_cast<std::size_t>(R));
    std::int64_t unordered_rows = 0;
    for (std::int64_t i = 0; i < R; ++i) {
      bool ordered = true;
      for (std::int64_t s = h.m.row_start(i); s < h.m.row_start(i) + h.m.row_nnz(i); ++s) {
        before[static_cast<std::size_t>(i)].push_back(h.m.col_indices()[static_cast<std::size_t>(s)]);
        if (s > h.m.row_start(i))
          ordered = ordered && (h.m.col_indices()[static_cast<std::size_t>(s)] >> shift) >=
                                   (h.m.col_indices()[static_cast<std::size_t>(s - 1)] >> shift);
      }
      unordered_rows += !ordered;
    }
    REQUIRE(unordered_rows > 0);
    std::int64_t followed = 0;
    const bool moved = h.m.group_columns(shift, [&](std::int64_t start, std::span<const std::int64_t> order) {
      ++followed;
      std::vector<double> a(order.size());
      std::vector<T> b(order.size());
      for (std::size_t j = 0; j < order.size(); ++j) {
        a[j] = h.state[static_cast<std::size_t>(start + order[j])];
        b[j] = h.state_t[static_cast<std::size_t>(start + order[j])];
      }
      for (std::size_t j = 0; j < order.size(); ++j) {
        h.state[static_cast<std::size_t>(start) + j] = a[j];
        h.state_t[static_cast<std::size_t>(start) + j] = b[j];
      }
    });
    CHECK(moved);
    CHECK(followed == unordered_rows);
    h.expect_version_bumped();
    h.verify();  // entries, values and state all where they belong
    for (std::int64_t i = 0; i < R; ++i) {
      std::vector<std::int64_t> after;
      for (std::int64_t s = h.m.row_start(i); s < h.m.row_start(i) + h.m.row_nnz(i); ++s)
        after.push_back(h.m.col_indices()[static_cast<std::size_t>(s)]);
      for (std::size_t q = 1; q < after.size(); ++q) FAST_REQUIRE((after[q] >> shift) >= (after[q - 1] >> shift));
      // stable: the same relative order within each block as before
      auto expected = before[static_cast<std::size_t>(i)];
      std::stable_sort(expected.begin(), expected.end(),
                       [&](std::int64_t a, std::int64_t b) { return (a >> shift) < (b >> shift); });
      FAST_REQUIRE(after == expected);
    }
    // again: nothing to do, nothing moves, the topology stays the same
    CHECK_FALSE(h.m.group_columns(shift));
    h.expect_version_same();
  }
  CHECK_THROWS_AS(h.m.group_columns(-1), sprig::ArgumentError);
  CHECK_THROWS_AS(h.m.group_columns(63), sprig::ArgumentError);
}
