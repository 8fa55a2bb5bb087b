#include <sprig/dist/data_parallel.hpp>

#include <unistd.h>  // getpid

#include <catch2/catch.hpp>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <sprig/models/mlp.hpp>
#include <sprig/dst/fan_in.hpp>
#include <sprig/dst/granet.hpp>
#include <sprig/dst/rigl.hpp>
#include <sprig/dst/set.hpp>
#include <sprig/dst/snfs.hpp>
#include <sprig/dst/static_topology.hpp>
#include <sprig/nn/block_sparse_linear.hpp>
#include <sprig/nn/gpt.hpp>
#include <sprig/nn/softmax_cross_entropy.hpp>
#include <sprig/optim/adamw.hpp>
#include <sprig/optim/sgd.hpp>

#include "dist/test_communicator.hpp"

// Built twice: test_dist_data_parallel runs on SingleProcessCommunicator (every build), and
// test_dist_data_parallel_mpi (tests/dist.cmake, when MPI is found) on MpiCommunicator under
// `mpirun -np 2` and `-np 3`. The reference in every test is one process training on the
// whole global batch, computed on each rank alone.

using namespace sprig;
using namespace sprig::dist;

namespace {

template <class T>
using Model = Sequential<T, std::int32_t>;

template <class T>
Model<T> small_mlp(std::uint64_t seed) {
  Model<T> m;
  m.add(SparseLinear<T, std::int32_t>(12, 40, {.density = 0.2, .seed = seed, .padding_ratio = 0.0}));
  m.add(ReLU<T>{});
  m.add(SparseLinear<T, std::int32_t>(40, 30, {.density = 0.15, .seed = seed, .layer_key = 1, .padding_ratio = 0.25}));
  m.add(ReLU<T>{});
  m.add(Linear<T>(30, 3, seed, 2));
  m.reserve_growth();
  return m;
}

// A 3-class problem: the class is the argmax of three fixed projections of the input.
template <class T>
struct Data {
  Matrix<T> X;
  std::vector<int> y;
};
template <class T>
Data<T> make_data(std::int64_t n, std::uint64_t seed) {
  Data<T> d{Matrix<T>(12, n), std::vector<int>(static_cast<std::size_t>(n))};
  CounterRng rng(seed);
  for (std::int64_t b = 0; b < n; ++b) {
    double s[3] = {0, 0, 0};
    for (std::int64_t f = 0; f < 12; ++f) {
      d.X(f, b) = static_cast<T>(rng.uniform(-1, 1));
      s[f % 3] += static_cast<double>(d.X(f, b));
    }
    d.y[static_cast<std::size_t>(b)] = static_cast<int>(std::max_element(s, s + 3) - s);
  }
  return d;
}
// Columns [s.begin, s.begin + s.size) of d.
template <class T>
Data<T> columns(const Data<T>& d, Shard s) {
  Data<T> out{Matrix<T>(d.X.rows(), s.size), std::vector<int>(d.y.begin() + s.begin, d.y.begin() + s.begin + s.size)};
  for (std::int64_t f = 0; f < d.X.rows(); ++f)
    for (std::int64_t b = 0; b < s.size; ++b) out.X(f, b) = d.X(f, s.begin + b);
  return out;
}

template <class T>
std::unique_ptr<dst::SparsityAlgorithm<T, std::int32_t>> make_algorithm(const std::string& name) {
  dst::UpdateSchedule s;
  s.delta_t = 4;
  s.t_end = 24;
  if (name == "rigl") return std::make_unique<dst::RigL<T, std::int32_t>>(s, 11);
  if (name == "rigl per row") {  // its model drawn with constant fan-in (redraw_constant_fan_in)
    auto a = std::make_unique<dst::RigL<T, std::int32_t>>(s, 11);
    a->constant_fan_in = true;
    return a;
  }
  if (name == "set") return std::make_unique<dst::SET<T, std::int32_t>>(s, 11);
  if (name == "snfs") return std::make_unique<dst::SNFS<T, std::int32_t>>(s, 11);
  if (name == "granet")  // from small_block_mlp's half of the blocks
    return std::make_unique<dst::GraNet<T, std::int32_t>>(s, 11, dst::GraNetOptions{{0.5, 0.5}, {0.7, 0.75}});
  return std::make_unique<dst::Static<T, std::int32_t>>();
}

// The largest |a - b| over every parameter value of two models built alike.
template <class M>
double max_weight_difference(M& a, M& b) {
  using T = typename M::value_type;
  std::vector<std::span<const T>> va, vb;
  a.for_each_parameter([&](auto& p) {
    if constexpr (requires { p.matrix.values(); })
      va.push_back(p.matrix.values());
    else
      va.push_back(std::span<const T>(p.value));
  });
  b.for_each_parameter([&](auto& p) {
    if constexpr (requires { p.matrix.values(); })
      vb.push_back(p.matrix.values());
    else
      vb.push_back(std::span<const T>(p.value));
  });
  REQUIRE(va.size() == vb.size());
  double d = 0;
  for (std::size_t k = 0; k < va.size(); ++k) {
    REQUIRE(va[k].size() == vb[k].size());
    for (std::size_t j = 0; j < va[k].size(); ++j)
      d = std::max(d, std::abs(static_cast<double>(va[k][j]) - static_cast<double>(vb[k][j])));
  }
  return d;
}

// Every parameter's live entries as (linear position, value), sorted by position: what a
// model computes with, whatever its slot layout (a checkpoint loads into a compact layout).
template <class T>
std::vector<std::vector<std::pair<std::int64_t, T>>> live_entries(Model<T>& m) {
  std::vector<std::vector<std::pair<std::int64_t, T>>> out;
  m.for_each_parameter([&](auto& p) {
    auto& e = out.emplace_back();
    if constexpr (requires { p.matrix.values(); }) {
      p.matrix.for_each_live(
          [&](std::int64_t i, std::int64_t c, T v, std::int64_t) { e.emplace_back(i * p.matrix.cols() + c, v); });
      std::sort(e.begin(), e.end());
    } else {
      for (std::size_t k = 0; k < p.value.size(); ++k) e.emplace_back(static_cast<std::int64_t>(k), p.value[k]);
    }
  });
  return out;
}

// The values a gradient average moves per rank: every live weight of the sparse parameters
// (none of their padding or dead slots) and every value of the dense ones.
template <class M>
std::int64_t trained_values(M& m) {
  std::int64_t n = 0;
  m.for_each_parameter([&](auto& p) {
    if constexpr (requires { p.matrix.pattern(); })
      n += p.matrix.pattern().nnz() * p.kBlockSize;
    else if constexpr (requires { p.matrix.values(); })
      n += p.matrix.nnz();
    else
      n += static_cast<std::int64_t>(p.value.size());
  });
  return n;
}

// The block-sparse counterpart of small_mlp: 4 x 4 blocks at half the blocks live.
template <class T>
Sequential<T, std::int32_t, BlockSparseLinear<T, std::int32_t, 4, 4>> small_block_mlp(std::uint64_t seed) {
  return models::build_block_mlp<T, std::int32_t, 4, 4>(
      {.widths = {12, 40, 32, 3}, .sparsity = 0.5, .seed = seed, .growth_reserve = 0.125});
}

// Trains `steps` steps of global batch 24 two ways, one process on the whole batch and this
// communicator's ranks on their shards, and checks after every step: the global loss within
// `tolerance` (relative) of the single process's, the same topology (hash) as the single
// process, and an update on the same steps.
template <class T, class Optimizer, class MakeModel = decltype(&small_mlp<T>)>
void check_equivalence(const std::string& algorithm, Optimizer optimizer, double tolerance, std::int64_t steps = 30,
                       std::int64_t bucket_bytes = std::int64_t{1} << 20, MakeModel make_model = &small_mlp<T>) {
  Communicator& comm = sprig::testing::communicator();
  const Data<T> data = make_data<T>(24, 99);
  const Data<T> local = columns(data, shard(24, comm));
  auto single = make_model(5), parallel = make_model(5);
  Optimizer opt_single = optimizer, opt_parallel = optimizer;
  auto algo_single = make_algorithm<T>(algorithm), algo_parallel = make_algorithm<T>(algorithm);
  DataParallel dp(comm, parallel, {.bucket_bytes = bucket_bytes});
  SoftmaxCrossEntropy<T> ce_single, ce_parallel;
  std::int64_t updates = 0;
  for (std::int64_t t = 0; t < steps; ++t) {
    const auto Z = single.forward(data.X.view());
    const double loss_single = static_cast<double>(ce_single.forward_backward(Z, data.y, single.output_grad()));
    single.backward();
    dst::UpdateReport r_single, r_parallel;
    dst::apply_step(*algo_single, opt_single, single, t, &r_single);

    const auto Zl = parallel.forward(local.X.view());
    const double loss_local = static_cast<double>(ce_parallel.forward_backward(Zl, local.y, parallel.output_grad()));
    const std::int64_t bytes_before = dp.stats().gradient_bytes;
    const std::int64_t expected_bytes = static_cast<std::int64_t>(sizeof(T)) * trained_values(parallel);
    dp.backward();
    REQUIRE(dp.stats().gradient_bytes - bytes_before == expected_bytes);
    dp.apply_step(*algo_parallel, opt_parallel, t, &r_parallel);
    const double loss = dp.average(loss_local);

    INFO("step " << t << ", " << comm.size() << " ranks, " << algorithm);
    REQUIRE(loss == Approx(loss_single).epsilon(tolerance));
    REQUIRE(r_parallel.step == r_single.step);
    updates += r_parallel.step == t;
    REQUIRE(topology_hash(parallel) == topology_hash(single));
  }
  if (algorithm != "static") CHECK(updates == 7);  // steps 0, 4, ..., 24 (t_end)
  CHECK(max_weight_difference(single, parallel) < tolerance * 10);
  CHECK(dp.stats().steps == steps);
  CHECK(dp.stats().topology_checks == updates);  // the constructor's check is not counted
  if (comm.size() > 1 && algorithm == "rigl") CHECK(dp.stats().gather_bytes > 0);
  if (comm.size() == 1) CHECK(dp.stats().gather_bytes == 0);
}

// A fake second rank that disagrees: its all-gather returns this rank's bytes, then the same
// bytes with every bit flipped. Lets the single-process build see the mismatch checks fail.
class DisagreeingPeer final : public Communicator {
public:
  int rank() const noexcept override { return 0; }
  int size() const noexcept override { return 2; }
  std::string name() const override { return "disagreeing peer"; }
  void allreduce_sum(std::span<float> d) override {
    for (auto& x : d) x += x;
  }
  void allreduce_sum(std::span<double> d) override {
    for (auto& x : d) x += x;
  }
  void allreduce_sum(std::span<std::int64_t> d) override {
    for (auto& x : d) x += x;
  }
  std::int64_t start_allreduce_sum(std::span<float> d) override {
    allreduce_sum(d);
    return 0;
  }
  std::int64_t start_allreduce_sum(std::span<double> d) override {
    allreduce_sum(d);
    return 0;
  }
  bool test(std::int64_t) override { return true; }
  void wait(std::int64_t) override {}
  void wait_all() override {}
  void allgather(std::span<const std::byte> mine, std::span<std::byte> all) override {
    REQUIRE(all.size() == 2 * mine.size());
    for (std::size_t k = 0; k < mine.size(); ++k) {
      all[k] = mine[k];
      all[mine.size() + k] = mine[k] ^ std::byte{0xff};
    }
  }
  void broadcast(std::span<std::byte>, int) override {}
  void barrier() override {}
};

// Named by rank 0's process id, so that concurrent runs of the suite do not share the file.
std::filesystem::path scratch_file(Communicator& comm, const std::string& what) {
  std::int64_t pid = ::getpid();
  comm.broadcast(std::as_writable_bytes(std::span(&pid, 1)), 0);
  return std::filesystem::temp_directory_path() /
         ("sprig_test_dist_" + what + "_" + std::to_string(pid) + "_" + std::to_string(comm.size()) + "ranks.bin");
}

}  // namespace

