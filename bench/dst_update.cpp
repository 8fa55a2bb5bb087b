// dst_update — the cost of one topology update (SET, RigL) on one sparse layer against the
// cost of one training step of that layer, measured in the same process, plus the split of
// an update into its phases (drop selection, grow selection, storage changes), and the same
// updates with constant fan-in (every row keeps its count) on a layer of equal rows, and a
// GraNet update (prune along the cubic schedule and regrow) on a copy of the layer.
//
//   dst_update [--rows 4096] [--cols 4096] [--density 0.1] [--batch 128] [--reps 7] [--threads 1]
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include <sprig/dst/fan_in.hpp>
#include <sprig/dst/granet.hpp>
#include <sprig/dst/rigl.hpp>
#include <sprig/dst/set.hpp>
#include <sprig/optim/sgd.hpp>
#if defined(_OPENMP)
#  include <omp.h>
#endif
#if defined(SPRIG_OPENBLAS)
extern "C" void openblas_set_num_threads(int);
#endif

using T = float;
using Index = std::int32_t;
using Clock = std::chrono::steady_clock;

namespace {
double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}
}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Cost of one SET / RigL topology update against one training step of the layer"};
  std::int64_t rows = 4096, cols = 4096, batch = 128;
  double density = 0.1;
  int reps = 7, threads = 1;
  app.add_option("--rows", rows)->capture_default_str();
  app.add_option("--cols", cols)->capture_default_str();
  app.add_option("--density", density)->capture_default_str();
  app.add_option("--batch", batch)->capture_default_str();
  app.add_option("--reps", reps)->capture_default_str();
  app.add_option("--threads", threads)->capture_default_str();
  CLI11_PARSE(app, argc, argv);
#if defined(_OPENMP)
  omp_set_num_threads(threads);
#endif
#if defined(SPRIG_OPENBLAS)
  openblas_set_num_threads(threads);
