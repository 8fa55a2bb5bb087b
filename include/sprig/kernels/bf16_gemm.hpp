// sprig/kernels/bf16_gemm.hpp — dense C[M x N] (float) = A[M x K] * B[K x N] (bfloat16), or
// C += A * B, accumulated in float: the mixed-precision GEMM of bf16 training.
//
//   bf16_gemm(A, B, C, update)        the fastest path this CPU runs (bf16_gemm_path())
//   bf16_gemm(A, B, C, update, path)  that path (tests, benchmarks); ArgumentError if unavailable
//   bf16_gemm(A, B, C, update, path, workspace)  in the caller's packing memory (no allocation;
//                                     bf16_gemm_workspace_size elements): what layers call
//   bf16_gemm_available(path)         whether path runs here; bf16_gemm_unavailable_reason says why not
//
// Three paths, picked in this order:
//   amx          x86-64 Linux, AMX-TILE + AMX-BF16 (Intel server CPUs since 2023): `tdpbf16ps`
//                multiplies a 16 x 32 bf16 tile of A by a 32 x 16 one of B (packed in pairs)
//                into 16 x 16 floats; blocks of 2 x 2 C tiles. Needs Linux to grant the tile
//                state (arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)): the first query
//                of the path asks once per process, and without the grant the path is off.
//   avx512_bf16  x86-64, AVX512F + AVX512BW + AVX512-BF16 (Intel since 2020, AMD since 2022):
//                `vdpbf16ps` adds the products of a pair of adjacent k into one float lane;
//                register tiles of 6 rows x 64 columns.
//   portable     everywhere (AVX2, AVX-512, NEON, scalar): A and B widened to float (exact),
//                then sprig's fp32 loop nest (dense_gemm.hpp's portable path).
// The fast paths use their instructions through function target attributes, so a consumer
// compiles with no special flags; the CPU is asked at run time (CPUID, XCR0).
//
// Numerics: every path forms the exact products a(i,k) b(k,j) (a bf16 times a bf16 fits a float)
// and sums them, and in accumulate mode C's old value, in float in some order, so each entry is
// within gamma_{K+1} * (|c(i,j)| + sum_k |a(i,k) b(k,j)|) of the exact result, gamma_n =
// n u / (1 - n u), u = 2^-24. The orders differ between paths, so the paths agree to that
// bound, not bit for bit. The fast paths' instructions treat subnormal bf16 inputs as zero and
// flush subnormal float results to zero (the portable path keeps them): at magnitudes below
// 2^-126 they differ by more. NaN and infinities propagate on every path (a NaN in A or B gives
// NaN in the entries it touches, as in float arithmetic).
//
// Preconditions: A is M x K, B is K x N, C is M x N (else ShapeError); C shares no memory with
// A or B (else ArgumentError). Views may be strided sub-blocks; no alignment is needed.
// update: Update::overwrite (C = A B; C is not read, so NaN there does not propagate) or
// Update::accumulate (C += A B).
// Complexity: M N K multiply-adds. Each call allocates its packing buffers: amx about
// 2 (M + N) K bytes (A and B tiles, M and N rounded up to 16, K to 32), avx512_bf16 2 N K bytes
// (B in pairs), portable 4 (M + N) K bytes (A and B as floats).
// Threads: OpenMP when the consumer links it; packing is split among the threads, then each
// thread computes whole output rows blocks. Every output entry goes through the same arithmetic
// whichever thread computes it, so a path gives the same bits for any thread count. A call
// made inside a parallel region runs on its calling thread.
// Throws: ShapeError, ArgumentError (above), std::bad_alloc.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>

#include "../core/aligned_allocator.hpp"
#include "../core/bfloat16.hpp"
#include "../core/config.hpp"
#include "../core/error.hpp"
#include "../core/matrix.hpp"
#include "amx_tiles.hpp"
#include "bfloat16_convert.hpp"
#include "dense_gemm.hpp"
#include "update_mode.hpp"

#if SPRIG_HAS_OPENMP
#  include <omp.h>
#endif

#include "bf16_paths.hpp"