TEST_CASE("shard splits a global batch into equal column ranges in rank order", "[dist]") {
  Communicator& comm = sprig::testing::communicator();
  const Shard s = shard(12 * comm.size(), comm);
  CHECK(s.size == 12);
  CHECK(s.begin == 12 * comm.rank());
  // no columns for one rank; one column too many for several
  CHECK_THROWS_AS(shard(comm.size() == 1 ? 0 : 5 * comm.size() + 1, comm), ArgumentError);
  DisagreeingPeer two;
  CHECK_THROWS_WITH(shard(7, two), Catch::Contains("7 columns does not split into 2 equal shards"));
  CHECK(shard(8, two).size == 4);
}

TEST_CASE("topology_hash follows the slot layout, not the values", "[dist]") {
  Model<double> a = small_mlp<double>(5), b = small_mlp<double>(5), c = small_mlp<double>(6);
  CHECK(topology_hash(a) == topology_hash(b));
  CHECK(topology_hash(a) != topology_hash(c));
  auto& W = a.sparse_layers()[1].layer->weight;
  W.matrix.values()[0] += 1.0;  // a value is not topology
  CHECK(topology_hash(a) == topology_hash(b));
  // one weight moved from its column to a free one in the same row
  std::int64_t row = 0;
  while (W.matrix.row_nnz(row) == 0) ++row;
  const std::int64_t col = W.matrix.row(row).cols[0];
  std::int64_t free_col = 0;
  while (W.matrix.find(row, free_col) >= 0) ++free_col;
  SlotLog log;
  REQUIRE(W.matrix.erase(row, col, &log));
  W.matrix.insert_new(row, free_col, 0.5, &log);
  W.apply(log);
  CHECK(topology_hash(a) != topology_hash(b));
}

