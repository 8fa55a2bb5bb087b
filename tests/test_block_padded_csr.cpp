// BlockPaddedCSR: conversions, random init, structural operations under random sequences
// against a map model of blocks, per-slot state of R*C values following blocks through
// SlotLog, invariants, memory accounting and errors; for every block shape the kernels use
// and every (T, Index) pair.
#include <sprig/core/block_padded_csr.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <map>
#include <random>
#include <tuple>
#include <utility>
#include <vector>

namespace {

template <class T, class Index, int R, int C>
struct Case {
  using Value = T;
  using Idx = Index;
  static constexpr int kR = R;
  static constexpr int kC = C;
};

// 4x4 at three (T, Index) pairs, every other block shape once, 16x1 at int16 where the index
// range limits bite first, and an odd 3x5.
using Cases =
    std::tuple<Case<float, std::int16_t, 4, 4>, Case<float, std::int32_t, 4, 4>, Case<double, std::int64_t, 4, 4>,
               Case<float, std::int32_t, 1, 4>, Case<float, std::int32_t, 4, 1>, Case<double, std::int32_t, 8, 1>,
               Case<float, std::int32_t, 8, 8>, Case<double, std::int16_t, 16, 1>, Case<float, std::int64_t, 3, 5>>;

#define FAST_REQUIRE(...)                     \
  do {                                        \
    if (!(__VA_ARGS__)) REQUIRE(__VA_ARGS__); \
  } while (0)

template <class T>
sprig::Matrix<T> random_dense(std::int64_t m, std::int64_t k, double keep, std::mt19937_64& gen) {
  sprig::Matrix<T> d(m, k);
  std::uniform_real_distribution<double> u(-1.0, 1.0), p(0.0, 1.0);
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t j = 0; j < k; ++j) d(i, j) = p(gen) < keep ? static_cast<T>(u(gen)) : T(0);
  return d;
}

template <class T>
bool equal(const sprig::Matrix<T>& a, const sprig::Matrix<T>& b) {
  if (a.rows() != b.rows() || a.cols() != b.cols()) return false;
  for (std::int64_t i = 0; i < a.rows(); ++i)
    for (std::int64_t j = 0; j < a.cols(); ++j)
      if (a(i, j) != b(i, j)) return false;
  return true;
}

}  // namespace

TEMPLATE_LIST_TEST_CASE("BlockPaddedCSR: from_dense and to_dense round-trip on odd shapes", "[block_csr]", Cases) {
  using T = typename TestType::Value;
  using Index = typename TestType::Idx;
  constexpr int R = TestType::kR, C = TestType::kC;
  using BM = sprig::BlockPaddedCSR<T, Index, R, C>;
  std::mt19937_64 gen(17 + R * 31 + C);
  for (int trial = 0; trial < 40; ++trial) {
    const std::int64_t m = std::uniform_int_distribution<std::int64_t>(0, 3 * R + 5)(gen);
    const std::int64_t k = std::uniform_int_distribution<std::int64_t>(0, 3 * C + 7)(gen);
    const double keep = trial % 4 == 0 ? 1.0 : (trial % 4 == 1 ? 0.0 : 0.15);
    const sprig::Matrix<T> d = random_dense<T>(m, k, keep, gen);
    const BM b = BM::from_dense(d, 0.25);
    b.check_invariants();
    REQUIRE(equal(b.to_dense(), d));
    REQUIRE(b.rows() == m);
    REQUIRE(b.cols() == k);
    REQUIRE(b.block_rows() == (m + R - 1) / R);
    REQUIRE(b.block_cols() == (k + C - 1) / C);
    // live blocks are exactly the blocks with a nonzero
    std::int64_t expect = 0;
    for (std::int64_t i = 0; i < b.block_rows(); ++i)
      for (std::int64_t j = 0; j < b.block_cols(); ++j) {
        bool any = false;
        for (std::int64_t r = i * R; r < std::min(m, (i + 1) * R); ++r)
          for (std::int64_t c = j * C; c < std::min(k, (j + 1) * C); ++c) any = any || d(r, c) != T(0);
        expect += any;
        REQUIRE((b.find_block(i, j) >= 0) == any);
      }
    REQUIRE(b.nnz_blocks() == expect);
    REQUIRE(b.pattern().structure_only());
    REQUIRE(b.pattern().values().empty());
    REQUIRE(std::ssize(b.values()) == b.storage_size() * R * C);
  }
}

