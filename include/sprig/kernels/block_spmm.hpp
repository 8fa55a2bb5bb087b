// sprig/kernels/block_spmm.hpp — the block-sparse products of a linear layer on a
// BlockPaddedCSR W (M x K in R x C blocks), X, Y, dY, dX dense and feature-major (batch
// contiguous):
//   block_spmm:            Y[M,B]  (=|+=) W X      (optionally act(W X + bias), RowEpilogue)
//   block_spmm_transposed: dX[K,B] (=|+=) W^T dY   (through the transposed block pattern)
//
// How: as spmm (spmm.hpp), the batch is cut into panels of whole SIMD registers (panels.hpp,
// X packed where it is not read in place) and threads take nnz-balanced ranges of block rows.
// For one block row and one panel, a tile of R output rows stays in registers across all the
// row's blocks and is stored once; per block and block column c, the X panel row bj*C + c is
// loaded once and multiplied with the R weights of that column, broadcast: each X load
// serves R multiply-adds, where the unstructured kernel gets one. The tile is at most 8 rows
// (taller blocks are done in chunks of 8 rows, each over all the row's blocks) and holds
// three quarters of the register file in accumulators (panel width per tile height:
// block_max_regs), so that the tile, the X registers and a broadcast fit. Small tiles deal
// the blocks round-robin to independent accumulator sets (block_chains), summed pairwise at
// the end, so that the multiply-add latency is hidden; the same kernel runs W^T, whose C x R
// blocks are W's blocks read transposed in place (TransposedBlocks), not copied (but on the
// bf16 pair path: kStagesTranspose).
//
// Edges: M and K need not be multiples of R and C. A block of the last block column reads
// only the X rows inside the matrix (one branch per block), and the last block row stores
// only the rows inside it; an edge block's out-of-matrix weights meet only skipped X rows or
// unstored accumulators, so they never reach a result.
//
// Operands: X (dY) and W's values may be bf16 (operands.hpp: widened in registers, the bytes
// read halved) with float accumulation and output; bf16_block_kernels.hpp is that interface,
// and adds the vdpbf16ps pair path through the same tiles.
//
// Determinism: each output element is summed in an order fixed by its block row, the block
// shape and the batch width alone (chain q mod chains per block, then the pairwise sum), so
// the result is bitwise identical for every thread count.
#pragma once

#include <type_traits>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <iterator>

#include "../core/block_padded_csr.hpp"
#include "../core/config.hpp"
#include "../core/error.hpp"
#include "../core/matrix.hpp"
#include "../core/padded_csr.hpp"
#include "../core/tuning.hpp"
#include "operands.hpp"
#include "output_store.hpp"
#include "panels.hpp"
#include "parallel.hpp"
#include "row_epilogue.hpp"
#include "row_partition.hpp"
#include "simd.hpp"
#include "spmm.hpp"
#include "transpose.hpp"
#include "update_mode.hpp"
#include "workspace.hpp"