TEST_CASE("data-parallel training equals one process on the global batch", "[dist][train]") {
  // double: the only difference is where the batch sum is split, ~1e-16 a step
  SECTION("Static, SGD momentum") {
    check_equivalence<double>("static", SGD<double>({.lr = 0.1, .momentum = 0.9}), 1e-10);
  }
  SECTION("SET, SGD momentum") { check_equivalence<double>("set", SGD<double>({.lr = 0.1, .momentum = 0.9}), 1e-10); }
  SECTION("RigL, SGD momentum") { check_equivalence<double>("rigl", SGD<double>({.lr = 0.1, .momentum = 0.9}), 1e-10); }
  SECTION("SET, AdamW") { check_equivalence<double>("set", AdamW<double>({.lr = 0.01}), 1e-10); }
  SECTION("RigL, AdamW") { check_equivalence<double>("rigl", AdamW<double>({.lr = 0.01}), 1e-10); }
  SECTION("4x4 blocks: SET and RigL, SGD momentum") {
    check_equivalence<double>("set", SGD<double>({.lr = 0.1, .momentum = 0.9}), 1e-10, 30, std::int64_t{1} << 20,
                              &small_block_mlp<double>);
    check_equivalence<double>("rigl", SGD<double>({.lr = 0.1, .momentum = 0.9}), 1e-10, 30, 64,
                              &small_block_mlp<double>);
  }
  SECTION("4x4 blocks: SNFS and GraNet, SGD momentum") {
    for (const char* algorithm : {"snfs", "granet"})
      check_equivalence<double>(algorithm, SGD<double>({.lr = 0.1, .momentum = 0.9}), 1e-10, 30, 64,
                                &small_block_mlp<double>);
  }
  SECTION("RigL, SGD momentum, every sparse gradient in a buffer of its own") {
    check_equivalence<double>("rigl", SGD<double>({.lr = 0.1, .momentum = 0.9}), 1e-10, 30, 64);
  }
  // float: rounding of the split sums reaches ~1e-6 relative over the run
  SECTION("RigL, AdamW, float") { check_equivalence<float>("rigl", AdamW<float>({.lr = 0.01}), 1e-4); }
}

