// bf16_gemm on every path this CPU runs, against a reference summed in double from the same
// bf16 inputs. A path the CPU (or OS, or build) lacks is reported with WARN as not run; no
// assertion stands in for it.
//
// Tolerance: each path forms the exact products a b (bf16 x bf16 fits a float's 24 bits) and
// adds them, and in accumulate mode C's old value, in float: n = K + 1 terms summed in any order
// (any summation tree has depth <= n - 1) give |computed - exact| <= gamma_{K} * S <=
// gamma_{K+1} * S with S = |c| + sum_k |a b| and gamma_n = n u / (1 - n u), u = 2^-24
// (Higham, Accuracy and Stability, 2nd ed., 4.2). The test asserts gamma_{K+1} * S; two paths
// therefore agree to 2 gamma_{K+1} S. Inputs are drawn from [-2, 2] rounded to bf16 and kept
// away from zero's subnormal range, where the fast paths flush to zero (the header's contract).
#include <sprig/kernels/bf16_gemm.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "with_threads.hpp"

#if SPRIG_HAS_OPENMP
#  include <omp.h>
#endif

using sprig::Bf16GemmPath;
using sprig::bfloat16;
using sprig::ConstMatrixView;
using sprig::MatrixView;
using sprig::Update;

namespace {

constexpr Bf16GemmPath kPaths[] = {Bf16GemmPath::portable, Bf16GemmPath::avx512_bf16, Bf16GemmPath::amx};

double gamma_of(std::int64_t n) {
  const double u = std::ldexp(1.0, -24);
  return static_cast<double>(n) * u / (1.0 - static_cast<double>(n) * u);
}

// A rows x cols matrix inside a larger buffer: row stride cols + pad, starting `pad` elements
// in, so views are strided and unaligned.
template <class T>
struct Strided {
  std::vector<T> buf;
  std::int64_t rows, cols, stride, offset;
  Strided(std::int64_t r, std::int64_t c, std::int64_t pad, T fill)
      : buf(static_cast<std::size_t>(r * (c + pad) + pad + 1), fill), rows(r), cols(c), stride(c + pad), offset(pad) {}
  T* data() { return buf.data() + offset; }
  MatrixView<T> view() { return {data(), rows, cols, stride}; }
  ConstMatrixView<T> cview() { return {data(), rows, cols, stride}; }
  T& at(std::int64_t i, std::int64_t j) { return data()[i * stride + j]; }
};

bfloat16 random_bf16(std::mt19937& rng) {
  std::uniform_real_distribution<float> d(-2.0f, 2.0f);
  return bfloat16(d(rng));
}

void fill_random(Strided<bfloat16>& m, std::mt19937& rng) {
  for (std::int64_t i = 0; i < m.rows; ++i)
    for (std::int64_t j = 0; j < m.cols; ++j) m.at(i, j) = random_bf16(rng);
}

struct Problem {
  std::int64_t M, N, K;
  Strided<bfloat16> A, B;
  Strided<float> C0;  // C's value before an accumulate call
  Problem(std::int64_t m, std::int64_t n, std::int64_t k, std::uint32_t seed)
      : M(m), N(n), K(k), A(m, k, 3, bfloat16{}), B(k, n, 5, bfloat16{}), C0(m, n, 7, 0.0f) {
    std::mt19937 rng(seed);
    fill_random(A, rng);
    fill_random(B, rng);
    std::uniform_real_distribution<float> d(-4.0f, 4.0f);
    for (std::int64_t i = 0; i < M; ++i)
      for (std::int64_t j = 0; j < N; ++j) C0.at(i, j) = d(rng);
  }

  // C on `path` in `update` mode, starting from C0 (accumulate) or NaN (overwrite: must not be read).
  Strided<float> run(Bf16GemmPath path, Update update) {
    Strided<float> C = C0;
    if (update == Update::overwrite)
      for (std::int64_t i = 0; i < M; ++i)
        for (std::int64_t j = 0; j < N; ++j) C.at(i, j) = std::numeric_limits<float>::quiet_NaN();
    sprig::bf16_gemm(A.cview(), B.cview(), C.view(), update, path);
    return C;
  }