namespace sprig {
namespace detail {

// Runs fn(t, n) on every thread t of n, or fn(0, 1) on the caller when OpenMP is off, the
// work is below kParallelMinWork, there is one thread, or the call is inside a parallel
// region. fn must not throw; it may call bf16_gemm_barrier().
template <class Fn>
void bf16_gemm_threads(std::int64_t work, Fn&& fn) {
#if SPRIG_HAS_OPENMP
  if (work >= kParallelMinWork && omp_get_max_threads() > 1 && !omp_in_parallel()) {
#  pragma omp parallel
    fn(static_cast<std::int64_t>(omp_get_thread_num()), static_cast<std::int64_t>(omp_get_num_threads()));
    return;
  }
#else
  (void)work;
#endif
  fn(std::int64_t{0}, std::int64_t{1});
}

// Waits for the team of bf16_gemm_threads (a no-op on one thread).
inline void bf16_gemm_barrier() noexcept {
#if SPRIG_HAS_OPENMP
#  pragma omp barrier
#endif
}

// Thread t's share [n t / threads, n (t + 1) / threads) of [0, n).
inline std::int64_t share_begin(std::int64_t n, std::int64_t t, std::int64_t threads) noexcept {
  return n * t / threads;
}

// Where a path's packing lives in its workspace, in bf16 elements from its start: the second
// part (amx: B's pairs after A's tiles; portable: B's floats after A's, A's rounded up to a
// 64-byte line) at `second`, `total` in all (avx512_bf16: B's pairs alone, second = 0).
// bf16_gemm_workspace_size and the kernels read the same layout.
struct Bf16GemmLayout {
  std::int64_t second, total;
};
inline Bf16GemmLayout bf16_gemm_layout(std::int64_t M, std::int64_t K, std::int64_t N, Bf16GemmPath path) noexcept {
  const std::int64_t NT = (N + 15) / 16;
  switch (path) {
    case Bf16GemmPath::amx: {
      const std::int64_t MT = (M + 15) / 16, KT = (K + 31) / 32, a = MT * KT * 512;
      return {a, a + NT * (KT * 16) * 32};
    }
    case Bf16GemmPath::avx512_bf16: return {0, NT * ((K + 1) / 2) * 32};
    default: {
      const std::int64_t a_floats = (M * K + 15) / 16 * 16;
      return {2 * a_floats, 2 * (a_floats + K * N)};
    }
  }
}

// B in pairs along k, in panels of 16 columns: panel jt, pair p holds at
// out[(jt P + p) 32 + 2 c + e] the value B(2 p + e, 16 jt + c), zero past K or N, for the
// panels [jt0, jt1). A panel's 16 pairs from p = 16 kt on are AMX's B tile (16 rows of 64
// bytes); one pair row is a 512-bit register for vdpbf16ps.
inline void pack_b_pairs(ConstMatrixView<bfloat16> B, std::int64_t P, std::int64_t jt0, std::int64_t jt1,
                         bfloat16* out) noexcept {
  const std::int64_t K = B.rows(), N = B.cols();
  for (std::int64_t jt = jt0; jt < jt1; ++jt) {
    const std::int64_t c0 = 16 * jt, nc = std::min<std::int64_t>(16, N - c0);
    bfloat16* panel = out + jt * P * 32;
    for (std::int64_t p = 0; p < P; ++p) {
      bfloat16* dst = panel + p * 32;
      std::fill_n(dst, 32, bfloat16{});
      for (std::int64_t e = 0; e < 2; ++e) {
        const std::int64_t k = 2 * p + e;
        if (k >= K) break;
        const bfloat16* src = B.row(k) + c0;
        for (std::int64_t c = 0; c < nc; ++c) dst[2 * c + e] = src[c];
      }
    }
  }
}

#if SPRIG_BF16_GEMM_X86
// Whether the CPU and OS run AVX512F + AVX512BW (the vector packer's instructions).
inline bool avx512bw_usable() noexcept {
  static const bool ok = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
    return (b & (1u << 16)) && (b & (1u << 30)) && (bf16_gemm_xcr0() & 0xE6) == 0xE6;
  }();
  return ok;
}

// pack_b_pairs with AVX512BW: two masked 16-column row loads, interleaved by one vpermt2w
// into a 64-byte pair row. The same bytes as pack_b_pairs.
__attribute__((target("avx512f,avx512bw"))) inline void pack_b_pairs_avx512(ConstMatrixView<bfloat16> B, std::int64_t P,
                                                                            std::int64_t jt0, std::int64_t jt1,
                                                                            bfloat16* out) noexcept {
  const std::int64_t K = B.rows(), N = B.cols();
  alignas(64) std::uint16_t order[32];
  for (int c = 0; c < 16; ++c) {
    order[2 * c] = static_cast<std::uint16_t>(c);
    order[2 * c + 1] = static_cast<std::uint16_t>(32 + c);
  }
  const __m512i idx = _mm512_load_si512(order);
  for (std::int64_t jt = jt0; jt < jt1; ++jt) {
    const std::int64_t c0 = 16 * jt, nc = std::min<std::int64_t>(16, N - c0);
    const auto mask = static_cast<__mmask32>((1u << nc) - 1u);
    bfloat16* panel = out + jt * P * 32;
    for (std::int64_t p = 0; p < P; ++p) {
      const std::int64_t k = 2 * p;
      const __m512i r0 = k < K ? _mm512_maskz_loadu_epi16(mask, B.row(k) + c0) : _mm512_setzero_si512();
      const __m512i r1 = k + 1 < K ? _mm512_maskz_loadu_epi16(mask, B.row(k + 1) + c0) : _mm512_setzero_si512();
      _mm512_storeu_si512(panel + p * 32, _mm512_permutex2var_epi16(r0, idx, r1));
    }
  }
}

// The fast paths' B packing: AVX512BW where the CPU runs it, else the scalar loop.
inline void pack_b_pairs_fast(ConstMatrixView<bfloat16> B, std::int64_t P, std::int64_t jt0, std::int64_t jt1,
                              bfloat16* out) noexcept {
  if (avx512bw_usable())
    pack_b_pairs_avx512(B, P, jt0, jt1, out);
  else
    pack_b_pairs(B, P, jt0, jt1, out);
}
#endif

#if SPRIG_BF16_GEMM_AMX

// The tile configuration used here (amx_tiles.hpp's defaults): every tile 16 rows of 64 bytes.
// Tiles 0..3 hold a 2 x 2 block of C (tile 2 r + c), 4 and 5 two row tiles of A, 6 and 7 two
// column tiles of B.

// One block of MT x NT C tiles (MT, NT in {1, 2}) over all KT k-tiles. a[r]: row tile r of
// packed A (16 x 32 bf16 per k-tile, 512 elements apart); b[c]: column panel c of packed B
// (k-tile kt at + 512 kt); c[t], ldc[t] (bytes): C tile t (2 r + c), loaded when load_c.
template <int MT, int NT>
__attribute__((target("amx-tile,amx-bf16"))) inline void amx_block(const bfloat16* const* a, const bfloat16* const* b,
                                                                   std::int64_t KT, float* const* c,
                                                                   const std::int64_t* ldc, bool load_c) noexcept {
  amx_compiler_barrier(c[0]);
  if (load_c) {
    _tile_loadd(0, c[0], ldc[0]);
    if constexpr (NT > 1) _tile_loadd(1, c[1], ldc[1]);
    if constexpr (MT > 1) _tile_loadd(2, c[2], ldc[2]);
    if constexpr (MT > 1 && NT > 1) _tile_loadd(3, c[3], ldc[3]);
  } else {
    _tile_zero(0);
    if constexpr (NT > 1) _tile_zero(1);
    if constexpr (MT > 1) _tile_zero(2);
    if constexpr (MT > 1 && NT > 1) _tile_zero(3);
  }
  for (std::int64_t kt = 0; kt < KT; ++kt) {
    const std::int64_t off = kt * 512;
    _tile_loadd(4, a[0] + off, 64);
    if constexpr (MT > 1) _tile_loadd(5, a[1] + off, 64);
    _tile_loadd(6, b[0] + off, 64);
    if constexpr (NT > 1) _tile_loadd(7, b[1] + off, 64);
    _tile_dpbf16ps(0, 4, 6);
    if constexpr (NT > 1) _tile_dpbf16ps(1, 4, 7);
    if constexpr (MT > 1) _tile_dpbf16ps(2, 5, 6);
    if constexpr (MT > 1 && NT > 1) _tile_dpbf16ps(3, 5, 7);
  }
  _tile_stored(0, c[0], ldc[0]);
  if constexpr (NT > 1) _tile_stored(1, c[1], ldc[1]);
  if constexpr (MT > 1) _tile_stored(2, c[2], ldc[2]);
  if constexpr (MT > 1 && NT > 1) _tile_stored(3, c[3], ldc[3]);
}

// Thread t of n's rows of C: row-block pairs of tiles [ib0, ib1). K runs in even blocks of at
// most SPRIG_BF16_GEMM_AMX_K_TILES k-tiles of 32 (a block's two A row tiles stay in L1/L2
// across a column chunk), columns in chunks whose B panels for that K block fill about
// SPRIG_BF16_GEMM_AMX_CHUNK_BYTES of L2 (reused by every row block). Between K blocks C passes
// through memory as float, which is exact: the bits are those of one pass over all of K.
inline void amx_compute(const bfloat16* Ap, const bfloat16* Bp, std::int64_t M, std::int64_t N, std::int64_t KT,
                        MatrixView<float> C, bool accumulate, std::int64_t ib0, std::int64_t ib1) noexcept {
  const std::int64_t MT = (M + 15) / 16, NT = (N + 15) / 16, P = KT * 16;
  const std::int64_t max_tiles = std::max<std::int64_t>(1, SPRIG_BF16_GEMM_AMX_K_TILES);
  const std::int64_t blocks = (KT + max_tiles - 1) / max_tiles, block_tiles = (KT + blocks - 1) / blocks;
  const std::int64_t chunk_tiles =
      std::max<std::int64_t>(2,
                             (std::int64_t{SPRIG_BF16_GEMM_AMX_CHUNK_BYTES} / (block_tiles * 1024)) & ~std::int64_t{1});
  const AmxTileConfig cfg;
  amx_begin(cfg);
  alignas(64) float scratch[4][256];
  for (std::int64_t kb = 0; kb < KT; kb += block_tiles) {
    const std::int64_t kbt = std::min(block_tiles, KT - kb);
    const bool load = accumulate || kb > 0;
    for (std::int64_t jc = 0; jc < NT; jc += chunk_tiles) {
      const std::int64_t jc1 = std::min(NT, jc + chunk_tiles);
      for (std::int64_t ib = ib0; ib < ib1; ++ib) {
        const std::int64_t it = 2 * ib, mt = std::min<std::int64_t>(2, MT - it);
        const bfloat16* a[2] = {Ap + (it * KT + kb) * 512, Ap + ((it + mt - 1) * KT + kb) * 512};
        for (std::int64_t jt = jc; jt < jc1; jt += 2) {
          const std::int64_t nt = std::min<std::int64_t>(2, jc1 - jt);
          const bfloat16* b[2] = {Bp + jt * P * 32 + kb * 512, Bp + (jt + nt - 1) * P * 32 + kb * 512};
          float* c[4];
          std::int64_t ldc[4];
          bool edge[4] = {};
          for (std::int64_t r = 0; r < mt; ++r)
            for (std::int64_t q = 0; q < nt; ++q) {
              const std::int64_t t = 2 * r + q, i0 = 16 * (it + r), j0 = 16 * (jt + q);
              const std::int64_t rows = std::min<std::int64_t>(16, M - i0), cols = std::min<std::int64_t>(16, N - j0);
              edge[t] = rows < 16 || cols < 16;
              if (!edge[t]) {
                c[t] = C.row(i0) + j0;
                ldc[t] = C.stride() * static_cast<std::int64_t>(sizeof(float));
                continue;
              }
              c[t] = scratch[t];
              ldc[t] = 64;
              std::fill_n(scratch[t], 256, 0.0f);
              if (load)
                for (std::int64_t i = 0; i < rows; ++i) std::copy_n(C.row(i0 + i) + j0, cols, scratch[t] + 16 * i);
            }
          if (mt == 2 && nt == 2)
            amx_block<2, 2>(a, b, kbt, c, ldc, load);
          else if (mt == 2)
            amx_block<2, 1>(a, b, kbt, c, ldc, load);
          else if (nt == 2)
            amx_block<1, 2>(a, b, kbt, c, ldc, load);
          else
            amx_block<1, 1>(a, b, kbt, c, ldc, load);
          for (std::int64_t r = 0; r < mt; ++r)
            for (std::int64_t q = 0; q < nt; ++q) {
              const std::int64_t t = 2 * r + q;
              if (!edge[t]) continue;
              const std::int64_t i0 = 16 * (it + r), j0 = 16 * (jt + q);
              const std::int64_t rows = std::min<std::int64_t>(16, M - i0), cols = std::min<std::int64_t>(16, N - j0);
              for (std::int64_t i = 0; i < rows; ++i) std::copy_n(scratch[t] + 16 * i, cols, C.row(i0 + i) + j0);
            }
        }
      }
    }
  }
  amx_end();
}

// Row tile it of A, k-tiles [0, KT), as 16 x 32 tiles at out[(it KT + kt) 512], zero past M or K.
inline void pack_a_tiles(ConstMatrixView<bfloat16> A, std::int64_t KT, std::int64_t it0, std::int64_t it1,
                         bfloat16* out) noexcept {
  const std::int64_t M = A.rows(), K = A.cols();
  for (std::int64_t it = it0; it < it1; ++it)
    for (std::int64_t kt = 0; kt < KT; ++kt) {
      bfloat16* tile = out + (it * KT + kt) * 512;
      const std::int64_t k0 = 32 * kt, nk = std::clamp<std::int64_t>(K - k0, 0, 32);
      for (std::int64_t r = 0; r < 16; ++r) {
        bfloat16* dst = tile + 32 * r;
        const std::int64_t i = 16 * it + r;
        const std::int64_t n = i < M ? nk : 0;
        if (n > 0) std::copy_n(A.row(i) + k0, n, dst);
        std::fill(dst + n, dst + 32, bfloat16{});
      }
    }
}

// ws: bf16_gemm_workspace_size(M, K, N, amx) elements: A's tiles, then B's pairs.
inline void bf16_gemm_amx(ConstMatrixView<bfloat16> A, ConstMatrixView<bfloat16> B, MatrixView<float> C,
                          bool accumulate, bfloat16* ws) {
  const std::int64_t M = A.rows(), K = A.cols(), N = B.cols();
  const std::int64_t MT = (M + 15) / 16, NT = (N + 15) / 16, KT = (K + 31) / 32, P = KT * 16;
  bfloat16* const Ap = ws;
  bfloat16* const Bp = ws + bf16_gemm_layout(M, K, N, Bf16GemmPath::amx).second;
  const std::int64_t MB = (MT + 1) / 2;
  bf16_gemm_threads(M * N * K, [&](std::int64_t t, std::int64_t n) {
    pack_a_tiles(A, KT, share_begin(MT, t, n), share_begin(MT, t + 1, n), Ap);
    pack_b_pairs_fast(B, P, share_begin(NT, t, n), share_begin(NT, t + 1, n), Bp);
    bf16_gemm_barrier();
    amx_compute(Ap, Bp, M, N, KT, C, accumulate, share_begin(MB, t, n), share_begin(MB, t + 1, n));
  });
}

#endif  // SPRIG_BF16_GEMM_AMX

#if SPRIG_BF16_GEMM_X86

// C rows [i0, i0 + R), columns [j0, j0 + 16 V) (the last register masked to `last_mask`):
// sum over the pairs p < P_full of A(i, 2p..2p+1) . Bp(p), then, when K is odd, the last k
// alone. bp: packed panel of column j0 (panels P * 32 elements apart).
template <int R, int V>
__attribute__((target("avx512bf16,avx512f,avx512bw"))) inline void dp_tile(
    ConstMatrixView<bfloat16> A, std::int64_t i0, std::int64_t K, const bfloat16* bp, std::int64_t panel_stride,
    MatrixView<float> C, std::int64_t j0, __mmask16 last_mask, bool accumulate) noexcept {
  __m512 acc[R][V];
  const std::uint16_t* a[R];
  for (int r = 0; r < R; ++r) a[r] = reinterpret_cast<const std::uint16_t*>(A.row(i0 + r));
  SPRIG_UNROLL for (int r = 0; r < R; ++r) {
    float* c = C.row(i0 + r) + j0;
    SPRIG_UNROLL for (int v = 0; v < V; ++v) {
      const __mmask16 m = v == V - 1 ? last_mask : __mmask16(0xFFFF);
      acc[r][v] = accumulate ? _mm512_maskz_loadu_ps(m, c + 16 * v) : _mm512_setzero_ps();
    }
  }
  const std::int64_t pairs = K / 2;
  for (std::int64_t p = 0; p < pairs; ++p) {
    __m512i b[V];
    SPRIG_UNROLL for (int v = 0; v < V; ++v) b[v] = _mm512_loadu_si512(bp + v * panel_stride + p * 32);
    SPRIG_UNROLL for (int r = 0; r < R; ++r) {
      std::uint32_t pair;
      std::memcpy(&pair, a[r] + 2 * p, 4);
      const __m512i av = _mm512_set1_epi32(static_cast<int>(pair));
      SPRIG_UNROLL for (int v = 0; v < V; ++v) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], (__m512bh)av, (__m512bh)b[v]);
    }
  }
  if (K % 2 != 0) {  // the last k alone: A's pair is (a, 0), B's packing holds (b, 0)
    __m512i b[V];
    SPRIG_UNROLL for (int v = 0; v < V; ++v) b[v] = _mm512_loadu_si512(bp + v * panel_stride + pairs * 32);
    SPRIG_UNROLL for (int r = 0; r < R; ++r) {
      const __m512i av = _mm512_set1_epi32(static_cast<int>(a[r][K - 1]));
      SPRIG_UNROLL for (int v = 0; v < V; ++v) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], (__m512bh)av, (__m512bh)b[v]);
    }
  }
  SPRIG_UNROLL for (int r = 0; r < R; ++r) {
    float* c = C.row(i0 + r) + j0;
    SPRIG_UNROLL for (int v = 0; v < V; ++v) {
      const __mmask16 m = v == V - 1 ? last_mask : __mmask16(0xFFFF);
      _mm512_mask_storeu_ps(c + 16 * v, m, acc[r][v]);
    }
  }
}

