#include <sprig/io/checkpoint.hpp>

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <bit>

#include <csignal>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include <sprig/dst/rigl.hpp>
#include <sprig/dst/set.hpp>
#include <sprig/data/batches.hpp>
#include <sprig/nn/softmax_cross_entropy.hpp>

#include "file_test_support.hpp"
#include "fuzz/reseal.hpp"

using namespace sprig;
namespace fs = std::filesystem;

namespace {

using test::TempDir;
using test::WhatHas;

using AllPairs =
    std::tuple<std::tuple<float, std::int16_t>, std::tuple<float, std::int32_t>, std::tuple<float, std::int64_t>,
               std::tuple<double, std::int16_t>, std::tuple<double, std::int32_t>, std::tuple<double, std::int64_t>>;

std::vector<std::byte> file_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::vector<char> c((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::byte> out(c.size());
  std::memcpy(out.data(), c.data(), c.size());
  return out;
}

// Each row's live entries in slot order: what training depends on (see checkpoint.hpp).
template <class T, class Index>
std::vector<std::vector<std::pair<std::int64_t, T>>> entries(const PaddedCSR<T, Index>& m) {
  std::vector<std::vector<std::pair<std::int64_t, T>>> out(static_cast<std::size_t>(m.rows()));
  m.for_each_live([&](std::int64_t i, std::int64_t c, T v, std::int64_t) { out[i].push_back({c, v}); });
  return out;
}

template <class T>
bool same_bits(T a, T b) {
  return std::memcmp(&a, &b, sizeof(T)) == 0;
}

template <class T, class Index>
void require_same_entries(const PaddedCSR<T, Index>& a, const PaddedCSR<T, Index>& b) {
  REQUIRE(a.rows() == b.rows());
  REQUIRE(a.cols() == b.cols());
  REQUIRE(a.nnz() == b.nnz());
  for (std::int64_t i = 0; i < a.rows(); ++i) {
    const auto ra = a.row(i), rb = b.row(i);
    REQUIRE(ra.cols.size() == rb.cols.size());
    for (std::size_t q = 0; q < ra.cols.size(); ++q) {
      REQUIRE(ra.cols[q] == rb.cols[q]);
      REQUIRE(same_bits(ra.values[q], rb.values[q]));
    }
  }
}

// A matrix whose layout has relocated rows, dead slots and empty rows, built by random
// inserts and erases (values include -0.0, NaN and denormals: a round trip is bitwise).
template <class T, class Index>
PaddedCSR<T, Index> scrambled(std::int64_t rows, std::int64_t cols, std::uint64_t seed) {
  auto m = PaddedCSR<T, Index>::random_density(rows, cols, 0.3, seed, 0.1);
  CounterRng rng(seed, 77);
  for (int k = 0; k < 4 * rows; ++k) {
    const auto i = static_cast<std::int64_t>(rng.uniform_below(static_cast<std::uint64_t>(rows)));
    const auto c = static_cast<std::int64_t>(rng.uniform_below(static_cast<std::uint64_t>(cols)));
    if (m.find(i, c) >= 0)
      m.erase(i, c);
    else
      m.insert(i, c, static_cast<T>(rng.uniform(-2, 2)));
  }
  if (m.nnz() >= 3) {
    auto v = m.values();
    const auto r0 = m.row(m.rows() - 1);
    (void)r0;
    std::int64_t n = 0;
    m.for_each_live([&](std::int64_t, std::int64_t, T, std::int64_t s) {
      if (n == 0) v[s] = T(-0.0);
      if (n == 1) v[s] = std::numeric_limits<T>::quiet_NaN();
      if (n == 2) v[s] = std::numeric_limits<T>::denorm_min();
      ++n;
    });
  }
  return m;
}

}  // namespace

TEST_CASE("crc32 matches the IEEE/zlib check values", "[io][checkpoint][crc]") {
  const std::string check = "123456789";
  const auto bytes = std::as_bytes(std::span<const char>(check.data(), check.size()));
  CHECK(binary::crc32(bytes) == 0xCBF43926u);
  CHECK(binary::crc32({}) == 0u);
  // "The quick brown fox jumps over the lazy dog" = 0x414FA339 (a common reference value)
  const std::string fox = "The quick brown fox jumps over the lazy dog";
  CHECK(binary::crc32(std::as_bytes(std::span<const char>(fox.data(), fox.size()))) == 0x414FA339u);
  // incremental == one shot, for every split (slicing-by-8 head/tail paths)
  const auto fb = std::as_bytes(std::span<const char>(fox.data(), fox.size()));
  for (std::size_t k = 0; k <= fb.size(); ++k)
    CHECK(binary::crc32(fb.subspan(k), binary::crc32(fb.first(k))) == 0x414FA339u);
}

TEMPLATE_LIST_TEST_CASE("PaddedCSR round trip keeps every entry, in slot order within each row", "[io][checkpoint]",
                        AllPairs) {
  using T = std::tuple_element_t<0, TestType>;
  using Index = std::tuple_element_t<1, TestType>;
  TempDir dir;
  for (std::uint64_t seed = 1; seed <= 6; ++seed) {
    const std::int64_t rows = 1 + static_cast<std::int64_t>(seed * 7 % 23),
                       cols = 1 + static_cast<std::int64_t>(seed * 13 % 41);
    const auto m = scrambled<T, Index>(rows, cols, seed);
    m.check_invariants();
    const fs::path p = dir.path / "m.sprig";
    save_padded_csr(p, m);
    const auto back = load_padded_csr<T, Index>(p);
    back.check_invariants();
    require_same_entries(m, back);
    CHECK(back.padding_ratio() == m.padding_ratio());
    // the in-memory form is the file
    CHECK(encode_padded_csr(m) == file_bytes(p));
  }
  SECTION("a tight layout is restored slot for slot") {
    auto m = PaddedCSR<T, Index>::random_density(17, 29, 0.25, 5, 0.5);
    const auto back = decode_padded_csr<T, Index>(encode_padded_csr(m));
    CHECK(std::ranges::equal(back.row_starts(), m.row_starts()));
    CHECK(std::ranges::equal(back.row_capacities(), m.row_capacities()));
    CHECK(std::ranges::equal(back.col_indices(), m.col_indices()));
    CHECK(std::ranges::equal(back.values(), m.values()));
    CHECK(back.storage_size() == m.storage_size());
  }
  SECTION("degenerate shapes") {
    for (auto [r, c] : {std::pair<std::int64_t, std::int64_t>{0, 0}, {0, 5}, {4, 0}, {3, 1}}) {
      const PaddedCSR<T, Index> m(r, c);
      const auto back = decode_padded_csr<T, Index>(encode_padded_csr(m));
      back.check_invariants();
      CHECK(back.rows() == r);
      CHECK(back.cols() == c);
      CHECK(back.nnz() == 0);
    }
  }
}

TEST_CASE("PaddedCSR file: type mismatches are rejected", "[io][checkpoint]") {
  const auto m = scrambled<float, std::int32_t>(5, 9, 3);
  const auto bytes = encode_padded_csr(m);
  CHECK_THROWS_MATCHES((decode_padded_csr<double, std::int32_t>(bytes, "f.sprig")), FormatError,
                       WhatHas("f.sprig") && WhatHas("float32") && WhatHas("float64") && WhatHas("offset 14"));
  CHECK_THROWS_MATCHES((decode_padded_csr<float, std::int16_t>(bytes)), FormatError,
                       WhatHas("int32") && WhatHas("int16"));
  CHECK_NOTHROW((decode_padded_csr<float, std::int32_t>(bytes)));
}

TEST_CASE("PaddedCSR file: every single-bit flip and every truncation is a FormatError", "[io][checkpoint]") {
  const auto m = scrambled<double, std::int16_t>(4, 6, 9);
  const auto good = encode_padded_csr(m);
  REQUIRE(good.size() < 1000);
  for (std::size_t n = 0; n < good.size(); ++n)
    CHECK_THROWS_AS((decode_padded_csr<double, std::int16_t>(std::span(good).first(n))), FormatError);
  std::int64_t flips = 0;
  for (std::size_t byte = 0; byte < good.size(); ++byte)
    for (int bit = 0; bit < 8; ++bit) {
      auto bad = good;
      bad[byte] ^= std::byte(1u << bit);
      CHECK_THROWS_AS((decode_padded_csr<double, std::int16_t>(bad)), FormatError);
      ++flips;
    }
  CHECK(flips == 8 * static_cast<std::int64_t>(good.size()));
  auto longer = good;
  longer.push_back(std::byte{0});
  CHECK_THROWS_MATCHES((decode_padded_csr<double, std::int16_t>(longer)), FormatError, WhatHas("unexpected bytes"));
}

TEST_CASE("PaddedCSR file: checksummed but invalid content is rejected with what and where", "[io][checkpoint]") {
  using T = float;
  using Index = std::int32_t;
  // 3 x 5, rows {0: cols 1,3}, {1: none}, {2: col 4}; tight layout, ratio 0 (capacity 2, 1, 1)
  const std::vector<std::int64_t> rp = {0, 2, 2, 3};
  const std::vector<Index> ci = {1, 3, 4};
  const std::vector<T> va = {1.f, 2.f, 3.f};
  const auto m = PaddedCSR<T, Index>::from_csr(3, 5, std::span<const std::int64_t>(rp), std::span<const Index>(ci),
                                               std::span<const T>(va), 0.0);
  const auto good = encode_padded_csr(m);
  const auto sec = sprig_test::sections_of(good);
  REQUIRE(sec.size() == 1);
  const std::size_t P = sec[0].payload;
  const std::int64_t M = 3;
  // payload field offsets
  const std::size_t o_rows = P, o_cols = P + 8, o_ratio = P + 16, o_storage = P + 24, o_nnz = P + 32;
  const std::size_t o_start = P + 40, o_rnnz = o_start + 8 * M, o_cap = o_rnnz + 8 * M, o_ci = o_cap + 8 * M;
  auto patched = [&](std::size_t at, std::uint64_t v, std::size_t width) {
    auto f = good;
    sprig_test::store_le(f.data() + at, v, width);
    sprig_test::reseal(f);
    return f;
  };
  auto rejects = [&](const std::vector<std::byte>& f, const std::string& what) {
    INFO(what);
    CHECK_THROWS_MATCHES((decode_padded_csr<T, Index>(f, "m.sprig")), FormatError,
                         WhatHas("m.sprig") && WhatHas("offset") && WhatHas(what));
  };
  REQUIRE_NOTHROW((decode_padded_csr<T, Index>(good)));
  rejects(patched(o_ci + 4, 7, 4), "column 7 outside [0, 5)");
  rejects(patched(o_ci + 4, std::uint64_t(-1), 4), "column -1 outside");
  rejects(patched(o_ci + 4, 1, 4), "holds column 1 twice");
  rejects(patched(o_rnnz + 8, 1, 8), "row nnz add up to more than nnz");  // row 1 claims an entry
  rejects(patched(o_rnnz + 16, 2, 8), "row 2 has nnz 2 outside");         // nnz > capacity 1
  rejects(patched(o_cap + 8, 0, 8), "row 1 has capacity 0 < 1");
  rejects(patched(o_start + 8, 1, 8), "overlap");  // row 1 inside row 0
  rejects(patched(o_start + 16, 4, 8), "exceeds the storage of 4 slots");
  rejects(patched(o_storage, std::uint64_t(-5), 8), "storage_size is -5");
  rejects(patched(o_nnz, 4, 8), "nnz is 4 but the rows hold 3");
  rejects(patched(o_nnz, 2, 8), "row nnz add up to more than nnz = 2");
  rejects(patched(o_nnz, std::uint64_t{1} << 40, 8), "exceeds rows x cols");
  rejects(patched(o_ratio, std::bit_cast<std::uint64_t>(100.0), 8), "padding ratio 100");
  rejects(patched(o_ratio, std::bit_cast<std::uint64_t>(std::nan("")), 8), "padding ratio");
  rejects(patched(o_cols, std::uint64_t{1} << 40, 8), "cols is");  // > int32 columns
  rejects(patched(o_rows, std::uint64_t{1} << 50, 8), "rows is");  // no 2^50-row allocation
  rejects(patched(o_rows, 2, 8), "section 0 'CSR '");              // fields shift
  rejects(patched(8, 2, 4), "format version 2 is not supported");
  rejects(patched(0, 0x4E4F5453, 4), "wrong magic number");
  rejects(patched(12, 2, 2), "this is a training-state file, expected a PaddedCSR file");
  rejects(patched(16, 2, 4), "truncated: the section header needs 24 bytes, 0 left");
  rejects(patched(16, 1000, 4), "declares 1000 sections");
  rejects(patched(sec[0].header + 4, 1, 4), "unsupported section flags 1");
  rejects(patched(sec[0].header + 8, std::uint64_t{1} << 62, 8), "payload is declared as");
  rejects(patched(sec[0].header, sprig::binary::tag("MODL"), 4), "expected section 'CSR '");

  // a duplicate in a row of a very wide matrix (the sorted-row path, no per-column marker)
  const std::vector<std::int64_t> wrp = {0, 2};
  const std::vector<Index> wci = {5, 70000};
  const std::vector<T> wva = {1.f, 2.f};
  const auto wide = PaddedCSR<T, Index>::from_csr(1, 100000, std::span<const std::int64_t>(wrp),
                                                  std::span<const Index>(wci), std::span<const T>(wva), 0.0);
  auto f = encode_padded_csr(wide);
  REQUIRE_NOTHROW((decode_padded_csr<T, Index>(f)));
  const std::size_t wci_at = sprig_test::sections_of(f)[0].payload + 40 + 24;
  REQUIRE(sprig_test::load_le(f.data() + wci_at + 4, 4) == 70000);
  sprig_test::store_le(f.data() + wci_at + 4, 5, 4);
  sprig_test::reseal(f);
  rejects(f, "row 0 holds column 5 twice");
}

// ---- training state ----------------------------------------------------------------------

namespace {

template <class T, class Index>
Sequential<T, Index> mlp(std::uint64_t seed, std::int64_t hidden = 24) {
  Sequential<T, Index> m;
  // padding ratio 0: growth relocates rows
  m.add(SparseLinear<T, Index>(10, hidden, {.density = 0.3, .seed = seed, .layer_key = 0, .padding_ratio = 0.0}));
  m.add(ReLU<T>{});
  m.add(SparseLinear<T, Index>(hidden, 16, {.density = 0.25, .seed = seed, .layer_key = 1, .padding_ratio = 0.1}));
  m.add(GELU<T>{});
  m.add(Linear<T>(16, 3, seed, 2));
  return m;
}

template <class T>
struct Data {
  Matrix<T> X;  // [10 x N] feature-major
  std::vector<int> y;
};
template <class T>
Data<T> make_data(std::int64_t n) {
  Data<T> d{Matrix<T>(10, n), std::vector<int>(static_cast<std::size_t>(n))};
  CounterRng rng(4242);
  for (std::int64_t b = 0; b < n; ++b) {
    double s[3] = {0, 0, 0};
    for (std::int64_t f = 0; f < 10; ++f) {
      d.X(f, b) = static_cast<T>(rng.uniform(-1, 1));
      s[f % 3] += static_cast<double>(d.X(f, b));
    }
    d.y[b] = static_cast<int>(std::max_element(s, s + 3) - s);
  }
  return d;
}

constexpr std::int64_t kExamples = 40, kBatch = 8, kBatchesPerEpoch = kExamples / kBatch;

// Runs training steps progress.step .. steps-1 from the given progress: shuffled batches
// from (seed, epoch), LR decayed multiplicatively every step (so the LR is state), DST
// through apply_step. Returns the progress after the last step.
template <class T, class Index, class Opt>
TrainingProgress train(Sequential<T, Index>& model, Opt& opt, dst::SparsityAlgorithm<T, Index>& algo,
                       TrainingProgress p, std::int64_t steps) {
  const Data<T> data = make_data<T>(kExamples);
  SoftmaxCrossEntropy<T> loss;
  Matrix<T> X(10, kBatch);
  std::vector<int> y(kBatch);
  std::vector<std::int64_t> order(kExamples);
  epoch_permutation(order, p.seed, p.epoch);
  for (; p.step < steps; ++p.step) {
    for (std::int64_t b = 0; b < kBatch; ++b) {
      const std::int64_t e = order[static_cast<std::size_t>(p.batch * kBatch + b)];
      for (std::int64_t f = 0; f < 10; ++f) X(f, b) = data.X(f, e);
      y[b] = data.y[e];
    }
    const auto Z = model.forward(X.view());
    loss.forward_backward(Z, y, model.output_grad());
    model.backward();
    dst::apply_step(algo, opt, model, p.step);
    opt.set_lr(opt.lr() * 0.97);
    if (++p.batch == kBatchesPerEpoch) {
      p.batch = 0;
      epoch_permutation(order, p.seed, ++p.epoch);
    }
  }
  return p;
}

// Everything a run's future depends on, compared bitwise.
template <class T, class Index, class Opt>
void require_same_state(Sequential<T, Index>& a, const Opt& oa, Sequential<T, Index>& b, const Opt& ob) {
  REQUIRE(oa.step_count() == ob.step_count());
  REQUIRE(same_bits(oa.lr(), ob.lr()));
  std::vector<SparseParameter<T, Index>*> sa, sb;
  std::vector<DenseParameter<T>*> da, db;
  a.for_each_parameter([&](auto& p) {
    if constexpr (requires { p.matrix; })
      sa.push_back(&p);
    else
      da.push_back(&p);
  });
  b.for_each_parameter([&](auto& p) {
    if constexpr (requires { p.matrix; })
      sb.push_back(&p);
    else
      db.push_back(&p);
  });
  REQUIRE(sa.size() == sb.size());
  REQUIRE(da.size() == db.size());
  for (std::size_t k = 0; k < sa.size(); ++k) {
    const auto &pa = *sa[k], &pb = *sb[k];
    pa.matrix.check_invariants();
    pb.matrix.check_invariants();
    require_same_entries(pa.matrix, pb.matrix);
    REQUIRE(pa.decay == pb.decay);
    // AdamW's per-slot counts in either form: 16-bit, or state[2] as a loaded checkpoint has them
    const auto wide = [](const auto& p) { return p.state.size() > 2 && !p.state[2].empty(); };
    const auto moments = [&](const auto& p) { return wide(p) ? std::size_t{2} : p.state.size(); };
    const auto count_at = [&](const auto& p, std::int64_t s) {
      return wide(p) ? double(p.state[2][s]) : p.step_counts.empty() ? -1.0 : double(p.step_counts[s]);
    };
    REQUIRE(moments(pa) == moments(pb));
    for (std::size_t q = 0; q < moments(pa); ++q) {
      REQUIRE(pa.state[q].empty() == pb.state[q].empty());
      if (pa.state[q].empty()) continue;
      for (std::int64_t i = 0; i < pa.matrix.rows(); ++i)
        for (std::int64_t e = 0; e < pa.matrix.row_nnz(i); ++e)
          REQUIRE(same_bits(pa.state[q][pa.matrix.row_start(i) + e], pb.state[q][pb.matrix.row_start(i) + e]));
    }
    for (std::int64_t i = 0; i < pa.matrix.rows(); ++i)
      for (std::int64_t e = 0; e < pa.matrix.row_nnz(i); ++e)
        REQUIRE(count_at(pa, pa.matrix.row_start(i) + e) == count_at(pb, pb.matrix.row_start(i) + e));
  }
  for (std::size_t k = 0; k < da.size(); ++k) {
    const auto &pa = *da[k], &pb = *db[k];
    REQUIRE(pa.decay == pb.decay);
    REQUIRE(std::memcmp(pa.value.data(), pb.value.data(), pa.value.size() * sizeof(T)) == 0);
    REQUIRE(pa.state.size() == pb.state.size());
    for (std::size_t q = 0; q < pa.state.size(); ++q) {
      REQUIRE(pa.state[q].size() == pb.state[q].size());
      REQUIRE(std::memcmp(pa.state[q].data(), pb.state[q].data(), pa.state[q].size() * sizeof(T)) == 0);
    }
  }
}

// Returns whether the loaded layout differed from the saved one (relocated rows).
template <class T, class Index, class Opt, class Algo>
bool check_resume(const Opt& opt0, const Algo& algo0, std::int64_t steps, std::int64_t k) {
  INFO("resume after " << k << " of " << steps << " steps");
  TempDir dir;
  const TrainingProgress start{.step = 0, .epoch = 0, .batch = 0, .seed = 31};
  // uninterrupted
  auto model = mlp<T, Index>(7);
  Opt opt = opt0;
  Algo algo = algo0;
  const TrainingProgress end = train(model, opt, algo, start, steps);
  // interrupted at k, saved, loaded into objects built from another seed, resumed
  auto first = mlp<T, Index>(7);
  Opt opt1 = opt0;
  Algo algo1 = algo0;
  const TrainingProgress mid = train(first, opt1, algo1, start, k);
  save_training_state(dir.path / "state.sprig", first, opt1, mid, &algo1);
  auto second = mlp<T, Index>(12345);
  Opt opt2 = opt0;
  Algo algo2 = algo0;
  const TrainingProgress loaded = load_training_state(dir.path / "state.sprig", second, opt2, &algo2);
  REQUIRE(loaded == mid);
  require_same_state(first, opt1, second, opt2);
  CHECK(algo2.updates() == algo1.updates());  // statistics restored too
  CHECK(std::bit_cast<std::uint64_t>(algo2.total_seconds()) == std::bit_cast<std::uint64_t>(algo1.total_seconds()));
  bool relaid = false;
  {
    std::vector<std::vector<std::int64_t>> a, b;
    first.for_each_parameter([&](auto& p) {
      if constexpr (requires { p.matrix; }) a.emplace_back(p.matrix.row_starts().begin(), p.matrix.row_starts().end());
    });
    second.for_each_parameter([&](auto& p) {
      if constexpr (requires { p.matrix; }) b.emplace_back(p.matrix.row_starts().begin(), p.matrix.row_starts().end());
    });
    relaid = a != b;
  }
  const TrainingProgress end2 = train(second, opt2, algo2, loaded, steps);
  REQUIRE(end2 == end);
  require_same_state(model, opt, second, opt2);
  CHECK(algo2.compact_threshold == algo0.compact_threshold);
  return relaid;
}

}  // namespace

TEMPLATE_TEST_CASE("resume is bitwise: SGD with momentum and RigL updates inside the window",
                   "[io][checkpoint][resume]", (std::tuple<float, std::int32_t>), (std::tuple<double, std::int64_t>),
                   (std::tuple<float, std::int16_t>)) {
  using T = std::tuple_element_t<0, TestType>;
  using Index = std::tuple_element_t<1, TestType>;
  const dst::UpdateSchedule schedule{.delta_t = 3, .t_begin = 1, .t_end = 22, .alpha = 0.4};
  const SGD<T> opt({.lr = 0.2, .momentum = 0.9, .weight_decay = 1e-3});
  dst::RigL<T, Index> algo(schedule, 99);
  algo.compact_threshold = 1.0;  // never compact: saves then hold relocated rows and dead slots
  int relaid = 0;
  for (std::int64_t k : {1, 7, 10, 13, 19}) relaid += check_resume<T, Index>(opt, algo, 26, k);
  CHECK(relaid > 0);  // some saves had relocated rows (loaded in the tight layout)
}

TEMPLATE_TEST_CASE("resume is bitwise: AdamW and RigL, SGD Nesterov and SET", "[io][checkpoint][resume]",
                   (std::tuple<float, std::int32_t>), (std::tuple<double, std::int16_t>)) {
  using T = std::tuple_element_t<0, TestType>;
  using Index = std::tuple_element_t<1, TestType>;
  const dst::UpdateSchedule schedule{.delta_t = 4, .t_begin = 0, .t_end = 20, .alpha = 0.3};
  SECTION("AdamW + RigL") {
    const AdamW<T> opt({.lr = 0.01, .weight_decay = 0.05});
    const dst::RigL<T, Index> algo(schedule, 5);
    for (std::int64_t k : {4, 9, 17}) check_resume<T, Index>(opt, algo, 24, k);
  }
  SECTION("SGD Nesterov + SET") {
    const SGD<T> opt({.lr = 0.1, .momentum = 0.8, .nesterov = true});
    const dst::SET<T, Index> algo(schedule, 6);
    for (std::int64_t k : {3, 12}) check_resume<T, Index>(opt, algo, 24, k);
  }
}

namespace {

// A trained small model's checkpoint, with its objects.
struct Trained {
  Sequential<float, std::int32_t> model = mlp<float, std::int32_t>(3, 12);
  SGD<float> opt{{.lr = 0.1, .momentum = 0.9}};
  dst::RigL<float, std::int32_t> algo{{.delta_t = 2, .t_begin = 0, .t_end = 8, .alpha = 0.3}, 8};
  TrainingProgress progress;
  std::vector<std::byte> bytes;
  Trained() {
    progress = train(model, opt, algo, {.seed = 2}, 7);
    bytes = encode_training_state(model, opt, progress, &algo);
  }
};

// A snapshot of a target's full state, to show that a failed load changed nothing.
struct Snapshot {
  std::vector<std::byte> bytes;
  std::vector<std::vector<std::int64_t>> layouts;
  template <class M, class O, class A>
  Snapshot(M& model, const O& opt, const A& algo)
      : bytes(encode_training_state(model, opt, TrainingProgress{}, &algo)) {
    model.for_each_parameter([&](auto& p) {
      if constexpr (requires { p.matrix; }) {
        layouts.emplace_back(p.matrix.row_starts().begin(), p.matrix.row_starts().end());
        layouts.emplace_back(1, static_cast<std::int64_t>(p.matrix.topology_version()));
        layouts.emplace_back(1, static_cast<std::int64_t>(p.grad.size()));
      }
    });
  }
  bool operator==(const Snapshot&) const = default;
};

}  // namespace

TEST_CASE("training state: every truncation and bit flip is rejected and the target is untouched",
          "[io][checkpoint][corrupt]") {
  const Trained src;
  INFO("checkpoint of " << src.bytes.size() << " bytes");
  auto target = mlp<float, std::int32_t>(77, 12);
  SGD<float> opt({.lr = 0.1, .momentum = 0.9});
  dst::RigL<float, std::int32_t> algo({.delta_t = 2, .t_begin = 0, .t_end = 8, .alpha = 0.3}, 8);
  train(target, opt, algo, {.seed = 5}, 3);  // non-trivial target state
  const Snapshot before(target, opt, algo);
  std::int64_t rejected = 0;
  for (std::size_t n = 0; n < src.bytes.size(); ++n) {
    try {
      decode_training_state(std::span(src.bytes).first(n), "t.sprig", target, opt, &algo);
      FAIL("truncation to " << n << " bytes was accepted");
    } catch (const FormatError& e) {
      ++rejected;
      if (n % 97 == 0) REQUIRE(std::string(e.what()).find("t.sprig") != std::string::npos);
    }
  }
  CHECK(rejected == static_cast<std::int64_t>(src.bytes.size()));
  CounterRng rng(2024);
  for (int trial = 0; trial < 3000; ++trial) {
    auto bad = src.bytes;
    const int flips = trial < 2000 ? 1 : 1 + static_cast<int>(rng.uniform_below(16));
    for (int f = 0; f < flips; ++f) bad[rng.uniform_below(bad.size())] ^= std::byte(1u << rng.uniform_below(8));
    if (bad == src.bytes) continue;
    CHECK_THROWS_AS(decode_training_state(bad, "t.sprig", target, opt, &algo), FormatError);
  }
  REQUIRE(Snapshot(target, opt, algo) == before);
  // and the intact file loads
  CHECK(decode_training_state(src.bytes, "t.sprig", target, opt, &algo) == src.progress);
}

TEST_CASE("training state: checksummed garbage inside sections is a FormatError, never a crash",
          "[io][checkpoint][corrupt]") {
  const Trained src;
  const auto sections = sprig_test::sections_of(src.bytes);
  REQUIRE(sections.size() == 1 + 6 + 3);  // MODL, 3 layers x 2 parameters, OPTM, DST, PROG
  CounterRng rng(77);
  std::int64_t accepted = 0, rejected = 0;
  for (int trial = 0; trial < 4000; ++trial) {
    auto bad = src.bytes;
    const auto& s = sections[rng.uniform_below(sections.size())];
    if (s.length == 0) continue;
    // overwrite 1-8 bytes of one payload with random or extreme values
    const std::size_t at = s.payload + rng.uniform_below(s.length);
    const std::size_t n = std::min<std::size_t>(1 + rng.uniform_below(8), s.payload + s.length - at);
    const std::uint64_t pick = rng.uniform_below(4);
    const std::uint64_t v = pick == 0 ? rng() : pick == 1 ? ~std::uint64_t{0} : pick == 2 ? std::uint64_t{1} << 62 : 0;
    sprig_test::store_le(bad.data() + at, v, n);
    sprig_test::reseal(bad);
    try {
      // the restored model must satisfy the invariants whenever the load succeeds
      auto t2 = mlp<float, std::int32_t>(77, 12);
      SGD<float> o2({.lr = 0.1, .momentum = 0.9});
      dst::RigL<float, std::int32_t> a2({.delta_t = 2, .t_begin = 0, .t_end = 8, .alpha = 0.3}, 8);
      decode_training_state(bad, "g.sprig", t2, o2, &a2);
      t2.for_each_parameter([](auto& p) {
        if constexpr (requires { p.matrix; }) {
          p.matrix.check_invariants();
          p.check_aligned("test");
        }
      });
      ++accepted;  // e.g. a changed weight value: valid data
    } catch (const FormatError&) {
      ++rejected;
    }
  }
  INFO(accepted << " accepted, " << rejected << " rejected");
  CHECK(rejected > 0);
  CHECK(accepted > 0);
}

TEST_CASE("training state: a load into a mismatched target is rejected and changes nothing",
          "[io][checkpoint][mismatch]") {
  const Trained src;
  auto expect_reject = [&](auto& model, auto& opt, auto* algo, const std::string& what) {
    INFO(what);
    std::optional<Snapshot> before;
    if (algo) before.emplace(model, opt, *algo);
    CHECK_THROWS_MATCHES(decode_training_state(src.bytes, "m.sprig", model, opt, algo), FormatError,
                         WhatHas("m.sprig") && WhatHas(what));
    if (algo) CHECK(Snapshot(model, opt, *algo) == *before);
  };
  using A = dst::RigL<float, std::int32_t>;
  const dst::UpdateSchedule sched{.delta_t = 2, .t_begin = 0, .t_end = 8, .alpha = 0.3};
  {
    auto m = mlp<float, std::int32_t>(1, 13);  // hidden width 13, not 12
    SGD<float> o({.lr = 0.1, .momentum = 0.9});
    A a(sched, 8);
    expect_reject(m, o, &a, "shape mismatch: layer 0");
  }
  {
    Sequential<float, std::int32_t> m;  // a dense first layer where the file has a sparse one
    m.add(Linear<float>(10, 12, 1));
    m.add(ReLU<float>{});
    m.add(SparseLinear<float, std::int32_t>(12, 16, {.density = 0.25, .seed = 1, .layer_key = 1}));
    m.add(GELU<float>{});
    m.add(Linear<float>(16, 3, 1, 2));
    SGD<float> o({.lr = 0.1, .momentum = 0.9});
    A a(sched, 8);
    expect_reject(m, o, &a, "layer 0 is a SparseLinear in the checkpoint but a Linear in the model");
  }
  {
    auto m = mlp<float, std::int32_t>(1, 12);
    m.add(ReLU<float>{});
    SGD<float> o({.lr = 0.1, .momentum = 0.9});
    A a(sched, 8);
    expect_reject(m, o, &a, "the checkpoint has 5 layers, the model has 6");
  }
  {
    auto m = mlp<double, std::int32_t>(1, 12);  // double model, float file
    SGD<double> o({.lr = 0.1, .momentum = 0.9});
    dst::RigL<double, std::int32_t> a(sched, 8);
    expect_reject(m, o, &a, "type mismatch: the file holds float32 values but the model uses float64");
  }
  {
    auto m = mlp<float, std::int64_t>(1, 12);
    SGD<float> o({.lr = 0.1, .momentum = 0.9});
    dst::RigL<float, std::int64_t> a(sched, 8);
    expect_reject(m, o, &a, "int32 column indices but the model uses int64");
  }
  {
    auto m = mlp<float, std::int32_t>(1, 12);
    AdamW<float> o;
    A a(sched, 8);
    expect_reject(m, o, &a, "the checkpoint's optimizer is SGD, the target is AdamW");
  }
  {
    auto m = mlp<float, std::int32_t>(1, 12);
    SGD<float> o({.lr = 0.1, .momentum = 0.8});
    A a(sched, 8);
    expect_reject(m, o, &a, "optimizer option momentum is 0.9 in the checkpoint but 0.8");
  }
  {
    auto m = mlp<float, std::int32_t>(1, 12);
    SGD<float> o({.lr = 0.1, .momentum = 0.9});
    dst::SET<float, std::int32_t> a(sched, 8);
    expect_reject(m, o, &a, "DST algorithm is 'rigl', the target is 'set'");
  }
  {
    auto m = mlp<float, std::int32_t>(1, 12);
    SGD<float> o({.lr = 0.1, .momentum = 0.9});
    A a({.delta_t = 3, .t_begin = 0, .t_end = 8, .alpha = 0.3}, 8);
    expect_reject(m, o, &a, "DST schedule differs");
  }
  {
    auto m = mlp<float, std::int32_t>(1, 12);
    SGD<float> o({.lr = 0.1, .momentum = 0.9});
    A a(sched, 9);
    expect_reject(m, o, &a, "DST seed differs");
  }
  {
    // a PaddedCSR file is not a training state, and vice versa
    auto m = mlp<float, std::int32_t>(1, 12);
    SGD<float> o({.lr = 0.1, .momentum = 0.9});
    const auto csr = encode_padded_csr(PaddedCSR<float, std::int32_t>(2, 2));
    CHECK_THROWS_MATCHES(decode_training_state(csr, "c.sprig", m, o), FormatError,
                         WhatHas("this is a PaddedCSR file, expected a training-state file"));
    CHECK_THROWS_MATCHES((decode_padded_csr<float, std::int32_t>(src.bytes)), FormatError,
                         WhatHas("this is a training-state file"));
  }
  {
    // without an algorithm the DST section is ignored; with one but none saved, rejected
    auto m = mlp<float, std::int32_t>(1, 12);
    SGD<float> o({.lr = 0.1, .momentum = 0.9});
    CHECK(decode_training_state(src.bytes, "m.sprig", m, o) == src.progress);
    const auto no_dst = encode_training_state(m, o, src.progress);
    A a(sched, 8);
    const Snapshot before(m, o, a);
    CHECK_THROWS_MATCHES(decode_training_state(no_dst, "n.sprig", m, o, &a), FormatError,
                         WhatHas("n.sprig: section 8 'DST '") && WhatHas("has no DST algorithm state"));
    CHECK(Snapshot(m, o, a) == before);
  }
}

TEST_CASE("files: missing, not regular, and written atomically", "[io][checkpoint][atomic]") {
  TempDir dir;
  const Trained src;
  const fs::path p = dir.path / "state.sprig";
  CHECK_THROWS_MATCHES((load_padded_csr<float, std::int32_t>(p)), FormatError, WhatHas("no such file"));
  CHECK_THROWS_MATCHES((load_padded_csr<float, std::int32_t>(dir.path)), FormatError, WhatHas("not a regular file"));
  CHECK_THROWS_AS(save_padded_csr(dir.path / "no" / "such" / "dir.sprig", PaddedCSR<float, std::int32_t>(2, 2)), Error);

  save_training_state(p, src.model, src.opt, src.progress, &src.algo);
  const auto saved = file_bytes(p);
  REQUIRE(saved == src.bytes);
  CHECK(dir.names() == std::vector<std::string>{"state.sprig"});

  // A bigger state to write over it.
  auto big = mlp<float, std::int32_t>(5, 400);
  SGD<float> opt({.lr = 0.1, .momentum = 0.9});
  REQUIRE(encode_training_state(big, opt, {}).size() > 8192);

  SECTION("a failing write (file size limit: EFBIG) throws and leaves the old file") {
    std::signal(SIGXFSZ, SIG_IGN);
    rlimit old{};
    REQUIRE(::getrlimit(RLIMIT_FSIZE, &old) == 0);
    rlimit small = old;
    small.rlim_cur = 4096;
    REQUIRE(::setrlimit(RLIMIT_FSIZE, &small) == 0);
    bool threw = false;
    try {
      save_training_state(p, big, opt, {});
    } catch (const Error& e) {
      threw = true;
      CHECK(std::string(e.what()).find("is unchanged") != std::string::npos);
    }
    REQUIRE(::setrlimit(RLIMIT_FSIZE, &old) == 0);
    std::signal(SIGXFSZ, SIG_DFL);
    CHECK(threw);
    CHECK(file_bytes(p) == saved);
    CHECK(dir.names() == std::vector<std::string>{"state.sprig"});  // temporary removed
  }
  SECTION("a process killed in the middle of a write leaves the old file") {
    const pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      // SIGXFSZ's default action kills the process when the write crosses the limit: a
      // crash in the middle of writing the temporary.
      rlimit small{4096, 4096};
      ::setrlimit(RLIMIT_FSIZE, &small);
      std::signal(SIGXFSZ, SIG_DFL);
      try {
        save_training_state(p, big, opt, {});
      } catch (...) {
      }
      ::_exit(0);
    }
    int status = 0;
    REQUIRE(::waitpid(child, &status, 0) == child);
    CHECK(WIFSIGNALED(status));
    CHECK(file_bytes(p) == saved);
    auto m = mlp<float, std::int32_t>(3, 12);
    SGD<float> o({.lr = 0.1, .momentum = 0.9});
    dst::RigL<float, std::int32_t> a({.delta_t = 2, .t_begin = 0, .t_end = 8, .alpha = 0.3}, 8);
    CHECK(load_training_state(p, m, o, &a) == src.progress);
    // the crash left a partial temporary beside it, which nothing reads
    const auto names = dir.names();
    CHECK(names.size() == 2);
    CHECK(names[0] == "state.sprig");
  }
  SECTION("a successful save replaces the file") {
    save_training_state(p, big, opt, {.step = 3});
    auto m = mlp<float, std::int32_t>(9, 400);
    SGD<float> o({.lr = 0.1, .momentum = 0.9});
    CHECK(load_training_state(p, m, o).step == 3);
    CHECK(dir.names() == std::vector<std::string>{"state.sprig"});
  }
}

