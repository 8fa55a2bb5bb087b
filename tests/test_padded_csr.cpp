// PaddedCSR construction, conversion, validation, random initialisation and memory
// accounting. The structural operations under long random sequences are in
// test_padded_csr_ops.cpp.
#include <sprig/core/padded_csr.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace {

using AllPairs =
    std::tuple<std::pair<float, std::int16_t>, std::pair<float, std::int32_t>, std::pair<float, std::int64_t>,
               std::pair<double, std::int16_t>, std::pair<double, std::int32_t>, std::pair<double, std::int64_t>>;

using Catch::Matchers::Contains;

// Runs f, requires that it throws exactly an E (or a subclass), and returns what().
template <class E, class F>
std::string thrown(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    FAIL("threw the wrong exception type: " << e.what());
  }
  FAIL("did not throw");
  return {};
}

// Requires an E whose message names every given fragment (the offending values).
template <class E, class F>
void require_error(F&& f, std::initializer_list<const char*> fragments) {
  const std::string what = thrown<E>(std::forward<F>(f));
  INFO("message: " << what);
  for (const char* frag : fragments) CHECK_THAT(what, Contains(frag));
}

// Capacity from the specification: max(1, ceil(n * (1 + ratio))).
std::int64_t spec_capacity(std::int64_t n, double ratio) {
  return std::max<std::int64_t>(1, static_cast<std::int64_t>(std::ceil(static_cast<double>(n) * (1.0 + ratio))));
}

// A freshly built matrix has a tight layout in row order with spec capacities.
template <class M>
void require_tight_layout(const M& m, double ratio) {
  std::int64_t start = 0;
  for (std::int64_t i = 0; i < m.rows(); ++i) {
    INFO("row " << i);
    REQUIRE(m.row_start(i) == start);
    REQUIRE(m.row_capacity(i) == spec_capacity(m.row_nnz(i), ratio));
    start += m.row_capacity(i);
  }
  REQUIRE(m.storage_size() == start);
  REQUIRE(m.dead_slots() == 0);
}

template <class T, class Index>
void require_same(const sprig::CSRArrays<T, Index>& a, const sprig::CSRArrays<T, Index>& b) {
  REQUIRE(a.rows == b.rows);
  REQUIRE(a.cols == b.cols);
  REQUIRE(a.row_ptr == b.row_ptr);
  REQUIRE(a.col_indices == b.col_indices);
  REQUIRE(a.values == b.values);
}

// Entries of a matrix as a sorted map, through for_each_live.
template <class M>
auto entries(const M& m) {
  std::map<std::pair<std::int64_t, std::int64_t>, typename M::value_type> out;
  m.for_each_live([&](std::int64_t i, std::int64_t c, auto v, std::int64_t) { out[{i, c}] = v; });
  return out;
}

}  // namespace

// ---- empty and degenerate shapes ------------------------------------------------------

TEMPLATE_LIST_TEST_CASE("PaddedCSR: empty matrices of every shape, including 0 rows and 0 columns", "[padded_csr]",
                        AllPairs) {
  using T = typename TestType::first_type;
  using Index = typename TestType::second_type;
  using M = sprig::PaddedCSR<T, Index>;
  const std::pair<std::int64_t, std::int64_t> shapes[] = {{0, 0}, {0, 7}, {5, 0}, {3, 4}, {1, 1}};
  for (auto [r, c] : shapes) {
    INFO("shape " << r << "x" << c);
    const std::vector<std::int64_t> zero_ptr(static_cast<std::size_t>(r) + 1, 0);
    const M built[] = {
        M(r, c),
        M::from_dense(sprig::Matrix<T>(r, c).view()),
        M::from_csr(r, c, std::span<const std::int64_t>(zero_ptr), std::span<const Index>(), std::span<const T>()),
        M::from_coo(r, c, std::span<const int>(), std::span<const int>(), std::span<const T>()),
        M::random_per_row(r, c, 0, 1),
        M::random_total(r, c, 0, 1),
        M::random_density(r, c, 0.0, 1),
    };
    for (const M& m : built) {
      REQUIRE_NOTHROW(m.check_invariants());
      REQUIRE(m.rows() == r);
      REQUIRE(m.cols() == c);
      REQUIRE(m.nnz() == 0);
      REQUIRE(m.density() == 0.0);
      REQUIRE(m.storage_size() == r);  // capacity max(1, 0) = 1 per row
      require_tight_layout(m, sprig::kDefaultPaddingRatio);
      REQUIRE(std::all_of(m.col_indices().begin(), m.col_indices().end(), [](Index x) { return x == Index(-1); }));
      const auto csr = m.to_csr();
      REQUIRE(csr.row_ptr == zero_ptr);
      REQUIRE(csr.col_indices.empty());
      const auto d = m.to_dense();
      REQUIRE(d.rows() == r);
      REQUIRE(d.cols() == c);
      for (std::int64_t i = 0; i < r; ++i)
        for (std::int64_t j = 0; j < c; ++j) REQUIRE(d(i, j) == T(0));
      int calls = 0;
      m.for_each_live([&](auto...) { ++calls; });
      REQUIRE(calls == 0);
    }
  }
  // A default-constructed matrix is a valid 0 x 0 matrix.
  M m;
  REQUIRE_NOTHROW(m.check_invariants());
  REQUIRE(m.rows() == 0);
  REQUIRE(m.nnz() == 0);
}

TEMPLATE_LIST_TEST_CASE("PaddedCSR: negative shapes are rejected by every constructor", "[padded_csr][errors]",
                        AllPairs) {
  using T = typename TestType::first_type;
  using Index = typename TestType::second_type;
  using M = sprig::PaddedCSR<T, Index>;
  const std::vector<std::int64_t> ptr{0};
  require_error<sprig::ShapeError>([] { M(-3, 4); }, {"-3"});
  require_error<sprig::ShapeError>([] { M(4, -5); }, {"-5"});
  require_error<sprig::ShapeError>(
      [&] { M::from_csr(-2, 3, std::span<const std::int64_t>(ptr), std::span<const Index>(), std::span<const T>()); },
      {"-2"});
  require_error<sprig::ShapeError>(
      [&] { M::from_coo(3, -6, std::span<const int>(), std::span<const int>(), std::span<const T>()); }, {"-6"});
  require_error<sprig::ShapeError>([] { M::random_per_row(-7, 3, 0, 1); }, {"-7"});
  require_error<sprig::ShapeError>([] { M::random_total(3, -8, 0, 1); }, {"-8"});
  require_error<sprig::ShapeError>([] { M::random_density(-9, 3, 0.1, 1); }, {"-9"});
}

