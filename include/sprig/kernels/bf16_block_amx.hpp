// sprig/kernels/bf16_block_amx.hpp — the AMX path of the bf16 block forward (bf16_block_kernels.hpp):
// Y (=|+=) W X for a BlockPaddedCSR W in R x C blocks, bf16 weights and X, float sums and Y.
//
// How: a block is already a tile of A. `tdpbf16ps` multiplies an R x C bf16 tile (one block,
// rows 2C bytes apart as W's bf16 shadow stores it) by a C x 16 tile of X packed in pairs
// (operands.hpp's pair rows: rows 2k and 2k + 1 interleaved per batch column, C / 2 pair rows
// of one block column, one panel's row apart) into R x 16 floats. Per block row and group of
// up to four 16-column chunks of a panel, four C tiles stay in the tile registers across all
// the row's blocks: each block is one A load, then one B load and one tdpbf16ps per chunk.
// The tiles are stored to a small float buffer and finished (accumulate, bias, ReLU) in
// 16-float registers into Y (bf16_spmm.hpp's store_bf16_spmm); an overwritten Y of at least
// SPRIG_BF16_BLOCK_AMX_STREAM_BYTES (tuning.hpp) with streaming stores, since waiting for Y's
// lines became the bound.
//
// Shapes: R <= 16 (a tile's rows), C even and C <= 32 (a tile row of A holds 64 bytes);
// kAmxBlockForward<R, C>. Edges as the other paths: X's pair rows are zero past K (BlockPaddedCSR
// keeps an edge block's out-of-matrix weights 0), the batch is padded to whole chunks with
// zeros and only Y's rows and columns inside the matrix are stored.
//
// Numerics: each output is a float sum of the block row's products (exact in float) in an
// order fixed by W's row and the block shape (tdpbf16ps adds the pair products of a tile row
// into the accumulator in the hardware's order), within the bound bf16_block_kernels.hpp states;
// subnormal inputs and results are flushed as on the avx512_bf16 path. Bitwise identical for
// every thread count (rows are computed whole by one thread).
#pragma once

#include <algorithm>
#include <cstdint>

#include "../core/bfloat16.hpp"
#include "../core/matrix.hpp"
#include "../core/padded_csr.hpp"
#include "../core/tuning.hpp"
#include "amx_tiles.hpp"
#include "bf16_spmm.hpp"
#include "operands.hpp"
#include "panels.hpp"
#include "parallel.hpp"
#include "simd.hpp"
#include "update_mode.hpp"
#include "workspace.hpp"

#if SPRIG_BF16_GEMM_AMX && SPRIG_BF16_BLOCK_DP
#  define SPRIG_BF16_BLOCK_AMX 1
#else
#  define SPRIG_BF16_BLOCK_AMX 0
#endif

