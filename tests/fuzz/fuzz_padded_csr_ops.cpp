// libFuzzer target: the input is a program of PaddedCSR operations, run on a
// PaddedCSR<float, int16_t> and on a std::map reference model side by side. After every
// operation: check_invariants(), the live entries equal the map's, and a per-slot state
// vector replayed through the operation's SlotLog still tags every live slot with the
// identity of the entry it holds (moved state follows its weight, new weights start at 0,
// every non-live slot reads 0). Operations include a checkpoint round trip.
#include <sprig/core/padded_csr.hpp>
#include <sprig/io/checkpoint.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <span>
#include <utility>
#include <vector>

namespace {

using Matrix = sprig::PaddedCSR<float, std::int16_t>;

[[noreturn]] void fail(const char* what, long a = 0, long b = 0) {
  std::fprintf(stderr, "fuzz_padded_csr_ops: %s (%ld, %ld)\n", what, a, b);
  std::abort();
}

struct Input {
  const std::uint8_t* p;
  std::size_t n;
  bool empty() const { return n == 0; }
  std::uint8_t byte() {
    if (n == 0) return 0;
    --n;
    return *p++;
  }
};

struct Harness {
  Matrix m;
  std::map<std::pair<std::int64_t, std::int64_t>, float> ref;
  std::map<std::pair<std::int64_t, std::int64_t>, double> id;  // identity tag of each entry
  std::vector<double> tag;                                     // per-slot state: the entry's tag
  double next_id = 1;

  // A newborn weight's state is 0 after the log; give it a fresh identity.
  void born(std::int64_t r, std::int64_t c, std::int64_t slot) {
    if (tag[static_cast<std::size_t>(slot)] != 0) fail("newborn slot state not zeroed", slot);
    tag[static_cast<std::size_t>(slot)] = next_id;
    id[{r, c}] = next_id++;
  }

