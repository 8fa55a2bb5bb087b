// threads_step: the training step of a small sparse MLP (default 64-256-256-10 at 90%, batch
// 128, AdamW) on a chosen number of OpenMP threads, or on the examples' automatic choice
// (--threads 0: examples/threads.hpp). Prints the median, mean and 90th percentile of
// --steps steps after --warmup. bench/threads_busy_compare.sh runs it quiet and beside a
// 2-thread busy loop.
//   threads_step [--widths 64,256,256,10] [--sparsity 0.9] [--batch 128] [--threads 0]
#include <sprig/sprig.hpp>

#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <numeric>
#include <random>
#include <vector>

#include "../examples/threads.hpp"

int main(int argc, char** argv) {
  std::vector<std::int64_t> widths{64, 256, 256, 10};
  double sparsity = 0.9;
  std::int64_t batch = 128, steps = 1500, warmup = 50;
  int threads = 0;
  CLI::App app{"threads_step: a small sparse MLP's training step on N threads or the examples' automatic choice"};
  app.add_option("--widths", widths, "layer widths, input first")->expected(2, 16);
  app.add_option("--sparsity", sparsity, "sparsity of the hidden layers")->check(CLI::Range(0.0, 0.999));
  app.add_option("--batch", batch, "batch size")->check(CLI::PositiveNumber);
  app.add_option("--steps", steps, "timed steps")->check(CLI::PositiveNumber);
  app.add_option("--warmup", warmup, "untimed steps")->check(CLI::NonNegativeNumber);
  app.add_option("--threads", threads, "OpenMP threads (0: the examples' automatic choice)")
      ->check(CLI::NonNegativeNumber);
  CLI11_PARSE(app, argc, argv);

  namespace dst = sprig::dst;
  auto model = sprig::models::build_mlp<float, std::int32_t>({.widths = widths, .sparsity = sparsity, .seed = 1});
  const std::int64_t work = 3 * sprig::parameter_memory(model).parameters * batch;
  threads = examples::choose_threads(threads, work);
  sprig::AdamW<float> optimizer({.lr = 1e-3});
  dst::Static<float, std::int32_t> frozen;
  sprig::SoftmaxCrossEntropy<float> loss;
  sprig::Matrix<float> x(widths.front(), batch);
  std::vector<int> labels(static_cast<std::size_t>(batch));
  std::mt19937 gen(7);
  std::normal_distribution<float> noise(0.0f, 1.0f);
  for (std::int64_t b = 0; b < batch; ++b) {
    labels[static_cast<std::size_t>(b)] = static_cast<int>(gen() % static_cast<unsigned>(widths.back()));
    for (std::int64_t f = 0; f < widths.front(); ++f) x(f, b) = noise(gen);
  }
  std::vector<double> ms;
  for (std::int64_t t = 0; t < warmup + steps; ++t) {
    const auto start = std::chrono::steady_clock::now();
    const auto logits = model.forward(x);
    loss.forward_backward(logits, labels, model.output_grad());
    model.backward();
    dst::apply_step(frozen, optimizer, model, t);
    if (t >= warmup)
      ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  }
  const double mean = std::accumulate(ms.begin(), ms.end(), 0.0) / static_cast<double>(ms.size());
  std::sort(ms.begin(), ms.end());
  std::string shape;
  for (auto w : widths) shape += (shape.empty() ? "" : "-") + std::to_string(w);
  std::printf(
      "THREADSTEP model=%s sparsity=%.3f batch=%lld work=%lld threads=%d median_ms=%.4f mean_ms=%.4f p90_ms=%.4f "
      "kernels=%s\n",
      shape.c_str(), sparsity, static_cast<long long>(batch), static_cast<long long>(work), threads, ms[ms.size() / 2],
      mean, ms[ms.size() * 9 / 10], sprig::kernel_arch());
}
