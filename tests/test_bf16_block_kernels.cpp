// tests/test_bf16_block_kernels.cpp — sprig::bf16_block_spmm, bf16_block_spmm_transposed,
// bf16_block_sddmm and refresh_bf16_values on BlockPaddedCSR<float>: each against a double
// reference computed from the bf16-rounded operands (rounded here with sprig::bfloat16, not
// with the code under test), within gamma_{n} * sum |products| (n the terms plus a few for the
// float additions); block shapes 8x8, 4x4, 16x1 and 1x4; M, K, B not multiples of the block or
// the SIMD width; an empty and a full block row; padding and dead slots (erase and insert);
// strided operands; overwrite and accumulate; bitwise identical results for 1 and 2 threads;
// shape and overlap errors. Every path that runs here (Bf16BlockPath: portable, avx512_bf16,
// amx, also on 16x16 blocks, a tile of 16 rows, and on cases that read dY or X in place) is
// checked against the reference and against the portable path on the same inputs (within
// twice the bound: they sum in different orders); a path the build or the CPU lacks is
// reported with WARN as NOT RUN, never passed.
#include "sprig/kernels/bf16_block_kernels.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "sprig/core/block_padded_csr.hpp"
#include "sprig/core/rng.hpp"
#include "with_threads.hpp"

using namespace sprig;

