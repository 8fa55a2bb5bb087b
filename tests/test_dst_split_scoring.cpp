#include <sprig/dst/split_scoring.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <barrier>
#include <exception>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <sprig/dst/fan_in.hpp>
#include <sprig/dst/granet.hpp>
#include <sprig/dst/rigl.hpp>
#include <sprig/dst/snfs.hpp>
#include <sprig/models/mlp.hpp>
#include <sprig/nn/softmax_cross_entropy.hpp>
#include <sprig/optim/sgd.hpp>

using namespace sprig;
using namespace sprig::dst;

namespace {

// Part `p` of `n`, for the scoring functions (which read part() and parts() only).
class PartOf final : public SplitScoring {
public:
  PartOf(int p, int n) : p_(p), n_(n) {}
  int part() const noexcept override { return p_; }
  int parts() const noexcept override { return n_; }
  void gather(std::span<const std::byte>, std::vector<std::byte>&) override {
    throw std::logic_error("PartOf::gather is not for calling");
  }
  void sum(std::span<std::int64_t>) override { throw std::logic_error("PartOf::sum is not for calling"); }

private:
  int p_, n_;
};

// n threads as the parts of a split: gather() is an all-gather through shared slots between
// two barrier phases. A part that fails drops out of the barrier, so the others do not wait
// for it (their results are then wrong, and the test fails on the error it reports).
class ThreadGroup {
public:
  explicit ThreadGroup(int n) : slots_(static_cast<std::size_t>(n)), barrier_(n) {}
  class Part final : public SplitScoring {
  public:
    Part(ThreadGroup& g, int p) : g_(g), p_(p) {}
    int part() const noexcept override { return p_; }
    int parts() const noexcept override { return static_cast<int>(g_.slots_.size()); }
    void gather(std::span<const std::byte> mine, std::vector<std::byte>& all) override {
      ++gathers;
      bytes_sent += std::ssize(mine);
      g_.slots_[static_cast<std::size_t>(p_)].assign(mine.begin(), mine.end());
      g_.barrier_.arrive_and_wait();
      all.clear();
      for (const auto& s : g_.slots_) all.insert(all.end(), s.begin(), s.end());
      g_.barrier_.arrive_and_wait();  // no slot is rewritten before every part has read it
    }
    // Added into one shared total (the first part in zeroes it, the last part out leaves it for
    // the next call): O(parts x counts), where a gather into every part was O(parts^2 x counts).
    void sum(std::span<std::int64_t> counts) override {
      {
        const std::lock_guard lock(g_.mutex_);
        if (g_.adding_++ == 0) g_.total_.assign(counts.size(), 0);
        for (std::size_t j = 0; j < counts.size(); ++j) g_.total_[j] += counts[j];
      }
      g_.barrier_.arrive_and_wait();
      {
        const std::lock_guard lock(g_.mutex_);
        std::copy(g_.total_.begin(), g_.total_.end(), counts.begin());
        --g_.adding_;
      }
      g_.barrier_.arrive_and_wait();  // the total is not zeroed before every part has read it
      ++sums;
    }
    std::int64_t gathers = 0, sums = 0, bytes_sent = 0;  // bytes_sent: by gather(), not sum()

