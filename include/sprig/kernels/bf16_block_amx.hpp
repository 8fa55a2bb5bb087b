// sprig/kernels/bf16_block_amx.hpp — the AMX path of the bf16 block kernels (bf16_block_kernels.hpp)
// for a BlockPaddedCSR W in R x C blocks: bf16 weights, X and dY, float sums, Y, dX and grad.
//
// Forward, Y (=|+=) W X: a block is already a tile of A. `tdpbf16ps` multiplies an R x C bf16
// tile (one block, rows 2C bytes apart as W's bf16 shadow stores it) by a C x 16 tile of X
// packed in pairs (operands.hpp's pair rows: rows 2k and 2k + 1 interleaved per batch column,
// C / 2 pair rows of one block column, one panel's row apart) into R x 16 floats. Per block row
// and group of up to four 16-column chunks of a panel, four C tiles stay in the tile registers
// across all the row's blocks: each block is one A load, then one B load and one tdpbf16ps per
// chunk, with the next block's X pair rows prefetched. The tiles are stored to a small float
// buffer and finished (accumulate, bias, ReLU) in 16-float registers into Y, float or bf16
// (output_store.hpp); an overwritten float Y of at least SPRIG_BF16_BLOCK_AMX_STREAM_BYTES
// (tuning.hpp) with streaming stores, since waiting for Y's lines became the bound.
//
// Input gradient, dX (=|+=) W^T dY: the forward's code on W's transposed block pattern
// (transpose.hpp), each C x R tile of A the transpose of a block, copied transposed into the
// workspace first (O(nnz_blocks R C), against O(nnz_blocks R C B) multiply-adds).
//
// Weight gradient, grad (=|+=) dY X^T at the live blocks: a block's R x C gradient is a tile
// of C, summed over chunks of 32 batch columns of R rows of dY (A, 64 bytes a row, read in
// place where it can be) times 16 pairs of adjacent batch columns of the block's C rows of X (B,
// packed pair-major by an AVX-512 register transpose). Four blocks of a block row share each
// dY tile.
//
// Shapes: the forward takes R <= 16 (a tile's rows) and C even, C <= 32 (a tile row of A holds
// 64 bytes), kAmxBlockForward<R, C>; the input gradient the transposed shape,
// kAmxBlockForward<C, R>; the weight gradient R, C <= 16 (a tile row of C holds 16 floats),
// kAmxBlockWeightGrad<R, C>. Edges as the other paths: operands are zero-padded to whole blocks
// and chunks, and only entries inside the matrix are stored (grad's out-of-matrix entries of an
// edge block as the other paths leave them).
//
// Numerics: each output is a float sum of its products (exact in float) in an order fixed by
// W's row (forward), column (input gradient) or the batch (weight gradient) and the block
// shape; tdpbf16ps adds the pair products of a tile row into the accumulator in the hardware's
// order, within the bound bf16_block_kernels.hpp states; subnormal inputs and results are
// flushed as on the avx512_bf16 path. Bitwise identical for every thread count (each output
// is computed whole by one thread).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <span>
#include <type_traits>

#include "../core/bfloat16.hpp"
#include "../core/block_padded_csr.hpp"
#include "../core/matrix.hpp"
#include "../core/padded_csr.hpp"
#include "../core/tuning.hpp"
#include "amx_tiles.hpp"
#include "bf16_spmm.hpp"
#include "block_sddmm.hpp"
#include "block_spmm.hpp"
#include "operands.hpp"
#include "output_store.hpp"
#include "panels.hpp"
#include "parallel.hpp"
#include "simd.hpp"
#include "transpose.hpp"
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

// The tile steps both AMX kernels take on their four sums (tiles 0..Q-1), one shared operand
// (tile 4) and the operands of each sum in turn (tiles 5, 6, 7, 5):
//   amx_zero_sums<Q>()                        tiles 0..Q-1 = 0
//   amx_shared_products<Q, SharedA>(sh, ss, own, os)
//       tile 4 = rows at sh (ss bytes apart); for g < Q a turn tile = rows at own[g] (os bytes
//       apart) and tile g += tile 4 x it (SharedA: tile 4 is tdpbf16ps's A) or it x tile 4
//   amx_store_sums<Q>(out, stride)            tile g stored at out[g], rows stride bytes apart
template <int Q>
__attribute__((always_inline, target("amx-tile"))) inline void amx_zero_sums() noexcept {
  _tile_zero(0);
  if constexpr (Q > 1) _tile_zero(1);
  if constexpr (Q > 2) _tile_zero(2);
  if constexpr (Q > 3) _tile_zero(3);
}