template <int R>
inline void dp_rows(ConstMatrixView<bfloat16> A, std::int64_t i0, std::int64_t K, const bfloat16* bp,
                    std::int64_t panel_stride, MatrixView<float> C, std::int64_t j0, std::int64_t cols,
                    bool accumulate) noexcept {
  const std::int64_t v = (cols + 15) / 16;
  const auto mask = static_cast<__mmask16>(cols % 16 == 0 ? 0xFFFF : (1u << (cols % 16)) - 1u);
  switch (v) {
    case 1: dp_tile<R, 1>(A, i0, K, bp, panel_stride, C, j0, mask, accumulate); break;
    case 2: dp_tile<R, 2>(A, i0, K, bp, panel_stride, C, j0, mask, accumulate); break;
    case 3: dp_tile<R, 3>(A, i0, K, bp, panel_stride, C, j0, mask, accumulate); break;
    default: dp_tile<R, 4>(A, i0, K, bp, panel_stride, C, j0, mask, accumulate); break;
  }
}

// Rows [r0, r1) of C in tiles of 6 rows x 64 columns, over column chunks whose packed B fits in
// about 512 KiB of L2.
inline void avx512_bf16_compute(ConstMatrixView<bfloat16> A, const bfloat16* Bp, std::int64_t P, MatrixView<float> C,
                                bool accumulate, std::int64_t r0, std::int64_t r1) noexcept {
  constexpr std::int64_t kRows = 6, kCols = 64;
  const std::int64_t K = A.cols(), N = C.cols(), panel_stride = P * 32;
  const std::int64_t chunk =
      std::max<std::int64_t>(kCols, (512 * 1024 / std::max<std::int64_t>(1, 4 * P)) / kCols * kCols);
  for (std::int64_t jc = 0; jc < N; jc += chunk) {
    const std::int64_t jc1 = std::min(N, jc + chunk);
    for (std::int64_t i = r0; i < r1; i += kRows) {
      const std::int64_t rows = std::min(kRows, r1 - i);
      for (std::int64_t j = jc; j < jc1; j += kCols) {
        const std::int64_t cols = std::min(kCols, jc1 - j);
        const bfloat16* bp = Bp + (j / 16) * panel_stride;
        switch (rows) {
          case 1: dp_rows<1>(A, i, K, bp, panel_stride, C, j, cols, accumulate); break;
          case 2: dp_rows<2>(A, i, K, bp, panel_stride, C, j, cols, accumulate); break;
          case 3: dp_rows<3>(A, i, K, bp, panel_stride, C, j, cols, accumulate); break;
          case 4: dp_rows<4>(A, i, K, bp, panel_stride, C, j, cols, accumulate); break;
          case 5: dp_rows<5>(A, i, K, bp, panel_stride, C, j, cols, accumulate); break;
          default: dp_rows<6>(A, i, K, bp, panel_stride, C, j, cols, accumulate); break;
        }
      }
    }
  }
}