TEST_CASE("resume across processes: a child trains and saves, the parent loads and finishes",
          "[io][checkpoint][resume]") {
  using T = float;
  using Index = std::int32_t;
  TempDir dir;
  const fs::path p = dir.path / "state.sprig";
  const dst::UpdateSchedule schedule{.delta_t = 3, .t_begin = 1, .t_end = 22, .alpha = 0.4};
  const SGD<T> opt0({.lr = 0.2, .momentum = 0.9});
  const dst::RigL<T, Index> algo0(schedule, 99);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    int code = 1;
    try {
      auto model = mlp<T, Index>(7);
      SGD<T> opt = opt0;
      dst::RigL<T, Index> algo = algo0;
      const TrainingProgress mid = train(model, opt, algo, {.seed = 31}, 11);
      save_training_state(p, model, opt, mid, &algo);
      code = 0;
    } catch (...) {
    }
    ::_exit(code);
  }
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
  auto resumed = mlp<T, Index>(1);
  SGD<T> opt1 = opt0;
  dst::RigL<T, Index> algo1 = algo0;
  const TrainingProgress mid = load_training_state(p, resumed, opt1, &algo1);
  CHECK(mid.step == 11);
  train(resumed, opt1, algo1, mid, 26);
  auto whole = mlp<T, Index>(7);
  SGD<T> opt2 = opt0;
  dst::RigL<T, Index> algo2 = algo0;
  train(whole, opt2, algo2, {.seed = 31}, 26);
  require_same_state(whole, opt2, resumed, opt1);
}