  // The worst |C - exact| / (gamma_{K+1} S) over all entries (<= 1 passes), and whether the
  // padding around C's rows was left alone.
  double worst_ratio(Strided<float>& C, Update update) {
    double worst = 0;
    for (std::int64_t i = 0; i < M; ++i)
      for (std::int64_t j = 0; j < N; ++j) {
        double exact = update == Update::accumulate ? C0.at(i, j) : 0.0;
        double s = std::fabs(exact);
        for (std::int64_t k = 0; k < K; ++k) {
          const double p = static_cast<double>(static_cast<float>(A.at(i, k))) * static_cast<float>(B.at(k, j));
          exact += p;
          s += std::fabs(p);
        }
        const double err = std::fabs(static_cast<double>(C.at(i, j)) - exact);
        const double bound = gamma_of(K + 1) * s;
        const double ratio = bound > 0 ? err / bound : (err == 0 ? 0.0 : std::numeric_limits<double>::infinity());
        if (!(ratio <= worst)) worst = std::isnan(ratio) ? std::numeric_limits<double>::infinity() : ratio;
      }
    return worst;
  }
};

bool padding_untouched(Strided<float>& C, Strided<float>& C0) {
  for (std::int64_t i = 0; i < C.rows; ++i)
    for (std::int64_t j = C.cols; j < C.stride && i * C.stride + j + C.offset < (std::int64_t)C.buf.size(); ++j)
      if (std::memcmp(&C.at(i, j), &C0.at(i, j), sizeof(float)) != 0) return false;
  return std::memcmp(C.buf.data(), C0.buf.data(), sizeof(float) * C.offset) == 0;
}

bool same_bits(Strided<float>& x, Strided<float>& y) {
  for (std::int64_t i = 0; i < x.rows; ++i)
    if (std::memcmp(x.data() + i * x.stride, y.data() + i * y.stride, sizeof(float) * x.cols) != 0) return false;
  return true;
}

// WARNs, once per test case, that `path` was not run here and why; true when it runs.
bool runs_here(Bf16GemmPath path) {
  if (sprig::bf16_gemm_available(path)) return true;
  WARN("bf16_gemm " << sprig::path_name(path) << " path NOT RUN here: " << sprig::bf16_gemm_unavailable_reason(path));
  return false;
}

constexpr std::int64_t kSizes[] = {1, 15, 17, 33, 100};
// 1100: more than one of the AMX path's K blocks (at most 1024 k each by default).
constexpr std::int64_t kDepths[] = {1, 2, 15, 17, 32, 33, 64, 100, 1100};

void check_path_against_reference(Bf16GemmPath path) {
  std::uint32_t seed = 1;
  for (const std::int64_t M : kSizes)
    for (const std::int64_t N : kSizes)
      for (const std::int64_t K : kDepths)
        for (const Update update : {Update::overwrite, Update::accumulate}) {
          Problem pr(M, N, K, seed++);
          auto C = pr.run(path, update);
          const double worst = pr.worst_ratio(C, update);
          INFO(sprig::path_name(path) << " M " << M << " N " << N << " K " << K << " "
                                      << (update == Update::overwrite ? "overwrite" : "accumulate")
                                      << ": worst |err| / (gamma_{K+1} S) = " << worst);
          CHECK(worst <= 1.0);
          CHECK(padding_untouched(C, pr.C0));
        }
}

}  // namespace

TEST_CASE("bf16_gemm names its paths and picks the fastest available") {
  CHECK(std::string(sprig::path_name(Bf16GemmPath::portable)) == "portable");
  CHECK(std::string(sprig::path_name(Bf16GemmPath::avx512_bf16)) == "avx512_bf16");
  CHECK(std::string(sprig::path_name(Bf16GemmPath::amx)) == "amx");
  CHECK(sprig::bf16_gemm_available(Bf16GemmPath::portable));
  CHECK(sprig::bf16_gemm_unavailable_reason(Bf16GemmPath::portable).empty());
  const Bf16GemmPath best = sprig::bf16_gemm_path();
  CHECK(sprig::bf16_gemm_available(best));
  for (const Bf16GemmPath p : kPaths)
    if (p > best) CHECK_FALSE(sprig::bf16_gemm_available(p));
  for (const Bf16GemmPath p : kPaths)
    if (!sprig::bf16_gemm_available(p)) CHECK_FALSE(sprig::bf16_gemm_unavailable_reason(p).empty());
  WARN("bf16_gemm takes the " << sprig::path_name(best) << " path on this machine");
#if !defined(__x86_64__)
  CHECK(best == Bf16GemmPath::portable);
#endif
}

TEST_CASE("bf16_gemm portable path matches the reference on odd shapes, both modes") {
  check_path_against_reference(Bf16GemmPath::portable);
}

TEST_CASE("bf16_gemm AVX512-BF16 path matches the reference on odd shapes, both modes") {
  if (runs_here(Bf16GemmPath::avx512_bf16)) check_path_against_reference(Bf16GemmPath::avx512_bf16);
}