TEMPLATE_LIST_TEST_CASE("BlockPaddedCSR: element PaddedCSR conversions keep every entry", "[block_csr]", Cases) {
  using T = typename TestType::Value;
  using Index = typename TestType::Idx;
  constexpr int R = TestType::kR, C = TestType::kC;
  using BM = sprig::BlockPaddedCSR<T, Index, R, C>;
  std::mt19937_64 gen(5);
  for (int trial = 0; trial < 20; ++trial) {
    const std::int64_t m = std::uniform_int_distribution<std::int64_t>(1, 2 * R + 9)(gen);
    const std::int64_t k = std::uniform_int_distribution<std::int64_t>(1, 2 * C + 9)(gen);
    const auto W = sprig::PaddedCSR<T, Index>::random_density(m, k, 0.2, 100 + trial);
    const BM b = BM::from_padded_csr(W);
    b.check_invariants();
    REQUIRE(equal(b.to_dense(), W.to_dense()));
    // every in-matrix entry of a live block becomes a live element entry
    const auto E = b.to_padded_csr();
    E.check_invariants();
    REQUIRE(equal(E.to_dense(), W.to_dense()));
    std::int64_t in_matrix = 0;
    b.for_each_block([&](std::int64_t i, std::int64_t j, std::int64_t, const T*) {
      in_matrix += (std::min(m, (i + 1) * R) - i * R) * (std::min(k, (j + 1) * C) - j * C);
    });
    REQUIRE(E.nnz() == in_matrix);
    REQUIRE(E.nnz() >= W.nnz());
    W.for_each_live([&](std::int64_t i, std::int64_t c, T, std::int64_t) { REQUIRE(E.find(i, c) >= 0); });
    // and back: the same blocks
    const BM back = BM::from_padded_csr(E);
    REQUIRE(back.nnz_blocks() == b.nnz_blocks());
    REQUIRE(equal(back.to_dense(), b.to_dense()));
  }
}

TEMPLATE_LIST_TEST_CASE("BlockPaddedCSR: random() draws exactly the requested blocks, deterministically", "[block_csr]",
                        Cases) {
  using T = typename TestType::Value;
  using Index = typename TestType::Idx;
  constexpr int R = TestType::kR, C = TestType::kC;
  using BM = sprig::BlockPaddedCSR<T, Index, R, C>;
  const std::int64_t m = 5 * R + 3, k = 7 * C + 1;
  const std::int64_t grid = ((m + R - 1) / R) * ((k + C - 1) / C);
  for (std::int64_t n : {std::int64_t{0}, std::int64_t{1}, std::int64_t{13}, grid / 2 + 1, grid}) {
    const BM a = BM::random(m, k, n, 42);
    a.check_invariants();
    REQUIRE(a.nnz_blocks() == n);
    const BM b = BM::random(m, k, n, 42);
    REQUIRE(equal(a.to_dense(), b.to_dense()));
    const BM c = BM::random(m, k, n, 43);
    if (n > 0 && n < grid) REQUIRE_FALSE(equal(a.to_dense(), c.to_dense()));
    bool in_range = true;
    for (T v : a.values()) in_range = in_range && v >= T(-1) && v < T(1);
    REQUIRE(in_range);
  }
  REQUIRE_THROWS_AS(BM::random(m, k, grid + 1, 1), sprig::ArgumentError);
  REQUIRE_THROWS_AS(BM::random(m, k, -1, 1), sprig::ArgumentError);
  REQUIRE(BM::random_density(m, k, 0.25, 1).nnz_blocks() == (grid + 2) / 4);  // round(grid / 4), grid even
  REQUIRE_THROWS_AS(BM::random_density(m, k, 1.5, 1), sprig::ArgumentError);
}