TEST_CASE("training state: AdamW's bias-correction policy is saved, checked, and older files load",
          "[io][checkpoint][adamw]") {
  const dst::UpdateSchedule sched{.delta_t = 2, .t_begin = 0, .t_end = 8, .alpha = 0.3};
  auto model = mlp<float, std::int32_t>(3, 12);
  AdamW<float> opt({.lr = 0.01});
  dst::RigL<float, std::int32_t> algo(sched, 8);
  const TrainingProgress progress = train(model, opt, algo, {.seed = 2}, 7);
  const std::vector<std::byte> bytes = encode_training_state(model, opt, progress, &algo);
  model.for_each_parameter([](const auto& p) {  // the per-slot counts are part of the state
    if constexpr (requires { p.matrix; }) CHECK(!p.step_counts.empty());
  });
  {
    auto m = mlp<float, std::int32_t>(1, 12);
    AdamW<float> o({.lr = 0.01, .bias_correction = AdamWBiasCorrection::global});
    dst::RigL<float, std::int32_t> a(sched, 8);
    CHECK_THROWS_MATCHES(decode_training_state(bytes, "p.sprig", m, o, &a), FormatError,
                         WhatHas("optimizer option bias_correction is 0 in the checkpoint but 1"));
  }
  // A file from before the option: the same state with AdamW's 4 options and no counts.
  std::vector<std::byte> legacy;
  std::int64_t legacy_steps = 0;
  {
    auto m = mlp<float, std::int32_t>(3, 12);
    AdamW<float> o({.lr = 0.01, .bias_correction = AdamWBiasCorrection::global});
    dst::RigL<float, std::int32_t> a(sched, 8);
    const TrainingProgress pr = train(m, o, a, {.seed = 2}, 7);
    legacy = encode_training_state(m, o, pr, &a);
    legacy_steps = o.step_count();
  }
  for (const auto& s : sprig_test::sections_of(legacy)) {
    if (s.tag != binary::tag("OPTM")) continue;
    // payload: kind u8, step i64, lr f64, option count u8 (offset 17), options f64[5]
    REQUIRE(std::to_integer<int>(legacy[s.payload + 17]) == 5);
    legacy[s.payload + 17] = std::byte{4};
    legacy.erase(legacy.begin() + static_cast<std::ptrdiff_t>(s.payload + s.length - 8),
                 legacy.begin() + static_cast<std::ptrdiff_t>(s.payload + s.length));
    sprig_test::store_le(legacy.data() + s.header + 8, s.length - 8, 8);
  }
  sprig_test::reseal(legacy);
  for (const auto policy : {AdamWBiasCorrection::per_slot, AdamWBiasCorrection::global}) {
    auto m = mlp<float, std::int32_t>(1, 12);
    AdamW<float> o({.lr = 0.01, .bias_correction = policy});
    dst::RigL<float, std::int32_t> a(sched, 8);
    const TrainingProgress pr = decode_training_state(legacy, "old.sprig", m, o, &a);
    CHECK(pr.step == 7);
    CHECK(o.step_count() == legacy_steps);
    train(m, o, a, pr, 10);  // continues, through a topology update at step 8
    m.for_each_parameter([&](const auto& p) {
      if constexpr (requires { p.matrix; }) {
        CHECK(p.state.size() == 2);
        CHECK(p.step_counts.empty() == (policy == AdamWBiasCorrection::global));
      }
    });
  }
}
