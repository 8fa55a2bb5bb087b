#include <sprig/sprig.hpp>

#include <cstdio>
#include <vector>

int main() {
  // A 784 -> 512 layer at 90% sparsity. W is [outputs x inputs]; activations are
  // feature-major, [features x batch], so X holds a batch of 64 inputs as columns.
  auto W = sprig::PaddedCSR<float, std::int32_t>::random_density(512, 784, 0.10, /*seed=*/1);
  sprig::Matrix<float> X(784, 64, 0.5f), Y(512, 64), dY(512, 64, 0.01f), dX(784, 64);
  std::vector<float> grad(W.storage_size()), momentum(W.storage_size());  // per slot

  sprig::spmm(W, X, Y);                              // forward:       Y  = W X
  sprig::sddmm(W, dY, X, std::span<float>(grad));    // weight grad:   dW = dY X^T, live slots only
  sprig::TransposeCache<float, std::int32_t> cache;  // W^T, rebuilt only when the topology changes
  sprig::spmm(cache.get(W), dY, dX);                 // input grad:    dX = W^T dY
  for (std::size_t s = 0; s < grad.size(); ++s) {    // SGD with momentum
    momentum[s] = 0.9f * momentum[s] + grad[s];
    W.values()[s] -= 0.01f * momentum[s];
  }

  // Rewire in O(1): drop row 0's first weight, grow a free column; the optimizer state follows.
  sprig::SlotLog log;
  W.erase(0, W.row(0).cols[0], &log);
  std::int64_t free_col = 0;
  while (W.find(0, free_col) >= 0) ++free_col;
  W.insert(0, free_col, 0.0f, &log);
  log.apply(momentum);  // moved weights keep their momentum, the new one starts at 0
  W.check_invariants();
  std::printf("%lld live weights, %lld bytes (dense: %lld)\n", static_cast<long long>(W.nnz()),
              static_cast<long long>(W.memory_bytes()), static_cast<long long>(512 * 784 * sizeof(float)));
}