// A GPT in bf16 keeps its projections' inputs in bf16 (nn/projection_input.hpp): RigL's
// all-gather widens them. Its run over the ranks' shards of 6 sequences follows one process on
// all of them: the loss within 1e-3 (relative) at every step, and at least 95% of the live
// positions shared after every update. Not the same topology bit for bit: the gathered dY is
// scaled by 1 / ranks (inexact for 3), and bf16-rounded inputs make near-ties among RigL's
// scores common enough that the rounding flips a few (fp32 inputs agree exactly here).
// SGD, not AdamW: AdamW's m / sqrt(v) turns rounding noise on a near-zero gradient into a
// full step of either sign.
TEST_CASE("a bf16 GPT with bf16 inputs trains data-parallel as one process on the global batch",
          "[dist][train][bf16]") {
  Communicator& comm = sprig::testing::communicator();
  constexpr GPTConfig cfg{.layers = 1, .heads = 2, .d_model = 16, .d_ff = 32, .block_size = 8, .vocab = 11};
  const std::vector<GPTBlockDensity> dens(1, {.qkv = 0.5, .proj = 0.5, .fc = 0.4, .fc_proj = 0.4});
  const auto make = [&] {
    return GPT<float>(cfg, dens, {.seed = 3, .growth_reserve = 0.5, .precision = Precision::bf16});
  };
  const std::int64_t seqs = 6, len = 8;
  std::vector<std::int32_t> tokens(static_cast<std::size_t>(seqs * len));
  std::vector<int> labels(tokens.size());
  for (std::size_t n = 0; n < tokens.size(); ++n) {
    tokens[n] = static_cast<std::int32_t>((7 * n + 3) % 11);
    labels[n] = static_cast<int>((5 * n + 1) % 11);
  }
  const Shard sh = shard(seqs, comm);
  const std::vector<std::int32_t> local_tokens(tokens.begin() + sh.begin * len,
                                               tokens.begin() + (sh.begin + sh.size) * len);
  const std::vector<int> local_labels(labels.begin() + sh.begin * len, labels.begin() + (sh.begin + sh.size) * len);
  auto single = make(), parallel = make();
  SGD<float> opt_single({.lr = 0.1, .momentum = 0.9}), opt_parallel({.lr = 0.1, .momentum = 0.9});
  dst::UpdateSchedule schedule;
  schedule.delta_t = 2;
  schedule.t_end = 8;
  dst::RigL<float, std::int32_t> rigl_single(schedule, 11), rigl_parallel(schedule, 11);
  DataParallel dp(comm, parallel);
  SoftmaxCrossEntropy<float> ce_single, ce_parallel;
  for (std::int64_t t = 0; t < 10; ++t) {
    INFO("step " << t << ", " << comm.size() << " ranks");
    const auto Z = single.forward(tokens, seqs, len);
    const double loss_single = ce_single.forward_backward(Z, labels, single.output_grad());
    single.backward();
    dst::apply_step(rigl_single, opt_single, single, t);
    REQUIRE(single.sparse_layers()[0].input.data() == nullptr);  // bf16 inputs
    const auto Zl = parallel.forward(local_tokens, sh.size, len);
    const double loss_local = ce_parallel.forward_backward(Zl, local_labels, parallel.output_grad());
    dp.backward();
    dp.apply_step(rigl_parallel, opt_parallel, t);
    REQUIRE(dp.average(loss_local) == Approx(loss_single).epsilon(1e-3));
    // live (row, column) positions of every sparse projection, and how many the runs share
    std::int64_t live = 0, shared = 0;
    const auto a = single.sparse_layers(), b = parallel.sparse_layers();
    for (std::size_t k = 0; k < a.size(); ++k) {
      std::set<std::pair<std::int64_t, std::int64_t>> in_a;
      a[k].layer->weight.matrix.for_each_live(
          [&](std::int64_t i, std::int64_t c, float, std::int64_t) { in_a.insert({i, c}); });
      live += std::ssize(in_a);
      b[k].layer->weight.matrix.for_each_live(
          [&](std::int64_t i, std::int64_t c, float, std::int64_t) { shared += in_a.count({i, c}) > 0; });
    }
    REQUIRE(shared >= live * 95 / 100);
  }
  if (comm.size() > 1) CHECK(dp.stats().gather_bytes > 0);
}