namespace sprig {

namespace detail {

// Where the kernel reads the block of slot s, as a kRows x kCols block whose element (r, c)
// is at(s)[r * kRowStep + c * kColStep].
// W's own R x C blocks, row-major.
template <class T, int R, int C>
struct ForwardBlocks {
  static constexpr int kRows = R, kCols = C;
  static constexpr std::int64_t kRowStep = C, kColStep = 1;
  const T* values;
  SPRIG_ALWAYS_INLINE const T* at(std::int64_t s) const noexcept { return values + s * (std::int64_t{R} * C); }
  SPRIG_ALWAYS_INLINE void prefetch(std::int64_t) const noexcept {}  // a row's blocks are contiguous
};
// W^T's C x R blocks: for slot t of the transposed pattern, W's block at source[t], read
// transposed (element (c, r) of W^T's block is W's (r, c)). Consecutive slots of W^T gather
// from different block rows of W, so the blocks ahead are prefetched.
template <class T, int R, int C>
struct TransposedBlocks {
  static constexpr int kRows = C, kCols = R;
  static constexpr std::int64_t kRowStep = 1, kColStep = C;
  const T* values;           // W.values()
  const SourceSlot* source;  // transposed().source_slot
  SPRIG_ALWAYS_INLINE const T* at(std::int64_t t) const noexcept {
    return values + static_cast<std::int64_t>(source[t]) * (std::int64_t{R} * C);
  }
  SPRIG_ALWAYS_INLINE void prefetch(std::int64_t t) const noexcept {
    constexpr std::int64_t bytes = std::min<std::int64_t>(std::int64_t{R} * C * sizeof(T), 256);
    const char* p = reinterpret_cast<const char*>(at(t));
    for (std::int64_t off = 0; off < bytes; off += 64) detail::prefetch(p + off);
  }
};

#if SPRIG_BF16_BLOCK_DP
// For a bf16 block of at most 64 entries: out[o] = in[index[o]], the transpose as one word
// permutation over (at most) two registers.
template <int R, int C>
struct BlockTransposeIndex {
  alignas(64) std::uint16_t index[64] = {};
  constexpr BlockTransposeIndex() noexcept {
    for (int o = 0; o < R * C; ++o) index[o] = static_cast<std::uint16_t>(o % R * C + o / R);
  }
};
template <int R, int C>
inline constexpr BlockTransposeIndex<R, C> kBlockTransposeIndex{};
#endif

// out (C x R, row-major) = the transpose of the R x C block in (row-major). A bf16 block of at
// most 64 entries goes through vpermt2w where the bf16 pair paths are built (the copy is part
// of every bf16 input-gradient call there; element by element it cost more than the product
// of a small batch).
template <int R, int C, class T>
SPRIG_ALWAYS_INLINE void transpose_block(const T* __restrict in, T* __restrict out) noexcept {
#if SPRIG_BF16_BLOCK_DP
  if constexpr (std::is_same_v<T, bfloat16> && R * C <= 64 && R * C > 1) {
    constexpr int n = R * C;
    constexpr __mmask32 lo = n >= 32 ? ~__mmask32{0} : (__mmask32{1} << n) - 1;
    constexpr __mmask32 hi = n <= 32 ? 0 : n == 64 ? ~__mmask32{0} : (__mmask32{1} << (n - 32)) - 1;
    const auto* idx = kBlockTransposeIndex<R, C>.index;
    const __m512i a = _mm512_maskz_loadu_epi16(lo, in), b = _mm512_maskz_loadu_epi16(hi, in + 32);
    _mm512_mask_storeu_epi16(out, lo, _mm512_permutex2var_epi16(a, _mm512_load_si512(idx), b));
    if constexpr (n > 32)
      _mm512_mask_storeu_epi16(out + 32, hi, _mm512_permutex2var_epi16(a, _mm512_load_si512(idx + 32), b));
    return;
  }
#endif
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) out[c * R + r] = in[r * C + c];
}

// Slots [q0, q1) of W^T's blocks copied out transposed: out + q R C gets the transpose of W's
// R x C block at values + source[q] R C (transpose.hpp's source_slot); slots without a source
// (padding, dead) are left as they are. O((q1 - q0) R C).
template <int R, int C, class T>
void transpose_blocks(const T* values, const SourceSlot* source, T* out, std::int64_t q0, std::int64_t q1) noexcept {
  constexpr std::int64_t RC = std::int64_t{R} * C;
  for (std::int64_t q = q0; q < q1; ++q)
    if (source[q] >= 0) transpose_block<R, C>(values + std::int64_t{source[q]} * RC, out + q * RC);
}

// Whether the vdpbf16ps path copies W^T's blocks transposed before the product: its weight
// pairs run along W's block rows, C apart in W's blocks, and a pair assembled from two 16-bit
// loads per broadcast costs more than the dot product it feeds; the copy (O(nnz_blocks R C),
// in the pack phase) makes every pair one 32-bit broadcast load, as in the forward.
template <class Blocks>
inline constexpr bool kStagesTranspose = false;
template <int R, int C>
inline constexpr bool kStagesTranspose<TransposedBlocks<bfloat16, R, C>> = true;

// The tile height for blocks of R rows (taller blocks go in chunks of this many rows), and
// how many accumulator sets a tile of `accs` registers deals its blocks to (>= 8 registers
// of multiply-adds in flight).
constexpr int block_tile_rows(int R) noexcept { return R < 8 ? R : 8; }
constexpr int block_chains(int accs) noexcept { return accs >= 8 ? 1 : 8 / accs; }

// Which rows a block kernel reads and writes: `in_rows` rows of input (X or dY) and the
// output view; the Y row count bounds the last block row's store. In and Out: the input's and
// output's element types (T, or bf16 in and float out for the bf16 kernels).
template <class T, class In, class Out, ColumnIndex Index, int R, int C>
void check_block_operands(const char* fn, const BlockPaddedCSR<T, Index, R, C>& W, const char* in_name,
                          const ConstMatrixView<In>& in, std::int64_t in_rows, const char* out_name,
                          const MatrixView<Out>& out, std::int64_t out_rows) {
  if (in.rows() != in_rows || out.rows() != out_rows || out.cols() != in.cols())
    throw ShapeError(message(fn, ": W is ", W.rows(), "x", W.cols(), " (", R, "x", C, " blocks), ", in_name, " is ",
                             in.rows(), "x", in.cols(), ", ", out_name, " is ", out.rows(), "x", out.cols(), " (need ",
                             in_name, " ", in_rows, "xB and ", out_name, " ", out_rows, "xB)"));
  check_no_overlap(fn, out_name, out, in_name, in);
  check_no_overlap(fn, out_name, out, "W's values", W.values());
}

#if SPRIG_KERNEL_SIMD
// The most panel registers a tile of `rows` rows may span: three quarters of the register
// file hold accumulators (12 of 16, 24 of 32), the rest the X registers and a broadcast.
// Using the 32 registers of AVX-512 and AArch64 rather than a 16-register budget pays off
// (docs/block_sparse.md has the figures).
template <class A>
constexpr int block_max_regs(int rows) noexcept {
  return std::clamp(kVectorRegistersOf<A> * 3 / 4 / rows, 1, static_cast<int>(kMaxPanelRegs));
}

// One block's contribution to a tile: for each of its first cn block columns (BC, or fewer for
// an edge block), the X panel row loaded once into G registers and multiplied with the block
// column's Rows weights.
template <class A, class T, int Rows, int G, int BC, std::int64_t RS, std::int64_t CS, bool Full, class WT, class XT>
SPRIG_ALWAYS_INLINE void block_fma(Batch<T, A> (&acc)[Rows][G], const WT* __restrict w, const XT* __restrict x,
                                   std::int64_t xs, std::int64_t cn) noexcept {
  using B = Batch<T, A>;
  constexpr std::int64_t N = B::size;
  SPRIG_UNROLL for (int c = 0; c < BC; ++c) {
    if (!Full && c >= cn) break;
    B xv[G];
    SPRIG_UNROLL for (int g = 0; g < G; ++g) xv[g] = load_operand<A, T>(x + c * xs + g * N);
    SPRIG_UNROLL for (int r = 0; r < Rows; ++r) {
      const B wv(operand_value<T>(w[r * RS + c * CS]));
      SPRIG_UNROLL for (int g = 0; g < G; ++g) acc[r][g] = xsimd::fma(wv, xv[g], acc[r][g]);
    }
  }
}

#if SPRIG_BF16_BLOCK_DP
// One block's contribution on the vdpbf16ps path: per pair of block columns (c, c + 1), the X
// pair row (operands.hpp: Bf16Pair) loaded once into G registers of 16 batch columns and, per
// tile row, the two weights broadcast as one 32-bit pair: one instruction adds both products
// to each lane, so each instruction does two multiply-adds per lane where fma does one.
template <class A, int Rows, int G, int BC, std::int64_t RS, std::int64_t CS>
SPRIG_ALWAYS_INLINE void block_dp_pairs(Batch<float, A> (&acc)[Rows][G], const bfloat16* __restrict w,
                                        const Bf16Pair* __restrict x, std::int64_t xs) noexcept {
  static_assert(BC % 2 == 0 && Batch<float, A>::size == 16);
  SPRIG_UNROLL for (int c = 0; c < BC; c += 2) {
    __m512i xv[G];
    SPRIG_UNROLL for (int g = 0; g < G; ++g) xv[g] = _mm512_loadu_si512(x + (c / 2) * xs + g * 16);
    SPRIG_UNROLL for (int r = 0; r < Rows; ++r) {
      std::uint32_t pair;
      if constexpr (CS == 1)  // adjacent in memory: one 32-bit broadcast load
        std::memcpy(&pair, w + r * RS + c, sizeof pair);
      else
        pair = std::uint32_t{w[r * RS + c * CS].bits} | std::uint32_t{w[r * RS + (c + 1) * CS].bits} << 16;
      const __m512bh wv = (__m512bh)_mm512_set1_epi32(static_cast<int>(pair));
      SPRIG_UNROLL for (int g = 0; g < G; ++g) acc[r][g] =
          Batch<float, A>(_mm512_dpbf16_ps(acc[r][g], wv, (__m512bh)xv[g]));
    }
  }
}
#endif

// Adds the block of `slot` to a tile: its first X rows inside the matrix (all BC but in the
// last block column; a one-column block is never partial, and saying so keeps the tile in
// registers).
template <class A, class T, class Index, int Rows, int G, class Blocks, class XT>
SPRIG_ALWAYS_INLINE void block_one(Batch<T, A> (&acc)[Rows][G], const Index* __restrict cols, std::int64_t slot,
                                   const Blocks& blocks, int r0, const XT* __restrict xp, std::int64_t xs,
                                   std::int64_t in_rows) noexcept {
  constexpr int BC = Blocks::kCols;
  constexpr std::int64_t RS = Blocks::kRowStep, CS = Blocks::kColStep;
  const std::int64_t x0 = static_cast<std::int64_t>(cols[slot]) * BC;
  const auto* w = blocks.at(slot) + r0 * RS;
#if SPRIG_BF16_BLOCK_DP
  if constexpr (std::is_same_v<XT, Bf16Pair>) {  // pair rows padded to whole blocks: never partial
    block_dp_pairs<A, Rows, G, BC, RS, CS>(acc, w, xp + x0 / 2 * xs, xs);
  } else
#endif
  {
    const XT* x = xp + x0 * xs;
    if (BC == 1 || x0 + BC <= in_rows) [[likely]]
      block_fma<A, T, Rows, G, BC, RS, CS, true>(acc, w, x, xs, BC);
    else
      block_fma<A, T, Rows, G, BC, RS, CS, false>(acc, w, x, xs, in_rows - x0);
  }
}

// Rows [row0, row0 + rows_valid) of the output over one panel: a tile of Rows block rows
// (from block row r0 on) and G registers, over the n blocks from slot s on (block columns
// cols[s ..)). X panel rows are xs elements apart from xp, `in_rows` of them inside the
// matrix; the first `valid` columns of each tile row are stored at y (rows ys apart) through
// finish()'s order (bias: the chunk's first row's or nullptr).
template <class A, class T, class Index, int Rows, int G, class Blocks, class XT, class Out>
SPRIG_ALWAYS_INLINE void block_tile(const Index* __restrict cols, std::int64_t s, std::int64_t n, const Blocks& blocks,
                                    int r0, const XT* __restrict xp, std::int64_t xs, std::int64_t in_rows,
                                    Out* __restrict y, std::int64_t ys, std::int64_t rows_valid, std::int64_t valid,
                                    bool accumulate, const T* bias, bool relu, const bfloat16* scale, std::int64_t ss,
                                    bool stream) noexcept {
  using B = Batch<T, A>;
  constexpr std::int64_t N = B::size;
  constexpr int BC = Blocks::kCols;
  constexpr int Ch = block_chains(Rows * G);
  constexpr std::int64_t D = SPRIG_BLOCK_SPMM_PREFETCH;
  constexpr std::int64_t row_bytes = G * N * static_cast<std::int64_t>(sizeof(XT));
  B acc[Ch][Rows][G];
  SPRIG_UNROLL for (int k = 0; k < Ch; ++k) SPRIG_UNROLL for (int r = 0; r < Rows; ++r)
      SPRIG_UNROLL for (int g = 0; g < G; ++g) acc[k][r][g] = B(T(0));
  std::int64_t q = 0;
  for (; q + Ch <= n; q += Ch) {
    if (q + D + Ch <= n) SPRIG_UNROLL for (int k = 0; k < Ch; ++k) {
        const XT* x = xp + static_cast<std::int64_t>(cols[s + q + D + k]) * (BC / kRowsPerLine<XT>)*xs;
        SPRIG_UNROLL for (int c = 0; c < BC / kRowsPerLine<XT>; ++c) prefetch_row_start<row_bytes>(x + c * xs);
        blocks.prefetch(s + q + D + k);
      }
    SPRIG_UNROLL for (int k = 0; k < Ch; ++k)
        block_one<A, T, Index, Rows, G>(acc[k], cols, s + q + k, blocks, r0, xp, xs, in_rows);
  }
  SPRIG_UNROLL for (int k = 0; k < Ch - 1; ++k)  // the last < Ch blocks
      if (q + k < n) block_one<A, T, Index, Rows, G>(acc[k], cols, s + q + k, blocks, r0, xp, xs, in_rows);
  SPRIG_UNROLL for (int step = 1; step < Ch; step *= 2)  // pairwise: ((a0 + a1) + (a2 + a3)) + ...
      SPRIG_UNROLL for (int k = 0; k + step < Ch; k += 2 * step) SPRIG_UNROLL for (int r = 0; r < Rows; ++r)
          SPRIG_UNROLL for (int g = 0; g < G; ++g) acc[k][r][g] += acc[k + step][r][g];
  for (int r = 0; r < Rows && r < rows_valid; ++r) {
    Out* yr = y + r * ys;
    const T* br = bias ? bias + r : nullptr;
    for (int g = 0; g < G && g * N < valid; ++g)
      store_output<A>(yr + g * N, acc[0][r][g], std::min(N, valid - g * N), accumulate, br, relu,
                      scale ? scale + r * ss + g * N : nullptr, stream);
  }
}

// Block rows [i0, i1) of pattern P over one panel (b0: its first batch column), in tiles of
// block_tile_rows(kRows) rows; the rows past the output's end are not stored.
template <class A, class T, class Index, int G, class Blocks, class XT, class Out>
void block_panel_rows(const PaddedCSR<T, Index>& P, const Blocks& blocks, std::int64_t i0, std::int64_t i1,
                      const XT* xp, std::int64_t xs, std::int64_t in_rows, MatrixView<Out> Y, std::int64_t b0,
                      std::int64_t valid, bool accumulate, const T* bias, bool relu, ConstMatrixView<bfloat16> scale,
                      bool stream) noexcept {
  constexpr int BR = Blocks::kRows;
  constexpr int Rows = block_tile_rows(BR);
  constexpr int Tail = BR % Rows;
  const Index* cols = P.col_indices().data();
  for (std::int64_t i = i0; i < i1; ++i) {
    const std::int64_t s = P.row_start(i), n = P.row_nnz(i);
    for (int r0 = 0; r0 < BR; r0 += Rows) {
      const std::int64_t row = i * BR + r0;
      if (row >= Y.rows()) break;
      const std::int64_t rv = std::min<std::int64_t>(Y.rows() - row, std::min(Rows, BR - r0));
      Out* y = Y.row(row) + b0;
      const T* br = bias ? bias + row : nullptr;
      const bfloat16* sr = scale.data() ? scale.row(row) + b0 : nullptr;
      if constexpr (Tail != 0)
        if (BR - r0 < Rows) {
          block_tile<A, T, Index, Tail, G>(cols, s, n, blocks, r0, xp, xs, in_rows, y, Y.stride(), rv, valid,
                                           accumulate, br, relu, sr, scale.stride(), stream);
          continue;
        }
      block_tile<A, T, Index, Rows, G>(cols, s, n, blocks, r0, xp, xs, in_rows, y, Y.stride(), rv, valid, accumulate,
                                       br, relu, sr, scale.stride(), stream);
    }
  }
}

// Y (=|+=) P X for block pattern P read through `blocks`: X has the input rows (the pattern's
// columns times kCols, the last block column possibly partial), Y the output rows. X and the
// blocks' values are T or bf16 (widened in registers), Y is T. Pairs (bf16 only, kCols even):
// the vdpbf16ps path, X packed as pair rows (operands.hpp) over whole blocks, never in place,
// and W^T's blocks copied transposed first (kStagesTranspose).
template <class A, Value T, ColumnIndex Index, class Blocks, class XT, bool Pairs = false, class Out = T>
void block_spmm_simd(const PaddedCSR<T, Index>& P, const Blocks& blocks, ConstMatrixView<XT> X, MatrixView<Out> Y,
                     Update mode, KernelWorkspace<T>& ws, const T* bias, bool relu,
                     ConstMatrixView<bfloat16> scale = {}) {
  using Line = std::conditional_t<Pairs, Bf16Pair, XT>;
  constexpr std::int64_t N = Batch<T, A>::size;
  constexpr int max_regs = block_max_regs<A>(block_tile_rows(Blocks::kRows));
  const std::int64_t K = X.rows(), Bw = X.cols();
  const std::int64_t lines = Pairs ? P.cols() * Blocks::kCols / 2 : K;
  const PanelPlan plan(Bw, lines, N, sizeof(Line), kPanelBudgetBytes, max_regs);
  const bool in_place = !Pairs && plan.in_place();
  // The staged blocks (kStagesTranspose) go after the packed X in the same buffer.
  constexpr bool staged = Pairs && kStagesTranspose<std::remove_cv_t<Blocks>>;
  constexpr std::int64_t RC = std::int64_t{Blocks::kRows} * Blocks::kCols;
  const std::int64_t slots = staged ? P.storage_size() : 0;
  Line* packed = in_place ? nullptr : operand_buffer<Line>(ws, plan.packed_size(lines) + (slots * RC + 1) / 2);
  bfloat16* const stage = staged ? reinterpret_cast<bfloat16*>(packed + plan.packed_size(lines)) : nullptr;
  using ReadBlocks = std::conditional_t<staged, ForwardBlocks<bfloat16, Blocks::kRows, Blocks::kCols>, Blocks>;
  const ReadBlocks read = [&] {
    if constexpr (staged)
      return ReadBlocks{stage};
    else
      return blocks;
  }();
  ws.partition.update(P);
  const bool accumulate = mode == Update::accumulate;
  // Streaming stores (ws.stream_bytes) for a large overwritten float output; ordered before
  // the caller's next reads by each thread's fence.
  constexpr std::int64_t reg_bytes = sizeof(Batch<T, A>);
  const bool stream = kStreamingStores<A, T> && std::is_same_v<Out, T> && !accumulate && !scale.data() &&
                      Y.rows() * Bw * std::int64_t{sizeof(T)} >= ws.stream_bytes &&
                      reinterpret_cast<std::uintptr_t>(Y.data()) % reg_bytes == 0 &&
                      Y.stride() * std::int64_t{sizeof(T)} % reg_bytes == 0;
  run_partitioned(
      ws.partition, P.nnz() * Blocks::kRows * Blocks::kCols * Bw,
      [&](int t, int n) {
        if (in_place) return;
        if constexpr (Pairs)
          pack_bf16_pairs<A>(plan, X, lines, packed, lines * t / n, lines * (t + 1) / n);
        else
          pack_panels(plan, X, packed, K * t / n, K * (t + 1) / n);
        if constexpr (staged)
          transpose_blocks<Blocks::kCols, Blocks::kRows>(blocks.values, blocks.source, stage, slots * t / n,
                                                         slots * (t + 1) / n);
      },
      [&](std::int64_t i0, std::int64_t i1) {
        for (std::int64_t p = 0; p < plan.count(); ++p) {
          const std::int64_t b0 = plan.begin(p), regs = plan.regs_of(p);
          const Line* xp = packed + lines * b0;
          if constexpr (!Pairs)
            if (in_place) xp = X.data();
          const std::int64_t xs = in_place ? X.stride() : regs * N;
          const std::int64_t valid = plan.columns(p);
          with_panel_regs(regs, [&]<int G>(std::integral_constant<int, G>) {
            if constexpr (G <= max_regs)
              block_panel_rows<A, T, Index, G>(P, read, i0, i1, xp, xs, K, Y, b0, valid, accumulate, bias, relu, scale,
                                               stream);
          });
        }
        if (stream) streaming_fence();
      });
}
#endif

// Scalar path: the same block-row tiling with a 16-wide tile of plain accumulators per row.
template <Value T, ColumnIndex Index, class Blocks, class XT, class Out = T>
void block_spmm_scalar(const PaddedCSR<T, Index>& P, const Blocks& blocks, ConstMatrixView<XT> X, MatrixView<Out> Y,
                       Update mode, KernelWorkspace<T>& ws, const T* bias, bool relu,
                       ConstMatrixView<bfloat16> scale = {}) {
  constexpr int BR = Blocks::kRows, BC = Blocks::kCols;
  constexpr std::int64_t RS = Blocks::kRowStep, CS = Blocks::kColStep;
  constexpr std::int64_t tile = 16;
  const bool accumulate = mode == Update::accumulate;
  const std::int64_t K = X.rows(), M = Y.rows(), Bw = X.cols();
  const Index* cols = P.col_indices().data();
  ws.partition.update(P);
  run_partitioned(
      ws.partition, P.nnz() * BR * BC * Bw, [](int, int) {},
      [&](std::int64_t i0, std::int64_t i1) {
        for (std::int64_t i = i0; i < i1; ++i) {
          const std::int64_t s = P.row_start(i), n = P.row_nnz(i);
          const std::int64_t rv = std::min<std::int64_t>(BR, M - i * BR);
          for (std::int64_t b0 = 0; b0 < Bw; b0 += tile) {
            const std::int64_t nb = std::min(tile, Bw - b0);
            T acc[BR][tile] = {};
            for (std::int64_t q = 0; q < n; ++q) {
              const std::int64_t x0 = static_cast<std::int64_t>(cols[s + q]) * BC;
              const std::int64_t cn = std::min<std::int64_t>(BC, K - x0);
              const auto* w = blocks.at(s + q);
              for (std::int64_t c = 0; c < cn; ++c) {
                const XT* x = X.row(x0 + c) + b0;
                for (std::int64_t r = 0; r < rv; ++r) {
                  const T wv = operand_value<T>(w[r * RS + c * CS]);
                  for (std::int64_t j = 0; j < nb; ++j) acc[r][j] += wv * operand_value<T>(x[j]);
                }
              }
            }
            for (std::int64_t r = 0; r < rv; ++r) {
              Out* y = Y.row(i * BR + r) + b0;
              const T* br = bias ? bias + i * BR + r : nullptr;
              const bfloat16* sr = scale.data() ? scale.row(i * BR + r) + b0 : nullptr;
              for (std::int64_t j = 0; j < nb; ++j) {
                const T old = accumulate ? static_cast<T>(y[j]) : T(0);
                y[j] = static_cast<Out>(sr ? acc[r][j] * static_cast<T>(static_cast<float>(sr[j]))
                                           : finish(acc[r][j], &old, accumulate, br, relu));
              }
            }
          }
        }
      });
}

template <class A, Value T, ColumnIndex Index, class Blocks, class XT, class Out = T>
void block_spmm_on(const PaddedCSR<T, Index>& P, const Blocks& blocks, ConstMatrixView<XT> X, MatrixView<Out> Y,
                   Update mode, KernelWorkspace<T>& ws, const T* bias, bool relu,
                   ConstMatrixView<bfloat16> scale = {}) {
#if SPRIG_KERNEL_SIMD
  if constexpr (kSimdFor<T, A>) {
    block_spmm_simd<A>(P, blocks, X, Y, mode, ws, bias, relu, scale);
    return;
  }
#endif
  block_spmm_scalar(P, blocks, X, Y, mode, ws, bias, relu, scale);
}

}  // namespace detail