// tdpbf16ps into sum tile D with tile 4 and turn tile T, in the order SharedA names.
#  define SPRIG_AMX_SHARED_DP(D, T) \
    if constexpr (SharedA)          \
      _tile_dpbf16ps(D, 4, T);      \
    else                            \
      _tile_dpbf16ps(D, T, 4)

template <int Q, bool SharedA>
__attribute__((always_inline, target("amx-tile,amx-bf16"))) inline void amx_shared_products(
    const void* sh, std::int64_t sh_stride, const char* const* own, std::int64_t own_stride) noexcept {
  _tile_loadd(4, sh, sh_stride);
  _tile_loadd(5, own[0], own_stride);
  SPRIG_AMX_SHARED_DP(0, 5);
  if constexpr (Q > 1) {
    _tile_loadd(6, own[1], own_stride);
    SPRIG_AMX_SHARED_DP(1, 6);
  }
  if constexpr (Q > 2) {
    _tile_loadd(7, own[2], own_stride);
    SPRIG_AMX_SHARED_DP(2, 7);
  }
  if constexpr (Q > 3) {
    _tile_loadd(5, own[3], own_stride);
    SPRIG_AMX_SHARED_DP(3, 5);
  }
}
#  undef SPRIG_AMX_SHARED_DP

template <int Q>
__attribute__((always_inline, target("amx-tile"))) inline void amx_store_sums(float* const* out,
                                                                              std::int64_t stride) noexcept {
  _tile_stored(0, out[0], stride);
  if constexpr (Q > 1) _tile_stored(1, out[1], stride);
  if constexpr (Q > 2) _tile_stored(2, out[2], stride);
  if constexpr (Q > 3) _tile_stored(3, out[3], stride);
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
  amx_zero_sums<Q>();
  const std::int64_t block_row_bytes = std::int64_t{C / 2} * xs_bytes;
  for (std::int64_t q = s; q < s + n; ++q) {
    const char* x = xp + static_cast<std::int64_t>(cols[q]) * block_row_bytes;
    if (q + 1 < s + n) {  // the next block's X pair rows
      const char* xn = xp + static_cast<std::int64_t>(cols[q + 1]) * block_row_bytes;
      for (int r = 0; r < C / 2; ++r)
        for (int c = 0; c < Q; ++c) prefetch(xn + r * xs_bytes + c * 64);
    }
    const char* chunks[Q];
    for (int c = 0; c < Q; ++c) chunks[c] = x + 64 * c;
    amx_shared_products<Q, true>(values + q * (std::int64_t{R} * C), 2 * C, chunks, xs_bytes);
  }
  float* sums[Q];
  for (int c = 0; c < Q; ++c) sums[c] = out + 256 * c;
  amx_store_sums<Q>(sums, 64);
  amx_compiler_barrier(out);
}