TEST_CASE("overlapped and blocking gradient averages give the same bits", "[dist][train]") {
  Communicator& comm = sprig::testing::communicator();
  const Data<double> local = columns(make_data<double>(24, 3), shard(24, comm));
  Model<double> a = small_mlp<double>(5), b = small_mlp<double>(5);
  DataParallel dpa(comm, a, {.bucket_bytes = 256, .overlap = true});  // small buckets: many messages
  DataParallel dpb(comm, b, {.bucket_bytes = 1 << 20, .overlap = false});
  SoftmaxCrossEntropy<double> ce;
  SGD<double> oa({.lr = 0.1}), ob({.lr = 0.1});
  for (int t = 0; t < 5; ++t) {
    const auto Za = a.forward(local.X.view());  // before output_grad(): forward shapes it
    ce.forward_backward(Za, local.y, a.output_grad());
    dpa.backward();
    oa.step(a);
    const auto Zb = b.forward(local.X.view());
    ce.forward_backward(Zb, local.y, b.output_grad());
    dpb.backward();
    ob.step(b);
    REQUIRE(max_weight_difference(a, b) == 0.0);
  }
  CHECK(dpa.stats().gradient_bytes == dpb.stats().gradient_bytes);
}

// Split scoring (the default: each rank ranks its share of the rows, the ranks merge their
// candidates, or under constant fan-in their chosen positions) against every rank ranking every
// row: the same bits at every step. Under mpirun the split one also gathers the candidates; on
// one process neither splits.
TEST_CASE("split and unsplit update scoring give the same bits", "[dist][train]") {
  Communicator& comm = sprig::testing::communicator();
  const Data<double> local = columns(make_data<double>(24, 3), shard(24, comm));
  for (const std::string name : {"rigl", "snfs", "rigl per row"}) {
    INFO(name << ", " << comm.size() << " ranks");
    Model<double> a = small_mlp<double>(5), b = small_mlp<double>(5);
    if (name == "rigl per row")  // the parts' positions gathered instead of their candidates
      for (Model<double>* m : {&a, &b}) dst::redraw_constant_fan_in(*m, 5, 0.25);
    DataParallel split(comm, a), whole(comm, b, {.split_scoring = false});
    auto algo_a = make_algorithm<double>(name), algo_b = make_algorithm<double>(name);
    SoftmaxCrossEntropy<double> ce;
    SGD<double> oa({.lr = 0.1, .momentum = 0.9}), ob({.lr = 0.1, .momentum = 0.9});
    for (int t = 0; t < 26; ++t) {
      const auto Za = a.forward(local.X.view());
      ce.forward_backward(Za, local.y, a.output_grad());
      split.backward();
      split.apply_step(*algo_a, oa, t);
      const auto Zb = b.forward(local.X.view());
      ce.forward_backward(Zb, local.y, b.output_grad());
      whole.backward();
      whole.apply_step(*algo_b, ob, t);
      REQUIRE(topology_hash(a) == topology_hash(b));
      REQUIRE(max_weight_difference(a, b) == 0.0);
    }
    CHECK(algo_a->split_scoring() == nullptr);  // attached for each update only
    if (comm.size() > 1)
      CHECK(split.stats().gather_bytes > whole.stats().gather_bytes);  // the candidates
    else
      CHECK(split.stats().gather_bytes == 0);
  }
}