  private:
    ThreadGroup& g_;
    int p_;
  };
  void drop_out() { barrier_.arrive_and_drop(); }

private:
  std::vector<std::vector<std::byte>> slots_;
  std::barrier<> barrier_;
  std::mutex mutex_;
  std::vector<std::int64_t> total_;
  int adding_ = 0;
};

template <class T>
auto rows_of(const Matrix<T>& G) {
  return [&G](std::int64_t r0, std::int64_t n, MatrixView<T> out) {
    for (std::int64_t i = 0; i < n; ++i)
      for (std::int64_t c = 0; c < G.cols(); ++c) out(i, c) = G(r0 + i, c);
  };
}

// A gradient with ties, zeros, NaN, infinities and the largest values at live positions.
template <class T, class I>
Matrix<T> awkward_gradient(const PaddedCSR<T, I>& W, CounterRng& rng) {
  Matrix<T> G(W.rows(), W.cols());
  for (std::int64_t i = 0; i < W.rows(); ++i)
    for (std::int64_t c = 0; c < W.cols(); ++c) {
      const auto kind = rng.uniform_below(20);
      T g = kind == 0   ? std::numeric_limits<T>::quiet_NaN()
            : kind == 1 ? std::numeric_limits<T>::infinity()
            : kind < 10 ? T(rng.uniform_below(4))  // ties
                        : static_cast<T>(rng.uniform(-2.0, 2.0));
      if (W.find(i, c) >= 0 && rng.uniform_below(2)) g = T(1e30);
      G(i, c) = rng.uniform_below(2) ? g : -g;
    }
  return G;
}

// gather_top_candidates on one thread per part (part p's candidates mine[p]): what each part
// got back, and how many candidates it sent.
template <class T>
struct Gathered {
  std::vector<std::int64_t> positions;
  std::int64_t sent = 0, bytes = 0;  // candidates sent, and the bytes they took
};
template <class T>
std::vector<Gathered<T>> gather_on_threads(const std::vector<std::vector<KeyedPosition<T>>>& mine, std::int64_t k) {
  const int n = static_cast<int>(mine.size());
  ThreadGroup group(n);
  std::vector<Gathered<T>> out(mine.size());
  std::vector<std::string> errors(mine.size());
  {
    std::vector<std::jthread> threads;
    for (int p = 0; p < n; ++p)
      threads.emplace_back([&, p] {
        const auto q = static_cast<std::size_t>(p);
        try {
          ThreadGroup::Part part(group, p);
          SplitCandidates<T> buffers;
          out[q].positions = gather_top_candidates<T>(part, mine[q], k, buffers);
          out[q].sent = std::ssize(buffers.sent);
          out[q].bytes = part.bytes_sent;
        } catch (const std::exception& e) {
          errors[q] = e.what();
          group.drop_out();
        }
      });
  }
  for (const auto& e : errors) REQUIRE(e.empty());
  return out;
}

}  // namespace

TEST_CASE("split_rows cuts the rows into consecutive shares, empty ones included", "[dst][split]") {
  for (std::int64_t rows : {0, 1, 5, 7, 100})
    for (int n : {1, 2, 3, 8}) {
      std::int64_t next = 0;
      for (int p = 0; p < n; ++p) {
        const RowRange r = split_rows(rows, PartOf(p, n));
        REQUIRE(r.begin == next);
        REQUIRE(r.end >= r.begin);
        REQUIRE(r.end - r.begin <= rows / n + 1);
        next = r.end;
      }
      REQUIRE(next == rows);
    }
}

