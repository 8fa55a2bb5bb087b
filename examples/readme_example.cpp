#include <sprig/sprig.hpp>

#include <cstdio>
#include <vector>

int main() {
  // A 784 -> 512 layer at 90% sparsity. W is [outputs x inputs]; activations are
  // feature-major, [features x batch], so X holds a batch of 64 inputs as columns.
  auto W = sprig::PaddedCSR<float, std::int32_t>::random_density(512, 784, 0.10, /*seed=*/1);
  sprig::Matrix<float> X(784, 64, 0.5f), Y(512, 64), dY(512, 64, 0.01f), dX(784, 64);
  std::vector<float> grad(W.storage_size()), momentum(W.storage_size());  // per slot, aligned with W.values()
  sprig::TransposeCache<float, std::int32_t> cache;                       // W^T, rebuilt only when the topology changes

  auto train_step = [&] {
    sprig::spmm(W, X, Y);                            // forward:       Y  = W X
    sprig::sddmm(W, dY, X, std::span<float>(grad));  // weight grad:   dW = dY X^T, live slots only
    sprig::spmm(cache.get(W), dY, dX);               // input grad:    dX = W^T dY
    for (std::size_t s = 0; s < grad.size(); ++s) {  // SGD with momentum
      momentum[s] = 0.9f * momentum[s] + grad[s];
      W.values()[s] -= 0.01f * momentum[s];
    }
  };
  train_step();

  // Rewire in O(1) per weight: drop row 0's first weight, grow 24 free columns. That is more than
  // the row's padding holds, so the row moves to the end of storage and the slot count grows.
  // The SlotLog records every slot move; EVERY per-slot array must replay it (here grad and
  // momentum), or it no longer lines up with W.values() (sddmm rejects a grad of the old size).
  sprig::SlotLog log;
  const std::int64_t dropped = W.row(0).cols[0];
  W.erase(0, dropped, &log);
  for (std::int64_t c = 0, grown = 0; grown < 24; ++c)
    if (c != dropped && W.find(0, c) < 0) W.insert(0, c, 0.0f, &log), ++grown;
  log.apply(grad);
  log.apply(momentum);  // moved weights keep their momentum, the new ones start at 0
  W.check_invariants();
  train_step();  // the next step runs on the new topology

  std::printf("%lld live weights, %lld bytes (dense: %lld)\n", static_cast<long long>(W.nnz()),
              static_cast<long long>(W.memory_bytes()), static_cast<long long>(512 * 784 * sizeof(float)));
}