// A map model of the live blocks and a per-slot state array of R*C values per slot that
// follows the blocks through the SlotLog of every operation.
TEMPLATE_LIST_TEST_CASE("BlockPaddedCSR: random operation sequences agree with a model and move block state",
                        "[block_csr][ops]", Cases) {
  using T = typename TestType::Value;
  using Index = typename TestType::Idx;
  constexpr int R = TestType::kR, C = TestType::kC;
  constexpr std::int64_t S = std::int64_t{R} * C;
  using BM = sprig::BlockPaddedCSR<T, Index, R, C>;
  using Key = std::pair<std::int64_t, std::int64_t>;
  std::mt19937_64 gen(99 + R + 7 * C);
  const std::int64_t m = 4 * R + R / 2 + 1, k = 6 * C + (C > 1 ? C - 1 : 0);
  BM b = BM::random(m, k, 9, 7, 0.0);
  std::map<Key, std::vector<T>> model;
  b.for_each_block([&](std::int64_t i, std::int64_t j, std::int64_t, const T* v) {
    model[{i, j}] = std::vector<T>(v, v + S);
  });
  sprig::AlignedVector<T> state(b.values().begin(), b.values().end());  // state = a copy of each block
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  auto rand_below = [&](std::int64_t n) { return std::uniform_int_distribution<std::int64_t>(0, n - 1)(gen); };
  auto make_block = [&](std::int64_t i, std::int64_t j) {
    std::vector<T> v(static_cast<std::size_t>(S));
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < C; ++c) v[r * C + c] = i * R + r < m && j * C + c < k ? static_cast<T>(u(gen)) : T(0);
    return v;
  };
  for (int step = 0; step < 600; ++step) {
    sprig::SlotLog log;
    const int op = static_cast<int>(rand_below(10));
    std::int64_t inserted = -1;
    std::vector<T> born;
    if (op < 5) {
      const std::int64_t i = rand_below(b.block_rows()), j = rand_below(b.block_cols());
      if (model.count({i, j})) {
        REQUIRE_THROWS_AS(b.insert_block(i, j, model[{i, j}], &log), sprig::ArgumentError);
        REQUIRE(log.empty());
      } else {
        born = make_block(i, j);
        inserted = b.insert_block(i, j, born, &log);
        model[{i, j}] = born;
      }
    } else if (op < 8) {
      const std::int64_t i = rand_below(b.block_rows()), j = rand_below(b.block_cols());
      const bool was = model.erase({i, j}) > 0;
      REQUIRE(b.erase_block(i, j, &log) == was);
    } else if (op == 8) {
      b.reserve_row(rand_below(b.block_rows()), rand_below(2 * b.block_cols()) + 1, &log);
    } else if (step % 3 == 0) {
      b.compact(0.5, &log);
    } else if (!model.empty()) {  // erase a few blocks by slot
      std::vector<std::int64_t> slots;
      std::vector<Key> keys;
      for (const auto& [key, v] : model)
        if (rand_below(4) == 0) {
          slots.push_back(b.find_block(key.first, key.second));
          keys.push_back(key);
        }
      b.erase_slots(slots, &log);
      for (const Key& key : keys) model.erase(key);
    }
    log.apply(state, S);
    if (inserted >= 0) std::copy(born.begin(), born.end(), state.begin() + inserted * S);  // a born block's state
    FAST_REQUIRE(std::ssize(state) == b.storage_size() * S);
    FAST_REQUIRE(std::equal(state.begin(), state.end(), b.values().begin()));
    FAST_REQUIRE(b.nnz_blocks() == std::ssize(model));
    if (step % 50 == 0) {
      b.check_invariants();
      for (const auto& [key, v] : model) {
        const std::int64_t s = b.find_block(key.first, key.second);
        REQUIRE(s >= 0);
        REQUIRE(std::equal(v.begin(), v.end(), b.block(s)));
      }
    }
  }
  b.check_invariants();
}