// ws: bf16_gemm_workspace_size(M, K, N, avx512_bf16) elements: B's pairs.
inline void bf16_gemm_avx512(ConstMatrixView<bfloat16> A, ConstMatrixView<bfloat16> B, MatrixView<float> C,
                             bool accumulate, bfloat16* ws) {
  const std::int64_t M = A.rows(), K = A.cols(), N = B.cols();
  const std::int64_t NT = (N + 15) / 16, P = (K + 1) / 2;
  bf16_gemm_threads(M * N * K, [&](std::int64_t t, std::int64_t n) {
    pack_b_pairs_fast(B, P, share_begin(NT, t, n), share_begin(NT, t + 1, n), ws);
    bf16_gemm_barrier();
    avx512_bf16_compute(A, ws, P, C, accumulate, share_begin(M, t, n), share_begin(M, t + 1, n));
  });
}

#endif  // SPRIG_BF16_GEMM_X86

// ws: bf16_gemm_workspace_size(M, K, N, portable) elements (64-byte aligned): A and B in float.
inline void bf16_gemm_portable(ConstMatrixView<bfloat16> A, ConstMatrixView<bfloat16> B, MatrixView<float> C,
                               bool accumulate, bfloat16* ws) {
  const std::int64_t M = A.rows(), K = A.cols(), N = B.cols();
  const std::span<float> Af(reinterpret_cast<float*>(ws), static_cast<std::size_t>(M * K));
  const std::span<float> Bf(reinterpret_cast<float*>(ws + bf16_gemm_layout(M, K, N, Bf16GemmPath::portable).second),
                            static_cast<std::size_t>(K * N));
  bf16_gemm_threads(M * N * K, [&](std::int64_t t, std::int64_t n) {
    for (std::int64_t i = share_begin(M, t, n); i < share_begin(M, t + 1, n); ++i)
      to_float(std::span<const bfloat16>(A.row(i), static_cast<std::size_t>(K)),
               std::span<float>(Af.data() + i * K, static_cast<std::size_t>(K)));
    for (std::int64_t k = share_begin(K, t, n); k < share_begin(K, t + 1, n); ++k)
      to_float(std::span<const bfloat16>(B.row(k), static_cast<std::size_t>(N)),
               std::span<float>(Bf.data() + k * N, static_cast<std::size_t>(N)));
    bf16_gemm_barrier();
    // Each row of C goes through the same arithmetic in any row range (the loop nest's
    // register tiles keep one accumulator per row), so the split does not change the bits.
    const std::int64_t i0 = share_begin(M, t, n), rows = share_begin(M, t + 1, n) - i0;
    if (rows == 0) return;
    gemm_portable<float>(Trans::no, Trans::no, rows, N, K, 1.0f, ConstMatrixView<float>(Af.data() + i0 * K, rows, K),
                         ConstMatrixView<float>(Bf.data(), K, N), accumulate ? 1.0f : 0.0f, C.block(i0, 0, rows, N));
  });
}

}  // namespace detail