TEST_CASE("bf16_gemm AMX path matches the reference on odd shapes, both modes") {
  if (runs_here(Bf16GemmPath::amx)) check_path_against_reference(Bf16GemmPath::amx);
}

TEST_CASE("bf16_gemm fast paths agree with the portable path on the same inputs") {
  for (const Bf16GemmPath path : {Bf16GemmPath::avx512_bf16, Bf16GemmPath::amx}) {
    if (!runs_here(path)) continue;
    for (const auto& [M, N, K] :
         {std::array<std::int64_t, 3>{100, 130, 97}, {33, 17, 300}, {64, 64, 64}, {47, 70, 1100}}) {
      for (const Update update : {Update::overwrite, Update::accumulate}) {
        Problem pr(M, N, K, 77);
        auto fast = pr.run(path, update);
        auto slow = pr.run(Bf16GemmPath::portable, update);
        double worst = 0;
        for (std::int64_t i = 0; i < M; ++i)
          for (std::int64_t j = 0; j < N; ++j) {
            double s = update == Update::accumulate ? std::fabs(pr.C0.at(i, j)) : 0.0;
            for (std::int64_t k = 0; k < K; ++k)
              s +=
                  std::fabs(static_cast<double>(static_cast<float>(pr.A.at(i, k))) * static_cast<float>(pr.B.at(k, j)));
            const double diff = std::fabs(static_cast<double>(fast.at(i, j)) - slow.at(i, j));
            worst = std::max(worst, diff / (2 * gamma_of(K + 1) * s));
          }
        INFO(sprig::path_name(path) << " vs portable, M " << M << " N " << N << " K " << K
                                    << ": worst |fast - portable| / (2 gamma_{K+1} S) = " << worst);
        CHECK(worst <= 1.0);
      }
    }
  }
}

TEST_CASE("bf16_gemm gives the same bits on 1, 2 and all cores' threads, on every path it runs") {
  // 2, and the machine's core count where that is more (at most 16).
  std::vector<int> counts = {2};
#if SPRIG_HAS_OPENMP
  if (const int procs = std::min(16, omp_get_num_procs()); procs > 2) counts.push_back(procs);
#endif
  for (const Bf16GemmPath path : kPaths) {
    if (!runs_here(path)) continue;
    for (const Update update : {Update::overwrite, Update::accumulate}) {
      // M N K well above kParallelMinWork, so the threads do split the work.
      for (const auto& [M, N, K] : {std::array<std::int64_t, 3>{100, 130, 97}, {70, 90, 1100}}) {
        Problem pr(M, N, K, 5);
        Strided<float> one = pr.C0;
        sprig_test::with_threads(1, [&] { one = pr.run(path, update); });
        for (const int threads : counts) {
          Strided<float> many = pr.C0;
          sprig_test::with_threads(threads, [&] { many = pr.run(path, update); });
          INFO(sprig::path_name(path) << " M " << M << " N " << N << " K " << K << ", 1 vs " << threads << " threads");
          CHECK(same_bits(one, many));
        }
      }
    }
  }
}

TEST_CASE("bf16_gemm without a path takes bf16_gemm_path()") {
  Problem pr(40, 50, 60, 9);
  auto forced = pr.run(sprig::bf16_gemm_path(), Update::overwrite);
  Strided<float> C = pr.C0;
  sprig::bf16_gemm(pr.A.cview(), pr.B.cview(), C.view());
  CHECK(same_bits(C, forced));
}

TEST_CASE("bf16_gemm with K = 0 zeroes C or leaves it, and empty outputs are no-ops") {
  for (const Bf16GemmPath path : kPaths) {
    if (!runs_here(path)) continue;
    std::vector<bfloat16> none;
    std::vector<float> c(12, 3.0f);
    sprig::bf16_gemm(ConstMatrixView<bfloat16>(none.data(), 3, 0), ConstMatrixView<bfloat16>(none.data(), 0, 4),
                     MatrixView<float>(c.data(), 3, 4), Update::accumulate, path);
    CHECK(c == std::vector<float>(12, 3.0f));
    sprig::bf16_gemm(ConstMatrixView<bfloat16>(none.data(), 3, 0), ConstMatrixView<bfloat16>(none.data(), 0, 4),
                     MatrixView<float>(c.data(), 3, 4), Update::overwrite, path);
    CHECK(c == std::vector<float>(12, 0.0f));
    std::vector<bfloat16> b(20, bfloat16(1.0f));
    sprig::bf16_gemm(ConstMatrixView<bfloat16>(none.data(), 0, 5), ConstMatrixView<bfloat16>(b.data(), 5, 4),
                     MatrixView<float>(c.data(), 0, 4), Update::overwrite, path);
  }
}