namespace sprig::detail {

// The block shapes the AMX forward takes.
template <int R, int C>
inline constexpr bool kAmxBlockForward = R >= 1 && R <= 16 && C % 2 == 0 && C >= 2 && C <= 32;

#if SPRIG_BF16_BLOCK_AMX

// C tiles per group (16 batch columns each): tiles 0..3 accumulate, 4 holds the block, 5..7
// take turns with the X pair rows.
inline constexpr int kAmxBlockChunks = 4;

template <int R, int C>
AmxTileConfig amx_block_forward_config() noexcept {
  AmxTileConfig cfg;
  for (int t = 0; t < 8; ++t) {
    cfg.rows[t] = static_cast<std::uint8_t>(t <= 4 ? R : C / 2);
    cfg.colsb[t] = static_cast<std::uint16_t>(t == 4 ? 2 * C : 64);
  }
  return cfg;
}

// One block row (slots [s, s + n) with block columns cols[]) times Q chunks of one panel
// (xp: the panel's first pair row; xs_bytes: between pair rows), the R x 16 sums of chunk q
// stored at out + q * 256 (rows 64 bytes apart).
template <class Index, int R, int C, int Q>
__attribute__((target("amx-tile,amx-bf16"))) inline void amx_block_row(const Index* __restrict cols, std::int64_t s,
                                                                       std::int64_t n, const bfloat16* values,
                                                                       const char* xp, std::int64_t xs_bytes,
                                                                       float* out) noexcept {
  amx_compiler_barrier(out);
  _tile_zero(0);
  if constexpr (Q > 1) _tile_zero(1);
  if constexpr (Q > 2) _tile_zero(2);
  if constexpr (Q > 3) _tile_zero(3);
  const std::int64_t block_row_bytes = std::int64_t{C / 2} * xs_bytes;
  for (std::int64_t q = s; q < s + n; ++q) {
    const char* x = xp + static_cast<std::int64_t>(cols[q]) * block_row_bytes;
    _tile_loadd(4, values + q * (std::int64_t{R} * C), 2 * C);
    _tile_loadd(5, x, xs_bytes);
    _tile_dpbf16ps(0, 4, 5);
    if constexpr (Q > 1) {
      _tile_loadd(6, x + 64, xs_bytes);
      _tile_dpbf16ps(1, 4, 6);
    }
    if constexpr (Q > 2) {
      _tile_loadd(7, x + 128, xs_bytes);
      _tile_dpbf16ps(2, 4, 7);
    }
    if constexpr (Q > 3) {
      _tile_loadd(5, x + 192, xs_bytes);
      _tile_dpbf16ps(3, 4, 5);
    }
  }
  _tile_stored(0, out, 64);
  if constexpr (Q > 1) _tile_stored(1, out + 256, 64);
  if constexpr (Q > 2) _tile_stored(2, out + 512, 64);
  if constexpr (Q > 3) _tile_stored(3, out + 768, 64);
}

// Y (=|+=) P X (+ bias, ReLU) on the AMX tiles; P is W's block pattern, values its bf16
// shadow. Needs bf16_gemm_reason(Bf16GemmPath::amx) empty and kAmxBlockForward<R, C>.
template <class A, ColumnIndex Index, int R, int C>
void block_spmm_amx(const PaddedCSR<float, Index>& P, const bfloat16* values, ConstMatrixView<bfloat16> X,
                    MatrixView<float> Y, Update mode, KernelWorkspace<float>& ws, const float* bias, bool relu) {
  static_assert(kAmxBlockForward<R, C>);
  using B = Batch<float, A>;
  static_assert(B::size == 16, "the AMX path runs where the kernels are built for AVX-512");
  constexpr std::int64_t N = 16;
  const std::int64_t Bw = X.cols(), M = Y.rows();
  const std::int64_t lines = P.cols() * C / 2;
  const PanelPlan plan(Bw, lines, N, sizeof(Bf16Pair), kPanelBudgetBytes, 2 * kAmxBlockChunks);
  Bf16Pair* packed = operand_buffer<Bf16Pair>(ws, plan.packed_size(lines));
  ws.partition.update(P);
  const bool accumulate = mode == Update::accumulate;
  // Streaming stores (tuning.hpp) for a large overwritten Y; ordered before the caller's next
  // reads by the fence after the parallel loop.
  const bool stream = !accumulate && M * Bw * std::int64_t{sizeof(float)} >= SPRIG_BF16_BLOCK_AMX_STREAM_BYTES;
  const AmxTileConfig cfg = amx_block_forward_config<R, C>();
  run_partitioned(
      ws.partition, P.nnz() * R * C * Bw,
      [&](int t, int n) { pack_bf16_pairs<A>(plan, X, lines, packed, lines * t / n, lines * (t + 1) / n); },
      [&](std::int64_t i0, std::int64_t i1) {
        if (i0 >= i1) return;
        alignas(64) float sums[kAmxBlockChunks * 256];
        amx_begin(cfg);
        const Index* cols = P.col_indices().data();
        for (std::int64_t p = 0; p < plan.count(); ++p) {
          const std::int64_t b0 = plan.begin(p), regs = plan.regs_of(p), valid = plan.columns(p);
          const char* xp = reinterpret_cast<const char*>(packed + lines * b0);
          const std::int64_t xs_bytes = regs * N * std::int64_t{sizeof(Bf16Pair)};
          for (std::int64_t g = 0; g < regs; g += kAmxBlockChunks) {
            const std::int64_t q = std::min<std::int64_t>(kAmxBlockChunks, regs - g);
            const char* xg = xp + g * N * std::int64_t{sizeof(Bf16Pair)};
            for (std::int64_t i = i0; i < i1; ++i) {
              const std::int64_t s = P.row_start(i), nz = P.row_nnz(i);
              switch (q) {
                case 1: amx_block_row<Index, R, C, 1>(cols, s, nz, values, xg, xs_bytes, sums); break;
                case 2: amx_block_row<Index, R, C, 2>(cols, s, nz, values, xg, xs_bytes, sums); break;
                case 3: amx_block_row<Index, R, C, 3>(cols, s, nz, values, xg, xs_bytes, sums); break;
                default: amx_block_row<Index, R, C, 4>(cols, s, nz, values, xg, xs_bytes, sums); break;
              }
              const std::int64_t rows = std::min<std::int64_t>(R, M - i * R);
              for (std::int64_t c = 0; c < q; ++c) {
                const std::int64_t j0 = b0 + (g + c) * N, nv = std::min<std::int64_t>(N, b0 + valid - j0);
                if (nv <= 0) break;
                for (std::int64_t r = 0; r < rows; ++r) {
                  float* y = Y.row(i * R + r) + j0;
                  B v = B::load_aligned(sums + c * 256 + r * 16);
                  const float* br = bias ? bias + i * R + r : nullptr;
                  if (stream && nv == N && (reinterpret_cast<std::uintptr_t>(y) & 63) == 0) {  // overwrite
                    if (br) v += B(*br);
                    if (relu) v = xsimd::select(v > B(0.0f), v, B(0.0f));
                    _mm512_stream_ps(y, v);
                  } else {
                    store_bf16_spmm<A>(y, v, nv, accumulate, br, relu);
                  }
                }
              }
            }
          }
        }
        amx_end();
        if (stream) _mm_sfence();
      });
}

#endif

}  // namespace sprig::detail