// Y (=|+=) W X with a caller-owned workspace (row partition and packing buffer kept across
// calls, so a training step allocates nothing).
// Preconditions: X is W.cols() x B and Y is W.rows() x B (else ShapeError); Y shares no
// memory with X or W.values() (else ArgumentError). Overwrite never reads Y (NaN there does
// not propagate); only live blocks are read, and no X row or Y row outside the matrix.
// Complexity: O(nnz_blocks x R x C x B) multiply-adds, plus O(K x B) to pack X where it is
// not read in place and O(block rows) per topology change for the partition.
// Threads: OpenMP over nnz-balanced block-row ranges; bitwise identical for any thread count
// (a call inside a parallel region runs on its thread). The workspace must not be shared by
// concurrent calls.
template <Value T, ColumnIndex Index, int R, int C>
void block_spmm(const BlockPaddedCSR<T, Index, R, C>& W, std::type_identity_t<ConstMatrixView<T>> X,
                std::type_identity_t<MatrixView<T>> Y, KernelWorkspace<T>& workspace, Update mode = Update::overwrite) {
  detail::check_block_operands("sprig::block_spmm", W, "X", X, W.cols(), "Y", Y, W.rows());
  if (Y.rows() == 0 || Y.cols() == 0) return;
  detail::block_spmm_on<detail::KernelArch>(W.pattern(), detail::ForwardBlocks<T, R, C>{W.values().data()}, X, Y, mode,
                                            workspace, static_cast<const T*>(nullptr), false);
}