// Y (=|+=) P X (+ bias, ReLU), or Y = (P X) * scale element by element (scale non-empty, Y's
// shape; overwrite), on the AMX tiles; P's slot q holds the R x C block at values +
// q R C (W's bf16 shadow), or with `source` (the input gradient: P is W's transposed block
// pattern, transpose.hpp) the transpose of W's C x R block at values + source[q] R C, copied
// transposed into the workspace first (O(nnz_blocks R C)). Needs bf16_gemm_reason(
// Bf16GemmPath::amx) empty and kAmxBlockForward<R, C>.
template <class A, ColumnIndex Index, int R, int C, class Out = float>
void block_spmm_amx(const PaddedCSR<float, Index>& P, const bfloat16* values, ConstMatrixView<bfloat16> X,
                    MatrixView<Out> Y, Update mode, KernelWorkspace<float>& ws, const float* bias, bool relu,
                    const SourceSlot* source = nullptr, ConstMatrixView<bfloat16> scale = {}) {
  static_assert(kAmxBlockForward<R, C>);
  using B = Batch<float, A>;
  static_assert(B::size == 16, "the AMX path runs where the kernels are built for AVX-512");
  constexpr std::int64_t N = 16, RC = std::int64_t{R} * C;
  const std::int64_t Bw = X.cols(), M = Y.rows();
  const std::int64_t lines = P.cols() * C / 2;
  const PanelPlan plan(Bw, lines, N, sizeof(Bf16Pair), kPanelBudgetBytes, 2 * kAmxBlockChunks);
  const std::int64_t slots = source ? P.storage_size() : 0;
  const bfloat16* const values_in = values;
  Bf16Pair* packed = operand_buffer<Bf16Pair>(ws, plan.packed_size(lines) + (slots * RC + 1) / 2);
  bfloat16* transposed = reinterpret_cast<bfloat16*>(packed + plan.packed_size(lines));
  if (source) values = transposed;
  ws.partition.update(P);
  const bool accumulate = mode == Update::accumulate;
  // Streaming stores (tuning.hpp) for a large overwritten Y; ordered before the caller's next
  // reads by the fence after the parallel loop.
  const bool stream = std::is_same_v<Out, float> && !accumulate &&
                      M * Bw * std::int64_t{sizeof(float)} >= SPRIG_BF16_BLOCK_AMX_STREAM_BYTES;
  const AmxTileConfig cfg = amx_block_forward_config<R, C>();
  run_partitioned(
      ws.partition, P.nnz() * R * C * Bw,
      [&](int t, int n) {
        pack_bf16_pairs<A>(plan, X, lines, packed, lines * t / n, lines * (t + 1) / n);
        if (source) transpose_blocks<C, R>(values_in, source, transposed, slots * t / n, slots * (t + 1) / n);
      },
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
                  Out* y = Y.row(i * R + r) + j0;
                  B v = B::load_aligned(sums + c * 256 + r * 16);
                  const float* br = bias ? bias + i * R + r : nullptr;
                  const bfloat16* sr = scale.data() ? scale.row(i * R + r) + j0 : nullptr;
                  if constexpr (std::is_same_v<Out, float>)
                    if (stream && !sr && nv == N && (reinterpret_cast<std::uintptr_t>(y) & 63) == 0) {  // overwrite
                      if (br) v += B(*br);
                      if (relu) v = xsimd::select(v > B(0.0f), v, B(0.0f));
                      _mm512_stream_ps(y, v);
                      continue;
                    }
                  store_output<A>(y, v, nv, accumulate, br, relu, sr);
                }
              }
            }
          }
        }
        amx_end();
        if (stream) _mm_sfence();
      });
}

// The block shapes the AMX weight gradient takes: a block's gradient is a tile of C (R rows of
// C floats).
template <int R, int C>
inline constexpr bool kAmxBlockWeightGrad = R >= 1 && R <= 16 && C >= 1 && C <= 16;

// The weight gradient's tiles, for accumulators of AR rows of N floats: 0..3 accumulate four
// blocks' sums, 4 holds the operand the blocks of a block row share (SharedA: AR rows of 32
// bf16, one chunk of the batch; else 16 pairs of N), 5..7 take turns with each block's own
// (the other shape).
template <int AR, int N, bool SharedA>
AmxTileConfig amx_block_grad_config() noexcept {
  AmxTileConfig cfg;
  for (int t = 0; t < 8; ++t) {
    const bool a_shape = t < 4 ? false : (t == 4) == SharedA;
    cfg.rows[t] = static_cast<std::uint8_t>(t < 4 || a_shape ? AR : 16);
    cfg.colsb[t] = static_cast<std::uint16_t>(a_shape ? 64 : 4 * N);
  }
  return cfg;
}

