// SlotLog: each event kind on hand-built logs, replayed on std::vector and AlignedVector.
#include <sprig/core/slot_log.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <vector>

#include <sprig/core/aligned_allocator.hpp>

namespace {

template <class Vec>
Vec make(std::initializer_list<double> xs) {
  Vec v;
  for (double x : xs) v.push_back(static_cast<typename Vec::value_type>(x));
  return v;
}

}  // namespace

TEMPLATE_TEST_CASE("SlotLog: each event kind replays as specified", "[slot_log]", std::vector<float>,
                   std::vector<double>, sprig::AlignedVector<float>, sprig::AlignedVector<double>) {
  using Vec = TestType;

  SECTION("an empty log leaves the state alone") {
    sprig::SlotLog log;
    REQUIRE(log.empty());
    REQUIRE(log.size() == 0);
    Vec s = make<Vec>({1, 2, 3});
    log.apply(s);
    REQUIRE(s == make<Vec>({1, 2, 3}));
  }
  SECTION("move copies without clearing the source") {
    sprig::SlotLog log;
    log.move(3, 0);
    REQUIRE(log.size() == 1);
    REQUIRE(log.events()[0].kind == sprig::SlotLog::Kind::Move);
    REQUIRE(log.events()[0].a == 3);
    REQUIRE(log.events()[0].b == 0);
    Vec s = make<Vec>({1, 2, 3, 4});
    log.apply(s);
    REQUIRE(s == make<Vec>({4, 2, 3, 4}));
  }
  SECTION("clear zeroes one slot") {
    sprig::SlotLog log;
    log.clear(1);
    Vec s = make<Vec>({1, 2, 3});
    log.apply(s);
    REQUIRE(s == make<Vec>({1, 0, 3}));
  }
  SECTION("resize grows with zeros and shrinks") {
    sprig::SlotLog log;
    log.resize(5);
    Vec s = make<Vec>({1, 2});
    log.apply(s);
    REQUIRE(s == make<Vec>({1, 2, 0, 0, 0}));
    sprig::SlotLog shrink;
    shrink.resize(1);
    shrink.apply(s);
    REQUIRE(s == make<Vec>({1}));
  }
  SECTION("remap gathers, -1 gives zero, and may change the size") {
    sprig::SlotLog log;
    const std::int64_t sources[] = {2, -1, 0, 0, -1};
    log.remap(sources);
    REQUIRE(log.events()[0].kind == sprig::SlotLog::Kind::Remap);
    REQUIRE(log.events()[0].a == 5);
    REQUIRE(log.remap_sources().size() == 5);
    Vec s = make<Vec>({7, 8, 9});
    log.apply(s);
    REQUIRE(s == make<Vec>({9, 0, 7, 7, 0}));
  }
  SECTION("events replay in order; two remaps each use their own sources") {
    // The sequence an erase in a relocated row produces, then a compact-like remap, then
    // another remap: checks the offsets into remap_sources().
    sprig::SlotLog log;
    log.resize(6);   // {1, 2, 3, 4, 0, 0}
    log.move(1, 4);  // {1, 2, 3, 4, 2, 0}
    log.clear(1);    // {1, 0, 3, 4, 2, 0}
    log.move(3, 0);  // {4, 0, 3, 4, 2, 0}
    log.clear(3);    // {4, 0, 3, 0, 2, 0}
    const std::int64_t first[] = {4, 0, -1, 2};
    log.remap(first);  // {2, 4, 0, 3}
    const std::int64_t second[] = {3, 3, 1};
    log.remap(second);  // {3, 3, 4}
    log.move(0, 2);     // {3, 3, 3}
    log.clear(1);       // {3, 0, 3}
    REQUIRE(log.size() == 9);
    REQUIRE(log.events()[6].b == 4);  // the second remap's sources start after the first's
    Vec s = make<Vec>({1, 2, 3, 4});
    log.apply(s);
    REQUIRE(s == make<Vec>({3, 0, 3}));
    // apply() is const: the same log replays identically on another array.
    Vec t = make<Vec>({10, 20, 30, 40});
    log.apply(t);
    REQUIRE(t == make<Vec>({30, 0, 30}));
  }
  SECTION("reset empties the log") {
    sprig::SlotLog log;
    log.move(0, 1);
    const std::int64_t src[] = {0};
    log.remap(src);
    log.reset();
    REQUIRE(log.empty());
    REQUIRE(log.remap_sources().empty());
    Vec s = make<Vec>({5, 6});
    log.apply(s);
    REQUIRE(s == make<Vec>({5, 6}));
  }
}

TEST_CASE("SlotLog: a sink receives the events in chunks and the state ends as with one whole replay", "[slot_log]") {
  // a long random log on a growing array
  std::vector<sprig::SlotLog::Event> events;
  sprig::SlotLog whole;
  std::uint64_t x = 12345;
  auto next = [&](std::uint64_t n) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<std::int64_t>((x >> 33) % n);
  };
  std::int64_t size = 50;
  std::vector<std::vector<std::int64_t>> ops;  // kind, a, b
  for (int q = 0; q < 1000; ++q) {
    const std::int64_t kind = next(10);
    if (kind < 5)
      ops.push_back({0, next(size), next(size)});
    else if (kind < 9)
      ops.push_back({1, next(size), 0});
    else
      ops.push_back({2, size += 1 + next(5), 0});
  }
  std::vector<double> base(50);
  for (std::size_t i = 0; i < base.size(); ++i) base[i] = 1.0 + static_cast<double>(i);
  auto record = [&](sprig::SlotLog& log, bool flush_between) {
    for (const auto& op : ops) {
      if (op[0] == 0)
        log.move(op[1], op[2]);
      else if (op[0] == 1)
        log.clear(op[1]);
      else
        log.resize(op[1]);
      if (flush_between) log.flush_if_full();
    }
    log.flush();
  };
  record(whole, false);  // no sink: flush does nothing, the log keeps everything
  REQUIRE(whole.size() == ops.size());
  std::vector<double> expect = base;
  whole.apply(expect);

  std::vector<double> streamed = base;
  std::size_t chunks = 0, largest = 0;
  sprig::SlotLog log;
  log.set_sink(64, [&](const sprig::SlotLog& chunk) {
    ++chunks;
    largest = std::max(largest, chunk.size());
    chunk.apply(streamed);
  });
  record(log, true);
  CHECK(log.empty());
  CHECK(chunks == (ops.size() + 63) / 64);
  CHECK(largest == 64);
  CHECK(streamed == expect);
}
