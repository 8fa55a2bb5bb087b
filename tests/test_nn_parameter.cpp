#include "sprig/nn/parameter.hpp"

#include <cstdint>
#include <map>
#include <tuple>
#include <utility>

#include <catch2/catch.hpp>

using namespace sprig;

using Indices = std::tuple<std::int16_t, std::int32_t, std::int64_t>;

namespace {
// Tags every live slot's grad and state with a value derived from its (row, col), so after
// any structural change we can tell whether the per-slot arrays followed their weights.
template <class P>
void tag(P& p) {
  p.state.assign(2, AlignedVector<double>(p.grad.size(), 0.0));
  p.matrix.for_each_live([&](std::int64_t r, std::int64_t c, double, std::int64_t s) {
    p.grad[s] = 1000.0 * r + c + 0.5;
    p.state[0][s] = -(1000.0 * r + c);
    p.state[1][s] = 7.0 + r;
  });
}
}  // namespace

TEMPLATE_LIST_TEST_CASE("SparseParameter::apply keeps grad and state with their weights", "[nn][parameter]", Indices) {
  using Index = TestType;
  auto w = PaddedCSR<double, Index>::random_per_row(6, 10, 3, 42);
  SparseParameter<double, Index> p(std::move(w));
  REQUIRE(std::ssize(p.grad) == p.matrix.storage_size());
  tag(p);

  SlotLog log;
  // delete (moves the row's last live slot into the hole), insert into padding, insert into a
  // full row (relocates it to the end of storage), whole-row rewrite, then compaction.
  const auto r0 = p.matrix.row(0);
  const std::int64_t erased_col = r0.cols[0];
  p.matrix.erase_slot(0, r0.start, &log);
  std::int64_t new_col = 0;
  while (p.matrix.find(1, new_col) >= 0) ++new_col;
  const std::int64_t born = p.matrix.insert_new(1, new_col, 0.0, &log);
  for (std::int64_t c = 0; c < 10; ++c)
    if (p.matrix.find(2, c) < 0) p.matrix.insert_new(2, c, 0.0, &log);  // row 2 grows past capacity
  const std::vector<std::int32_t> cols3 = {9, 1};
  const std::vector<double> vals3 = {0.5, -0.5};
  p.matrix.rewrite_row(3, std::span<const std::int32_t>(cols3), std::span<const double>(vals3), &log);
  p.apply(log);
  log.reset();
  p.matrix.check_invariants();
  REQUIRE(std::ssize(p.grad) == p.matrix.storage_size());
  REQUIRE(p.matrix.dead_slots() > 0);  // the relocation happened
  CHECK(p.grad[born] == 0.0);

  auto verify = [&](std::int64_t original_per_row) {
    for (std::size_t k = 0; k < p.state.size(); ++k) REQUIRE(std::ssize(p.state[k]) == p.matrix.storage_size());
    std::int64_t survivors = 0;
    p.matrix.for_each_live([&](std::int64_t r, std::int64_t c, double, std::int64_t s) {
      const bool original = !(r == 3) && p.grad[s] != 0.0;
      if (original) {
        ++survivors;
        CHECK(p.grad[s] == 1000.0 * r + c + 0.5);
        CHECK(p.state[0][s] == -(1000.0 * r + c));
        CHECK(p.state[1][s] == 7.0 + r);
      } else {
        CHECK(p.grad[s] == 0.0);  // newborn or rewritten: zero state
        CHECK(p.state[0][s] == 0.0);
        CHECK(p.state[1][s] == 0.0);
      }
    });
    // rows 0..5 had 3 each; row 0 lost one; row 3 was rewritten.
    CHECK(survivors == 6 * original_per_row - 1 - original_per_row);
    CHECK(p.matrix.find(0, erased_col) < 0);
  };
  verify(3);
  // Non-live slots hold zero state (freed slots cleared, dead slots of the relocation too).
  for (std::int64_t s = 0; s < p.matrix.storage_size(); ++s)
    if (p.matrix.col_indices()[s] < 0) {
      CHECK(p.grad[s] == 0.0);
      CHECK(p.state[0][s] == 0.0);
    }

  p.matrix.compact(&log);
  p.apply(log);
  REQUIRE(p.matrix.dead_slots() == 0);
  verify(3);
}

TEST_CASE("SparseParameter::check_aligned catches a change made without apply", "[nn][parameter]") {
  SparseParameter<float, std::int32_t> p(PaddedCSR<float, std::int32_t>::random_per_row(3, 5, 2, 1));
  CHECK_NOTHROW(p.check_aligned("test"));
  p.matrix.compact(3.0);  // no log: storage grows, grad does not
  CHECK_THROWS_AS(p.check_aligned("test"), ShapeError);
}

TEST_CASE("DenseParameter shape and views", "[nn][parameter]") {
  DenseParameter<float> p(3, 4, 0.5f);
  CHECK(p.size() == 12);
  CHECK(p.view()(2, 3) == 0.5f);
  CHECK(p.grad_view()(1, 1) == 0.0f);
  CHECK(p.weight_bytes() >= 12 * 4);
  CHECK_NOTHROW(p.check_aligned("test"));
  p.state.emplace_back(5, 0.0f);
  CHECK_THROWS_AS(p.check_aligned("test"), ShapeError);
  CHECK_THROWS_AS(DenseParameter<float>(-1, 2), ShapeError);
}