TEMPLATE_TEST_CASE("the merged shares of a split gradient top-k are the unsplit positions", "[dst][split][rigl]", float,
                   double) {
  using T = TestType;
  CounterRng rng(17);
  for (int trial = 0; trial < 12; ++trial) {
    const std::int64_t M = 1 + rng.uniform_below(60), K = 1 + rng.uniform_below(50);
    auto W = PaddedCSR<T, std::int32_t>::random_density(M, K, 0.3, 40 + trial);
    const Matrix<T> G = awkward_gradient(W, rng);
    const DropSet drop = select_drop(W, W.nnz() / 3);
    const std::int64_t free = M * K - (W.nnz() - drop.size());
    for (std::int64_t k : {std::int64_t{1}, drop.size(), free / 2, free + 3}) {
      Matrix<T> block;
      const std::int64_t block_rows = 1 + rng.uniform_below(6);
      const auto want = top_gradient_linear_positions(W, drop, k, block_rows, rows_of(G), block);
      for (int n : {2, 3, static_cast<int>(M) + 2}) {  // M + 2: some shares are empty
        INFO("trial " << trial << ", " << M << "x" << K << ", k " << k << ", " << n << " parts");
        std::vector<std::vector<KeyedPosition<T>>> mine(static_cast<std::size_t>(n));
        std::vector<KeyedPosition<T>> all;
        for (int p = 0; p < n; ++p) {
          mine[p] = top_gradient_candidates(W, drop, k, block_rows, rows_of(G), block, split_rows(M, PartOf(p, n)));
          REQUIRE(std::ssize(mine[p]) <= std::max<std::int64_t>(k, 0));
          all.insert(all.end(), mine[p].begin(), mine[p].end());
        }
        REQUIRE(merge_top_candidates<T>(all, k) == want);
        // the same through the parts' histogram and gather, on every part
        const auto got = gather_on_threads<T>(mine, k);
        for (int p = 0; p < n; ++p) {
          REQUIRE(got[p].positions == want);
          REQUIRE(got[p].bytes == got[p].sent * (sizeof(T) == 4 ? 8 : 16));  // float: packed
        }
      }
    }
  }
}

TEST_CASE("float candidates travel packed in 8 bytes only where every position fits in 32 bits", "[dst][split][rigl]") {
  // candidates made directly (a layer of 2^32 positions would not fit in a test), with tied
  // keys; the oracle: sort by key descending, then position, take k, sort the positions
  CounterRng rng(31);
  using Key = decltype(sprig::magnitude_key(0.0f));
  for (const std::int64_t top : {(std::int64_t{1} << 32) - 1, std::int64_t{1} << 32, std::int64_t{1} << 40}) {
    INFO("largest position " << top);
    std::vector<std::vector<KeyedPosition<float>>> mine(3);
    std::vector<KeyedPosition<float>> every;
    std::int64_t next = top - 3 * 50;  // part 2 ends at top
    for (int p = 0; p < 3; ++p)
      for (int q = 0; q < 50; ++q) {
        const float g = rng.uniform_below(3) == 0 ? 1.5f : static_cast<float>(rng.uniform(0.0, 4.0));
        next += 1;
        mine[p].push_back({sprig::magnitude_key(g), next});
        every.push_back(mine[p].back());
      }
    REQUIRE(every.back().position == top);
    for (std::int64_t k : {1, 37, 150, 200}) {
      auto best = every;
      std::sort(best.begin(), best.end(),
                [](const auto& a, const auto& b) { return a.key != b.key ? a.key > b.key : a.position < b.position; });
      std::vector<std::int64_t> want;
      for (std::size_t q = 0; q < best.size() && std::cmp_less(q, k); ++q) want.push_back(best[q].position);
      std::sort(want.begin(), want.end());
      const auto got = gather_on_threads<float>(mine, k);
      for (const auto& g : got) {
        REQUIRE(g.positions == want);
        REQUIRE(g.bytes == g.sent * (top < (std::int64_t{1} << 32) ? 8 : 16));
      }
    }
  }
  static_assert(sizeof(Key) == 4);
}

TEST_CASE("the parts send about k candidates in all, not k each", "[dst][split][rigl]") {
  // 4 parts of a 64 x 50 layer with distinct gradients: each part's own top-k is k = 40
  // candidates, 160 in all; the histogram lets through those in or above the k-th's bucket
  auto W = PaddedCSR<float, std::int32_t>::random_density(64, 50, 0.2, 3);
  Matrix<float> G(64, 50), block;
  CounterRng rng(5);
  for (std::int64_t i = 0; i < 64; ++i)
    for (std::int64_t c = 0; c < 50; ++c) G(i, c) = static_cast<float>(rng.uniform(0.5, 100.0));
  const DropSet drop = select_drop(W, 40);
  const std::int64_t k = 40;
  std::vector<std::vector<KeyedPosition<float>>> mine;
  for (int p = 0; p < 4; ++p) {
    mine.push_back(top_gradient_candidates(W, drop, k, 8, rows_of(G), block, split_rows(64, PartOf(p, 4))));
    REQUIRE(std::ssize(mine.back()) == k);
  }
  const auto got = gather_on_threads<float>(mine, k);
  std::int64_t sent = 0;
  for (const auto& g : got) sent += g.sent;
  CHECK(sent >= k);
  CHECK(sent <= k + 8);  // the k-th's bucket (1/128 of a binade) holds a few besides it
  CHECK(got[0].positions == top_gradient_linear_positions(W, drop, k, 8, rows_of(G), block));
}