TEMPLATE_LIST_TEST_CASE("PaddedCSR: bad padding ratios are rejected by every constructor and by compact",
                        "[padded_csr][errors]", AllPairs) {
  using T = typename TestType::first_type;
  using Index = typename TestType::second_type;
  using M = sprig::PaddedCSR<T, Index>;
  const std::vector<std::int64_t> ptr{0, 0, 0};
  const sprig::Matrix<T> dense(2, 3);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (double bad : {-0.5, nan}) {
    const char* frag = std::isnan(bad) ? "nan" : "-0.5";
    INFO("ratio " << bad);
    require_error<sprig::ArgumentError>([&] { M(2, 3, bad); }, {frag});
    require_error<sprig::ArgumentError>([&] { M::from_dense(dense.view(), T(0), bad); }, {frag});
    require_error<sprig::ArgumentError>(
        [&] {
          M::from_csr(2, 3, std::span<const std::int64_t>(ptr), std::span<const Index>(), std::span<const T>(), bad);
        },
        {frag});
    require_error<sprig::ArgumentError>(
        [&] { M::from_coo(2, 3, std::span<const int>(), std::span<const int>(), std::span<const T>(), bad); }, {frag});
    require_error<sprig::ArgumentError>([&] { M::random_per_row(2, 3, 1, 1, bad); }, {frag});
    require_error<sprig::ArgumentError>([&] { M::random_total(2, 3, 1, 1, bad); }, {frag});
    require_error<sprig::ArgumentError>([&] { M::random_density(2, 3, 0.5, 1, bad); }, {frag});
    M m = M::random_per_row(2, 3, 1, 1);
    const auto version = m.topology_version();
    require_error<sprig::ArgumentError>([&] { m.compact(bad); }, {frag});
    REQUIRE(m.topology_version() == version);
    REQUIRE(m.padding_ratio() == sprig::kDefaultPaddingRatio);
  }
}

TEMPLATE_LIST_TEST_CASE("PaddedCSR: padding ratio 0 gives capacity == nnz (at least 1)", "[padded_csr]", AllPairs) {
  using T = typename TestType::first_type;
  using Index = typename TestType::second_type;
  using M = sprig::PaddedCSR<T, Index>;
  const M m = M::random_total(30, 17, 200, 4, 0.0);
  REQUIRE_NOTHROW(m.check_invariants());
  REQUIRE(m.nnz() == 200);
  for (std::int64_t i = 0; i < m.rows(); ++i) REQUIRE(m.row_capacity(i) == std::max<std::int64_t>(1, m.row_nnz(i)));
  require_tight_layout(m, 0.0);
}

// ---- index overflow -------------------------------------------------------------------

TEMPLATE_LIST_TEST_CASE("PaddedCSR: more columns than Index can address are rejected by every constructor",
                        "[padded_csr][errors]", AllPairs) {
  using T = typename TestType::first_type;
  using Index = typename TestType::second_type;
  using M = sprig::PaddedCSR<T, Index>;
  if constexpr (sizeof(Index) == 8) {
    // Every non-negative int64 column count is addressable.
    REQUIRE_NOTHROW(M(0, std::numeric_limits<std::int64_t>::max()));
    return;
  } else {
    const std::int64_t limit = static_cast<std::int64_t>(std::numeric_limits<Index>::max()) + 1;  // 32768, 2^31
    const std::string too_many = std::to_string(limit + 1);
    const std::vector<std::int64_t> ptr{0};
    // Zero rows keep these cheap for the 2^31-column case.
    require_error<sprig::ArgumentError>([&] { M(0, limit + 1); }, {too_many.c_str()});
    require_error<sprig::ArgumentError>(
        [&] {
          M::from_csr(0, limit + 1, std::span<const std::int64_t>(ptr), std::span<const Index>(), std::span<const T>());
        },
        {too_many.c_str()});
    require_error<sprig::ArgumentError>(
        [&] { M::from_coo(0, limit + 1, std::span<const int>(), std::span<const int>(), std::span<const T>()); },
        {too_many.c_str()});
    require_error<sprig::ArgumentError>([&] { M::random_total(0, limit + 1, 0, 1); }, {too_many.c_str()});
    require_error<sprig::ArgumentError>([&] { M::random_density(0, limit + 1, 0.0, 1); }, {too_many.c_str()});
    REQUIRE_NOTHROW(M(0, limit));
    if constexpr (sizeof(Index) == 2) {
      // The constructors that touch every column are exercised at the real int16 limit.
      const sprig::Matrix<T> wide(1, limit + 1, T(1));
      require_error<sprig::ArgumentError>([&] { M::from_dense(wide.view()); }, {too_many.c_str()});
      require_error<sprig::ArgumentError>([&] { M::random_per_row(2, limit + 1, 3, 1); }, {too_many.c_str()});
      require_error<sprig::ArgumentError>([&] { M(2, limit + 1); }, {too_many.c_str()});

      // 32768 columns: the largest column, 32767, round-trips through every path.
      const sprig::Matrix<T> ok(1, limit, T(1));
      const M d = M::from_dense(ok.view());
      REQUIRE_NOTHROW(d.check_invariants());
      REQUIRE(d.nnz() == limit);
      REQUIRE(d.find(0, limit - 1) >= 0);
      M m(2, limit);
      m.insert(1, limit - 1, T(3));
      m.insert(1, 0, T(4));
      REQUIRE_NOTHROW(m.check_invariants());
      const auto csr = m.to_csr();
      REQUIRE(csr.col_indices == std::vector<Index>{0, static_cast<Index>(limit - 1)});
      REQUIRE(static_cast<std::int64_t>(csr.col_indices[1]) == limit - 1);
      const std::int64_t row[] = {0, 0}, col[] = {limit - 1, 5};
      const T val[] = {T(1), T(2)};
      const M coo = M::from_coo(1, limit, std::span<const std::int64_t>(row), std::span<const std::int64_t>(col),
                                std::span<const T>(val));
      REQUIRE(coo.to_csr().col_indices == std::vector<Index>{5, static_cast<Index>(limit - 1)});
      const M r = M::random_per_row(3, limit, 100, 9);
      REQUIRE_NOTHROW(r.check_invariants());
      REQUIRE(M::random_total(2, limit, 1000, 9).nnz() == 1000);
      REQUIRE(M::random_density(2, limit, 0.01, 9).nnz() == 655);  // round(655.36)
      const std::vector<std::int64_t> ptr1{0, 1};
      const std::vector<std::int64_t> col1{limit - 1};
      const std::vector<T> val1{T(2)};
      const M csr1 = M::from_csr(1, limit, std::span<const std::int64_t>(ptr1), std::span<const std::int64_t>(col1),
                                 std::span<const T>(val1));
      REQUIRE(csr1.find(0, limit - 1) >= 0);
      // Column 32768 does not exist at 32768 columns.
      const std::vector<std::int64_t> col_out{limit};
      require_error<sprig::ArgumentError>(
          [&] {
            M::from_csr(1, limit, std::span<const std::int64_t>(ptr1), std::span<const std::int64_t>(col_out),
                        std::span<const T>(val1));
          },
          {"column 32768"});
    }
  }
}