// The same with a temporary workspace (allocates per call).
template <Value T, ColumnIndex Index, int R, int C>
void block_spmm(const BlockPaddedCSR<T, Index, R, C>& W, std::type_identity_t<ConstMatrixView<T>> X,
                std::type_identity_t<MatrixView<T>> Y, Update mode = Update::overwrite) {
  KernelWorkspace<T> workspace;
  block_spmm(W, X, Y, workspace, mode);
}

// Y = act(W X + bias) (row_epilogue.hpp): bias[i] added to output row i and the activation
// applied in the kernel's store, bitwise the same as block_spmm followed by a bias pass and a
// ReLU pass. Throws as block_spmm does; ShapeError unless the bias is empty (none) or has
// W.rows() entries; ArgumentError for an activation that is not a forward epilogue (gelu) or
// a bias that overlaps Y. Complexity and threads as block_spmm.
template <Value T, ColumnIndex Index, int R, int C>
void block_spmm(const BlockPaddedCSR<T, Index, R, C>& W, std::type_identity_t<ConstMatrixView<T>> X,
                std::type_identity_t<MatrixView<T>> Y, KernelWorkspace<T>& workspace, const RowEpilogue<T>& epilogue) {
  detail::check_block_operands("sprig::block_spmm", W, "X", X, W.cols(), "Y", Y, W.rows());
  detail::check_row_epilogue("sprig::block_spmm", epilogue, W.rows(), Y);
  if (Y.rows() == 0 || Y.cols() == 0) return;
  detail::block_spmm_on<detail::KernelArch>(W.pattern(), detail::ForwardBlocks<T, R, C>{W.values().data()}, X, Y,
                                            Update::overwrite, workspace,
                                            epilogue.bias.empty() ? nullptr : epilogue.bias.data(),
                                            epilogue.activation == FusedActivation::relu);
}