TEMPLATE_TEST_CASE("the shares of a split per-row gradient top-k, in part order, are the unsplit positions",
                   "[dst][split][fan_in]", float, double) {
  using T = TestType;
  CounterRng rng(23);
  for (int trial = 0; trial < 10; ++trial) {
    const std::int64_t M = 1 + rng.uniform_below(40), K = 4 + rng.uniform_below(40);
    auto W = PaddedCSR<T, std::int32_t>::random_per_row(M, K, 1 + K / 4, 60 + trial);
    const Matrix<T> G = awkward_gradient(W, rng);
    const std::int64_t per_row = std::max<std::int64_t>(1, W.row_nnz(0) / 2);
    const DropSet drop = select_drop_per_row(W, per_row, "test");
    Matrix<T> block;
    const std::int64_t block_rows = 1 + rng.uniform_below(5);
    const auto want = top_gradient_linear_positions_per_row(W, drop, per_row, block_rows, rows_of(G), block);
    for (int n : {2, 3, static_cast<int>(M) + 1}) {
      std::vector<std::int64_t> got;
      for (int p = 0; p < n; ++p) {
        const auto mine = top_gradient_linear_positions_per_row(W, drop, per_row, block_rows, rows_of(G), block,
                                                                split_rows(M, PartOf(p, n)));
        got.insert(got.end(), mine.begin(), mine.end());
      }
      REQUIRE(got == want);
    }
  }
}

TEST_CASE("gathered per-row positions travel in 4 bytes only below 2^32 positions", "[dst][split][fan_in]") {
  // positions made directly near the bound (a layer of 2^32 positions would not fit in a
  // test); part 1 sends none; the oracle: every part's positions in part order
  constexpr std::int64_t k32 = std::int64_t{1} << 32;
  for (const std::int64_t bound : {std::int64_t{5}, k32 - 1, k32, k32 + 1, std::int64_t{1} << 40}) {
    INFO("bound " << bound);
    const std::vector<std::vector<std::int64_t>> mine = {{0, 1},
                                                         {},
                                                         {std::max<std::int64_t>(2, bound - 3), bound - 2, bound - 1}};
    std::vector<std::int64_t> want;
    for (const auto& m : mine) want.insert(want.end(), m.begin(), m.end());
    ThreadGroup group(3);
    std::vector<std::vector<std::int64_t>> got(3);
    std::vector<std::int64_t> bytes(3);
    std::vector<std::string> errors(3);
    {
      std::vector<std::jthread> threads;
      for (int p = 0; p < 3; ++p)
        threads.emplace_back([&, p] {
          const auto q = static_cast<std::size_t>(p);
          try {
            ThreadGroup::Part part(group, p);
            SplitCandidates<float> buffers;
            got[q] = gather_positions<float>(part, mine[q], bound, buffers);
            bytes[q] = part.bytes_sent;
          } catch (const std::exception& e) {
            errors[q] = e.what();
            group.drop_out();
          }
        });
    }
    for (int p = 0; p < 3; ++p) {
      const auto q = static_cast<std::size_t>(p);
      REQUIRE(errors[q].empty());
      CHECK(got[q] == want);
      CHECK(bytes[q] == std::ssize(mine[q]) * (bound <= k32 ? 4 : 8));
    }
  }
  SplitCandidates<double> buffers;
  PartOf part(0, 2);  // refused before anything is sent
  const std::vector<std::int64_t> outside = {3, 7}, negative = {-1};
  CHECK_THROWS_AS(gather_positions<double>(part, outside, 7, buffers), ArgumentError);
  CHECK_THROWS_AS(gather_positions<double>(part, negative, 7, buffers), ArgumentError);
}