// ---- from_dense / to_dense ------------------------------------------------------------

TEMPLATE_LIST_TEST_CASE("PaddedCSR: from_dense keeps |x| > threshold (and NaN), to_dense round-trips",
                        "[padded_csr][dense]", AllPairs) {
  using T = typename TestType::first_type;
  using Index = typename TestType::second_type;
  using M = sprig::PaddedCSR<T, Index>;
  std::mt19937_64 gen(42);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  for (auto [r, c] : {std::pair<std::int64_t, std::int64_t>{1, 1}, {7, 13}, {16, 3}, {33, 65}}) {
    INFO("shape " << r << "x" << c);
    // A strided source view: the kernels and conversions take views.
    sprig::Matrix<T> dense(r, c, c + 3, T(7));
    for (std::int64_t i = 0; i < r; ++i)
      for (std::int64_t j = 0; j < c; ++j) {
        const double x = u(gen);
        dense(i, j) = std::abs(x) < 0.6 ? T(0) : static_cast<T>(x);
      }
    dense(r - 1, 0) = T(0);  // at least one zero
    if (c > 2) dense(0, c - 1) = T(1);
    const M m = M::from_dense(dense.view());
    REQUIRE_NOTHROW(m.check_invariants());
    require_tight_layout(m, sprig::kDefaultPaddingRatio);
    std::int64_t nonzeros = 0;
    for (std::int64_t i = 0; i < r; ++i)
      for (std::int64_t j = 0; j < c; ++j) nonzeros += dense(i, j) != T(0);
    REQUIRE(m.nnz() == nonzeros);
    const auto back = m.to_dense();
    for (std::int64_t i = 0; i < r; ++i)
      for (std::int64_t j = 0; j < c; ++j) REQUIRE(back(i, j) == dense(i, j));
    // to_dense into a strided view fills only the view and overwrites old contents.
    sprig::Matrix<T> out(r, c + 2, T(9));
    m.to_dense(out.view().block(0, 1, r, c));
    for (std::int64_t i = 0; i < r; ++i) {
      REQUIRE(out(i, 0) == T(9));
      REQUIRE(out(i, c + 1) == T(9));
      for (std::int64_t j = 0; j < c; ++j) REQUIRE(out(i, j + 1) == dense(i, j));
    }
    // to_csr is sorted by column in every row and matches the dense source.
    const auto csr = m.to_csr();
    for (std::int64_t i = 0; i < r; ++i) {
      REQUIRE(std::is_sorted(csr.col_indices.begin() + csr.row_ptr[i], csr.col_indices.begin() + csr.row_ptr[i + 1]));
      for (std::int64_t p = csr.row_ptr[i]; p < csr.row_ptr[i + 1]; ++p)
        REQUIRE(csr.values[p] == dense(i, static_cast<std::int64_t>(csr.col_indices[p])));
    }
  }

  // Threshold semantics on hand-picked values: strict >, NaN and infinities kept.
  const T nan = std::numeric_limits<T>::quiet_NaN(), inf = std::numeric_limits<T>::infinity();
  sprig::Matrix<T> d(1, 8);
  const T row[] = {T(0.5), T(-0.5), T(0.25), T(-0.75), nan, -inf, T(0), T(0.5000001)};
  std::copy(std::begin(row), std::end(row), d.row(0));
  const M m = M::from_dense(d.view(), T(0.5));
  const auto e = entries(m);
  std::vector<std::int64_t> kept;
  for (const auto& [k, v] : e) kept.push_back(k.second);
  REQUIRE(kept == std::vector<std::int64_t>{3, 4, 5, 7});
  REQUIRE(std::isnan(e.at({0, 4})));
  REQUIRE(e.at({0, 5}) == -inf);
  // Threshold 0 keeps every non-zero, including denormals.
  d(0, 6) = std::numeric_limits<T>::denorm_min();
  REQUIRE(M::from_dense(d.view()).nnz() == 8);
  // Bad thresholds.
  require_error<sprig::ArgumentError>([&] { M::from_dense(d.view(), T(-0.25)); }, {"-0.25"});
  require_error<sprig::ArgumentError>([&] { M::from_dense(d.view(), nan); }, {"nan"});
}

