#include <sprig/dist/mpi_communicator.hpp>
#include <sprig/sprig.hpp>

#include <cstdio>
#include <random>
#include <vector>

// mpirun -np 4 readme_distributed: the model of the loop above, trained data parallel.
int main(int argc, char** argv) {
  namespace dst = sprig::dst;
  sprig::dist::MpiSession mpi(argc, argv);  // MPI_Init ... MPI_Finalize
  sprig::dist::MpiCommunicator world;       // the ranks mpirun started
  auto model = sprig::models::build_mlp<float, std::int32_t>(
      {.widths = {32, 256, 256, 4}, .sparsity = 0.9, .seed = 1, .growth_reserve = 0.125});  // the same on every rank
  const std::int64_t steps = 600, batch = 128;                                              // batch: the global batch
  const sprig::dist::Shard mine = sprig::dist::shard(batch, world);                         // this rank's share of it
  sprig::AdamW<float> optimizer({.lr = 3e-3});
  dst::RigL<float, std::int32_t> rigl(dst::UpdateSchedule::for_run(steps, /*delta_t=*/50), /*seed=*/1);
  sprig::SoftmaxCrossEntropy<float> loss;
  sprig::dist::DataParallel dp(world, model);  // throws unless every rank holds the same topology

  sprig::Matrix<float> x(32, mine.size);
  std::vector<int> labels(mine.size);
  std::mt19937 gen(7 + world.rank());  // each rank draws its own examples
  std::normal_distribution<float> noise(0.0f, 1.0f);
  double accuracy = 0.0;
  for (std::int64_t t = 0; t < steps; ++t) {
    for (std::int64_t b = 0; b < mine.size; ++b) {
      labels[b] = static_cast<int>(gen() % 4);
      for (std::int64_t f = 0; f < 32; ++f) x(f, b) = noise(gen) + (f / 8 == labels[b] ? 1.0f : 0.0f);
    }
    const auto logits = model.forward(x);
    loss.forward_backward(logits, labels, model.output_grad());  // the mean over this rank's columns
    const double correct = dp.sum(sprig::SoftmaxCrossEntropy<float>::count_correct(logits, labels)) / double(batch);
    accuracy = t == 0 ? correct : 0.9 * accuracy + 0.1 * correct;
    dp.backward();                      // backward, then every gradient averaged over the ranks
    dp.apply_step(rigl, optimizer, t);  // the same step on every rank; RigL grows by the global batch's gradient
  }
  if (world.rank() == 0)
    std::printf("%d ranks: accuracy %.3f, %.1f ms of the run waiting for gradient sums\n", world.size(), accuracy,
                1e3 * dp.stats().gradient_wait_seconds);
  return accuracy > 0.85 ? 0 : 1;
}