TEMPLATE_LIST_TEST_CASE("BlockPaddedCSR: structural operations bump the topology version, value edits do not",
                        "[block_csr]", Cases) {
  using T = typename TestType::Value;
  using Index = typename TestType::Idx;
  constexpr int R = TestType::kR, C = TestType::kC;
  using BM = sprig::BlockPaddedCSR<T, Index, R, C>;
  BM b(3 * R, 3 * C);
  const auto key0 = b.topology_key();
  b.values();  // a value view is not a change
  REQUIRE(b.topology_key() == key0);
  const std::vector<T> ones(static_cast<std::size_t>(R * C), T(1));
  b.insert_block(1, 2, ones);
  REQUIRE(b.topology_version() > key0.version);
  const auto key1 = b.topology_key();
  b.values()[0] = T(0);
  REQUIRE(b.topology_key() == key1);
  REQUIRE(b.erase_block(1, 2));
  REQUIRE(b.topology_version() > key1.version);
  const BM copy = b;
  REQUIRE_FALSE(copy.topology_key() == b.topology_key());  // a copy is another matrix for every cache
}

TEMPLATE_LIST_TEST_CASE("BlockPaddedCSR: bad input is rejected and leaves the matrix unchanged", "[block_csr]", Cases) {
  using T = typename TestType::Value;
  using Index = typename TestType::Idx;
  constexpr int R = TestType::kR, C = TestType::kC;
  using BM = sprig::BlockPaddedCSR<T, Index, R, C>;
  REQUIRE_THROWS_AS(BM(-1, 4), sprig::ShapeError);
  REQUIRE_THROWS_AS(BM(4, -1), sprig::ShapeError);
  REQUIRE_THROWS_AS(BM(4, 4, -0.5), sprig::ArgumentError);
  const std::int64_t m = 2 * R + (R > 1 ? 1 : 0), k = 2 * C + (C > 1 ? 1 : 0);
  BM b = BM::random(m, k, 3, 11);
  const auto before = b.to_dense();
  const auto key = b.topology_key();
  std::vector<T> block(static_cast<std::size_t>(R * C), T(0));
  REQUIRE_THROWS_AS(b.insert_block(-1, 0, block), sprig::ArgumentError);
  REQUIRE_THROWS_AS(b.insert_block(0, b.block_cols(), block), sprig::ArgumentError);
  REQUIRE_THROWS_AS(b.erase_block(b.block_rows(), 0), sprig::ArgumentError);
  REQUIRE_THROWS_AS(b.find_block(0, -1), sprig::ArgumentError);
  std::vector<T> short_block(static_cast<std::size_t>(R * C - 1), T(0));
  REQUIRE_THROWS_AS(b.insert_block(0, 0, short_block), sprig::ShapeError);
  if (m % R != 0 || k % C != 0) {  // an edge block with a nonzero outside the matrix
    const std::int64_t bi = b.block_rows() - 1, bj = b.block_cols() - 1;
    if (b.find_block(bi, bj) < 0) {
      std::vector<T> bad(static_cast<std::size_t>(R * C), T(1));
      REQUIRE_THROWS_AS(b.insert_block(bi, bj, bad), sprig::ArgumentError);
    }
  }
  REQUIRE(b.topology_key() == key);
  REQUIRE(equal(b.to_dense(), before));
  b.check_invariants();
  sprig::Matrix<T> wrong(m + 1, k);
  REQUIRE_THROWS_AS(b.to_dense(wrong.view()), sprig::ShapeError);
  if constexpr (sizeof(Index) == 2) {  // more block columns than a 16-bit index can number
    REQUIRE_THROWS_AS(BM(1, std::int64_t{C} * 32768 + 1), sprig::ArgumentError);
    REQUIRE_NOTHROW(BM(1, std::int64_t{C} * 32768));
  }
  // a corrupted value outside the matrix or in padding is reported
  if (m % R != 0 || k % C != 0) {
    std::mt19937_64 gen(3);
    BM full = BM::from_dense(random_dense<T>(m, k, 1.0, gen));
    const std::int64_t s = full.find_block(full.block_rows() - 1, full.block_cols() - 1);
    full.block(s)[R * C - 1] = T(2);
    REQUIRE_THROWS_AS(full.check_invariants(), sprig::Error);
  }
}

