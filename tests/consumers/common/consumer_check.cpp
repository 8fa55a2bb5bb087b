// The program every consumer test builds: PaddedCSR and the kernels, checked against plain
// loops. Inputs are small integers, so every product and sum is exact in float and the
// comparisons are exact.
#include <sprig/sprig.hpp>

#include <cstdint>
#include <cstdio>
#include <span>
#include <vector>

#ifndef SPRIG_CONSUMER_MODE
#  define SPRIG_CONSUMER_MODE "vendored include/"
#endif

// The package version (find_package) and the header's SPRIG_VERSION are one number.
#if defined(SPRIG_EXPECTED_VERSION_MAJOR)
static_assert(SPRIG_VERSION_MAJOR == SPRIG_EXPECTED_VERSION_MAJOR &&
                  SPRIG_VERSION_MINOR == SPRIG_EXPECTED_VERSION_MINOR &&
                  SPRIG_VERSION_PATCH == SPRIG_EXPECTED_VERSION_PATCH,
              "sprig/version.hpp disagrees with the CMake package version");
#endif
static_assert(SPRIG_VERSION == SPRIG_VERSION_MAJOR * 10000 + SPRIG_VERSION_MINOR * 100 + SPRIG_VERSION_PATCH);

int main() {
  constexpr std::int64_t M = 5, K = 7, B = 9;
  sprig::Matrix<float> dense(M, K), X(K, B), dY(M, B), Y(M, B, -1.0f);
  std::int64_t expected_nnz = 0;
  for (std::int64_t i = 0; i < M; ++i)
    for (std::int64_t c = 0; c < K; ++c) {
      const bool live = (3 * i + 5 * c) % 4 == 0;  // about a quarter of the positions
      dense(i, c) = live ? static_cast<float>(1 + (i + 2 * c) % 5) : 0.0f;
      expected_nnz += live;
    }
  for (std::int64_t c = 0; c < K; ++c)
    for (std::int64_t b = 0; b < B; ++b) X(c, b) = static_cast<float>((c * 3 + b) % 7 - 3);
  for (std::int64_t i = 0; i < M; ++i)
    for (std::int64_t b = 0; b < B; ++b) dY(i, b) = static_cast<float>((i + 2 * b) % 5 - 2);

  auto W = sprig::PaddedCSR<float, std::int32_t>::from_dense(dense.view());
  W.insert(0, 1, 2.0f);  // a structural change: (0, 1) is not live in the pattern above
  dense(0, 1) = 2.0f;
  ++expected_nnz;
  W.check_invariants();
  int failures = 0;
  if (W.nnz() != expected_nnz) {
    std::printf("nnz %lld, expected %lld\n", static_cast<long long>(W.nnz()), static_cast<long long>(expected_nnz));
    ++failures;
  }

  // Forward: Y = W X (overwrite must ignore the -1s already in Y).
  sprig::spmm(W, X.view(), Y.view());
  for (std::int64_t i = 0; i < M; ++i)
    for (std::int64_t b = 0; b < B; ++b) {
      float want = 0.0f;
      for (std::int64_t c = 0; c < K; ++c) want += dense(i, c) * X(c, b);
      if (Y(i, b) != want) {
        std::printf("spmm Y(%lld, %lld) = %g, expected %g\n", static_cast<long long>(i), static_cast<long long>(b),
                    static_cast<double>(Y(i, b)), static_cast<double>(want));
        ++failures;
      }
    }

  // Weight gradient at live slots: grad[s] = dot(dY[i,:], X[c,:]).
  std::vector<float> grad(static_cast<std::size_t>(W.storage_size()), -1.0f);
  sprig::sddmm(W, dY.view(), X.view(), std::span<float>(grad));
  W.for_each_live([&](std::int64_t i, std::int64_t c, float, std::int64_t s) {
    float want = 0.0f;
    for (std::int64_t b = 0; b < B; ++b) want += dY(i, b) * X(c, b);
    if (grad[static_cast<std::size_t>(s)] != want) {
      std::printf("sddmm at (%lld, %lld) = %g, expected %g\n", static_cast<long long>(i), static_cast<long long>(c),
                  static_cast<double>(grad[static_cast<std::size_t>(s)]), static_cast<double>(want));
      ++failures;
    }
  });

  std::printf("sprig consumer (%s): nnz %lld of %lld, %lld bytes, %s\n", SPRIG_CONSUMER_MODE,
              static_cast<long long>(W.nnz()), static_cast<long long>(M * K), static_cast<long long>(W.memory_bytes()),
              failures == 0 ? "all checks passed" : "FAILED");
  return failures == 0 ? 0 : 1;
}