TEMPLATE_LIST_TEST_CASE("PaddedCSR: fully dense rows (nnz == cols)", "[padded_csr][dense]", AllPairs) {
  using T = typename TestType::first_type;
  using Index = typename TestType::second_type;
  using M = sprig::PaddedCSR<T, Index>;
  const sprig::Matrix<T> dense(4, 9, T(-2));
  for (double ratio : {0.0, 0.2}) {
    const M m = M::from_dense(dense.view(), T(0), ratio);
    REQUIRE_NOTHROW(m.check_invariants());
    REQUIRE(m.nnz() == 36);
    REQUIRE(m.density() == 1.0);
    for (std::int64_t i = 0; i < 4; ++i) {
      REQUIRE(m.row_nnz(i) == 9);
      REQUIRE(m.row_capacity(i) == spec_capacity(9, ratio));  // 9 or 11
    }
  }
  const M r = M::random_per_row(5, 6, 6, 3);
  REQUIRE(r.density() == 1.0);
  const M t = M::random_total(5, 6, 30, 3);
  REQUIRE(t.density() == 1.0);
  REQUIRE(r.to_csr().row_ptr == t.to_csr().row_ptr);
  REQUIRE(r.to_csr().col_indices == t.to_csr().col_indices);  // every row is 0..5
  M full(2, 3, 0.0);
  for (std::int64_t c = 0; c < 3; ++c) full.insert(0, c, T(1));
  REQUIRE(full.row_nnz(0) == 3);
  REQUIRE_NOTHROW(full.check_invariants());
  // Reserving more than cols clamps to cols: a row never needs more.
  full.reserve_row(1, 1000);
  REQUIRE(full.row_capacity(1) == 3);
  REQUIRE_NOTHROW(full.check_invariants());
}

// ---- from_csr -------------------------------------------------------------------------

TEMPLATE_LIST_TEST_CASE("PaddedCSR: from_csr accepts unsorted columns and sorts them", "[padded_csr][csr]", AllPairs) {
  using T = typename TestType::first_type;
  using Index = typename TestType::second_type;
  using M = sprig::PaddedCSR<T, Index>;
  std::mt19937_64 gen(7);
  const std::int64_t R = 11, C = 19;
  std::vector<std::int64_t> ptr{0};
  std::vector<std::int32_t> cols;
  std::vector<T> vals;
  std::map<std::pair<std::int64_t, std::int64_t>, T> model;
  for (std::int64_t i = 0; i < R; ++i) {
    std::vector<std::int32_t> row(C);
    std::iota(row.begin(), row.end(), 0);
    std::shuffle(row.begin(), row.end(), gen);
    row.resize(static_cast<std::size_t>(i == 3 ? 0 : (i == 5 ? C : static_cast<std::int64_t>(gen() % C))));
    for (std::int32_t c : row) {
      const T v = static_cast<T>(static_cast<double>(gen() % 1000) / 7.0 + 1.0);
      cols.push_back(c);
      vals.push_back(v);
      model[{i, c}] = v;
    }
    ptr.push_back(std::ssize(cols));
  }
  const M m = M::from_csr(R, C, std::span<const std::int64_t>(ptr), std::span<const std::int32_t>(cols),
                          std::span<const T>(vals));
  REQUIRE_NOTHROW(m.check_invariants());
  require_tight_layout(m, sprig::kDefaultPaddingRatio);
  REQUIRE(entries(m) == model);
  // Every live row is laid out in ascending column order.
  for (std::int64_t i = 0; i < R; ++i) {
    auto r = m.row(i);
    REQUIRE(std::is_sorted(r.cols.begin(), r.cols.end()));
  }
  const auto csr = m.to_csr();
  REQUIRE(csr.row_ptr == ptr);
  // Round trip through the exported arrays with the Index type itself.
  const M again = M::from_csr(R, C, std::span<const std::int64_t>(csr.row_ptr), std::span<const Index>(csr.col_indices),
                              std::span<const T>(csr.values));
  require_same(again.to_csr(), csr);
}

TEMPLATE_LIST_TEST_CASE("PaddedCSR: from_csr rejects every malformed input with the offending values",
                        "[padded_csr][csr][errors]", AllPairs) {
  using T = typename TestType::first_type;
  using Index = typename TestType::second_type;
  using M = sprig::PaddedCSR<T, Index>;
  using P = std::vector<std::int64_t>;
  using Cs = std::vector<std::int64_t>;
  using Vs = std::vector<T>;
  auto build = [](std::int64_t rows, std::int64_t cols, const P& p, const Cs& c, const Vs& v) {
    return M::from_csr(rows, cols, std::span<const std::int64_t>(p), std::span<const std::int64_t>(c),
                       std::span<const T>(v));
  };
  const Vs v3{T(1), T(2), T(3)};
  REQUIRE_NOTHROW(build(2, 4, {0, 1, 3}, {2, 0, 3}, v3));
  // row_ptr of the wrong length.
  require_error<sprig::ShapeError>([&] { build(2, 4, {0, 3}, {2, 0, 3}, v3); }, {"2 entries", "3"});
  require_error<sprig::ShapeError>([&] { build(2, 4, {0, 1, 2, 3}, {2, 0, 3}, v3); }, {"4 entries"});
  require_error<sprig::ShapeError>([&] { build(2, 4, {}, {}, {}); }, {"0 entries"});
  // row_ptr[0] != 0.
  require_error<sprig::ArgumentError>([&] { build(2, 4, {1, 2, 3}, {2, 0, 3}, v3); }, {"row_ptr[0] is 1"});
  // Decreasing row_ptr.
  require_error<sprig::ArgumentError>([&] { build(3, 4, {0, 2, 1, 3}, {2, 0, 3}, v3); }, {"row 1", "2 > 1"});
  // Column out of range, above and below.
  require_error<sprig::ArgumentError>([&] { build(2, 4, {0, 1, 3}, {2, 4, 3}, v3); }, {"column 4", "row 1"});
  require_error<sprig::ArgumentError>([&] { build(2, 4, {0, 1, 3}, {-1, 0, 3}, v3); }, {"column -1", "row 0"});
  // Duplicate column within a row (the same column in two rows is fine).
  require_error<sprig::ArgumentError>([&] { build(2, 4, {0, 1, 3}, {2, 3, 3}, v3); }, {"column 3 twice", "row 1"});
  REQUIRE_NOTHROW(build(2, 4, {0, 1, 3}, {3, 3, 0}, v3));
  // Array lengths that disagree with row_ptr[rows].
  require_error<sprig::ShapeError>([&] { build(2, 4, {0, 1, 3}, {2, 0}, v3); }, {"= 3", "2"});
  require_error<sprig::ShapeError>([&] { build(2, 4, {0, 1, 3}, {2, 0, 3}, {T(1)}); }, {"= 3", "1"});
  require_error<sprig::ShapeError>([&] { build(2, 4, {0, 1, 4}, {2, 0, 3}, v3); }, {"= 4"});
}