// Why `path` cannot run in this process ("the CPU lacks AMX-TILE AMX-BF16", ...), or empty
// when it can. The first query of amx asks Linux for the tile state (see the top of this file).
inline std::string bf16_gemm_unavailable_reason(Bf16GemmPath path) { return detail::bf16_gemm_reason(path); }

// Whether bf16_gemm can take `path` here (portable: always).
inline bool bf16_gemm_available(Bf16GemmPath path) { return detail::bf16_gemm_reason(path).empty(); }

// The path bf16_gemm(A, B, C, update) takes in this process: amx, else avx512_bf16, else portable.
inline Bf16GemmPath bf16_gemm_path() {
  if (bf16_gemm_available(Bf16GemmPath::amx)) return Bf16GemmPath::amx;
  if (bf16_gemm_available(Bf16GemmPath::avx512_bf16)) return Bf16GemmPath::avx512_bf16;
  return Bf16GemmPath::portable;
}

// The bf16 elements of packing memory bf16_gemm takes on `path` for A [M x K] times B [K x N]
// (0 for an empty product). O(1).
inline std::int64_t bf16_gemm_workspace_size(std::int64_t M, std::int64_t K, std::int64_t N,
                                             Bf16GemmPath path) noexcept {
  return M <= 0 || K <= 0 || N <= 0 ? 0 : detail::bf16_gemm_layout(M, K, N, path).total;
}