// The pair transpose of a power-of-two C <= 16 in vpermt2d steps: C registers (register c: X
// row c's 16 pairs of one chunk, p = ph * (16 / C) + pl) become C registers (register ph: pairs
// ph * (16 / C) + pl of every row, lane pl * C + c). Step j exchanges register bit j (c_j) with
// ph_j; between steps register bit i holds ph_i for i < j and c_i above, lane pl * C + (c_i for
// i < j, ph_i above) (the first step also reorders the lanes). kPairTransposeIndex<C>[j][v]: the
// vpermt2d indices of the outputs whose new register bit is v, from the sources with c_j = 0
// (lanes 0..15) and 1 (16..31).
template <int C>
struct PairTransposeIndex {
  std::uint32_t idx[4][2][16] = {};
  constexpr PairTransposeIndex() {
    constexpr int PL = 16 / C;
    for (int j = 0; j < 4 && (1 << j) < C; ++j)
      for (int v = 0; v < 2; ++v)
        for (int lane = 0; lane < 16; ++lane) {
          // The element this output lane holds after step j: pl, c_i (i <= j), ph_i (i > j, bit j: v).
          const int pl = lane / C, low = lane % C;
          int c = 0, ph = 0;
          for (int i = 0; i < 4 && (1 << i) < C; ++i) {
            const int bit = (low >> i) & 1;
            if (i <= j)
              c |= bit << i;
            else
              ph |= bit << i;
          }
          ph |= v << j;
          // Where it was before step j: lane (j == 0: the input's, ph * PL + pl), source c_j.
          const int before = j == 0 ? ph * PL + pl : pl * C + ((c & ((1 << j) - 1)) | (ph & ~((1 << j) - 1)));
          idx[j][v][lane] = static_cast<std::uint32_t>(before + 16 * ((c >> j) & 1));
        }
  }
};

// Block column bj's rows of X (C features, zero past X.rows()) for bj in [bj0, bj1), as pairs of
// adjacent batch columns, pair-major: unit (bj, j, c) = out[(bj * pairs + j) * C + c] holds
// X[bj C + c, 2j] (low half) and X[bj C + c, 2j + 1], zero past the batch. Chunk h of the batch
// (32 columns) of block column bj is then a 16 x C tile of B at out + (bj * pairs + 16 h) * C.
// Whole chunks of a power-of-two C in vpermt2d steps (PairTransposeIndex), the rest unit by unit.
template <int C>
void pack_pair_columns(ConstMatrixView<bfloat16> X, std::int64_t pairs, std::uint32_t* out, std::int64_t bj0,
                       std::int64_t bj1) noexcept {
  const std::int64_t K = X.rows(), Bw = X.cols(), full = Bw / 2;
  constexpr bool fast = C >= 2 && (C & (C - 1)) == 0;
  const std::int64_t whole = fast ? Bw / 32 : 0;  // chunks done in registers
  for (std::int64_t bj = bj0; bj < bj1; ++bj) {
    std::uint32_t* base = out + bj * pairs * C;
    if constexpr (fast) {
      static constexpr PairTransposeIndex<C> tix{};
      constexpr int steps = C == 2 ? 1 : C == 4 ? 2 : C == 8 ? 3 : 4;
      for (std::int64_t h = 0; h < whole; ++h) {
        __m512i v[C];
        for (int c = 0; c < C; ++c)
          v[c] = bj * C + c < K ? _mm512_loadu_si512(X.row(bj * C + c) + 32 * h) : _mm512_setzero_si512();
        for (int j = 0; j < steps; ++j) {
          const __m512i i0 = _mm512_loadu_si512(tix.idx[j][0]), i1 = _mm512_loadu_si512(tix.idx[j][1]);
          __m512i w[C];
          for (int r = 0; r < C; ++r) {
            const int a = r & ~(1 << j);
            w[r] = _mm512_permutex2var_epi32(v[a], (r >> j) & 1 ? i1 : i0, v[a | (1 << j)]);
          }
          for (int r = 0; r < C; ++r) v[r] = w[r];
        }
        for (int r = 0; r < C; ++r) _mm512_storeu_si512(base + (16 * h + r * (16 / C)) * C, v[r]);
      }
    }
    for (std::int64_t c = 0; c < C; ++c) {
      std::uint32_t* dst = base + c;
      const std::int64_t k = bj * C + c;
      std::int64_t j = 16 * whole;
      if (k < K) {
        const bfloat16* src = X.row(k);
        for (; j < full; ++j) std::memcpy(dst + j * C, src + 2 * j, sizeof(std::uint32_t));
        if (Bw % 2 != 0) {
          std::uint16_t lo;
          std::memcpy(&lo, src + 2 * j, sizeof lo);
          dst[j++ * C] = lo;
        }
      }
      for (; j < pairs; ++j) dst[j * C] = 0;
    }
  }
}