// ---- from_coo -------------------------------------------------------------------------

TEMPLATE_LIST_TEST_CASE("PaddedCSR: from_coo accepts any order and validates", "[padded_csr][coo]", AllPairs) {
  using T = typename TestType::first_type;
  using Index = typename TestType::second_type;
  using M = sprig::PaddedCSR<T, Index>;
  std::mt19937_64 gen(9);
  const std::int64_t R = 17, C = 23;
  // A random set of positions, presented in two different random orders.
  std::vector<std::int64_t> linear(static_cast<std::size_t>(R * C));
  std::iota(linear.begin(), linear.end(), 0);
  std::shuffle(linear.begin(), linear.end(), gen);
  linear.resize(90);
  std::map<std::pair<std::int64_t, std::int64_t>, T> model;
  std::vector<std::int32_t> ri;
  std::vector<std::int16_t> ci;
  std::vector<T> v;
  for (std::int64_t p : linear) {
    ri.push_back(static_cast<std::int32_t>(p / C));
    ci.push_back(static_cast<std::int16_t>(p % C));
    v.push_back(static_cast<T>(p + 1));
    model[{p / C, p % C}] = static_cast<T>(p + 1);
  }
  const M a =
      M::from_coo(R, C, std::span<const std::int32_t>(ri), std::span<const std::int16_t>(ci), std::span<const T>(v));
  REQUIRE_NOTHROW(a.check_invariants());
  require_tight_layout(a, sprig::kDefaultPaddingRatio);
  REQUIRE(a.nnz() == 90);
  REQUIRE(entries(a) == model);
  std::vector<std::size_t> perm(ri.size());
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), gen);
  std::vector<std::int32_t> ri2;
  std::vector<std::int16_t> ci2;
  std::vector<T> v2;
  for (std::size_t q : perm) {
    ri2.push_back(ri[q]);
    ci2.push_back(ci[q]);
    v2.push_back(v[q]);
  }
  const M b =
      M::from_coo(R, C, std::span<const std::int32_t>(ri2), std::span<const std::int16_t>(ci2), std::span<const T>(v2));
  require_same(a.to_csr(), b.to_csr());

  using Is = std::vector<std::int64_t>;
  auto build = [](const Is& r, const Is& c, const std::vector<T>& vals) {
    return M::from_coo(3, 5, std::span<const std::int64_t>(r), std::span<const std::int64_t>(c),
                       std::span<const T>(vals));
  };
  const std::vector<T> v3{T(1), T(2), T(3)};
  REQUIRE_NOTHROW(build({2, 0, 2}, {4, 4, 0}, v3));
  require_error<sprig::ArgumentError>([&] { build({2, 0, 2}, {4, 4, 4}, v3); }, {"column 4 twice", "row 2"});
  require_error<sprig::ArgumentError>([&] { build({2, 3, 2}, {4, 4, 0}, v3); }, {"row 3", "entry 1"});
  require_error<sprig::ArgumentError>([&] { build({2, -1, 2}, {4, 4, 0}, v3); }, {"row -1"});
  require_error<sprig::ArgumentError>([&] { build({2, 0, 2}, {4, 5, 0}, v3); }, {"column 5"});
  require_error<sprig::ArgumentError>([&] { build({2, 0, 2}, {4, -2, 0}, v3); }, {"column -2"});
  require_error<sprig::ShapeError>([&] { build({2, 0}, {4, 4, 0}, v3); }, {"2, 3 and 3"});
  require_error<sprig::ShapeError>([&] { build({2, 0, 1}, {4, 4, 0, 1}, v3); }, {"3, 4 and 3"});
  require_error<sprig::ShapeError>([&] { build({2, 0, 1}, {4, 4, 0}, {T(1)}); }, {"3, 3 and 1"});
}

// ---- random initialisation ------------------------------------------------------------