TEST_CASE("a row range outside the layer is refused", "[dst][split][errors]") {
  auto W = PaddedCSR<float, std::int32_t>::random_density(6, 5, 0.4, 1);
  const DropSet drop = select_drop(W, 2);
  Matrix<float> G(6, 5, 1.0f), block;
  for (RowRange bad : {RowRange{-1, 3}, RowRange{4, 2}, RowRange{7, 9}}) {
    REQUIRE_THROWS_AS(top_gradient_candidates(W, drop, 3, 2, rows_of(G), block, bad), ArgumentError);
    REQUIRE_THROWS_WITH(top_gradient_candidates(W, drop, 3, 2, rows_of(G), block, bad),
                        Catch::Contains("dst::top_gradient_candidates: rows [") &&
                            Catch::Contains("of a layer of 6 rows"));
    REQUIRE_THROWS_AS(top_gradient_linear_positions_per_row(W, drop, 1, 2, rows_of(G), block, bad), ArgumentError);
  }
  // an empty range ranks nothing; end is clipped to the rows
  CHECK(top_gradient_candidates(W, drop, 3, 2, rows_of(G), block, RowRange{6, 6}).empty());
  CHECK(top_gradient_linear_positions(W, drop, 3, 2, rows_of(G), block, RowRange{0, 100}) ==
        top_gradient_linear_positions(W, drop, 3, 2, rows_of(G), block));
}

namespace {

// A 3-class problem on 12 inputs: the class is the argmax of three fixed projections.
struct Data {
  Matrix<double> X;
  std::vector<int> y;
};
Data make_data(std::int64_t n) {
  Data d{Matrix<double>(12, n), std::vector<int>(static_cast<std::size_t>(n))};
  CounterRng rng(99);
  for (std::int64_t b = 0; b < n; ++b) {
    double s[3] = {0, 0, 0};
    for (std::int64_t f = 0; f < 12; ++f) {
      d.X(f, b) = rng.uniform(-1, 1);
      s[f % 3] += d.X(f, b);
    }
    d.y[static_cast<std::size_t>(b)] = static_cast<int>(std::max_element(s, s + 3) - s);
  }
  return d;
}

struct Outcome {
  std::vector<std::vector<std::int64_t>> live;  // per sparse layer, its live positions on its grid
  std::vector<double> losses;                   // every step's
  std::int64_t updates = 0;
};

// 20 steps of SGD with the algorithm (updates every 4 steps), its scoring split by `split`.
template <class Model, class Algorithm>
Outcome train(Model model, Algorithm& algorithm, SplitScoring* split) {
  algorithm.set_split_scoring(split);
  SGD<double> opt({.lr = 0.1, .momentum = 0.9});
  SoftmaxCrossEntropy<double> ce;
  const Data d = make_data(32);
  Outcome out;
  for (std::int64_t t = 0; t < 20; ++t) {
    const auto Z = model.forward(d.X.view());
    out.losses.push_back(ce.forward_backward(Z, d.y, model.output_grad()));
    model.backward();
    UpdateReport report;
    apply_step(algorithm, opt, model, t, &report);
    out.updates += report.step == t;
  }
  for (const auto& ref : model.sparse_layers()) {
    auto& live = out.live.emplace_back();
    const auto& W = ref.layer->weight.matrix;
    W.for_each_live([&](std::int64_t i, std::int64_t c, double, std::int64_t) { live.push_back(i * W.cols() + c); });
    std::sort(live.begin(), live.end());
  }
  return out;
}

// The run unsplit, then split over `parts` threads: every part ends with the unsplit
// topology and every step's loss bit for bit, having gathered once per update and layer that
// grows by gradient (`grows` of them).
template <class MakeModel, class MakeAlgorithm>
void check_split(MakeModel make_model, MakeAlgorithm make_algorithm, int parts, std::int64_t grows = 5 * 2) {
  auto alone = make_algorithm();
  const Outcome want = train(make_model(), *alone, nullptr);
  REQUIRE(want.updates == 5);
  ThreadGroup group(parts);
  std::vector<std::unique_ptr<ThreadGroup::Part>> split;
  for (int p = 0; p < parts; ++p) split.push_back(std::make_unique<ThreadGroup::Part>(group, p));
  std::vector<Outcome> got(static_cast<std::size_t>(parts));
  std::vector<std::string> errors(static_cast<std::size_t>(parts));
  {
    std::vector<std::jthread> threads;
    for (int p = 0; p < parts; ++p)
      threads.emplace_back([&, p] {
        const auto q = static_cast<std::size_t>(p);
        try {
          auto algorithm = make_algorithm();
          got[q] = train(make_model(), *algorithm, split[q].get());
        } catch (const std::exception& e) {
          errors[q] = e.what();
          group.drop_out();
        }
      });
  }
  for (int p = 0; p < parts; ++p) {
    const auto q = static_cast<std::size_t>(p);
    INFO("part " << p << " of " << parts);
    REQUIRE(errors[q].empty());
    CHECK(got[q].live == want.live);
    CHECK(got[q].losses == want.losses);
    CHECK(split[q]->gathers == grows);
  }
}

UpdateSchedule every_4_steps() {
  UpdateSchedule s;
  s.delta_t = 4;
  s.t_end = 16;
  return s;
}

}  // namespace