  void check() {
    m.check_invariants();
    if (m.nnz() != static_cast<std::int64_t>(ref.size())) fail("nnz differs from the model", m.nnz(), long(ref.size()));
    if (static_cast<std::int64_t>(tag.size()) != m.storage_size())
      fail("state size != storage", long(tag.size()), m.storage_size());
    std::vector<char> live(tag.size(), 0);
    m.for_each_live([&](std::int64_t r, std::int64_t c, float v, std::int64_t s) {
      const auto it = ref.find({r, c});
      if (it == ref.end()) fail("live entry absent from the model", r, c);
      if (!(it->second == v)) fail("value differs", r, c);
      if (tag[static_cast<std::size_t>(s)] != id.at({r, c})) fail("state did not follow its weight", r, c);
      live[static_cast<std::size_t>(s)] = 1;
    });
    for (std::size_t s = 0; s < tag.size(); ++s)
      if (!live[s] && tag[s] != 0) fail("non-live slot has state", long(s));
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  Input in{data, size};
  const std::int64_t rows = 1 + in.byte() % 8, cols = 1 + in.byte() % 16;
  Harness h;
  h.m = Matrix(rows, cols, (in.byte() % 4) * 0.5);
  h.tag.assign(static_cast<std::size_t>(h.m.storage_size()), 0.0);
  h.check();
  int ops = 0;
  while (!in.empty() && ops++ < 256) {
    const std::uint8_t op = in.byte() % 9;
    const std::int64_t r = in.byte() % rows, c = in.byte() % cols;
    const float v = static_cast<float>(static_cast<std::int8_t>(in.byte())) / 4.0f;
    sprig::SlotLog log;
    switch (op) {
      case 0:
      case 1: {  // insert (checked) / insert_new when absent
        const bool present = h.ref.count({r, c}) > 0;
        if (op == 0) {
          try {
            const std::int64_t s = h.m.insert(r, c, v, &log);
            if (present) fail("insert of a live position succeeded", r, c);
            log.apply(h.tag);
            h.ref[{r, c}] = v;
            h.born(r, c, s);
          } catch (const sprig::ArgumentError&) {
            if (!present) fail("insert of an absent position threw", r, c);
          }
        } else if (!present) {
          const std::int64_t s = h.m.insert_new(r, c, v, &log);
          log.apply(h.tag);
          h.ref[{r, c}] = v;
          h.born(r, c, s);
        }
        break;
      }
      case 2: {  // erase by position
        const bool was = h.m.erase(r, c, &log);
        if (was != (h.ref.erase({r, c}) > 0)) fail("erase result differs", r, c);
        h.id.erase({r, c});
        log.apply(h.tag);
        break;
      }
      case 3: {  // erase_slot of the k-th live entry of row r
        const auto row = h.m.row(r);
        if (row.cols.empty()) break;
        const std::int64_t s = row.start + in.byte() % static_cast<std::int64_t>(row.cols.size());
        const std::int64_t col = h.m.col_indices()[static_cast<std::size_t>(s)];
        h.m.erase_slot(r, s, &log);
        h.ref.erase({r, col});
        h.id.erase({r, col});
        log.apply(h.tag);
        break;
      }
      case 4: {  // erase_slots: a random subset of all live slots
        std::vector<std::int64_t> slots;
        std::vector<std::pair<std::int64_t, std::int64_t>> gone;
        h.m.for_each_live([&](std::int64_t i, std::int64_t j, float, std::int64_t s) {
          if (in.byte() % 4 == 0) {
            slots.push_back(s);
            gone.push_back({i, j});
          }
        });
        h.m.erase_slots(slots, &log);
        for (const auto& g : gone) {
          h.ref.erase(g);
          h.id.erase(g);
        }
        log.apply(h.tag);
        break;
      }
      case 5: {  // rewrite_row with distinct columns from a bit mask
        std::vector<std::int16_t> cs;
        std::vector<float> vs;
        const unsigned mask = unsigned(in.byte()) | unsigned(in.byte()) << 8;
        for (std::int64_t j = 0; j < cols; ++j)
          if (mask >> j & 1u) {
            cs.push_back(static_cast<std::int16_t>(j));
            vs.push_back(v + static_cast<float>(j));
          }
        h.m.rewrite_row(r, std::span<const std::int16_t>(cs), std::span<const float>(vs), &log);
        log.apply(h.tag);
        for (std::int64_t j = 0; j < cols; ++j) {
          h.ref.erase({r, j});
          h.id.erase({r, j});
        }
        for (std::size_t q = 0; q < cs.size(); ++q) h.ref[{r, cs[q]}] = vs[q];
        for (std::int64_t s = h.m.row_start(r); s < h.m.row_start(r) + h.m.row_nnz(r); ++s)
          h.born(r, h.m.col_indices()[static_cast<std::size_t>(s)], s);
        break;
      }
      case 6:  // reserve_row
        h.m.reserve_row(r, in.byte() % 24, &log);
        log.apply(h.tag);
        break;
      case 7:  // compact with a new ratio
        h.m.compact((in.byte() % 8) * 0.25, &log);
        log.apply(h.tag);
        break;
      case 8: {  // checkpoint round trip: the state follows the live entries in order
        const Matrix back = sprig::decode_padded_csr<float, std::int16_t>(sprig::encode_padded_csr(h.m));
        std::vector<double> moved(static_cast<std::size_t>(back.storage_size()), 0.0);
        for (std::int64_t i = 0; i < rows; ++i) {
          if (back.row_nnz(i) != h.m.row_nnz(i)) fail("round trip changed a row length", i);
          for (std::int64_t e = 0; e < back.row_nnz(i); ++e) {
            if (back.col_indices()[back.row_start(i) + e] != h.m.col_indices()[h.m.row_start(i) + e])
              fail("round trip reordered a row", i, e);
            moved[back.row_start(i) + e] = h.tag[h.m.row_start(i) + e];
          }
        }
        h.m = back;
        h.tag = std::move(moved);
        break;
      }
    }
    h.check();
  }
  return 0;
}
