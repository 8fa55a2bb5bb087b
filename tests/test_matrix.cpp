// Dense Matrix, MatrixView, ConstMatrixView and transpose_into.
#include <sprig/core/matrix.hpp>

#include <catch2/catch.hpp>

#include <cstdint>
#include <span>
#include <random>
#include <string>
#include <type_traits>
#include <utility>

namespace {

using Catch::Matchers::Contains;

template <class T>
bool aligned64(const T* p) {
  return reinterpret_cast<std::uintptr_t>(p) % 64 == 0;
}

// Distinct value for every (i, j), exact in float for the sizes used here.
template <class T>
T at(std::int64_t i, std::int64_t j) {
  return static_cast<T>(i * 1000 + j + 1);
}

}  // namespace

TEMPLATE_TEST_CASE("Matrix: data is 64-byte aligned, also after resize", "[matrix]", float, double) {
  using T = TestType;
  for (std::int64_t r : {1, 3, 17}) {
    for (std::int64_t c : {1, 5, 16, 33}) {
      sprig::Matrix<T> m(r, c);
      INFO(r << "x" << c);
      REQUIRE(aligned64(m.data()));
      REQUIRE(m.rows() == r);
      REQUIRE(m.cols() == c);
      REQUIRE(m.stride() == c);
      REQUIRE(m.size() == r * c);
      m.resize(r + 7, c * 3 + 1);
      REQUIRE(aligned64(m.data()));
      REQUIRE(m.stride() == c * 3 + 1);
      m.resize(2, c, c + 9, T(4));
      REQUIRE(aligned64(m.data()));
      REQUIRE(m.stride() == c + 9);
      // resize fills the live elements with init.
      for (std::int64_t i = 0; i < 2; ++i)
        for (std::int64_t j = 0; j < c; ++j) REQUIRE(m(i, j) == T(4));
    }
  }
  // Owned bytes cover rows x stride.
  sprig::Matrix<T> m(5, 7, 11, T(0));
  REQUIRE(m.memory_bytes() >= 5 * 11 * static_cast<std::int64_t>(sizeof(T)));
  // An empty matrix is fine.
  sprig::Matrix<T> e(0, 4);
  REQUIRE(e.size() == 0);
  REQUIRE(e.view().rows() == 0);
}

TEMPLATE_TEST_CASE("Matrix: element access follows the row stride", "[matrix]", float, double) {
  using T = TestType;
  const std::int64_t R = 6, C = 5, S = 8;
  sprig::Matrix<T> m(R, C, S, T(-1));
  for (std::int64_t i = 0; i < R; ++i)
    for (std::int64_t j = 0; j < C; ++j) m(i, j) = at<T>(i, j);
  for (std::int64_t i = 0; i < R; ++i) {
    REQUIRE(m.row(i) == m.data() + i * S);
    for (std::int64_t j = 0; j < C; ++j) REQUIRE(m.data()[i * S + j] == at<T>(i, j));
    for (std::int64_t j = C; j < S; ++j) REQUIRE(m.data()[i * S + j] == T(-1));  // row padding untouched
  }
  const sprig::MatrixView<T> v = m.view();
  REQUIRE(v.data() == m.data());
  REQUIRE(v.stride() == S);
  const sprig::ConstMatrixView<T> cv = std::as_const(m).view();
  REQUIRE(cv.stride() == S);
  REQUIRE(cv(4, 3) == at<T>(4, 3));
  // Implicit conversions.
  sprig::ConstMatrixView<T> from_mut = v;
  REQUIRE(from_mut(2, 1) == at<T>(2, 1));
  sprig::MatrixView<T> from_matrix = m;
  from_matrix(1, 1) = T(77);
  REQUIRE(m(1, 1) == T(77));
  // fill on a view touches only the view's elements.
  v.block(1, 1, 2, 3).fill(T(9));
  for (std::int64_t i = 0; i < R; ++i)
    for (std::int64_t j = 0; j < C; ++j) {
      const bool inside = i >= 1 && i < 3 && j >= 1 && j < 4;
      if (inside)
        REQUIRE(m(i, j) == T(9));
      else if (!(i == 1 && j == 1))
        REQUIRE(m(i, j) == at<T>(i, j));
    }
  for (std::int64_t i = 0; i < R; ++i)
    for (std::int64_t j = C; j < S; ++j) REQUIRE(m.data()[i * S + j] == T(-1));
}