TEST_CASE("an update whose gradient ranking is split over parts grows what one process grows", "[dst][split][train]") {
  using I = std::int32_t;
  const auto mlp = [] {
    return models::build_mlp<double, I>(
        {.widths = {12, 40, 30, 3}, .sparsity = 0.6, .seed = 5, .growth_reserve = 0.25});
  };
  for (int parts : {2, 3}) {
    SECTION("RigL, " + std::to_string(parts) + " parts") {
      check_split(
          mlp, [] { return std::make_unique<RigL<double, I>>(every_4_steps(), 11); }, parts);
    }
    SECTION("SNFS, " + std::to_string(parts) + " parts") {
      check_split(
          mlp, [] { return std::make_unique<SNFS<double, I>>(every_4_steps(), 11); }, parts);
    }
    SECTION("GraNet, " + std::to_string(parts) + " parts") {
      check_split(
          mlp,
          [] {
            return std::make_unique<GraNet<double, I>>(every_4_steps(), 11, GraNetOptions{{0.6, 0.6}, {0.8, 0.7}});
          },
          parts, 4 * 2);  // the update at t_end regrows nothing
    }
    SECTION("RigL under constant fan-in, " + std::to_string(parts) + " parts") {
      const auto fan_in_mlp = [&] {
        auto m = mlp();
        redraw_constant_fan_in(m, 3, 0.25);
        return m;
      };
      const auto rigl = [] {
        auto a = std::make_unique<RigL<double, I>>(every_4_steps(), 11);
        a->constant_fan_in = true;
        return a;
      };
      check_split(fan_in_mlp, rigl, parts);
    }
    SECTION("RigL in 4x4 blocks, " + std::to_string(parts) + " parts") {
      const auto blocks = [] {
        return models::build_block_mlp<double, I, 4, 4>(
            {.widths = {12, 40, 32, 3}, .sparsity = 0.5, .seed = 5, .growth_reserve = 0.25});
      };
      check_split(
          blocks, [] { return std::make_unique<RigL<double, I>>(every_4_steps(), 11); }, parts);
    }
  }
}