TEMPLATE_LIST_TEST_CASE("PaddedCSR: random_per_row gives exact, distinct, in-range, seeded rows",
                        "[padded_csr][random]", AllPairs) {
  using T = typename TestType::first_type;
  using Index = typename TestType::second_type;
  using M = sprig::PaddedCSR<T, Index>;
  const std::int64_t R = 2000, C = 50, k = 5;
  const M m = M::random_per_row(R, C, k, 123);
  REQUIRE_NOTHROW(m.check_invariants());  // includes: columns in range and distinct per row
  require_tight_layout(m, sprig::kDefaultPaddingRatio);
  REQUIRE(m.nnz() == R * k);
  for (std::int64_t i = 0; i < R; ++i) REQUIRE(m.row_nnz(i) == k);
  for (std::int64_t s = 0; s < m.storage_size(); ++s)
    if (m.col_indices()[s] >= 0) {
      REQUIRE(m.values()[s] >= T(-1));
      REQUIRE(m.values()[s] < T(1));
    }
  // Deterministic for a seed, different for another seed.
  require_same(M::random_per_row(R, C, k, 123).to_csr(), m.to_csr());
  REQUIRE(M::random_per_row(R, C, k, 124).to_csr().col_indices != m.to_csr().col_indices);

  // Column hits: each column is chosen in a row with p = k / C, independently across rows,
  // so hits ~ Binomial(R, p). X = sum (hits - Rp)^2 / (Rp(1-p)) has mean C; with the
  // fixed row total its variance is below 2C. Bound at mean + 6 sd; a biased sampler (e.g.
  // the first k columns, or one column twice as likely) exceeds it by orders of magnitude.
  std::vector<double> hits(static_cast<std::size_t>(C), 0.0);
  double value_sum = 0.0;
  m.for_each_live([&](std::int64_t, std::int64_t c, T v, std::int64_t) {
    hits[static_cast<std::size_t>(c)] += 1;
    value_sum += static_cast<double>(v);
  });
  const double p = static_cast<double>(k) / static_cast<double>(C), var = static_cast<double>(R) * p * (1 - p);
  double x = 0;
  for (double h : hits) x += (h - static_cast<double>(R) * p) * (h - static_cast<double>(R) * p) / var;
  INFO("chi-square " << x << " over " << C << " columns");
  REQUIRE(x < static_cast<double>(C) + 6.0 * std::sqrt(2.0 * static_cast<double>(C)));
  // Values uniform in [-1, 1): mean 0, sd 1/sqrt(3); the mean of n has sd 1/sqrt(3n).
  const double n = static_cast<double>(R * k);
  REQUIRE(std::abs(value_sum / n) < 6.0 / std::sqrt(3.0 * n));

  // Edge counts: 0 and cols per row; out of range rejected with the value in the message.
  REQUIRE(M::random_per_row(4, 7, 0, 1).nnz() == 0);
  REQUIRE(M::random_per_row(4, 7, 7, 1).nnz() == 28);
  require_error<sprig::ArgumentError>([] { M::random_per_row(4, 7, 8, 1); }, {"8", "7"});
  require_error<sprig::ArgumentError>([] { M::random_per_row(4, 7, -1, 1); }, {"-1"});
}

TEMPLATE_LIST_TEST_CASE("PaddedCSR: random_per_row never allocates rows x cols", "[padded_csr][random]", AllPairs) {
  using T = typename TestType::first_type;
  using Index = typename TestType::second_type;
  using M = sprig::PaddedCSR<T, Index>;
  // 100000 x 30000 dense would be 12 GB in float; 3 per row is 300000 entries.
  const std::int64_t R = 100000, C = 30000;
  const M m = M::random_per_row(R, C, 3, 5);
  REQUIRE(m.nnz() == 3 * R);
  REQUIRE(m.storage_size() == 4 * R);  // ceil(3 * 1.2) = 4 slots per row
  const std::int64_t expected =
      4 * R * static_cast<std::int64_t>(sizeof(T) + sizeof(Index)) + 3 * R * 8 + static_cast<std::int64_t>(sizeof(M));
  REQUIRE(m.memory_bytes() == expected);
  REQUIRE(m.memory_bytes() < R * C / 100);
  for (std::int64_t i = 0; i < R; i += 997) REQUIRE(m.row_nnz(i) == 3);
  REQUIRE_NOTHROW(m.check_invariants());
}

TEMPLATE_LIST_TEST_CASE("PaddedCSR: random_total / random_density give an exact, uniform total", "[padded_csr][random]",
                        AllPairs) {
  using T = typename TestType::first_type;
  using Index = typename TestType::second_type;
  using M = sprig::PaddedCSR<T, Index>;
  const std::int64_t R = 300, C = 200, N = R * C;
  // Below and above half density (the complement branch).
  for (double density : {0.1, 0.8}) {
    INFO("density " << density);
    const std::int64_t total = std::llround(density * static_cast<double>(N));
    const M m = M::random_total(R, C, total, 77);
    REQUIRE_NOTHROW(m.check_invariants());
    require_tight_layout(m, sprig::kDefaultPaddingRatio);
    REQUIRE(m.nnz() == total);
    require_same(M::random_density(R, C, density, 77).to_csr(), m.to_csr());
    REQUIRE(M::random_total(R, C, total, 78).to_csr().col_indices != m.to_csr().col_indices);

    // Row counts are hypergeometric: mean n C / N, variance n (C/N)(1 - C/N)(N - n)/(N - 1).
    // Column counts likewise with R. X = sum (count - mean)^2 / variance has mean about the
    // number of bins; bound at bins + 6 sqrt(2 bins).
    auto chi = [&](const std::vector<double>& counts, std::int64_t per_bin) {
      const double q = static_cast<double>(per_bin) / static_cast<double>(N), n = static_cast<double>(total);
      const double mean = n * q, var = n * q * (1 - q) * (static_cast<double>(N) - n) / (static_cast<double>(N) - 1);
      double x = 0;
      for (double h : counts) x += (h - mean) * (h - mean) / var;
      return x;
    };
    std::vector<double> rows(R, 0.0), cols(C, 0.0);
    m.for_each_live([&](std::int64_t i, std::int64_t c, T, std::int64_t) {
      rows[static_cast<std::size_t>(i)] += 1;
      cols[static_cast<std::size_t>(c)] += 1;
    });
    const double xr = chi(rows, C), xc = chi(cols, R);
    INFO("row chi-square " << xr << ", column chi-square " << xc);
    REQUIRE(xr < static_cast<double>(R) + 6.0 * std::sqrt(2.0 * static_cast<double>(R)));
    REQUIRE(xc < static_cast<double>(C) + 6.0 * std::sqrt(2.0 * static_cast<double>(C)));
    // The row counts are not all equal (that would be random_per_row, not a uniform subset).
    REQUIRE(*std::max_element(rows.begin(), rows.end()) > *std::min_element(rows.begin(), rows.end()));
  }
  REQUIRE(M::random_total(4, 5, 20, 1).nnz() == 20);
  REQUIRE(M::random_density(7, 3, 0.5, 1).nnz() == 11);  // round(10.5) = 11
  REQUIRE(M::random_density(7, 3, 1.0, 1).nnz() == 21);
  require_error<sprig::ArgumentError>([] { M::random_total(4, 5, 21, 1); }, {"21", "20"});
  require_error<sprig::ArgumentError>([] { M::random_total(4, 5, -1, 1); }, {"-1"});
  require_error<sprig::ArgumentError>([] { M::random_density(4, 5, 1.5, 1); }, {"1.5"});
  require_error<sprig::ArgumentError>([] { M::random_density(4, 5, -0.1, 1); }, {"-0.1"});
  require_error<sprig::ArgumentError>([] { M::random_density(4, 5, std::nan(""), 1); }, {"nan"});
}