#endif

  sprig::SparseLinear<T, Index> layer(cols, rows, {.density = density, .seed = 1});
  sprig::Matrix<T> X(cols, batch), Y(rows, batch), dY(rows, batch), dX(cols, batch);
  sprig::CounterRng rng(3);
  for (std::int64_t i = 0; i < cols; ++i)
    for (std::int64_t b = 0; b < batch; ++b) X(i, b) = static_cast<T>(rng.uniform(-1, 1));
  for (std::int64_t i = 0; i < rows; ++i)
    for (std::int64_t b = 0; b < batch; ++b) dY(i, b) = static_cast<T>(rng.uniform(-1e-3, 1e-3));
  sprig::SGD<T> opt({.lr = 0.01, .momentum = 0.9});
  auto step = [&] {
    layer.forward(X, Y);
    layer.backward(X, dY, dX);
    opt.update(layer.weight);
    opt.update(layer.bias);
  };
  sprig::dst::UpdateSchedule schedule;
  schedule.delta_t = 100;
  schedule.t_end = 1000;
  sprig::dst::SET<T, Index> set(schedule, 1);
  sprig::dst::RigL<T, Index> rigl(schedule, 1);
  const std::vector<sprig::SparseLayerRef<T, Index>> refs{{0, 0, &layer, X.view(), dY.view()}};
  // constant fan-in: the same shape and density with llround(density * cols) weights per row
  auto fan_in_layer = sprig::dst::constant_fan_in_linear<T, Index>(cols, rows, {.density = density, .seed = 1});
  sprig::dst::SET<T, Index> set_cfi(schedule, 1);
  sprig::dst::RigL<T, Index> rigl_cfi(schedule, 1);
  set_cfi.constant_fan_in = rigl_cfi.constant_fan_in = true;
  const std::vector<sprig::SparseLayerRef<T, Index>> cfi_refs{{0, 0, &fan_in_layer, X.view(), dY.view()}};
  auto cfi_step = [&] {
    fan_in_layer.forward(X, Y);
    fan_in_layer.backward(X, dY, dX);
    opt.update(fan_in_layer.weight);
    opt.update(fan_in_layer.bias);
  };
  std::vector<double> set_cfi_ms, rigl_cfi_ms;
  // GraNet (initial sparsity 1 - density, final 0.98) at step 100 of [0, 1000]: prunes to
  // s(0.1) = 0.92 and regrows f(100) of the rest, on a freshly drawn layer each time
  sprig::dst::GraNet<T, Index> granet(schedule, 1, {.initial_sparsity = {1.0 - density}, .final_sparsity = {0.98}});
  std::vector<double> granet_ms;

  std::vector<double> step_ms, set_ms, rigl_ms, drop_ms, grow_ms, apply_ms;
  step();  // warm-up: creates optimizer state and kernel workspaces
  cfi_step();
  for (int r = 0; r < reps; ++r) {
    auto t = Clock::now();
    step();
    step_ms.push_back(ms_since(t));
    t = Clock::now();
    set.update(refs, 100);  // drop fraction f(100) of the cosine schedule
    set_ms.push_back(ms_since(t));
    step();  // rebuild caches after the topology change outside the timed region
    t = Clock::now();
    rigl.update(refs, 100);
    rigl_ms.push_back(ms_since(t));
    step();
    // SET's phases, one call each as SET::update makes them for this layer
    auto& param = layer.weight;
    const auto k = static_cast<std::int64_t>(schedule.drop_fraction(100) * static_cast<double>(param.matrix.nnz()));
    t = Clock::now();
    const sprig::dst::DropSet drop = sprig::dst::select_drop(param.matrix, k);
    drop_ms.push_back(ms_since(t));
    sprig::CounterRng grow_rng(7, 0, static_cast<std::uint64_t>(r));
    t = Clock::now();
    std::vector<std::int64_t> grow = sprig::dst::random_free_linear_positions(param.matrix, drop, k, grow_rng);
    grow_ms.push_back(ms_since(t));
    t = Clock::now();
    sprig::SlotLog log;
    log.set_sink(sprig::dst::SET<T, Index>::kLogChunk, [&param](const sprig::SlotLog& chunk) { param.apply(chunk); });
    sprig::dst::apply_drop_grow_at(param.matrix, drop, std::move(grow), log);
    log.flush();
    apply_ms.push_back(ms_since(t));
    step();
    t = Clock::now();
    set_cfi.update(cfi_refs, 100);
    set_cfi_ms.push_back(ms_since(t));
    cfi_step();
    t = Clock::now();
    rigl_cfi.update(cfi_refs, 100);
    rigl_cfi_ms.push_back(ms_since(t));
    cfi_step();
    {
      sprig::SparseLinear<T, Index> pruned(cols, rows, {.density = density, .seed = 1});  // as `layer` was drawn
      const std::vector<sprig::SparseLayerRef<T, Index>> granet_refs{{0, 0, &pruned, X.view(), dY.view()}};
      t = Clock::now();
      granet.update(granet_refs, 100);
      granet_ms.push_back(ms_since(t));
    }
  }
  std::printf("layer %lld x %lld, density %.3f (nnz %lld), batch %lld, %d thread(s), drop fraction %.3f\n",
              static_cast<long long>(rows), static_cast<long long>(cols), density,
              static_cast<long long>(layer.weight.matrix.nnz()), static_cast<long long>(batch), threads,
              schedule.drop_fraction(100));
  const double s = median(step_ms);
  std::printf("training step (fwd + bwd incl. dX + SGD): median %.2f ms [%.2f - %.2f]\n", s,
              *std::min_element(step_ms.begin(), step_ms.end()), *std::max_element(step_ms.begin(), step_ms.end()));
  std::printf("SET update:  median %.2f ms [%.2f - %.2f] = %.2f training steps (%.3f per step at delta_t 100)\n",
              median(set_ms), *std::min_element(set_ms.begin(), set_ms.end()),
              *std::max_element(set_ms.begin(), set_ms.end()), median(set_ms) / s, median(set_ms) / s / 100);
  std::printf("RigL update: median %.2f ms [%.2f - %.2f] = %.2f training steps (%.3f per step at delta_t 100)\n",
              median(rigl_ms), *std::min_element(rigl_ms.begin(), rigl_ms.end()),
              *std::max_element(rigl_ms.begin(), rigl_ms.end()), median(rigl_ms) / s, median(rigl_ms) / s / 100);
  std::printf(
      "constant fan-in (%lld per row): SET update median %.2f ms [%.2f - %.2f] = %.2fx SET, RigL update "
      "median %.2f ms [%.2f - %.2f] = %.2fx RigL = %.2f training steps\n",
      static_cast<long long>(fan_in_layer.weight.matrix.row_nnz(0)), median(set_cfi_ms),
      *std::min_element(set_cfi_ms.begin(), set_cfi_ms.end()), *std::max_element(set_cfi_ms.begin(), set_cfi_ms.end()),
      median(set_cfi_ms) / median(set_ms), median(rigl_cfi_ms),
      *std::min_element(rigl_cfi_ms.begin(), rigl_cfi_ms.end()),
      *std::max_element(rigl_cfi_ms.begin(), rigl_cfi_ms.end()), median(rigl_cfi_ms) / median(rigl_ms),
      median(rigl_cfi_ms) / s);
  std::printf(
      "GraNet update (prune to sparsity %.4f, regrow by gradient): median %.2f ms [%.2f - %.2f] = %.2f "
      "training steps\n",
      granet.target_sparsity(0, 100), median(granet_ms), *std::min_element(granet_ms.begin(), granet_ms.end()),
      *std::max_element(granet_ms.begin(), granet_ms.end()), median(granet_ms) / s);
  std::printf(
      "SET phases (medians): drop selection %.2f ms, grow selection %.2f ms, storage changes and state "
      "replay %.2f ms\n",
      median(drop_ms), median(grow_ms), median(apply_ms));
  return 0;
}