TEST_CASE("bf16_gemm propagates NaN and infinity from its inputs") {
  for (const Bf16GemmPath path : kPaths) {
    if (!runs_here(path)) continue;
    Problem pr(20, 20, 40, 11);
    pr.A.at(3, 7) = bfloat16(std::numeric_limits<float>::quiet_NaN());
    pr.B.at(9, 5) = bfloat16(std::numeric_limits<float>::infinity());
    pr.A.at(4, 9) = bfloat16(1.0f);
    auto C = pr.run(path, Update::overwrite);
    INFO(sprig::path_name(path));
    for (std::int64_t j = 0; j < 20; ++j) CHECK(std::isnan(C.at(3, j)));
    CHECK(std::isinf(C.at(4, 5)));
    CHECK(std::isfinite(C.at(5, 4)));
  }
}

TEST_CASE("bf16_gemm checks shapes, overlap and the requested path") {
  std::vector<bfloat16> a(12), b(20);
  std::vector<float> c(20);
  const ConstMatrixView<bfloat16> A(a.data(), 3, 4), B(b.data(), 4, 5);
  CHECK_THROWS_AS(sprig::bf16_gemm(A, ConstMatrixView<bfloat16>(b.data(), 5, 4), MatrixView<float>(c.data(), 3, 4)),
                  sprig::ShapeError);
  CHECK_THROWS_AS(sprig::bf16_gemm(A, B, MatrixView<float>(c.data(), 4, 5)), sprig::ShapeError);
  CHECK_THROWS_AS(sprig::bf16_gemm(A, B, MatrixView<float>(c.data(), 3, 4)), sprig::ShapeError);
  // C over A's bytes.
  CHECK_THROWS_AS(sprig::bf16_gemm(ConstMatrixView<bfloat16>(reinterpret_cast<bfloat16*>(c.data()), 3, 4), B,
                                   MatrixView<float>(c.data(), 3, 5)),
                  sprig::ArgumentError);
  for (const Bf16GemmPath p : kPaths)
    if (!sprig::bf16_gemm_available(p))
      CHECK_THROWS_AS(sprig::bf16_gemm(A, B, MatrixView<float>(c.data(), 3, 5), Update::overwrite, p),
                      sprig::ArgumentError);
}

TEST_CASE("bf16_gemm in the caller's workspace: the same bits, and a short or misaligned one throws") {
  for (const Bf16GemmPath path : kPaths) {
    if (!runs_here(path)) continue;
    INFO(sprig::path_name(path));
    for (const auto& [M, N, K] : {std::tuple{1, 1, 1}, {17, 33, 15}, {40, 50, 1100}, {100, 17, 33}}) {
      Problem pr(M, N, K, static_cast<std::uint32_t>(M + N + K));
      const std::int64_t need = sprig::bf16_gemm_workspace_size(M, K, N, path);
      CHECK(need > 0);
      // a workspace of garbage, one element longer than needed, used twice: the same bits as an own one
      sprig::AlignedVector<bfloat16> ws(static_cast<std::size_t>(need + 1), bfloat16(std::nanf("")));
      for (const Update update : {Update::overwrite, Update::accumulate}) {
        auto own = pr.run(path, update);
        for (int again = 0; again < 2; ++again) {
          Strided<float> C = pr.C0;
          sprig::bf16_gemm(pr.A.cview(), pr.B.cview(), C.view(), update, path, std::span<bfloat16>(ws));
          CHECK(same_bits(C, own));
        }
      }
      Strided<float> C = pr.C0;
      CHECK_THROWS_WITH(sprig::bf16_gemm(pr.A.cview(), pr.B.cview(), C.view(), Update::overwrite, path,
                                         std::span<bfloat16>(ws.data(), static_cast<std::size_t>(need - 1))),
                        Catch::Contains("needs " + std::to_string(need)));
      CHECK_THROWS_WITH(sprig::bf16_gemm(pr.A.cview(), pr.B.cview(), C.view(), Update::overwrite, path,
                                         std::span<bfloat16>(ws.data() + 1, static_cast<std::size_t>(need))),
                        Catch::Contains("off a 64-byte boundary"));
    }
    CHECK(sprig::bf16_gemm_workspace_size(0, 5, 5, path) == 0);
  }
}