namespace {

// gamma_n = n u / (1 - n u), u = 2^-24: the float summation bound.
double gamma(std::int64_t n) {
  const double u = std::ldexp(1.0, -24);
  return static_cast<double>(n) * u / (1.0 - static_cast<double>(n) * u);
}

// A bf16 matrix rows x cols with row stride `stride` (>= cols; the gap holds NaN, which no
// kernel may read), values uniform in [-2, 2) rounded to bf16.
struct Bf16Matrix {
  std::int64_t rows = 0, cols = 0, stride = 0;
  std::vector<bfloat16> data;
  Bf16Matrix(std::int64_t r, std::int64_t c, std::int64_t gap, CounterRng& rng)
      : rows(r), cols(c), stride(c + gap), data(static_cast<std::size_t>(r * (c + gap) + 1)) {
    for (auto& v : data) v = bfloat16(std::numeric_limits<float>::quiet_NaN());
    for (std::int64_t i = 0; i < r; ++i)
      for (std::int64_t j = 0; j < c; ++j) at(i, j) = bfloat16(static_cast<float>(rng.uniform(-2.0, 2.0)));
  }
  bfloat16& at(std::int64_t i, std::int64_t j) { return data[static_cast<std::size_t>(i * stride + j)]; }
  double operator()(std::int64_t i, std::int64_t j) const {
    return static_cast<double>(static_cast<float>(data[static_cast<std::size_t>(i * stride + j)]));
  }
  ConstMatrixView<bfloat16> view() const { return {data.data(), rows, cols, stride}; }
};

// One case: M x K in R x C blocks, batch B; block row 0 empty, block row 1 full (where the
// matrix has them), the others live with probability `density`; then one block erased and
// blocks inserted into the last block row (padding, and a relocation's dead slots).
struct Case {
  std::int64_t M, K, B;
  double density;
  std::int64_t gap;  // operand row stride - cols
  std::uint64_t seed;
};

template <int R, int C>
BlockPaddedCSR<float, std::int32_t, R, C> case_matrix(const Case& c) {
  CounterRng rng(c.seed, 0xB1F);
  Matrix<float> dense(c.M, c.K, 0.0f);
  const std::int64_t br = (c.M + R - 1) / R, bc = (c.K + C - 1) / C;
  for (std::int64_t bi = 0; bi < br; ++bi)
    for (std::int64_t bj = 0; bj < bc; ++bj) {
      if (bi == 0 && br > 1) continue;
      if (bi != 1 && rng.uniform01() >= c.density) continue;
      for (std::int64_t r = 0; r < R && bi * R + r < c.M; ++r)
        for (std::int64_t k = 0; k < C && bj * C + k < c.K; ++k)
          dense(bi * R + r, bj * C + k) = static_cast<float>(0.25 + rng.uniform01());
    }
  auto W = BlockPaddedCSR<float, std::int32_t, R, C>::from_dense(dense.view());
  const auto& P = W.pattern();
  const std::int64_t last = P.rows() - 1;
  if (last >= 2 && P.row_nnz(last) > 0) REQUIRE(W.erase_block(last, P.col_indices()[P.row_start(last)]));
  if (last >= 2)
    for (std::int64_t bj = 0; bj < P.cols(); bj += 2)
      if (W.find_block(last, bj) < 0) {
        std::vector<float> v(static_cast<std::size_t>(R * C), 0.0f);
        for (std::int64_t r = 0; r < R && last * R + r < c.M; ++r)
          for (std::int64_t k = 0; k < C && bj * C + k < c.K; ++k)
            v[static_cast<std::size_t>(r * C + k)] = static_cast<float>(rng.uniform(-1.0, 1.0));
        W.insert_block(last, bj, std::span<const float>(v));
      }
  return W;
}

std::vector<Case> cases() {
  return {
      {37, 45, 53, 0.3, 3, 1},   // nothing a multiple of a block or a register
      {64, 64, 64, 0.2, 0, 2},   // whole blocks, whole registers: read in place
      {17, 9, 1, 0.5, 0, 3},     // batch 1
      {29, 71, 131, 0.15, 1, 4}, // several registers, a tail
      {9, 23, 200, 0.4, 5, 5},   // wide batch: several panels
      {8, 8, 7, 1.0, 0, 6},      // a single block row
      {3, 5, 17, 1.0, 2, 7},     // smaller than one block
  };
}

// Outputs of more than 4 MiB (SPRIG_BF16_BLOCK_AMX_STREAM_BYTES: the amx forward's streaming
// stores), Y row strides a multiple of 64 bytes and not.
std::vector<Case> large_cases() {
  static_assert(SPRIG_BF16_BLOCK_AMX_STREAM_BYTES <= 1100 * 1040 * 4);
  return {{1100, 24, 1040, 0.3, 0, 8}, {1030, 19, 1070, 0.2, 16, 9}};
}

// The amx weight gradient reads dY (X where K > M) in place where its rows are whole blocks and
// B whole chunks of 32 columns: strided and not, one chunk and several, both operands.
std::vector<Case> whole_chunk_cases() {
  return {{48, 40, 96, 0.3, 5, 10}, {32, 50, 32, 0.5, 0, 11}, {24, 64, 64, 0.4, 3, 12}};
}

// The bf16 shadow of W's values, rounded here (sprig::bfloat16's constructor).
template <int R, int C>
std::vector<bfloat16> shadow_of(const BlockPaddedCSR<float, std::int32_t, R, C>& W) {
  std::vector<bfloat16> s(W.values().size());
  for (std::size_t k = 0; k < s.size(); ++k) s[k] = bfloat16(W.values()[k]);
  return s;
}

// For every (output row, batch column): the double sum, sum |products| and the term count.
struct Reference {
  std::int64_t rows, cols;
  std::vector<double> sum, abs;
  std::vector<std::int64_t> terms;
  Reference(std::int64_t r, std::int64_t c)
      : rows(r), cols(c), sum(std::size_t(r * c)), abs(std::size_t(r * c)), terms(std::size_t(r * c)) {}
  void add(std::int64_t i, std::int64_t b, double p) {
    const auto k = static_cast<std::size_t>(i * cols + b);
    sum[k] += p;
    abs[k] += std::fabs(p);
    ++terms[k];
  }
};

// WARNs that `path` does not run `kernel` on R x C blocks here and why; true when it runs.
template <int R, int C>
bool runs_here(Bf16BlockKernel kernel, Bf16BlockPath path) {
  const std::string why = bf16_block_unavailable_reason<R, C>(kernel, path);
  if (why.empty()) return true;
  static const char* names[] = {"bf16_block_spmm", "bf16_block_spmm_transposed", "bf16_block_sddmm"};
  WARN(names[int(kernel)] << " " << path_name(path) << " path on " << R << "x" << C << " blocks NOT RUN here: " << why);
  return false;
}

// |a - b| <= 2 gamma_n S for each element: two paths' sums, each within gamma_n S of exact.
void check_paths_agree(const Reference& ref, const std::vector<float>& a, const std::vector<float>& b, std::int64_t ld,
                       const std::vector<float>* y0) {
  std::int64_t bad = 0;
  for (std::int64_t i = 0; i < ref.rows; ++i)
    for (std::int64_t j = 0; j < ref.cols; ++j) {
      const auto k = static_cast<std::size_t>(i * ref.cols + j), e = static_cast<std::size_t>(i * ld + j);
      const double S = ref.abs[k] + (y0 ? std::fabs(double((*y0)[e])) : 0.0);
      if (!(std::fabs(double(a[e]) - double(b[e])) <= 2 * gamma(ref.terms[k] + 3) * S) && bad++ < 5)
        FAIL_CHECK("paths differ at (" << i << ", " << j << "): " << a[e] << " vs portable " << b[e]);
    }
  CHECK(bad == 0);
}

// The products W X (transposed: W^T dY) from the shadow and the bf16 input, in double.
template <int R, int C>
Reference product_reference(const BlockPaddedCSR<float, std::int32_t, R, C>& W, const std::vector<bfloat16>& shadow,
                            const Bf16Matrix& in, bool transposed) {
  Reference ref(transposed ? W.cols() : W.rows(), in.cols);
  W.for_each_block([&](std::int64_t bi, std::int64_t bj, std::int64_t s, const float*) {
    for (std::int64_t r = 0; r < R && bi * R + r < W.rows(); ++r)
      for (std::int64_t c = 0; c < C && bj * C + c < W.cols(); ++c) {
        const double w = static_cast<float>(shadow[static_cast<std::size_t>(s * R * C + r * C + c)]);
        const std::int64_t i = bi * R + r, k = bj * C + c;
        for (std::int64_t b = 0; b < in.cols; ++b) {
          if (transposed)
            ref.add(k, b, w * in(i, b));
          else
            ref.add(i, b, w * in(k, b));
        }
      }
  });
  return ref;
}

// got (rows x B, stride ld) against the reference; y0 the old output in accumulate mode.
void check_against(const Reference& ref, const std::vector<float>& got, std::int64_t ld, const std::vector<float>* y0) {
  std::int64_t bad = 0;
  for (std::int64_t i = 0; i < ref.rows; ++i)
    for (std::int64_t b = 0; b < ref.cols; ++b) {
      const auto k = static_cast<std::size_t>(i * ref.cols + b);
      double want = ref.sum[k], S = ref.abs[k];
      std::int64_t n = ref.terms[k] + 2;
      if (y0) {
        const double old = (*y0)[static_cast<std::size_t>(i * ld + b)];
        want += old;
        S += std::fabs(old);
        ++n;
      }
      const double g = got[static_cast<std::size_t>(i * ld + b)];
      if (!(std::fabs(g - want) <= gamma(n) * S) && bad++ < 5)
        FAIL_CHECK("output (" << i << ", " << b << ") = " << g << ", want " << want << " (n " << n << ", S " << S
                              << ")");
    }
  CHECK(bad == 0);
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Y (overwrite and accumulate) and dX for one block shape over every case; 1 and 2 threads.
template <int R, int C>
void check_products(Bf16BlockPath path, const std::vector<Case>& which = cases()) {
  const bool fwd = runs_here<R, C>(Bf16BlockKernel::spmm, path);
  const bool bwd = runs_here<R, C>(Bf16BlockKernel::spmm_transposed, path);
  if (!fwd && !bwd) return;
  for (const Case& c : which) {
    INFO(R << "x" << C << " blocks, " << path_name(path) << " path, M=" << c.M << " K=" << c.K << " B=" << c.B << " seed=" << c.seed);
    const auto W = case_matrix<R, C>(c);
    const auto shadow = shadow_of(W);
    std::vector<bfloat16> refreshed(shadow.size());
    refresh_bf16_values(W, std::span<bfloat16>(refreshed));
    CHECK(std::memcmp(refreshed.data(), shadow.data(), shadow.size() * sizeof(bfloat16)) == 0);
    CounterRng rng(c.seed, 0xDA7A);
    const Bf16Matrix X(c.K, c.B, c.gap, rng), dY(c.M, c.B, c.gap, rng);
    const std::span<const bfloat16> vals(shadow);
    for (const Update mode : {Update::overwrite, Update::accumulate}) {
      INFO((mode == Update::overwrite ? "overwrite" : "accumulate"));
      const std::int64_t ldy = c.B + 1, ldx = c.B + 2;
      std::vector<float> y0(static_cast<std::size_t>(c.M * ldy)), dx0(static_cast<std::size_t>(c.K * ldx));
      for (auto& v : y0) v = mode == Update::overwrite ? std::numeric_limits<float>::quiet_NaN() : float(rng.uniform01());
      for (auto& v : dx0) v = mode == Update::overwrite ? std::numeric_limits<float>::quiet_NaN() : float(rng.uniform01());
      // [0], [1]: `path` on 1 and 2 threads; [2]: the portable path.
      std::vector<float> y[3], dx[3];
      for (int t = 0; t < 3; ++t)
        sprig_test::with_threads(t == 1 ? 2 : 1, [&] {
          const Bf16BlockPath p = t == 2 ? Bf16BlockPath::portable : path;
          y[t] = y0;
          dx[t] = dx0;
          KernelWorkspace<float> ws;
          TransposeCache<float, std::int32_t> cache;
          if (fwd) bf16_block_spmm(W, vals, X.view(), MatrixView<float>(y[t].data(), c.M, c.B, ldy), ws, mode, p);
          if (bwd)
            bf16_block_spmm_transposed(W, vals, cache, dY.view(), MatrixView<float>(dx[t].data(), c.K, c.B, ldx), ws,
                                       mode, p);
        });
      // `path` on 2 threads again with streaming stores (ws.stream_bytes = 0) into outputs with
      // 64-byte aligned rows (where the kernels stream a float output): the same bits.
      if (path != Bf16BlockPath::amx)
        sprig_test::with_threads(2, [&] {
          const std::int64_t ld = (c.B + 15) / 16 * 16;
          Matrix<float> ya(c.M, ld), dxa(c.K, ld);
          for (std::int64_t i = 0; i < c.M; ++i) std::copy_n(&y0[static_cast<std::size_t>(i * ldy)], c.B, ya.row(i));
          for (std::int64_t i = 0; i < c.K; ++i) std::copy_n(&dx0[static_cast<std::size_t>(i * ldx)], c.B, dxa.row(i));
          KernelWorkspace<float> ws;
          ws.stream_bytes = 0;
          TransposeCache<float, std::int32_t> cache;
          if (fwd) bf16_block_spmm(W, vals, X.view(), MatrixView<float>(ya.data(), c.M, c.B, ld), ws, mode, path);
          if (bwd)
            bf16_block_spmm_transposed(W, vals, cache, dY.view(), MatrixView<float>(dxa.data(), c.K, c.B, ld), ws, mode,
                                       path);
          std::int64_t off = 0;
          for (std::int64_t i = 0; fwd && i < c.M; ++i)
            off += std::memcmp(ya.row(i), &y[0][static_cast<std::size_t>(i * ldy)], c.B * sizeof(float)) != 0;
          for (std::int64_t i = 0; bwd && i < c.K; ++i)
            off += std::memcmp(dxa.row(i), &dx[0][static_cast<std::size_t>(i * ldx)], c.B * sizeof(float)) != 0;
          CHECK(off == 0);
        });
      const bool acc = mode == Update::accumulate;
      const Reference fref = product_reference(W, shadow, X, false), bref = product_reference(W, shadow, dY, true);
      if (fwd) {
        check_against(fref, y[0], ldy, acc ? &y0 : nullptr);
        CHECK(same_bits(y[0], y[1]));
        if (path != Bf16BlockPath::portable) check_paths_agree(fref, y[0], y[2], ldy, acc ? &y0 : nullptr);
      }
      if (bwd) {
        check_against(bref, dx[0], ldx, acc ? &dx0 : nullptr);
        CHECK(same_bits(dx[0], dx[1]));
        if (path != Bf16BlockPath::portable) check_paths_agree(bref, dx[0], dx[2], ldx, acc ? &dx0 : nullptr);
      }
    }
  }
}

// grad (overwrite and accumulate) for one block shape over every case; 1 and 2 threads.
template <int R, int C>
void check_gradient(Bf16BlockPath path, const std::vector<Case>& which = cases()) {
  constexpr std::int64_t RC = std::int64_t{R} * C;
  if (!runs_here<R, C>(Bf16BlockKernel::sddmm, path)) return;
  for (const Case& c : which) {
    INFO(R << "x" << C << " blocks, " << path_name(path) << " path, M=" << c.M << " K=" << c.K << " B=" << c.B << " seed=" << c.seed);
    const auto W = case_matrix<R, C>(c);
    CounterRng rng(c.seed, 0x6AD);
    const Bf16Matrix X(c.K, c.B, c.gap, rng), dY(c.M, c.B, c.gap, rng);
    // Which grad entries are live and in the matrix: (element row, element column), else -1.
    std::vector<std::int64_t> live(W.values().size(), -1);
    W.for_each_block([&](std::int64_t bi, std::int64_t bj, std::int64_t s, const float*) {
      for (std::int64_t r = 0; r < R; ++r)
        for (std::int64_t k = 0; k < C; ++k)
          if (bi * R + r < W.rows() && bj * C + k < W.cols())
            live[static_cast<std::size_t>(s * RC + r * C + k)] = (bi * R + r) * W.cols() + bj * C + k;
    });
    for (const Update mode : {Update::overwrite, Update::accumulate}) {
      INFO((mode == Update::overwrite ? "overwrite" : "accumulate"));
      std::vector<float> g0(W.values().size());
      for (auto& v : g0) v = mode == Update::overwrite ? std::numeric_limits<float>::quiet_NaN() : float(rng.uniform01());
      // [0], [1]: `path` on 1 and 2 threads; [2]: the portable path.
      std::vector<float> g[3];
      for (int t = 0; t < 3; ++t)
        sprig_test::with_threads(t == 1 ? 2 : 1, [&] {
          g[t] = g0;
          KernelWorkspace<float> ws;
          bf16_block_sddmm(W, dY.view(), X.view(), std::span<float>(g[t]), ws, mode,
                           t == 2 ? Bf16BlockPath::portable : path);
        });
      CHECK(same_bits(g[0], g[1]));
      std::int64_t bad = 0;
      for (std::size_t e = 0; e < g0.size(); ++e) {
        if (live[e] < 0) {
          const bool ok = mode == Update::overwrite ? g[0][e] == 0.0f : std::memcmp(&g[0][e], &g0[e], 4) == 0;
          if (!ok && bad++ < 5) FAIL_CHECK("non-live entry " << e << " holds " << g[0][e]);
          continue;
        }
        const std::int64_t i = live[e] / W.cols(), k = live[e] % W.cols();
        double want = 0, S = 0;
        for (std::int64_t b = 0; b < c.B; ++b) {
          want += dY(i, b) * X(k, b);
          S += std::fabs(dY(i, b) * X(k, b));
        }
        std::int64_t n = c.B + 2;
        if (mode == Update::accumulate) {
          want += g0[e];
          S += std::fabs(double(g0[e]));
          ++n;
        }
        if (!(std::fabs(g[0][e] - want) <= gamma(n) * S) && bad++ < 5)
          FAIL_CHECK("grad[" << e << "] (W(" << i << ", " << k << ")) = " << g[0][e] << ", want " << want);
        if (!(std::fabs(double(g[0][e]) - double(g[2][e])) <= 2 * gamma(n) * S) && bad++ < 5)
          FAIL_CHECK("grad[" << e << "]: " << g[0][e] << " vs portable " << g[2][e]);
      }
      CHECK(bad == 0);
    }
  }
}

}  // namespace

TEST_CASE("bf16_block_spmm and bf16_block_spmm_transposed match a double reference", "[bf16_block]") {
  for (const Bf16BlockPath path : {Bf16BlockPath::portable, Bf16BlockPath::avx512_bf16, Bf16BlockPath::amx}) {
    check_products<8, 8>(path);
    check_products<4, 4>(path);
    check_products<16, 1>(path);
    check_products<1, 4>(path);
    check_products<6, 6>(path);  // 36 entries: the input gradient's block copy spans two registers, one partial
  }
  check_products<16, 16>(Bf16BlockPath::amx);
  check_products<8, 8>(Bf16BlockPath::amx, large_cases());
}

TEST_CASE("bf16_block_sddmm matches a double reference", "[bf16_block]") {
  for (const Bf16BlockPath path : {Bf16BlockPath::portable, Bf16BlockPath::avx512_bf16, Bf16BlockPath::amx}) {
    check_gradient<8, 8>(path);
    check_gradient<4, 4>(path);
    check_gradient<16, 1>(path);
    check_gradient<1, 4>(path);
  }
  check_gradient<16, 16>(Bf16BlockPath::amx);
  check_gradient<8, 8>(Bf16BlockPath::amx, whole_chunk_cases());
  check_gradient<16, 16>(Bf16BlockPath::amx, whole_chunk_cases());
  check_gradient<8, 8>(Bf16BlockPath::amx, large_cases());
}

TEST_CASE("bf16 block kernels name their paths and pick the fastest available", "[bf16_block]") {
  using K = Bf16BlockKernel;
  for (const K k : {K::spmm, K::spmm_transposed, K::sddmm}) {
    CHECK(bf16_block_unavailable_reason<8, 8>(k, Bf16BlockPath::portable).empty());
    const bool dp = bf16_block_unavailable_reason<8, 8>(k, Bf16BlockPath::avx512_bf16).empty();
    const bool amx = bf16_block_unavailable_reason<8, 8>(k, Bf16BlockPath::amx).empty();
    CHECK(bf16_block_path<8, 8>(k) ==
          (amx ? Bf16BlockPath::amx : dp ? Bf16BlockPath::avx512_bf16 : Bf16BlockPath::portable));
    if (!dp) CHECK_FALSE(amx);  // AMX implies AVX512-BF16
  }
  // AMX tiles hold at most 16 rows and 64 bytes a row: 32 bf16 columns in pairs for the
  // products (W's blocks, or their transposes, are tiles of A), 16 float columns for the
  // weight gradient (a block's gradient is a tile of C).
  CHECK_FALSE(bf16_block_unavailable_reason<16, 1>(K::spmm, Bf16BlockPath::amx).empty());
  CHECK_FALSE(bf16_block_unavailable_reason<32, 2>(K::spmm, Bf16BlockPath::amx).empty());
  CHECK_FALSE(bf16_block_unavailable_reason<4, 64>(K::spmm, Bf16BlockPath::amx).empty());
  CHECK_FALSE(bf16_block_unavailable_reason<1, 4>(K::spmm_transposed, Bf16BlockPath::amx).empty());
  CHECK_FALSE(bf16_block_unavailable_reason<2, 32>(K::spmm_transposed, Bf16BlockPath::amx).empty());
  CHECK_FALSE(bf16_block_unavailable_reason<32, 2>(K::sddmm, Bf16BlockPath::amx).empty());
  CHECK_FALSE(bf16_block_unavailable_reason<2, 32>(K::sddmm, Bf16BlockPath::amx).empty());
  // Pairs along an odd block dimension do not exist: 16x1's forward, 1x4's input gradient.
  CHECK_FALSE(bf16_block_unavailable_reason<16, 1>(K::spmm, Bf16BlockPath::avx512_bf16).empty());
  CHECK_FALSE(bf16_block_unavailable_reason<1, 4>(K::spmm_transposed, Bf16BlockPath::avx512_bf16).empty());
  CHECK(bf16_block_path<16, 1>(K::spmm) == Bf16BlockPath::portable);
  WARN("bf16 block kernels on 8x8 take the " << path_name(bf16_block_path<8, 8>(K::spmm)) << " path here");
  // A path that cannot run is refused, not replaced.
  const auto W = BlockPaddedCSR<float, std::int32_t, 16, 1>::random(20, 12, 3, 1);
  std::vector<bfloat16> vals(W.values().size());
  CounterRng rng(5, 6);
  const Bf16Matrix X(12, 5, 0, rng);
  std::vector<float> y(20 * 5);
  KernelWorkspace<float> ws;
  CHECK_THROWS_AS(bf16_block_spmm(W, std::span<const bfloat16>(vals), X.view(), MatrixView<float>(y.data(), 20, 5), ws,
                                  Update::overwrite, Bf16BlockPath::avx512_bf16),
                  ArgumentError);
}

TEST_CASE("bf16 block kernels with an empty batch or no live block", "[bf16_block]") {
  const auto W = BlockPaddedCSR<float, std::int32_t, 8, 8>::random(20, 12, 0, 1);
  const std::vector<bfloat16> vals(W.values().size());
  CounterRng rng(3, 4);
  const Bf16Matrix X(12, 5, 0, rng), dY(20, 5, 0, rng);
  std::vector<float> y(20 * 5, 7.0f), dx(12 * 5, 7.0f), g(W.values().size(), 7.0f);
  KernelWorkspace<float> ws;
  TransposeCache<float, std::int32_t> cache;
  bf16_block_spmm(W, vals, X.view(), MatrixView<float>(y.data(), 20, 5), ws);
  bf16_block_spmm_transposed(W, vals, cache, dY.view(), MatrixView<float>(dx.data(), 12, 5), ws);
  bf16_block_sddmm(W, dY.view(), X.view(), std::span<float>(g), ws);
  for (float v : y) CHECK(v == 0.0f);
  for (float v : dx) CHECK(v == 0.0f);
  for (float v : g) CHECK(v == 0.0f);
}

TEST_CASE("bf16 block kernels reject wrong shapes, shadow sizes and overlaps", "[bf16_block]") {
  const auto W = BlockPaddedCSR<float, std::int32_t, 8, 8>::random(20, 12, 3, 1);
  std::vector<bfloat16> vals(W.values().size());
  refresh_bf16_values(W, std::span<bfloat16>(vals));
  const std::span<const bfloat16> v(vals);
  CounterRng rng(3, 4);
  const Bf16Matrix X(12, 5, 0, rng), dY(20, 5, 0, rng), X13(13, 5, 0, rng);
  std::vector<float> y(20 * 5), dx(12 * 5), g(W.values().size());
  KernelWorkspace<float> ws;
  TransposeCache<float, std::int32_t> cache;
  const MatrixView<float> Y(y.data(), 20, 5), dX(dx.data(), 12, 5);
  CHECK_THROWS_AS(bf16_block_spmm(W, v, X13.view(), Y, ws), ShapeError);
  CHECK_THROWS_AS(bf16_block_spmm(W, v, X.view(), MatrixView<float>(y.data(), 19, 5), ws), ShapeError);
  CHECK_THROWS_AS(bf16_block_spmm(W, v, X.view(), MatrixView<float>(y.data(), 20, 4), ws), ShapeError);
  CHECK_THROWS_AS(bf16_block_spmm(W, v.first(v.size() - 1), X.view(), Y, ws), ShapeError);
  CHECK_THROWS_AS(bf16_block_spmm_transposed(W, v, cache, X.view(), dX, ws), ShapeError);
  CHECK_THROWS_AS(bf16_block_spmm_transposed(W, v.first(1), cache, dY.view(), dX, ws), ShapeError);
  CHECK_THROWS_AS(bf16_block_sddmm(W, dY.view(), X13.view(), std::span<float>(g), ws), ShapeError);
  CHECK_THROWS_AS(bf16_block_sddmm(W, dY.view(), X.view(), std::span<float>(g).first(g.size() - 1), ws), ShapeError);
  std::vector<bfloat16> short_shadow(vals.size() + 1);
  CHECK_THROWS_AS(refresh_bf16_values(W, std::span<bfloat16>(short_shadow)), ShapeError);
  // The output over an input: a float view over the bf16 storage of X.
  std::vector<bfloat16> shared(20 * 12 * 4);
  const ConstMatrixView<bfloat16> Xs(shared.data(), 12, 5);
  const MatrixView<float> Ys(reinterpret_cast<float*>(shared.data()), 20, 5);
  CHECK_THROWS_AS(bf16_block_spmm(W, v, Xs, Ys, ws), ArgumentError);
  const ConstMatrixView<bfloat16> dYs(shared.data(), 20, 5);
  CHECK_THROWS_AS(bf16_block_sddmm(W, dYs, X.view(), std::span<float>(reinterpret_cast<float*>(shared.data()), g.size()), ws),
                  ArgumentError);
}

namespace {

// A case's W, its bf16 shadow, X and a bias, drawn from rng (seeded by the case and tag).
template <int R, int C>
struct ForwardOperands {
  BlockPaddedCSR<float, std::int32_t, R, C> W;
  std::vector<bfloat16> vals;
  CounterRng rng;
  Bf16Matrix X;
  std::vector<float> bias;
  ForwardOperands(const Case& c, std::uint64_t tag)
      : W(case_matrix<R, C>(c)),
        vals(shadow_of(W)),
        rng(c.seed, tag),
        X(c.K, c.B, c.gap, rng),
        bias(static_cast<std::size_t>(c.M)) {
    for (auto& b : bias) b = static_cast<float>(rng.uniform(-1.0, 1.0));
  }
};

// bf16_block_spmm_transposed with x_derivative D against the float dX times D afterwards, bit
// for bit, on `path`: into a float dX, a bf16 dX, and in place over D.
template <int R, int C>
void check_scaled_dx(Bf16BlockPath path) {
  if (!runs_here<R, C>(Bf16BlockKernel::spmm_transposed, path)) return;
  for (const Case& c : cases()) {
    CAPTURE(R, C, path_name(path), c.M, c.K, c.B);
    const auto W = case_matrix<R, C>(c);
    const auto vals = shadow_of(W);
    const std::span<const bfloat16> v(vals);
    CounterRng rng(c.seed, 0xD5);
    const Bf16Matrix dY(c.M, c.B, c.gap, rng);
    const auto n = static_cast<std::size_t>(c.K * c.B);
    std::vector<bfloat16> d(n);
    for (auto& x : d) x = bfloat16(static_cast<float>(rng.uniform(-2.0, 2.0)));
    KernelWorkspace<float> ws;
    TransposeCache<float, std::int32_t> cache;
    std::vector<float> plain(n), scaled(n, std::numeric_limits<float>::quiet_NaN());
    std::vector<bfloat16> narrow(n, bfloat16(std::numeric_limits<float>::quiet_NaN())), in_place = d;
    const ConstMatrixView<bfloat16> D(d.data(), c.K, c.B);
    bf16_block_spmm_transposed(W, v, cache, dY.view(), MatrixView<float>(plain.data(), c.K, c.B), ws, Update::overwrite,
                               path);
    bf16_block_spmm_transposed(W, v, cache, dY.view(), MatrixView<float>(scaled.data(), c.K, c.B), D, ws, path);
    bf16_block_spmm_transposed(W, v, cache, dY.view(), MatrixView<bfloat16>(narrow.data(), c.K, c.B), D, ws, path);
    const MatrixView<bfloat16> over(in_place.data(), c.K, c.B);
    bf16_block_spmm_transposed(W, v, cache, dY.view(), over, ConstMatrixView<bfloat16>(over), ws, path);
    std::int64_t differ = 0;
    for (std::size_t e = 0; e < n; ++e) {
      const float want = plain[e] * static_cast<float>(d[e]);
      differ += std::memcmp(&scaled[e], &want, sizeof(float)) != 0;
      differ += narrow[e].bits != bfloat16(want).bits;
      differ += in_place[e].bits != bfloat16(want).bits;
    }
    CHECK(differ == 0);
  }
}

// bf16_block_spmm with the epilogue (bias, relu) against bf16_block_spmm (overwrite) followed
// by the bias and ReLU passes done here in float, bit for bit, on the path it picks.
template <int R, int C>
void check_epilogue() {
  for (const Case& c : cases()) {
    CAPTURE(R, C, c.M, c.K, c.B);
    ForwardOperands<R, C> f(c, 0xE2);
    const auto& [W, vals, rng, X, bias] = f;
    const std::span<const bfloat16> v(vals);
    KernelWorkspace<float> ws;
    std::vector<float> plain(static_cast<std::size_t>(c.M * c.B));
    bf16_block_spmm(W, v, X.view(), MatrixView<float>(plain.data(), c.M, c.B), ws);
    for (const FusedActivation act : {FusedActivation::none, FusedActivation::relu}) {
      CAPTURE(act == FusedActivation::relu);
      std::vector<float> want(plain.size()), got(plain.size(), std::numeric_limits<float>::quiet_NaN());
      for (std::int64_t i = 0; i < c.M; ++i)
        for (std::int64_t j = 0; j < c.B; ++j) {
          const auto e = static_cast<std::size_t>(i * c.B + j);
          const float y = plain[e] + bias[static_cast<std::size_t>(i)];
          want[e] = act == FusedActivation::relu ? (y > 0.0f ? y : 0.0f) : y;
        }
      bf16_block_spmm(W, v, X.view(), MatrixView<float>(got.data(), c.M, c.B), ws, RowEpilogue<float>{bias, act});
      std::int64_t differ = 0;
      for (std::size_t e = 0; e < got.size(); ++e) differ += std::memcmp(&got[e], &want[e], sizeof(float)) != 0;
      CHECK(differ == 0);
    }
  }
}

// bf16_block_spmm into a bf16 Y against the float Y rounded, bit for bit, on `path`: overwrite
// (with the epilogue's bias and ReLU where `path` is the one it takes), and accumulate onto
// bf16 values (the float Y starting from them widened).
template <int R, int C>
void check_bf16_output(Bf16BlockPath path) {
  if (!runs_here<R, C>(Bf16BlockKernel::spmm, path)) return;
  for (const Case& c : cases()) {
    CAPTURE(R, C, path_name(path), c.M, c.K, c.B);
    ForwardOperands<R, C> f(c, 0xB16);
    auto& [W, vals, rng, X, bias] = f;
    const std::span<const bfloat16> v(vals);
    const auto n = static_cast<std::size_t>(c.M * c.B);
    std::vector<bfloat16> start(n);
    for (auto& y : start) y = bfloat16(static_cast<float>(rng.uniform(-1.0, 1.0)));
    KernelWorkspace<float> ws;
    const auto rounded_same = [&](const std::vector<float>& wide, const std::vector<bfloat16>& narrow) {
      std::int64_t differ = 0;
      for (std::size_t e = 0; e < n; ++e) differ += narrow[e].bits != bfloat16(wide[e]).bits;
      return differ;
    };
    std::vector<float> wide(n);
    std::vector<bfloat16> narrow(n, bfloat16(std::numeric_limits<float>::quiet_NaN()));
    bf16_block_spmm(W, v, X.view(), MatrixView<float>(wide.data(), c.M, c.B), ws, Update::overwrite, path);
    bf16_block_spmm(W, v, X.view(), MatrixView<bfloat16>(narrow.data(), c.M, c.B), ws, Update::overwrite, path);
    CHECK(rounded_same(wide, narrow) == 0);
    if (path == bf16_block_path<R, C>(Bf16BlockKernel::spmm)) {  // the epilogue takes the fastest path
      const RowEpilogue<float> epilogue{bias, FusedActivation::relu};
      bf16_block_spmm(W, v, X.view(), MatrixView<float>(wide.data(), c.M, c.B), ws, epilogue);
      bf16_block_spmm(W, v, X.view(), MatrixView<bfloat16>(narrow.data(), c.M, c.B), ws, epilogue);
      CHECK(rounded_same(wide, narrow) == 0);
    }
    for (std::size_t e = 0; e < n; ++e) wide[e] = static_cast<float>(start[e]);
    narrow = start;
    bf16_block_spmm(W, v, X.view(), MatrixView<float>(wide.data(), c.M, c.B), ws, Update::accumulate, path);
    bf16_block_spmm(W, v, X.view(), MatrixView<bfloat16>(narrow.data(), c.M, c.B), ws, Update::accumulate, path);
    CHECK(rounded_same(wide, narrow) == 0);
  }
}

}  // namespace

TEST_CASE("bf16_block_spmm's epilogue is bitwise a bias pass and a ReLU pass after the product", "[bf16_block]") {
  WARN("bf16_block_spmm's epilogue runs on the " << path_name(bf16_block_path<8, 8>(Bf16BlockKernel::spmm))
                                                 << " path for 8x8 here");
  check_epilogue<8, 8>();
  check_epilogue<4, 4>();
  check_epilogue<16, 1>();
  check_epilogue<1, 4>();
  sprig_test::with_threads(2, [] { check_epilogue<8, 8>(); });
  // The bias's length, gelu and a bias inside Y are refused.
  const auto W = BlockPaddedCSR<float, std::int32_t, 8, 8>::random(20, 12, 3, 1);
  std::vector<bfloat16> vals(W.values().size());
  CounterRng rng(3, 4);
  const Bf16Matrix X(12, 5, 0, rng);
  std::vector<float> y(20 * 5), bias(20);
  KernelWorkspace<float> ws;
  const MatrixView<float> Y(y.data(), 20, 5);
  const std::span<const bfloat16> v(vals);
  CHECK_THROWS_AS(bf16_block_spmm(W, v, X.view(), Y, ws, RowEpilogue<float>{std::span<const float>(bias).first(19)}),
                  ShapeError);
  CHECK_THROWS_AS(bf16_block_spmm(W, v, X.view(), Y, ws, RowEpilogue<float>{bias, FusedActivation::gelu}),
                  ArgumentError);
  CHECK_THROWS_AS(bf16_block_spmm(W, v, X.view(), Y, ws, RowEpilogue<float>{std::span<const float>(y.data(), 20)}),
                  ArgumentError);
}

TEST_CASE("bf16 block products into bf16 outputs: the float ones rounded, bit for bit, on every path", "[bf16_block]") {
  for (const Bf16BlockPath path : {Bf16BlockPath::portable, Bf16BlockPath::avx512_bf16, Bf16BlockPath::amx}) {
    check_bf16_output<8, 8>(path);
    check_bf16_output<4, 4>(path);
    check_bf16_output<16, 1>(path);
    check_bf16_output<1, 4>(path);
    check_scaled_dx<8, 8>(path);
    check_scaled_dx<4, 4>(path);
    check_scaled_dx<16, 1>(path);
    check_scaled_dx<1, 4>(path);
  }
  // x_derivative of another shape, or overlapping a float dX, is refused
  const auto W = BlockPaddedCSR<float, std::int32_t, 8, 8>::random(20, 12, 3, 1);
  std::vector<bfloat16> vals(W.values().size());
  CounterRng rng(3, 5);
  const Bf16Matrix dY(20, 5, 0, rng);
  std::vector<float> dx(12 * 5);
  std::vector<bfloat16> d(12 * 5);
  KernelWorkspace<float> ws;
  TransposeCache<float, std::int32_t> cache;
  const std::span<const bfloat16> v(vals);
  CHECK_THROWS_AS(bf16_block_spmm_transposed(W, v, cache, dY.view(), MatrixView<float>(dx.data(), 12, 5),
                                             ConstMatrixView<bfloat16>(d.data(), 12, 4), ws),
                  ShapeError);
  CHECK_THROWS_AS(bf16_block_spmm_transposed(W, v, cache, dY.view(), MatrixView<float>(dx.data(), 12, 5),
                                             ConstMatrixView<bfloat16>(reinterpret_cast<bfloat16*>(dx.data()), 12, 5),
                                             ws),
                  ArgumentError);
}