// The sums of Q blocks of one block row over nch chunks of 32 batch columns into acc[g]
// (amx_block_grad_config's rows, cb bytes apart): the shared operand at sh (chunks sh_step
// bytes apart, rows sh_stride), block g's own at own[g] (own_step, own_stride); SharedA: the
// shared one is A (tdpbf16ps's left operand), else B.
template <int Q, bool SharedA>
__attribute__((target("amx-tile,amx-bf16"))) inline void amx_grad_blocks(const char* sh, std::int64_t sh_step,
                                                                         std::int64_t sh_stride, const char* const* own,
                                                                         std::int64_t own_step, std::int64_t own_stride,
                                                                         std::int64_t nch, float* const* acc,
                                                                         std::int64_t cb) noexcept {
  amx_compiler_barrier(acc);
  amx_zero_sums<Q>();
  for (std::int64_t h = 0; h < nch; ++h) {
    const char* at[Q];
    for (int g = 0; g < Q; ++g) at[g] = own[g] + h * own_step;
    amx_shared_products<Q, SharedA>(sh + h * sh_step, sh_stride, at, own_stride);
  }
  amx_store_sums<Q>(acc, cb);
  amx_compiler_barrier(acc);
}

// grad (=|+=) the weight gradient of W's live blocks (bf16_block_sddmm's contract) on the AMX
// tiles, summed over 32-column chunks of the batch. Each block's gradient is a tile of C: R x C,
// dY's R rows (A) times the block's X rows in pairs of batch columns (B, pack_pair_columns); or,
// where K > M, C x R (the transpose), X's C rows (A) times dY's block rows in pairs (B), so that
// the smaller operand is the one packed. The A operand is read in place where the batch is
// whole chunks and its rows whole blocks, else from a zero-padded copy; four blocks of a block
// row share the tile of dY. Overwritten full R x C blocks go from the tiles into grad directly;
// the rest through block_sddmm_store. Needs bf16_gemm_reason(Bf16GemmPath::amx) empty and
// kAmxBlockWeightGrad<R, C>.
template <class A, ColumnIndex Index, int R, int C>
void block_sddmm_amx(const BlockPaddedCSR<float, Index, R, C>& W, ConstMatrixView<bfloat16> dY,
                     ConstMatrixView<bfloat16> X, std::span<float> grad, Update mode, KernelWorkspace<float>& ws) {
  static_assert(kAmxBlockWeightGrad<R, C>);
  constexpr std::int64_t RC = std::int64_t{R} * C, T = 32;
  const auto& P = W.pattern();
  const std::int64_t M = W.rows(), K = W.cols(), Bw = X.cols();
  const std::int64_t nch = (Bw + T - 1) / T, Bp = nch * T, pairs = Bp / 2;
  const bool tr = K > M;
  const ConstMatrixView<bfloat16> a_op = tr ? X : dY;            // rows read as tiles of A
  const std::int64_t a_rows = tr ? P.cols() * C : P.rows() * R;  // padded to whole blocks
  const std::int64_t pair_blocks = tr ? P.rows() : P.cols();     // block rows or columns paired
  const std::int64_t pair_width = tr ? R : C;                    // units a pair row
  const bool in_place = Bw % T == 0 && a_rows == a_op.rows();
  const std::int64_t pair_units = pair_blocks * pairs * pair_width, copy = in_place ? 0 : a_rows * Bp;
  std::uint32_t* pt = operand_buffer<std::uint32_t>(ws, pair_units + (copy + 1) / 2);
  bfloat16* a_copy = reinterpret_cast<bfloat16*>(pt + pair_units);
  const char* a_base = reinterpret_cast<const char*>(in_place ? a_op.data() : a_copy);
  const std::int64_t a_stride = (in_place ? a_op.stride() : Bp) * std::int64_t{sizeof(bfloat16)};
  const std::int64_t pair_bytes = 4 * pair_width;
  ws.partition.update(P);
  const Index* cols = P.col_indices().data();
  const bool overwrite = mode == Update::overwrite;
  const bool dead = P.dead_slots() > 0;
  const AmxTileConfig cfg = tr ? amx_block_grad_config<C, R, false>() : amx_block_grad_config<R, C, true>();
  run_partitioned(
      ws.partition, P.nnz() * RC * Bw,
      [&](int t, int n) {
        const std::int64_t b0 = pair_blocks * t / n, b1 = pair_blocks * (t + 1) / n;
        if (tr)
          pack_pair_columns<R>(dY, pairs, pt, b0, b1);
        else
          pack_pair_columns<C>(X, pairs, pt, b0, b1);
        if (!in_place)
          for (std::int64_t i = a_rows * t / n; i < a_rows * (t + 1) / n; ++i) {
            bfloat16* dst = a_copy + i * Bp;
            const std::int64_t nb = i < a_op.rows() ? Bw : 0;
            if (nb > 0) std::memcpy(dst, a_op.row(i), static_cast<std::size_t>(nb) * sizeof(bfloat16));
            std::fill(dst + nb, dst + Bp, bfloat16{});
          }
        if (overwrite && dead) {  // slots owned by no row: zeroed by storage range
          const std::int64_t S = std::ssize(grad);
          std::fill(grad.data() + S * t / n, grad.data() + S * (t + 1) / n, 0.0f);
        }
      },
      [&](std::int64_t r0, std::int64_t r1) {
        if (r0 >= r1) return;
        alignas(64) float sums[kAmxBlockChunks][RC];
        alignas(64) float block[RC];
        amx_begin(cfg);
        for (std::int64_t bi = r0; bi < r1; ++bi) {
          const std::int64_t s0 = P.row_start(bi), nb = P.row_nnz(bi);
          if (overwrite) std::fill(grad.data() + (s0 + nb) * RC, grad.data() + (s0 + P.row_capacity(bi)) * RC, 0.0f);
          const std::int64_t rows_in = std::min<std::int64_t>(R, M - bi * R);
          const char* shared = tr ? reinterpret_cast<const char*>(pt + bi * pairs * R) : a_base + bi * R * a_stride;
          for (std::int64_t q = 0; q < nb; q += kAmxBlockChunks) {
            const std::int64_t n = std::min<std::int64_t>(kAmxBlockChunks, nb - q);
            const char* own[kAmxBlockChunks];
            float* acc[kAmxBlockChunks];
            for (std::int64_t g = 0; g < n; ++g) {
              const std::int64_t bj = cols[s0 + q + g];
              own[g] = tr ? a_base + bj * C * a_stride : reinterpret_cast<const char*>(pt + bj * pairs * C);
              const bool direct = !tr && overwrite && rows_in == R && K - bj * C >= C;
              acc[g] = direct ? grad.data() + (s0 + q + g) * RC : sums[g];
            }
            auto run = [&]<int Q>() {
              if (tr)
                amx_grad_blocks<Q, false>(shared, 64 * R, pair_bytes, own, 64, a_stride, nch, acc, pair_bytes);
              else
                amx_grad_blocks<Q, true>(shared, 64, a_stride, own, 64 * C, pair_bytes, nch, acc, pair_bytes);
            };
            switch (n) {
              case 1: run.template operator()<1>(); break;
              case 2: run.template operator()<2>(); break;
              case 3: run.template operator()<3>(); break;
              default: run.template operator()<4>(); break;
            }
            for (std::int64_t g = 0; g < n; ++g) {
              if (acc[g] != sums[g]) continue;
              const float* r = sums[g];
              if (tr) {  // C x R -> R x C
                for (int i = 0; i < R; ++i)
                  for (int c = 0; c < C; ++c) block[i * C + c] = sums[g][c * R + i];
                r = block;
              }
              block_sddmm_store<float, R, C>(grad.data(), s0 + q + g, rows_in, K - cols[s0 + q + g] * C, !overwrite, r);
            }
          }
        }
        amx_end();
      });
}

#endif

}  // namespace sprig::detail