TEMPLATE_TEST_CASE("MatrixView: block() addresses sub-blocks and rejects out-of-bounds ones", "[matrix]", float,
                   double) {
  using T = TestType;
  sprig::Matrix<T> m(7, 9);
  for (std::int64_t i = 0; i < 7; ++i)
    for (std::int64_t j = 0; j < 9; ++j) m(i, j) = at<T>(i, j);
  const auto v = m.view();
  const auto b = v.block(2, 3, 4, 5);
  REQUIRE(b.rows() == 4);
  REQUIRE(b.cols() == 5);
  REQUIRE(b.stride() == 9);
  for (std::int64_t i = 0; i < 4; ++i)
    for (std::int64_t j = 0; j < 5; ++j) REQUIRE(b(i, j) == at<T>(i + 2, j + 3));
  const auto bb = b.block(1, 1, 2, 2);  // nested
  REQUIRE(bb(1, 1) == at<T>(4, 5));
  const sprig::ConstMatrixView<T> cv = v;
  const auto cb = cv.block(6, 8, 1, 1);
  REQUIRE(cb(0, 0) == at<T>(6, 8));
  REQUIRE(cv.block(7, 9, 0, 0).rows() == 0);  // empty block at the corner is valid
  REQUIRE(v.block(0, 0, 7, 9).data() == m.data());

  auto expect_bad = [](auto&& view, std::int64_t r0, std::int64_t c0, std::int64_t nr, std::int64_t nc) {
    INFO("block(" << r0 << ", " << c0 << ", " << nr << ", " << nc << ")");
    try {
      (void)view.block(r0, c0, nr, nc);
      FAIL("no exception");
    } catch (const sprig::ShapeError& e) {
      CHECK_THAT(e.what(), Contains("7x9"));
      CHECK_THAT(e.what(), Contains(std::to_string(r0) + "+" + std::to_string(nr)));
    }
  };
  for (const auto& view : {cv}) {
    expect_bad(view, 5, 0, 3, 1);   // rows past the end
    expect_bad(view, 0, 8, 1, 2);   // cols past the end
    expect_bad(view, -1, 0, 1, 1);  // negative origin
    expect_bad(view, 0, 0, -1, 1);  // negative extent
  }
  expect_bad(v, 5, 0, 3, 1);
  expect_bad(v, 0, 0, 1, 10);
  expect_bad(v, 0, -2, 1, 1);
}

TEMPLATE_TEST_CASE("Matrix and views: shape errors name the dimensions", "[matrix][errors]", float, double) {
  using T = TestType;
  T buf[16] = {};
  auto message = [](auto&& f) -> std::string {
    try {
      f();
    } catch (const sprig::ShapeError& e) {
      return e.what();
    }
    FAIL("no ShapeError");
    return {};
  };
  CHECK_THAT(message([] { sprig::Matrix<T>(-2, 3); }), Contains("-2x3"));
  CHECK_THAT(message([] { sprig::Matrix<T>(2, 5, 4, T(0)); }), Contains("stride 4") && Contains("cols 5"));
  CHECK_THAT(message([] {
               sprig::Matrix<T> m;
               m.resize(3, -1);
             }),
             Contains("3x-1"));
  CHECK_THAT(message([&] { sprig::MatrixView<T>(buf, 2, 8, 7); }), Contains("stride 7") && Contains("cols 8"));
  CHECK_THAT(message([&] { sprig::ConstMatrixView<T>(buf, -1, 2); }), Contains("-1x2"));
  REQUIRE_THROWS_AS(sprig::MatrixView<T>(nullptr, 2, 2), sprig::ArgumentError);
  REQUIRE_NOTHROW(sprig::MatrixView<T>(nullptr, 0, 2));
  REQUIRE_NOTHROW(sprig::ConstMatrixView<T>(buf, 2, 4, 8));
}