// ---- operations: argument errors and their messages -------------------------------------

TEMPLATE_LIST_TEST_CASE("PaddedCSR: bad arguments to operations throw, name the values, and change nothing",
                        "[padded_csr][errors]", AllPairs) {
  using T = typename TestType::first_type;
  using Index = typename TestType::second_type;
  using M = sprig::PaddedCSR<T, Index>;
  M m = M::random_per_row(4, 10, 3, 2);
  for (std::int64_t c = 0; c < 10; ++c)
    if (m.find(2, c) < 0) {
      m.insert(2, c, T(1));  // row 2 relocates (capacity 4 -> 4 live, then grows) or fills
      break;
    }
  const auto before = m.to_csr();
  const auto version = m.topology_version();
  const auto storage = m.storage_size();
  auto unchanged = [&] {
    REQUIRE_NOTHROW(m.check_invariants());
    require_same(m.to_csr(), before);
    REQUIRE(m.topology_version() == version);
    REQUIRE(m.storage_size() == storage);
  };
  // Find a live column of row 1 and an absent one.
  const std::int64_t live_c = m.row(1).cols[0];
  std::int64_t absent_c = 0;
  while (m.find(1, absent_c) >= 0) ++absent_c;

  sprig::SlotLog log;
  require_error<sprig::ArgumentError>([&] { m.insert(1, live_c, T(5), &log); },
                                      {("(1, " + std::to_string(live_c) + ")").c_str(), "already live"});
  REQUIRE(log.empty());
  require_error<sprig::ArgumentError>([&] { m.insert(4, 0, T(5)); }, {"(4, 0)", "4x10"});
  require_error<sprig::ArgumentError>([&] { m.insert(0, 10, T(5)); }, {"(0, 10)"});
  require_error<sprig::ArgumentError>([&] { m.insert(-1, 0, T(5)); }, {"(-1, 0)"});
  require_error<sprig::ArgumentError>([&] { m.erase(0, -3); }, {"(0, -3)"});
  require_error<sprig::ArgumentError>([&] { (void)m.find(9, 0); }, {"(9, 0)"});
  REQUIRE_FALSE(m.erase(1, absent_c));
  unchanged();

  // erase_slot: padding slot, another row's slot, a slot before the row, a bad row.
  const std::int64_t pad = m.row_start(1) + m.row_nnz(1);
  require_error<sprig::ArgumentError>([&] { m.erase_slot(1, pad, &log); }, {std::to_string(pad).c_str(), "row 1"});
  const std::int64_t other = m.row_start(0);
  require_error<sprig::ArgumentError>([&] { m.erase_slot(1, other); }, {std::to_string(other).c_str()});
  require_error<sprig::ArgumentError>([&] { m.erase_slot(7, 0); }, {"row 7"});
  REQUIRE(log.empty());
  unchanged();

  // erase_slots: a non-live slot, a repeated slot; either way nothing is erased.
  const std::vector<std::int64_t> with_pad{m.row_start(0), pad, m.row_start(2)};
  require_error<sprig::ArgumentError>([&] { m.erase_slots(with_pad, &log); }, {std::to_string(pad).c_str()});
  const std::int64_t twice = m.row_start(3);
  const std::vector<std::int64_t> repeated{twice, m.row_start(0), twice};
  require_error<sprig::ArgumentError>([&] { m.erase_slots(repeated, &log); }, {std::to_string(twice).c_str()});
  const std::vector<std::int64_t> negative{-4};
  require_error<sprig::ArgumentError>([&] { m.erase_slots(negative); }, {"-4"});
  const std::vector<std::int64_t> beyond{m.storage_size() + 5};
  require_error<sprig::ArgumentError>([&] { m.erase_slots(beyond); }, {std::to_string(m.storage_size() + 5).c_str()});
  REQUIRE(log.empty());
  unchanged();

  // rewrite_row: duplicate column, out-of-range column, length mismatch, bad row.
  const std::vector<Index> dup{1, 5, 1};
  const std::vector<T> three{T(1), T(2), T(3)};
  require_error<sprig::ArgumentError>(
      [&] { m.rewrite_row(1, std::span<const Index>(dup), std::span<const T>(three), &log); }, {"column 1 twice"});
  const std::vector<Index> out_of_range{1, 10, 2};
  require_error<sprig::ArgumentError>(
      [&] { m.rewrite_row(1, std::span<const Index>(out_of_range), std::span<const T>(three), &log); }, {"column 10"});
  const std::vector<Index> two{1, 2};
  require_error<sprig::ShapeError>([&] { m.rewrite_row(1, std::span<const Index>(two), std::span<const T>(three)); },
                                   {"2 columns but 3 values"});
  require_error<sprig::ArgumentError>(
      [&] { m.rewrite_row(4, std::span<const Index>(two), std::span<const T>(three).first(2)); }, {"row 4"});
  require_error<sprig::ArgumentError>([&] { m.reserve_row(-1, 3); }, {"row -1"});
  REQUIRE(log.empty());
  unchanged();
}

// ---- memory accounting, copies, invariant checker ----------------------------------------

