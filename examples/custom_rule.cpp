// A drop/grow rule of your own (docs/dst.md, "Writing a rule"): grow where the Cauchy-Schwarz
// bound of RigL's score is largest, |dL/dW(r, c)| = |dY_r . X_c| <= ||dY_r|| ||X_c||, which
// costs (rows + cols) x B multiply-adds per layer instead of RigL's rows x cols x B.
// The base class drops the smallest magnitudes, checks the positions returned, moves the
// optimizer state and compacts; the rule only chooses where to grow.
#include <sprig/sprig.hpp>

#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

namespace dst = sprig::dst;

template <class T, class Index>
class NormGrow final : public dst::SparsityAlgorithm<T, Index> {
public:
  using Base = dst::SparsityAlgorithm<T, Index>;
  using Base::Base;  // (UpdateSchedule, seed)
  std::string_view name() const override { return "normgrow"; }
  bool needs_gradients() const override { return true; }  // update steps read each layer's X and dY

protected:
  // k positions not kept, ascending: the k largest ||dY_r|| ||X_c|| (ties: the smaller position).
  std::vector<std::int64_t> grow_linear_positions(const typename Base::LayerRef& layer, const dst::DropSet& dropped,
                                                  std::int64_t k, sprig::CounterRng&) override {
    const auto& W = layer.layer->weight.matrix;
    std::vector<T> out_norm(W.rows()), in_norm(W.cols());
    for (std::int64_t r = 0; r < W.rows(); ++r) out_norm[r] = norm(layer.output_grad.row(r), layer.output_grad.cols());
    for (std::int64_t c = 0; c < W.cols(); ++c) in_norm[c] = norm(layer.input.row(c), layer.input.cols());
    return dst::top_gradient_linear_positions(
        W, dropped, k, /*block_rows=*/64,
        [&](std::int64_t r0, std::int64_t rows, sprig::MatrixView<T> score) {
          for (std::int64_t i = 0; i < rows; ++i)
            for (std::int64_t c = 0; c < W.cols(); ++c) score(i, c) = out_norm[r0 + i] * in_norm[c];
        },
        scores_);
  }

private:
  static T norm(const T* v, std::int64_t n) {
    T s = 0;
    for (std::int64_t b = 0; b < n; ++b) s += v[b] * v[b];
    return std::sqrt(s);
  }
  sprig::Matrix<T> scores_;  // one block of scores, reused
};

int main() {
  // The README's toy problem (class k shifts inputs 8k..8k+7), a 32-256-256-4 MLP 90% sparse.
  auto model = sprig::models::build_mlp<float, std::int32_t>(
      {.widths = {32, 256, 256, 4}, .sparsity = 0.9, .seed = 1, .growth_reserve = 0.125});
  const std::int64_t steps = 600, batch = 128;
  sprig::AdamW<float> optimizer({.lr = 3e-3});
  NormGrow<float, std::int32_t> rule(dst::UpdateSchedule::for_run(steps, /*delta_t=*/50), /*seed=*/1);
  sprig::SoftmaxCrossEntropy<float> loss;
  sprig::Matrix<float> x(32, batch);
  std::vector<int> labels(batch);
  std::mt19937 gen(7);
  std::normal_distribution<float> noise(0.0f, 1.0f);
  double accuracy = 0.0;
  std::int64_t grown = 0;
  for (std::int64_t t = 0; t < steps; ++t) {
    for (std::int64_t b = 0; b < batch; ++b) {
      labels[b] = static_cast<int>(gen() % 4);
      for (std::int64_t f = 0; f < 32; ++f) x(f, b) = noise(gen) + (f / 8 == labels[b] ? 1.0f : 0.0f);
    }
    const auto logits = model.forward(x);
    loss.forward_backward(logits, labels, model.output_grad());
    const double correct = sprig::SoftmaxCrossEntropy<float>::count_correct(logits, labels) / double(batch);
    accuracy = t == 0 ? correct : 0.9 * accuracy + 0.1 * correct;
    model.backward();
    dst::UpdateReport report;
    dst::apply_step(rule, optimizer, model, t, &report);
    for (const auto& l : report.layers) grown += l.stats.grown;
  }
  std::printf("%s: %lld updates grew %lld weights; smoothed training accuracy %.3f\n", std::string(rule.name()).c_str(),
              static_cast<long long>(rule.updates()), static_cast<long long>(grown), accuracy);
  return accuracy > 0.85 && rule.updates() > 0 && grown > 0 ? 0 : 1;  // the test fails if it did not learn or grow
}