TEST_CASE("a rank whose topology differs is detected on every rank", "[dist]") {
  Communicator& comm = sprig::testing::communicator();
  Model<double> m = small_mlp<double>(5);
  DataParallel dp(comm, m);  // all ranks agree
  SECTION("a topology changed by hand on the last rank") {
    if (comm.rank() == comm.size() - 1) {
      auto& W = m.sparse_layers()[0].layer->weight;
      std::int64_t row = 0;
      while (W.matrix.row_nnz(row) == 0) ++row;
      SlotLog log;
      REQUIRE(W.matrix.erase(row, W.matrix.row(row).cols[0], &log));
      W.apply(log);
    }
    if (comm.size() > 1)
      CHECK_THROWS_WITH(dp.check_topology("test"), Catch::Contains("topology hash differs across ranks") &&
                                                       Catch::Contains("rank " + std::to_string(comm.size() - 1)));
    else
      CHECK_NOTHROW(dp.check_topology("test"));  // one rank agrees with itself
  }
  SECTION("a peer that disagrees") {
    DisagreeingPeer two;
    CHECK_THROWS_WITH(DataParallel(two, m), Catch::Contains("DataParallel: the topology hash differs across ranks") &&
                                                Catch::Contains("rank 1 has"));
  }
}

// A user's model whose sparse_layers() lists one sparse_index twice.
struct RepeatsAnIndex {
  using value_type = double;
  using index_type = std::int32_t;
  Model<double>& inner;
  template <class Fn>
  void for_each_parameter(Fn&& fn) {
    inner.for_each_parameter(fn);
  }
  template <class Fn>
  void for_each_parameter(Fn&& fn) const {
    std::as_const(inner).for_each_parameter(fn);
  }
  std::vector<SparseLayerRef<double, std::int32_t>> sparse_layers() {
    auto layers = inner.sparse_layers();
    layers[1].sparse_index = layers[0].sparse_index;
    return layers;
  }
  void backward() { inner.backward(); }
};

