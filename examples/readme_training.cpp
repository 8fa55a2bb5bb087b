#include <sprig/sprig.hpp>

#include <cstdio>
#include <random>
#include <vector>

int main() {
  namespace dst = sprig::dst;
  namespace models = sprig::models;
  // A 32-256-256-4 MLP whose hidden layers are 90% sparse (ERK densities); the output layer is dense.
  models::MLPSpec spec{.widths = {32, 256, 256, 4}, .sparsity = 0.9, .distribution = models::Distribution::erk};
  spec.seed = 1, spec.growth_reserve = 0.125;  // room for RigL's regrowth
  auto model = models::build_mlp<float, std::int32_t>(spec);
  const std::int64_t steps = 600, batch = 128;
  sprig::AdamW<float> optimizer({.lr = 3e-3});
  dst::RigL<float, std::int32_t> rigl(dst::UpdateSchedule::for_run(steps, /*delta_t=*/50), /*seed=*/1);
  sprig::SoftmaxCrossEntropy<float> loss;

  // Toy data: class k shifts inputs 8k..8k+7 by +1 in unit Gaussian noise. Feature-major: a column per example.
  sprig::Matrix<float> x(32, batch);
  std::vector<int> labels(batch);
  std::mt19937 gen(7);
  std::normal_distribution<float> noise(0.0f, 1.0f);
  double accuracy = 0.0;
  for (std::int64_t t = 0; t < steps; ++t) {
    for (std::int64_t b = 0; b < batch; ++b) {
      labels[b] = static_cast<int>(gen() % 4);
      for (std::int64_t f = 0; f < 32; ++f) x(f, b) = noise(gen) + (f / 8 == labels[b] ? 1.0f : 0.0f);
    }
    const auto logits = model.forward(x);
    const float l = loss.forward_backward(logits, labels, model.output_grad());
    const double correct = sprig::SoftmaxCrossEntropy<float>::count_correct(logits, labels) / double(batch);
    accuracy = t == 0 ? correct : 0.9 * accuracy + 0.1 * correct;  // smoothed over the last ~10 batches
    model.backward();
    dst::apply_step(rigl, optimizer, model, t);  // an AdamW step, or on RigL's update steps a topology update
    if (t == 0 || (t + 1) % 150 == 0) std::printf("step %d: loss %.3f, accuracy %.3f\n", int(t + 1), l, accuracy);
  }
  std::printf("the model holds %lld bytes\n", static_cast<long long>(model.memory_bytes()));
  return accuracy > 0.85 ? 0 : 1;  // the run fails (and so its test) if the model did not learn
}