TEMPLATE_LIST_TEST_CASE("BlockPaddedCSR: memory counts R*C values and one index per block", "[block_csr]", Cases) {
  using T = typename TestType::Value;
  using Index = typename TestType::Idx;
  constexpr int R = TestType::kR, C = TestType::kC;
  using BM = sprig::BlockPaddedCSR<T, Index, R, C>;
  const BM b = BM::random(40 * R, 30 * C, 120, 5, 0.0);
  const auto mem = b.memory();
  REQUIRE(mem.values >= b.storage_size() * R * C * static_cast<std::int64_t>(sizeof(T)));
  REQUIRE(mem.values <= (b.storage_size() * R * C + 64) * static_cast<std::int64_t>(sizeof(T)));
  REQUIRE(mem.col_indices >= b.storage_size() * static_cast<std::int64_t>(sizeof(Index)));
  REQUIRE(mem.col_indices <= (b.storage_size() + 64) * static_cast<std::int64_t>(sizeof(Index)));
  REQUIRE(b.memory_bytes() == mem.total());
  // the same entries as an element PaddedCSR need one index per value
  if constexpr (R * C >= 4) REQUIRE(b.memory_bytes() < b.to_padded_csr(0.0).memory_bytes());
}

TEST_CASE("blocks_covering: the grid extent of n rows in blocks, the last partial", "[block_csr]") {
  static_assert(sprig::blocks_covering(0, 4) == 0);
  const std::int64_t cases[][3] = {{1, 4, 1}, {4, 4, 1},      {5, 4, 2},      {8, 4, 2},      {9, 4, 3},
                                   {7, 1, 7}, {1023, 16, 64}, {1024, 16, 64}, {1025, 16, 65}, {-3, 4, -3}};
  for (const auto& c : cases) {
    INFO(c[0] << " rows in blocks of " << c[1]);
    CHECK(sprig::blocks_covering(c[0], c[1]) == c[2]);
  }
}

TEST_CASE("PaddedCSR: a structure-only matrix keeps no values through every structural operation",
          "[block_csr][padded_csr]") {
  auto W = sprig::PaddedCSR<float, std::int32_t>::random_density(30, 40, 0.1, 3, 0.0);
  const auto nnz = W.nnz();
  W.drop_values();
  REQUIRE(W.structure_only());
  REQUIRE(W.values().empty());
  REQUIRE(W.nnz() == nnz);
  W.check_invariants();
  std::mt19937_64 gen(1);
  for (int step = 0; step < 300; ++step) {
    const auto i = std::uniform_int_distribution<std::int64_t>(0, 29)(gen);
    const auto c = std::uniform_int_distribution<std::int64_t>(0, 39)(gen);
    if (W.find(i, c) >= 0)
      W.erase(i, c);
    else
      W.insert(i, c, 1.0f);
    if (step % 100 == 99) W.compact(0.3);
    if (step % 40 == 0) W.reserve_row(i, 12);
  }
  W.check_invariants();
  REQUIRE(W.values().empty());
  REQUIRE(W.row(0).values.empty());
  REQUIRE_THROWS_AS(W.to_dense(), sprig::ArgumentError);
  REQUIRE_THROWS_AS(W.to_csr(), sprig::ArgumentError);
}

TEST_CASE("SlotLog: a width replays every event on whole blocks, and logs append", "[block_csr][slot_log]") {
  sprig::SlotLog a, b;
  a.resize(3);   // 3 slots of width 2
  a.move(0, 2);  // slot 2 = slot 0
  a.clear(0);
  b.remap(std::vector<std::int64_t>{2, -1, 1});  // slot 0 <- 2, slot 1 <- 0 (zero), slot 2 <- 1
  a.append(b);
  std::vector<double> s = {1, 2, 3, 4};
  a.apply(s, 2);
  REQUIRE(s == std::vector<double>{1, 2, 0, 0, 3, 4});
  // the same log at width 1 on a 2-slot array treats slots as single values
  sprig::SlotLog one;
  one.append(b);
  std::vector<double> t = {7, 8, 9};
  one.apply(t);
  REQUIRE(t == std::vector<double>{9, 0, 8});
}