TEMPLATE_LIST_TEST_CASE("PaddedCSR: memory() counts every array at its capacity", "[padded_csr][memory]", AllPairs) {
  using T = typename TestType::first_type;
  using Index = typename TestType::second_type;
  using M = sprig::PaddedCSR<T, Index>;
  M m = M::random_density(64, 100, 0.1, 3);
  const auto mem = m.memory();
  const std::int64_t slots = m.storage_size();
  REQUIRE(slots == [&] {
    std::int64_t s = 0;
    for (std::int64_t i = 0; i < 64; ++i) s += spec_capacity(m.row_nnz(i), 0.2);
    return s;
  }());
  REQUIRE(mem.values == slots * static_cast<std::int64_t>(sizeof(T)));
  REQUIRE(mem.col_indices == slots * static_cast<std::int64_t>(sizeof(Index)));
  REQUIRE(mem.row_arrays == 3 * 64 * static_cast<std::int64_t>(sizeof(std::int64_t)));
  REQUIRE(mem.object == static_cast<std::int64_t>(sizeof(M)));
  REQUIRE(mem.total() == mem.values + mem.col_indices + mem.row_arrays + mem.object);
  REQUIRE(m.memory_bytes() == mem.total());

  // Relocating rows grows storage (and never shrinks the accounted bytes below the slots).
  for (std::int64_t i = 0; i < 64; i += 2) m.reserve_row(i, m.row_capacity(i) + 5);
  REQUIRE(m.dead_slots() > 0);
  const auto grown = m.memory();
  REQUIRE(grown.values >= m.storage_size() * static_cast<std::int64_t>(sizeof(T)));
  REQUIRE(grown.col_indices >= m.storage_size() * static_cast<std::int64_t>(sizeof(Index)));
  REQUIRE(grown.values > mem.values);
  // compact() with the same ratio restores the original tight size exactly.
  m.compact();
  REQUIRE(m.memory().values == mem.values);
  REQUIRE(m.memory().col_indices == mem.col_indices);
  REQUIRE(m.memory_bytes() == mem.total());
  // With ratio 0: nnz slots per row, one for an empty row.
  m.compact(0.0);
  std::int64_t expect = 0;
  for (std::int64_t i = 0; i < 64; ++i) expect += std::max<std::int64_t>(1, m.row_nnz(i));
  REQUIRE(m.memory().values == expect * static_cast<std::int64_t>(sizeof(T)));
}

TEMPLATE_LIST_TEST_CASE("PaddedCSR: copies are independent values", "[padded_csr]", AllPairs) {
  using T = typename TestType::first_type;
  using Index = typename TestType::second_type;
  using M = sprig::PaddedCSR<T, Index>;
  M a = M::random_per_row(5, 8, 2, 1);
  const auto csr = a.to_csr();
  M b = a;
  for (std::int64_t c = 0; c < 8; ++c)
    if (b.find(0, c) < 0) b.insert(0, c, T(1));  // row 0 becomes dense and relocates
  b.values()[static_cast<std::size_t>(b.row_start(1))] = T(42);
  require_same(a.to_csr(), csr);
  REQUIRE(b.nnz() > a.nnz());
  REQUIRE_NOTHROW(b.check_invariants());
}

TEMPLATE_LIST_TEST_CASE("PaddedCSR: check_invariants reports a corrupted padding slot", "[padded_csr]", AllPairs) {
  using T = typename TestType::first_type;
  using Index = typename TestType::second_type;
  using M = sprig::PaddedCSR<T, Index>;
  M m = M::random_per_row(3, 10, 2, 1);  // capacity 3, so slot start+2 of each row is padding
  REQUIRE_NOTHROW(m.check_invariants());
  const std::int64_t pad = m.row_start(1) + m.row_nnz(1);
  m.values()[static_cast<std::size_t>(pad)] = T(1);  // padding must hold 0
  require_error<sprig::Error>([&] { m.check_invariants(); }, {"padding slot", std::to_string(pad).c_str()});
}

TEMPLATE_LIST_TEST_CASE("PaddedCSR: to_dense rejects an output of the wrong shape", "[padded_csr][dense][errors]",
                        AllPairs) {
  using T = typename TestType::first_type;
  using Index = typename TestType::second_type;
  using M = sprig::PaddedCSR<T, Index>;
  const M m = M::random_per_row(3, 5, 2, 1);
  sprig::Matrix<T> wrong(5, 3, T(7));
  require_error<sprig::ShapeError>([&] { m.to_dense(wrong.view()); }, {"5x3", "3x5"});
  for (std::int64_t i = 0; i < 5; ++i)
    for (std::int64_t j = 0; j < 3; ++j) REQUIRE(wrong(i, j) == T(7));  // untouched
  // Operations on a matrix without rows reject every slot and row.
  M none(0, 4);
  const std::vector<std::int64_t> zero{0};
  require_error<sprig::ArgumentError>([&] { none.erase_slots(zero); }, {"slot 0"});
  require_error<sprig::ArgumentError>([&] { none.erase_slot(0, 0); }, {"row 0"});
  require_error<sprig::ArgumentError>([&] { none.insert(0, 0, T(1)); }, {"(0, 0)", "0x4"});
  none.compact();
  REQUIRE_NOTHROW(none.check_invariants());
  REQUIRE(none.storage_size() == 0);
}

TEST_CASE("PaddedCSR::topology_key names one topology of one object for the whole process", "[padded_csr]") {
  using M = sprig::PaddedCSR<float, std::int32_t>;
  // Two matrices built alike: the same topology_version, different keys.
  M a = M::random_density(20, 30, 0.2, 1), b = M::random_density(20, 30, 0.2, 2);
  REQUIRE(a.topology_version() == b.topology_version());
  CHECK_FALSE(a.topology_key() == b.topology_key());
  // A copy is a new object: a new key (the two may diverge through equal version numbers).
  const M c = a;
  CHECK_FALSE(c.topology_key() == a.topology_key());
  M d;
  d = a;
  CHECK_FALSE(d.topology_key() == a.topology_key());
  // A move hands the key over; the source gets a fresh one.
  const auto key_a = a.topology_key();
  M e = std::move(a);
  CHECK(e.topology_key() == key_a);
  CHECK_FALSE(a.topology_key() == key_a);  // NOLINT(bugprone-use-after-move): the contract under test
  M f;
  f = std::move(e);
  CHECK(f.topology_key() == key_a);
  CHECK_FALSE(e.topology_key() == key_a);  // NOLINT(bugprone-use-after-move)
  // A structural change makes a new key; a value change does not.
  f.values()[static_cast<std::size_t>(f.row_start(0))] = 3.0f;
  CHECK(f.topology_key() == key_a);
  f.insert(0, f.find(0, 29) < 0 ? 29 : 28, 1.0f);
  CHECK_FALSE(f.topology_key() == key_a);
}
