// dist_step — the training step of a sparse model data parallel over MPI ranks
// (dist::DataParallel), or on one process when not launched by mpirun: step time, the share
// of it spent waiting for gradient sums, bytes per step, and each rank's memory.
//
//   dist_step --model mlp --threads 2                       # 1 process x 2 threads
//   mpirun -np 2 dist_step --model mlp --threads 1          # 2 ranks x 1 thread
//   mpirun -np 4 --oversubscribe dist_step --model ffn --width 4096 --hidden 16384 --sparsity 0.8
//
// Models (fp32, 32-bit column indices, feature-major activations, synthetic data as in
// bench/train_step: a step's cost does not depend on the values):
//   mlp  784-1024-1024-10, ReLU; hidden layers sparse, output dense; softmax cross-entropy.
//   ffn  width -> hidden -> width with GELU; both layers sparse; MSE against a random target.
// --batch is the global batch G; each of N ranks trains on G / N of its columns. The optimizer
// is SGD with momentum (or --optimizer adamw); --algorithm rigl or set adds topology updates
// every --delta-t steps (--constant-fan-in: per row, every row the same count).
//
// Timing: --warmup untimed steps, then --steps timed steps back to back, each from the start
// of forward to the end of the optimizer step (or topology update); every rank times its own.
// Printed per rank: the median step and its quartiles, the mean time blocked in the gradient
// sums (the blocking sums after backward; with --overlap, what backward did not hide), the gradient bytes it contributed
// per step, the bytes gathered per topology update, the time per update (the algorithm's
// own clock: the drop, the grow ranking and the candidates' gather, not the X / dY gather),
// the model's bytes (Sequential::memory_bytes) and the peak resident set (VmHWM). The last
// line, DISTSTEP, is machine-readable: medians over ranks (update_ms: the slowest rank's).
#include <sprig/dist/data_parallel.hpp>
#include <sprig/dist/mpi_communicator.hpp>
#include <sprig/dst/fan_in.hpp>
#include <sprig/dst/rigl.hpp>
#include <sprig/dst/set.hpp>
#include <sprig/sprig.hpp>

#include <CLI/CLI.hpp>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace {

using T = float;
using Index = std::int32_t;
using Model = sprig::Sequential<T, Index>;
using Clock = std::chrono::steady_clock;

struct Options {
  std::string model = "mlp";
  std::int64_t width = 1024;   // ffn
  std::int64_t hidden = 4096;  // ffn
  double sparsity = 0.9;
  std::int64_t batch = 128;
  int threads = 1;
  int warmup = 10;
  int steps = 100;
  std::string optimizer = "sgd";
  std::string algorithm = "none";
  std::int64_t delta_t = 25;
  std::uint64_t seed = 1;
  bool overlap = false;
  bool split_scoring = true;
  bool constant_fan_in = false;
};

// Peak resident set of this process in bytes (VmHWM), 0 where /proc is not there.
double peak_resident_bytes() {
  std::ifstream status("/proc/self/status");
  std::string key;
  while (status >> key) {
    if (key == "VmHWM:") {
      double kb = 0.0;
      status >> kb;
      return 1024.0 * kb;
    }
    status.ignore(1 << 12, '\n');
  }
  return 0.0;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}
double quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[static_cast<std::size_t>(q * static_cast<double>(v.size() - 1) + 0.5)];
}