TEST_CASE("a model that lists a sparse_index twice is refused before any collective", "[dist]") {
  Communicator& comm = sprig::testing::communicator();
  Model<double> m = small_mlp<double>(5);
  RepeatsAnIndex bad{m};
  CHECK_THROWS_AS(DataParallel(comm, bad), ArgumentError);
  CHECK_THROWS_WITH(DataParallel(comm, bad),
                    Catch::Contains("DataParallel") && Catch::Contains("sparse_index 0 twice"));
  CHECK_NOTHROW(DataParallel(comm, m));
}

TEST_CASE("a distributed checkpoint resumes exactly where the run left off", "[dist][io]") {
  Communicator& comm = sprig::testing::communicator();
  const Data<double> local = columns(make_data<double>(24, 7), shard(24, comm));
  const auto path = scratch_file(comm, "resume");
  auto run = [&](Model<double>& m, AdamW<double>& opt, dst::SparsityAlgorithm<double, std::int32_t>& algo,
                 std::int64_t from, std::int64_t to) {
    DataParallel dp(comm, m);
    SoftmaxCrossEntropy<double> ce;
    for (std::int64_t t = from; t < to; ++t) {
      const auto Z = m.forward(local.X.view());
      ce.forward_backward(Z, local.y, m.output_grad());
      dp.backward();
      dp.apply_step(algo, opt, t);
    }
  };
  Model<double> whole = small_mlp<double>(5);
  AdamW<double> opt_whole({.lr = 0.01});
  auto algo_whole = make_algorithm<double>("rigl");
  run(whole, opt_whole, *algo_whole, 0, 14);

  Model<double> first = small_mlp<double>(5);
  AdamW<double> opt_first({.lr = 0.01});
  auto algo_first = make_algorithm<double>("rigl");
  run(first, opt_first, *algo_first, 0, 6);
  const RunSettings settings = {{"model", "small_mlp"}, {"algorithm", "rigl"}};
  save_training_state(comm, path, first, opt_first, {.step = 6}, algo_first.get(), settings);
  CHECK(read_run_settings(path) == settings);  // the barrier above: complete on every rank

  Model<double> resumed = small_mlp<double>(5);
  AdamW<double> opt_resumed({.lr = 0.01});
  auto algo_resumed = make_algorithm<double>("rigl");
  const TrainingProgress p = load_training_state(comm, path, resumed, opt_resumed, algo_resumed.get());
  CHECK(p.step == 6);
  run(resumed, opt_resumed, *algo_resumed, 6, 14);
  CHECK(live_entries(resumed) == live_entries(whole));  // bitwise, on every rank
  CHECK(algo_resumed->updates() == algo_whole->updates());

  SECTION("a rank that cannot read the file makes every rank throw, none changed") {
    const auto missing = comm.rank() == comm.size() - 1 ? path.string() + ".missing" : path.string();
    Model<double> m = small_mlp<double>(5);
    const std::uint64_t before = topology_hash(m);
    AdamW<double> o({.lr = 0.01});
    if (comm.rank() == comm.size() - 1)
      CHECK_THROWS_AS(load_training_state(comm, missing, m, o), FormatError);
    else
      CHECK_THROWS_WITH(load_training_state(comm, missing, m, o), Catch::Contains("1 rank(s) could not read"));
    CHECK(topology_hash(m) == before);
  }
  SECTION("ranks holding different files are named") {
    DisagreeingPeer two;
    Model<double> m = small_mlp<double>(5);
    AdamW<double> o({.lr = 0.01});
    CHECK_THROWS_WITH(load_training_state(two, path, m, o), Catch::Contains("checkpoint file differs across ranks"));
    CHECK(o.step_count() == 0);
  }
  comm.barrier();
  if (comm.rank() == 0) std::filesystem::remove(path);
}