TEMPLATE_TEST_CASE("transpose_into matches dst(j, i) = src(i, j) on odd shapes and strided views",
                   "[matrix][transpose]", float, double) {
  using T = TestType;
  std::mt19937_64 gen(3);
  // Shapes around the 32-element tile: smaller, equal, one over, several tiles plus a rest.
  for (std::int64_t r : {1, 7, 31, 32, 33, 70}) {
    for (std::int64_t c : {1, 2, 32, 65}) {
      INFO(r << "x" << c);
      const std::int64_t pad_src = static_cast<std::int64_t>(gen() % 5), pad_dst = static_cast<std::int64_t>(gen() % 5);
      // Source: a block inside a larger strided matrix (unaligned, off the matrix origin).
      sprig::Matrix<T> big(r + 2, c + 3 + pad_src, c + 3 + pad_src, T(0));
      for (std::int64_t i = 0; i < r + 2; ++i)
        for (std::int64_t j = 0; j < c + 3 + pad_src; ++j) big(i, j) = at<T>(i, j);
      const sprig::ConstMatrixView<T> src = std::as_const(big).view().block(1, 2, r, c);
      // Destination: a strided block too, with a sentinel around it.
      sprig::Matrix<T> out(c + 1, r + 1 + pad_dst, r + 1 + pad_dst, T(-5));
      transpose_into<T>(src, out.view().block(1, 0, c, r));
      for (std::int64_t j = 0; j < c; ++j)
        for (std::int64_t i = 0; i < r; ++i) REQUIRE(out(j + 1, i) == at<T>(i + 1, j + 2));
      for (std::int64_t i = 0; i < r + 1 + pad_dst; ++i) REQUIRE(out(0, i) == T(-5));  // untouched row
      for (std::int64_t j = 1; j <= c; ++j)
        for (std::int64_t i = r; i < r + 1 + pad_dst; ++i) REQUIRE(out(j, i) == T(-5));  // untouched cols
      // transposed() returns a tight c x r matrix; transposing twice is the identity.
      const sprig::Matrix<T> t = sprig::transposed<T>(src);
      REQUIRE(t.rows() == c);
      REQUIRE(t.cols() == r);
      const sprig::Matrix<T> tt = sprig::transposed<T>(t.view());
      for (std::int64_t i = 0; i < r; ++i)
        for (std::int64_t j = 0; j < c; ++j) REQUIRE(tt(i, j) == src(i, j));
    }
  }
  // Shape mismatch names both shapes.
  sprig::Matrix<T> a(3, 4), b(3, 4);
  try {
    sprig::transpose_into<T>(a.view(), b.view());
    FAIL("no exception");
  } catch (const sprig::ShapeError& e) {
    CHECK_THAT(e.what(), Contains("3x4") && Contains("4x3"));
  }
  // Empty shapes are fine.
  sprig::Matrix<T> e(0, 5), et(5, 0);
  REQUIRE_NOTHROW(sprig::transpose_into<T>(e.view(), et.view()));
}

TEST_CASE("overlaps: views and spans of one buffer share memory where their byte ranges meet", "[matrix][overlap]") {
  sprig::Matrix<float> m(6, 8);
  const sprig::MatrixView<float> v = m.view();
  // Disjoint row ranges, adjacent ones included, do not overlap; shared rows do.
  CHECK_FALSE(sprig::overlaps(v.block(0, 0, 3, 8), v.block(3, 0, 3, 8)));
  CHECK(sprig::overlaps(v.block(0, 0, 3, 8), v.block(2, 0, 3, 8)));
  CHECK(sprig::overlaps(v, v));
  CHECK(sprig::overlaps(sprig::ConstMatrixView<float>(v), v.block(5, 7, 1, 1)));
  // Conservative: side-by-side column blocks of the same rows interleave in memory and count.
  CHECK(sprig::overlaps(v.block(0, 0, 6, 4), v.block(0, 4, 6, 4)));
  // ... but not when one ends before the other's first element.
  CHECK_FALSE(sprig::overlaps(v.block(0, 0, 1, 4), v.block(0, 4, 6, 4)));
  // Spans, of const or mutable elements, against views and each other.
  const std::span<float> all(m.data(), 48);
  CHECK(sprig::overlaps(all.subspan(10, 1), v.block(1, 2, 1, 1)));
  CHECK_FALSE(sprig::overlaps(std::span<const float>(m.data(), 8), v.block(1, 0, 5, 8)));
  CHECK_FALSE(sprig::overlaps(all.subspan(0, 8), all.subspan(8, 8)));
  // Empty views and spans overlap nothing.
  CHECK_FALSE(sprig::overlaps(v.block(2, 2, 0, 3), v));
  CHECK_FALSE(sprig::overlaps(all.subspan(4, 0), v));
  CHECK_FALSE(sprig::overlaps(sprig::MatrixView<float>(), v));
}

TEMPLATE_TEST_CASE("transpose_into rejects a dst that overlaps src", "[matrix][transpose][overlap]", float, double) {
  using T = TestType;
  // Before the check, transpose_into(m, m) on a square m returned quietly with m not m^T.
  sprig::Matrix<T> m(4, 4);
  for (std::int64_t i = 0; i < 4; ++i)
    for (std::int64_t j = 0; j < 4; ++j) m(i, j) = at<T>(i, j);
  CHECK_THROWS_AS(sprig::transpose_into<T>(m.view(), m.view()), sprig::ArgumentError);
  CHECK_THROWS_WITH(sprig::transpose_into<T>(m.view(), m.view()), Contains("transpose_into: dst overlaps src"));
  CHECK(m(0, 1) == at<T>(0, 1));
}