int run(const Options& o, sprig::dist::Communicator& comm) {
  const sprig::dist::Shard shard = sprig::dist::shard(o.batch, comm);
  const std::int64_t B = shard.size;
  const bool mlp = o.model == "mlp";
  if (!mlp && o.model != "ffn") throw sprig::ArgumentError("dist_step: --model is mlp or ffn, not " + o.model);
  if (o.sparsity <= 0.0 || o.sparsity >= 1.0) throw sprig::ArgumentError("dist_step: --sparsity must be in (0, 1)");

  Model model;
  std::uint64_t key = 0;
  const double density = 1.0 - o.sparsity;
  auto sparse = [&](std::int64_t in, std::int64_t out) {
    model.add(sprig::SparseLinear<T, Index>(
        in, out, {.density = density, .seed = o.seed, .layer_key = key++, .growth_reserve = 0.125}));
  };
  // every rank draws the whole global batch from the same stream and keeps its columns
  sprig::CounterRng rng(o.seed, 0xD157, 0);
  const std::int64_t in = mlp ? 784 : o.width;
  const std::int64_t out = mlp ? 10 : o.width;
  if (mlp) {
    sparse(784, 1024);
    model.add(sprig::ReLU<T>{});
    sparse(1024, 1024);
    model.add(sprig::ReLU<T>{});
    model.add(sprig::Linear<T>(1024, 10, o.seed, key++));
  } else {
    sparse(o.width, o.hidden);
    model.add(sprig::GELU<T>{});
    sparse(o.hidden, o.width);
  }
  sprig::Matrix<T> X(in, B, Model::activation_stride(B)), target(out, B, Model::activation_stride(B));
  std::vector<int> labels(static_cast<std::size_t>(B));
  for (std::int64_t i = 0; i < in; ++i)
    for (std::int64_t b = 0; b < o.batch; ++b) {
      const double v = mlp ? rng.uniform01() : rng.normal();
      if (b >= shard.begin && b < shard.begin + B) X(i, b - shard.begin) = static_cast<T>(v);
    }
  for (std::int64_t b = 0; b < o.batch; ++b) {
    const int label = static_cast<int>(rng.uniform_below(10));
    if (b >= shard.begin && b < shard.begin + B) labels[static_cast<std::size_t>(b - shard.begin)] = label;
  }
  for (std::int64_t i = 0; i < out; ++i)
    for (std::int64_t b = 0; b < o.batch; ++b) {
      const double v = rng.normal();
      if (b >= shard.begin && b < shard.begin + B) target(i, b - shard.begin) = static_cast<T>(v);
    }

  std::variant<sprig::SGD<T>, sprig::AdamW<T>> optimizer = sprig::SGD<T>({.lr = 0.01, .momentum = 0.9});
  if (o.optimizer == "adamw") optimizer = sprig::AdamW<T>({.lr = 1e-3});
  sprig::SoftmaxCrossEntropy<T> ce;
  std::unique_ptr<sprig::dst::SparsityAlgorithm<T, Index>> algorithm;
  const auto schedule = sprig::dst::UpdateSchedule::for_run(4 * (o.warmup + o.steps), o.delta_t);
  if (o.algorithm == "rigl")
    algorithm = std::make_unique<sprig::dst::RigL<T, Index>>(schedule, o.seed);
  else if (o.algorithm == "set")
    algorithm = std::make_unique<sprig::dst::SET<T, Index>>(schedule, o.seed);
  else if (o.algorithm != "none")
    throw sprig::ArgumentError("dist_step: --algorithm is none, set or rigl, not " + o.algorithm);
  if (o.constant_fan_in) {  // every row of a sparse layer the same count, kept by the updates
    sprig::dst::redraw_constant_fan_in(model, o.seed, 0.125);
    if (algorithm) algorithm->constant_fan_in = true;
  }

  sprig::dist::DataParallel dp(comm, model, {.overlap = o.overlap, .split_scoring = o.split_scoring});
  // the mean over the global batch: each shard's gradient is over its B columns, and
  // DataParallel averages the N shards
  auto step = [&](std::int64_t t) {
    const auto Z = model.forward(X);
    auto dZ = model.output_grad();
    if (mlp) {
      ce.forward_backward(Z, labels, dZ);
    } else {
      const T scale = static_cast<T>(2.0 / static_cast<double>(Z.rows() * Z.cols()));
      for (std::int64_t i = 0; i < Z.rows(); ++i)
        for (std::int64_t b = 0; b < Z.cols(); ++b) dZ(i, b) = scale * (Z(i, b) - target(i, b));
    }
    dp.backward();
    std::visit(
        [&](auto& opt) {
          if (algorithm)
            dp.apply_step(*algorithm, opt, t);
          else
            opt.step(model);
        },
        optimizer);
  };

  for (int t = 0; t < o.warmup; ++t) step(t);
  comm.barrier();
  dp.reset_stats();
  const std::int64_t updates_before = algorithm ? algorithm->updates() : 0;
  const double update_seconds_before = algorithm ? algorithm->total_seconds() : 0.0;
  std::vector<double> ms;
  ms.reserve(static_cast<std::size_t>(o.steps));
  const auto t_all = Clock::now();
  for (int t = o.warmup; t < o.warmup + o.steps; ++t) {
    const auto t0 = Clock::now();
    step(t);
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  const double total_ms = std::chrono::duration<double, std::milli>(Clock::now() - t_all).count();
  const std::int64_t updates = algorithm ? algorithm->updates() - updates_before : 0;
  const double update_ms =
      updates > 0 ? 1e3 * (algorithm->total_seconds() - update_seconds_before) / static_cast<double>(updates) : 0.0;

  std::int64_t live = 0, values = 0;
  model.for_each_parameter([&](auto& p) {
    if constexpr (requires { p.live_count(); }) {
      live += p.live_count();
      values += p.live_count();
    } else {
      values += p.size();
    }
  });
  // a gradient-driven update gathers every sparse layer's X and dY: (in + out) x G values,
  // of which this rank receives all but its own shard
  const double sparse_io = mlp ? (784 + 1024) + (1024 + 1024) : 2.0 * static_cast<double>(o.width + o.hidden);
  const double predicted_gather = algorithm && algorithm->needs_gradients() && comm.size() > 1
                                      ? sizeof(T) * sparse_io * static_cast<double>(o.batch - B)
                                      : 0.0;
  const auto& st = dp.stats();
  constexpr int kFields = 10;
  const double mine[kFields] = {median(ms),
                                quantile(ms, 0.25),
                                quantile(ms, 0.75),
                                total_ms > 0 ? 1e3 * st.gradient_wait_seconds / total_ms : 0.0,
                                static_cast<double>(st.gradient_bytes) /
                                    static_cast<double>(std::max<std::int64_t>(1, st.steps)),
                                updates > 0 ? static_cast<double>(st.gather_bytes) / static_cast<double>(updates) : 0.0,
                                static_cast<double>(model.memory_bytes()),
                                peak_resident_bytes(),
                                1e3 * st.gradient_wait_seconds / static_cast<double>(std::max(1, o.steps)),
                                update_ms};
  std::vector<double> all(static_cast<std::size_t>(kFields * comm.size()));
  comm.allgather(std::as_bytes(std::span<const double>(mine)), std::as_writable_bytes(std::span<double>(all)));
  if (comm.rank() != 0) return 0;

  std::printf(
      "dist_step: %s, %s%s, sparsity %.3f, %lld live weights (%lld trained values), global batch %lld, "
      "%d rank(s) (%s) x %d thread(s), %d warm-up + %d timed steps, %s, algorithm %s (%lld updates timed), "
      "gradient sums %s backward, update scoring %s\n",
      o.model.c_str(), mlp ? "784-1024-1024-10" : "",
      mlp ? "" : (std::to_string(o.width) + "-" + std::to_string(o.hidden) + "-" + std::to_string(o.width)).c_str(),
      o.sparsity, static_cast<long long>(live), static_cast<long long>(values), static_cast<long long>(o.batch),
      comm.size(), comm.name().c_str(), o.threads, o.warmup, o.steps, o.optimizer.c_str(), o.algorithm.c_str(),
      static_cast<long long>(updates), o.overlap ? "during" : "after",
      o.split_scoring && comm.size() > 1 ? "split over the ranks" : "whole on every rank");
  std::vector<double> step_ms, share, peak, update;
  for (int r = 0; r < comm.size(); ++r) {
    const double* v = all.data() + kFields * r;
    std::printf(
        "rank %d: %.3f ms/step [%.3f, %.3f], waiting for gradient sums %.3f ms/step (%.1f%%); %.3f MB of "
        "gradient a step, %.3f MB gathered per update, %.1f ms per update; model %.1f MB, peak resident %.1f MB\n",
        r, v[0], v[1], v[2], v[8], 100.0 * v[3], v[4] / 1e6, v[5] / 1e6, v[9], v[6] / 1e6, v[7] / 1e6);
    step_ms.push_back(v[0]);
    share.push_back(v[3]);
    peak.push_back(v[7]);
    update.push_back(v[9]);
  }
  std::printf(
      "DISTSTEP model=%s optimizer=%s overlap=%d ranks=%d threads=%d batch=%lld live=%lld ms_per_step=%.3f comm_share=%.4f "
      "gradient_bytes_per_step=%.0f predicted_gradient_bytes=%lld gather_bytes_per_update=%.0f "
      "predicted_gather_bytes=%.0f "
      "update_ms=%.3f model_bytes=%.0f peak_resident_bytes=%.0f\n",
      o.model.c_str(), o.optimizer.c_str(), o.overlap ? 1 : 0, comm.size(), o.threads, static_cast<long long>(o.batch),
      static_cast<long long>(live), median(step_ms), median(share), mine[4],
      static_cast<long long>(values * static_cast<std::int64_t>(sizeof(T))), mine[5], predicted_gather,
      *std::max_element(update.begin(), update.end()), mine[6], median(peak));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"The data-parallel training step of a sparse model (sprig::dist::DataParallel)"};
  app.add_option("--model", o.model, "mlp (784-1024-1024-10) or ffn (width-hidden-width)")
      ->check(CLI::IsMember({"mlp", "ffn"}));
  app.add_option("--width", o.width, "ffn: input and output width")->check(CLI::PositiveNumber);
  app.add_option("--hidden", o.hidden, "ffn: hidden width")->check(CLI::PositiveNumber);
  app.add_option("--sparsity", o.sparsity, "fraction of zero weights in the sparse layers")
      ->check(CLI::Range(0.0, 0.9999));
  app.add_option("--batch", o.batch, "global batch (a multiple of the number of ranks)")->check(CLI::PositiveNumber);
  app.add_option("--threads", o.threads, "OpenMP threads per rank")->check(CLI::PositiveNumber);
  app.add_option("--warmup", o.warmup, "untimed steps first")->check(CLI::NonNegativeNumber);
  app.add_option("--steps", o.steps, "timed steps")->check(CLI::PositiveNumber);
  app.add_option("--optimizer", o.optimizer, "sgd (momentum 0.9) or adamw")->check(CLI::IsMember({"sgd", "adamw"}));
  app.add_option("--algorithm", o.algorithm, "topology updates: none, set or rigl")
      ->check(CLI::IsMember({"none", "set", "rigl"}));
  app.add_option("--delta-t", o.delta_t, "steps between topology updates")->check(CLI::PositiveNumber);
  app.add_option("--seed", o.seed, "seed of weights and data");
  app.add_flag("--overlap", o.overlap, "sum the gradients during backward (non-blocking) instead of after it");
  app.add_flag("--constant-fan-in", o.constant_fan_in,
               "every row of a sparse layer keeps the same count of weights (drawn so, kept by the updates)");
  app.add_flag("!--no-split-scoring", o.split_scoring,
               "every rank ranks every row of a RigL update's dense gradients (default: each its share)");
  CLI11_PARSE(app, argc, argv);
  omp_set_num_threads(o.threads);
  try {
    if (sprig::dist::MpiSession::launched_with_ranks()) {
      sprig::dist::MpiSession mpi(argc, argv);
      sprig::dist::MpiCommunicator world;
      return run(o, world);
    }
    sprig::dist::SingleProcessCommunicator one;
    return run(o, one);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dist_step: %s\n", e.what());
    return 1;
  }
}