// The same with a temporary workspace (allocates per call).
template <Value T, ColumnIndex Index, int R, int C>
void block_spmm(const BlockPaddedCSR<T, Index, R, C>& W, std::type_identity_t<ConstMatrixView<T>> X,
                std::type_identity_t<MatrixView<T>> Y, const RowEpilogue<T>& epilogue) {
  KernelWorkspace<T> workspace;
  block_spmm(W, X, Y, workspace, epilogue);
}

// dX (=|+=) W^T dY with a caller-owned workspace (for W^T's block rows). `cache` holds the
// transposed block pattern (K/C x M/R blocks) and, per slot, the slot of W's block: it should
// belong to W (one cache per weight matrix; another matrix is detected by its topology key
// and costs a rebuild) and serve only this kernel (it is kept structure-only: W's values are
// read through the permutation, each R x C block as its C x R transpose, never copied).
// Preconditions: dY is W.rows() x B and dX is W.cols() x B (else ShapeError); dX shares no
// memory with dY or W.values() (else ArgumentError). Overwrite never reads dX; no dY row or
// dX row outside the matrix is touched.
// Complexity: O(nnz_blocks x R x C x B) multiply-adds; O(nnz_blocks + block rows + block
// cols) for a rebuild after a topology change. Throws ArgumentError where the transpose
// cannot be built (transpose_into: more than kMaxTransposeSlots slots, or block rows Index
// cannot number). Threads: as block_spmm, bitwise identical for any thread count.
template <Value T, ColumnIndex Index, int R, int C>
void block_spmm_transposed(const BlockPaddedCSR<T, Index, R, C>& W, TransposeCache<T, Index>& cache,
                           std::type_identity_t<ConstMatrixView<T>> dY, std::type_identity_t<MatrixView<T>> dX,
                           KernelWorkspace<T>& workspace, Update mode = Update::overwrite) {
  detail::check_block_operands("sprig::block_spmm_transposed", W, "dY", dY, W.rows(), "dX", dX, W.cols());
  if (dX.rows() == 0 || dX.cols() == 0) return;
  const auto& t = cache.sync_topology(W.pattern());
  detail::block_spmm_on<detail::KernelArch>(t.matrix,
                                            detail::TransposedBlocks<T, R, C>{W.values().data(), t.source_slot.data()},
                                            dY, dX, mode, workspace, static_cast<const T*>(nullptr), false);
}

// The same with a temporary workspace (allocates per call).
template <Value T, ColumnIndex Index, int R, int C>
void block_spmm_transposed(const BlockPaddedCSR<T, Index, R, C>& W, TransposeCache<T, Index>& cache,
                           std::type_identity_t<ConstMatrixView<T>> dY, std::type_identity_t<MatrixView<T>> dX,
                           Update mode = Update::overwrite) {
  KernelWorkspace<T> workspace;
  block_spmm_transposed(W, cache, dY, dX, workspace, mode);
}

}  // namespace sprig