// C = A B (overwrite) or C += A B (accumulate) on `path` in the caller's packing memory:
// `workspace` holds at least bf16_gemm_workspace_size(M, K, N, path) elements and starts on a
// 64-byte boundary, its contents unspecified before and after; nothing allocates. The contract
// at the top of this file; throws ArgumentError when the path is not available here
// (bf16_gemm_unavailable_reason) or the workspace is short or misaligned, ShapeError as below.
inline void bf16_gemm(ConstMatrixView<bfloat16> A, ConstMatrixView<bfloat16> B, MatrixView<float> C, Update update,
                      Bf16GemmPath path, std::span<bfloat16> workspace) {
  const std::int64_t M = A.rows(), K = A.cols(), N = B.cols();
  if (B.rows() != K || C.rows() != M || C.cols() != N)
    throw ShapeError(detail::message("bf16_gemm: A is ", M, "x", K, ", B is ", B.rows(), "x", N, ", C is ", C.rows(),
                                     "x", C.cols(), " (expected ", M, "x", N, " and B with ", K, " rows)"));
  detail::check_no_overlap("bf16_gemm", "C", C, "A", A);
  detail::check_no_overlap("bf16_gemm", "C", C, "B", B);
  if (const std::string& why = detail::bf16_gemm_reason(path); !why.empty())
    throw ArgumentError(detail::message("bf16_gemm: the ", path_name(path), " path is not available: ", why));
  const bool accumulate = update == Update::accumulate;
  if (M == 0 || N == 0) return;
  if (K == 0) {
    if (!accumulate) C.fill(0.0f);
    return;
  }
  const std::int64_t need = bf16_gemm_workspace_size(M, K, N, path);
  if (std::ssize(workspace) < need || reinterpret_cast<std::uintptr_t>(workspace.data()) % 64 != 0)
    throw ArgumentError(
        detail::message("bf16_gemm: the workspace holds ", workspace.size(), " elements",
                        reinterpret_cast<std::uintptr_t>(workspace.data()) % 64 != 0 ? " off a 64-byte boundary" : "",
                        "; this product needs ", need, " on a 64-byte boundary"));
  bfloat16* const ws = workspace.data();
  switch (path) {
#if SPRIG_BF16_GEMM_AMX
    case Bf16GemmPath::amx: detail::bf16_gemm_amx(A, B, C, accumulate, ws); return;
#endif
#if SPRIG_BF16_GEMM_X86
    case Bf16GemmPath::avx512_bf16: detail::bf16_gemm_avx512(A, B, C, accumulate, ws); return;
#endif
    default: detail::bf16_gemm_portable(A, B, C, accumulate, ws); return;
  }
}

// The same in packing memory of its own, allocated for the call.
inline void bf16_gemm(ConstMatrixView<bfloat16> A, ConstMatrixView<bfloat16> B, MatrixView<float> C, Update update,
                      Bf16GemmPath path) {
  AlignedVector<bfloat16> ws(static_cast<std::size_t>(bf16_gemm_workspace_size(A.rows(), A.cols(), B.cols(), path)));
  bf16_gemm(A, B, C, update, path, std::span<bfloat16>(ws));
}

// C = A B or C += A B on the fastest path here (bf16_gemm_path()).
inline void bf16_gemm(ConstMatrixView<bfloat16> A, ConstMatrixView<bfloat16> B, MatrixView<float> C,
                      Update update = Update::overwrite) {
  bf16_gemm(A, B, C, update, bf16_gemm_path());
}

}  // namespace sprig
