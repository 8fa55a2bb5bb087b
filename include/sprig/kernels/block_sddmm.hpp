// sprig/kernels/block_sddmm.hpp — the weight gradient of a block-sparse layer: for every live
// R x C block (bi, bj) of W, the R * C dots grad[s*R*C + r*C + c] = dot(dY[bi*R + r, :],
// X[bj*C + c, :]), written into an array aligned with W.values().
//
// How: the batch is cut into panels of whole registers (panels.hpp) and, unless both operands
// can be read in place, dY and X are packed panel by panel, zero-padded to whole registers and
// to whole blocks (ceil(M / R) * R and ceil(K / C) * C rows), so a block's rows sit at one
// fixed stride and an edge block reads zero rows instead of rows outside the matrix. For one
// live block and one panel, the R * C dots are done in tiles of RT x CT lane-wise
// accumulators (block_sddmm_tiling: as many as the register file holds beside the loaded
// rows), fed by RT dY and CT X registers per batch register; each tile's accumulators are
// reduced N at a time by one batched horizontal sum (simd.hpp: batched_hsum). Blocks of
// fewer than N entries with several rows are done G at a time (block_sddmm_group), so that
// one horizontal sum and each loaded dY register serve G blocks. Panels after the first add
// their partial dots to grad.
//
// Operands: dY and X may be bf16 (operands.hpp: widened in registers), grad float;
// bf16_block_kernels.hpp is that interface, and adds the vdpbf16ps path (32 bf16 a step).
//
// Determinism: every grad element is summed in an order fixed by the block shape, the batch
// width and K alone (the panel plan), so the result is bitwise identical for every thread
// count.
#pragma once

#include <type_traits>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <span>

#include "../core/block_padded_csr.hpp"
#include "../core/config.hpp"
#include "../core/error.hpp"
#include "../core/matrix.hpp"
#include "../core/tuning.hpp"
#include "operands.hpp"
#include "panels.hpp"
#include "parallel.hpp"
#include "row_partition.hpp"
#include "simd.hpp"
#include "update_mode.hpp"
#include "workspace.hpp"

namespace sprig {

namespace detail {

#if SPRIG_KERNEL_SIMD
// v, kept in a register for its `uses` multiply-adds: GCC otherwise folds the load into
// each of them, and a loaded register that feeds several becomes as many loads (the load
// ports then bound the tile instead of the FMA units).
template <int uses, class B>
SPRIG_ALWAYS_INLINE B pinned(B v) noexcept {
#  if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
  if constexpr (uses > 1 && requires { typename B::register_type; }) {
    auto r = static_cast<typename B::register_type>(v);
    __asm__("" : "+v"(r));
    return B(r);
  } else if constexpr (uses > 1) {  // a raw register (the vdpbf16ps path's bf16 operands)
    __asm__("" : "+v"(v));
    return v;
  }
#  endif
  return v;
}

// Inputs per batch step of a tile: one register of T (bf16: widened), or on the vdpbf16ps
// path (Dp) 32 bf16 that one instruction multiplies pairwise into the 16 float lanes.
template <class Arch, class T, bool Dp>
inline constexpr std::int64_t kSddmmStep = Dp ? 32 : static_cast<std::int64_t>(Batch<T, Arch>::size);

// A step's register of inputs at p, and acc + a * b lane-wise (Dp: each lane adds the
// products of its two bf16 pairs, in one rounding order fixed by the instruction).
template <class Arch, class T, bool Dp, class In>
SPRIG_ALWAYS_INLINE auto load_step(const In* p) noexcept {
#  if SPRIG_BF16_BLOCK_DP
  if constexpr (Dp) return _mm512_loadu_si512(p);
  else
#  endif
    return load_operand<Arch, T>(p);
}
template <bool Dp, class B, class V>
SPRIG_ALWAYS_INLINE B madd(B acc, V a, V b) noexcept {
#  if SPRIG_BF16_BLOCK_DP
  if constexpr (Dp) return B(_mm512_dpbf16_ps(acc, (__m512bh)a, (__m512bh)b));
  else
#  endif
    return xsimd::fma(a, b, acc);
}

// A tile of RT x CT accumulators within an R x C block.
struct BlockTile {
  int rt = 1, ct = 1;
};

// Lane-wise chains per accumulator: blocks of fewer than 8 entries have too few accumulators
// to hide the multiply-add latency, so each gets two (even and odd batch registers).
template <int R, int C>
inline constexpr int kBlockSddmmChains = R* C < 8 ? 2 : 1;

// The tile shape for an R x C block: among tiles whose accumulators, the held registers of
// the shorter side and one streamed register fit the register file (one spare), the fewest
// loads per batch register over the whole block (each tile loads its RT dY and CT X rows),
// then the fewest horizontal sums (ceil(RT * CT / N) per tile), then the fewest tiles.
template <class Arch, class T, int R, int C>
constexpr BlockTile block_sddmm_tiling() noexcept {
  constexpr int N = static_cast<int>(Batch<T, Arch>::size);
  constexpr int budget = kVectorRegistersOf<Arch> - 1;
  constexpr int chains = kBlockSddmmChains<R, C>;
  BlockTile best;
  long best_loads = -1, best_sums = 0, best_tiles = 0;
  for (int rt = 1; rt <= R; ++rt)
    for (int ct = 1; ct <= C; ++ct) {
      if (rt * ct * chains + std::min(rt, ct) + 1 > budget && !(rt == 1 && ct == 1)) continue;
      const long nr = (R + rt - 1) / rt, nc = (C + ct - 1) / ct;
      const long loads = nc * R + nr * C;
      long sums = 0;
      for (int tr = 0; tr < R; tr += rt)
        for (int tc = 0; tc < C; tc += ct) sums += (std::min(rt, R - tr) * std::min(ct, C - tc) + N - 1) / N;
      const long tiles = nr * nc;
      const bool better = best_loads < 0 || loads < best_loads || (loads == best_loads && sums < best_sums) ||
                          (loads == best_loads && sums == best_sums && tiles < best_tiles);
      if (better) {
        best = {rt, ct};
        best_loads = loads;
        best_sums = sums;
        best_tiles = tiles;
      }
    }
  return best;
}

// One tile over one panel: out[r * LD + c] = sum over the `steps` batch registers of
// d[r * ds + .] * x[c * xs + .], for r < RT, c < CT. The shorter side's registers are held
// per batch register, the other side's streamed through one.
template <class Arch, class T, int RT, int CT, int CH, int LD, bool Dp, class In>
SPRIG_ALWAYS_INLINE void block_sddmm_tile(const In* __restrict d, std::int64_t ds, const In* __restrict x,
                                          std::int64_t xs, std::int64_t steps, T* __restrict out) noexcept {
  using B = Batch<T, Arch>;
  constexpr std::int64_t N = B::size, S = kSddmmStep<Arch, T, Dp>;
  constexpr int A = RT * CT;
  B acc[CH][A];
  SPRIG_UNROLL for (int h = 0; h < CH; ++h) SPRIG_UNROLL for (int k = 0; k < A; ++k) acc[h][k] = B(T(0));
  auto step = [&](B* a, std::int64_t off) {
    using V = decltype(load_step<Arch, T, Dp>(d));
    if constexpr (RT <= CT) {
      V dv[RT];
      SPRIG_UNROLL for (int r = 0; r < RT; ++r) dv[r] = pinned<CT>(load_step<Arch, T, Dp>(d + r * ds + off));
      SPRIG_UNROLL for (int c = 0; c < CT; ++c) {
        const V xv = pinned<RT>(load_step<Arch, T, Dp>(x + c * xs + off));
        SPRIG_UNROLL for (int r = 0; r < RT; ++r) a[r * CT + c] = madd<Dp>(a[r * CT + c], dv[r], xv);
      }
    } else {
      V xv[CT];
      SPRIG_UNROLL for (int c = 0; c < CT; ++c) xv[c] = pinned<RT>(load_step<Arch, T, Dp>(x + c * xs + off));
      SPRIG_UNROLL for (int r = 0; r < RT; ++r) {
        const V dv = pinned<CT>(load_step<Arch, T, Dp>(d + r * ds + off));
        SPRIG_UNROLL for (int c = 0; c < CT; ++c) a[r * CT + c] = madd<Dp>(a[r * CT + c], dv, xv[c]);
      }
    }
  };
  std::int64_t j = 0;
  if constexpr (CH == 2) {
    for (; j + 2 <= steps; j += 2) {
      step(acc[0], j * S);
      step(acc[CH - 1], (j + 1) * S);
    }
  }
  for (; j < steps; ++j) step(acc[0], j * S);
  if constexpr (CH == 2) SPRIG_UNROLL for (int k = 0; k < A; ++k) acc[0][k] += acc[CH - 1][k];
  SPRIG_UNROLL for (int k0 = 0; k0 < A; k0 += static_cast<int>(N)) {
    B rows[N];
    SPRIG_UNROLL for (int k = 0; k < static_cast<int>(N); ++k) rows[k] = k0 + k < A ? acc[0][k0 + k] : B(T(0));
    const B sums = batched_hsum(rows);
    if constexpr (CT == LD && A >= static_cast<int>(N)) {  // the tile's rows are contiguous in out
      if (k0 + static_cast<int>(N) <= A) {
        sums.store_unaligned(out + k0);
        continue;
      }
    }
    alignas(64) T tmp[N];
    sums.store_aligned(tmp);
    // Row by row, each row's run of sums one copy (element by element, GCC made it a scatter,
    // which is slow on AMD CPUs).
    const int k1 = std::min(A, k0 + static_cast<int>(N));
    SPRIG_UNROLL for (int r = k0 / CT; r * CT < k1; ++r) {
      const int lo = std::max(r * CT, k0), hi = std::min((r + 1) * CT, k1);
      std::memcpy(out + r * LD + (lo - r * CT), tmp + (lo - k0), static_cast<std::size_t>(hi - lo) * sizeof(T));
    }
  }
}

// One row of tiles (block rows [tr, tr + RT)) of a block over one panel into res.
template <class Arch, class T, int R, int C, int RT, bool Dp, class In>
SPRIG_ALWAYS_INLINE void block_sddmm_row_tiles(const In* d, std::int64_t ds, const In* x, std::int64_t xs,
                                               std::int64_t steps, T* res, int tr) noexcept {
  constexpr int ct = block_sddmm_tiling<Arch, T, R, C>().ct, CH = kBlockSddmmChains<R, C>;
  int tc = 0;
  for (; tc + ct <= C; tc += ct)
    block_sddmm_tile<Arch, T, RT, ct, CH, C, Dp>(d + tr * ds, ds, x + tc * xs, xs, steps, res + tr * C + tc);
  if constexpr (C % ct != 0)
    block_sddmm_tile<Arch, T, RT, C % ct, CH, C, Dp>(d + tr * ds, ds, x + tc * xs, xs, steps, res + tr * C + tc);
}

// All R * C dots of one block over one panel into res (row-major R x C).
template <class Arch, class T, int R, int C, bool Dp, class In>
SPRIG_ALWAYS_INLINE void block_sddmm_block(const In* d, std::int64_t ds, const In* x, std::int64_t xs, std::int64_t steps,
                                           T* res) noexcept {
  constexpr int rt = block_sddmm_tiling<Arch, T, R, C>().rt;
  int tr = 0;
  for (; tr + rt <= R; tr += rt) block_sddmm_row_tiles<Arch, T, R, C, rt, Dp>(d, ds, x, xs, steps, res, tr);
  if constexpr (R % rt != 0) block_sddmm_row_tiles<Arch, T, R, C, R % rt, Dp>(d, ds, x, xs, steps, res, tr);
}

// How many blocks of a block row block_sddmm_group does at a time: as many as fill one
// horizontal sum (N / (R * C)) and fit the registers, for blocks of fewer than N entries and
// more than one row. A one-row block has no dY register to share, and its grouped X loads
// (G blocks' rows at once) made it no faster than one block at a time.
template <class Arch, class T, int R, int C>
constexpr int block_sddmm_group_size() noexcept {
  constexpr int N = static_cast<int>(Batch<T, Arch>::size), RC = R * C;
  int g = RC < N && R > 1 ? N / RC : 1;
  while (g > 1 && g * RC * (g * RC < 8 ? 2 : 1) + R + 1 > kVectorRegistersOf<Arch> - 1) --g;
  return g;
}

// G blocks of one block row over one panel: one batched horizontal sum serves all G, and
// each dY register of a batch step feeds G blocks' multiply-adds. xg: the G blocks' X rows;
// res: their G * R * C dots, block after block.
template <class Arch, class T, int R, int C, int G, bool Dp, class In>
SPRIG_ALWAYS_INLINE void block_sddmm_group(const In* __restrict d, std::int64_t ds, const In* const* xg, std::int64_t xs,
                                           std::int64_t steps, T* __restrict res) noexcept {
  using B = Batch<T, Arch>;
  constexpr std::int64_t N = B::size, S = kSddmmStep<Arch, T, Dp>;
  constexpr int RC = R * C, A = G * RC, CH = A < 8 ? 2 : 1;
  static_assert(A <= N);
  B acc[CH][A];
  SPRIG_UNROLL for (int h = 0; h < CH; ++h) SPRIG_UNROLL for (int k = 0; k < A; ++k) acc[h][k] = B(T(0));
  auto step = [&](B* a, std::int64_t off) SPRIG_ALWAYS_INLINE_LAMBDA {
    using V = decltype(load_step<Arch, T, Dp>(d));
    V dv[R];
    SPRIG_UNROLL for (int r = 0; r < R; ++r) dv[r] = pinned<G * C>(load_step<Arch, T, Dp>(d + r * ds + off));
    SPRIG_UNROLL for (int g = 0; g < G; ++g) SPRIG_UNROLL for (int c = 0; c < C; ++c) {
      const V xv = pinned<R>(load_step<Arch, T, Dp>(xg[g] + c * xs + off));
      SPRIG_UNROLL for (int r = 0; r < R; ++r) a[g * RC + r * C + c] = madd<Dp>(a[g * RC + r * C + c], dv[r], xv);
    }
  };
  std::int64_t j = 0;
  if constexpr (CH == 2) {
    for (; j + 2 <= steps; j += 2) {
      step(acc[0], j * S);
      step(acc[CH - 1], (j + 1) * S);
    }
  }
  for (; j < steps; ++j) step(acc[0], j * S);
  if constexpr (CH == 2) SPRIG_UNROLL for (int k = 0; k < A; ++k) acc[0][k] += acc[CH - 1][k];
  B rows[N];
  SPRIG_UNROLL for (int k = 0; k < static_cast<int>(N); ++k) rows[k] = k < A ? acc[0][k] : B(T(0));
  const B sums = batched_hsum(rows);
  if constexpr (A == N) {
    sums.store_unaligned(res);
  } else {
    alignas(64) T tmp[N];
    sums.store_aligned(tmp);
    SPRIG_UNROLL for (int k = 0; k < A; ++k) res[k] = tmp[k];
  }
}

// The grad of the block at `slot` from its dots r (R x C): = or += (add); an edge block
// (rows_in < R or cols_in < C in-matrix rows and columns) writes 0 at its out-of-matrix
// entries when not adding, and leaves them alone when adding. Called once per block: inlined
// by force, as GCC otherwise calls it.
template <class T, int R, int C>
SPRIG_ALWAYS_INLINE void block_sddmm_store(T* __restrict grad, std::int64_t slot, std::int64_t rows_in,
                                           std::int64_t cols_in, bool add, const T* __restrict r) noexcept {
  constexpr std::int64_t RC = std::int64_t{R} * C;
  T* g = grad + slot * RC;
  if (rows_in >= R && cols_in >= C) {
    if (add)
      for (std::int64_t k = 0; k < RC; ++k) g[k] += r[k];
    else
      for (std::int64_t k = 0; k < RC; ++k) g[k] = r[k];
    return;
  }
  for (std::int64_t i = 0; i < R; ++i)
    for (std::int64_t c = 0; c < C; ++c) {
      T& e = g[i * C + c];
      if (i < rows_in && c < cols_in)
        e = add ? e + r[i * C + c] : r[i * C + c];
      else if (!add)
        e = T(0);
    }
}

// Rows [r0, r1) of src into `packed` with the plan's layout over `padded` rows (rows past
// src.rows() and columns past the batch zero). O((r1 - r0) x B).
template <class T>
void block_sddmm_pack(const PanelPlan& plan, ConstMatrixView<T> src, std::int64_t padded, T* packed, std::int64_t r0,
                      std::int64_t r1) noexcept {
  for (std::int64_t p = 0; p < plan.count(); ++p) {
    const std::int64_t b0 = plan.begin(p), nb = plan.columns(p), stride = plan.regs_of(p) * plan.simd;
    T* base = packed + padded * b0;
    for (std::int64_t i = r0; i < r1; ++i) {
      T* dst = base + i * stride;
      std::int64_t j = 0;
      if (i < src.rows()) {
        std::memcpy(dst, src.row(i) + b0, static_cast<std::size_t>(nb) * sizeof(T));
        j = nb;
      }
      std::fill(dst + j, dst + stride, T(0));
    }
  }
}

// dY and X are T or bf16 (widened in registers); grad is T. Dp (bf16 only): the vdpbf16ps
// path, 32 bf16 a batch step.
template <class Arch, Value T, ColumnIndex Index, int R, int C, class In, bool Dp = false>
void block_sddmm_simd(const BlockPaddedCSR<T, Index, R, C>& W, ConstMatrixView<In> dY, ConstMatrixView<In> X,
                      std::span<T> grad, Update mode, KernelWorkspace<T>& ws) {
  constexpr std::int64_t N = kSddmmStep<Arch, T, Dp>, RC = std::int64_t{R} * C;
  const auto& P = W.pattern();
  const std::int64_t M = W.rows(), K = W.cols(), Bw = X.cols();
  const std::int64_t Mp = P.rows() * R, Kp = P.cols() * C;  // padded to whole blocks
  // No panel wider than the batch: a wider one would only pack zeros.
  const PanelPlan plan(Bw, Kp, N, sizeof(In), SPRIG_BLOCK_SDDMM_PANEL_BUDGET_BYTES, (Bw + N - 1) / N);
  const bool in_place = plan.in_place() && Mp == M && Kp == K;
  In* packed_dy = in_place ? nullptr : operand_buffer<In>(ws, plan.packed_size(Mp) + plan.packed_size(Kp));
  In* packed_x = in_place ? nullptr : packed_dy + plan.packed_size(Mp);
  ws.partition.update(P);
  const Index* cols = P.col_indices().data();
  const bool overwrite = mode == Update::overwrite;
  const bool dead = P.dead_slots() > 0;
  run_partitioned(
      ws.partition, P.nnz() * RC * Bw,
      [&](int t, int n) {
        if (!in_place) {
          block_sddmm_pack(plan, dY, Mp, packed_dy, Mp * t / n, Mp * (t + 1) / n);
          block_sddmm_pack(plan, X, Kp, packed_x, Kp * t / n, Kp * (t + 1) / n);
        }
        if (overwrite && dead) {  // slots owned by no row: zeroed by storage range
          const std::int64_t S = std::ssize(grad);
          std::fill(grad.data() + S * t / n, grad.data() + S * (t + 1) / n, T(0));
        }
      },
      [&](std::int64_t r0, std::int64_t r1) {
        if (overwrite)
          for (std::int64_t bi = r0; bi < r1; ++bi) {
            const std::int64_t s = P.row_start(bi);
            std::fill(grad.data() + (s + P.row_nnz(bi)) * RC, grad.data() + (s + P.row_capacity(bi)) * RC, T(0));
          }
        constexpr int G = block_sddmm_group_size<Arch, T, R, C>();
        alignas(64) T res[G * RC];
        for (std::int64_t p = 0; p < plan.count(); ++p) {
          const std::int64_t b0 = plan.begin(p), steps = plan.regs_of(p);
          const In* dbase = in_place ? dY.data() : packed_dy + Mp * b0;
          const In* xbase = in_place ? X.data() : packed_x + Kp * b0;
          const std::int64_t ds = in_place ? dY.stride() : steps * N;
          const std::int64_t xs = in_place ? X.stride() : steps * N;
          const bool add = !overwrite || p > 0;
          for (std::int64_t bi = r0; bi < r1; ++bi) {
            const std::int64_t s0 = P.row_start(bi), nb = P.row_nnz(bi);
            const std::int64_t rows_in = std::min<std::int64_t>(R, M - bi * R);
            const In* d = dbase + bi * R * ds;
            if constexpr (G > 1) {
              for (std::int64_t q = 0; q < nb; q += G) {
                const In* xg[G];  // a short last group repeats its last block (computed, not stored)
                SPRIG_UNROLL for (int g = 0; g < G; ++g) xg[g] =
                    xbase + cols[s0 + std::min<std::int64_t>(q + g, nb - 1)] * C * xs;
                block_sddmm_group<Arch, T, R, C, G, Dp>(d, ds, xg, xs, steps, res);
                for (std::int64_t g = 0; g < std::min<std::int64_t>(G, nb - q); ++g)
                  block_sddmm_store<T, R, C>(grad.data(), s0 + q + g, rows_in, K - cols[s0 + q + g] * C, add,
                                             res + g * RC);
              }
            } else {
              for (std::int64_t q = 0; q < nb; ++q) {
                block_sddmm_block<Arch, T, R, C, Dp>(d, ds, xbase + cols[s0 + q] * C * xs, xs, steps, res);
                block_sddmm_store<T, R, C>(grad.data(), s0 + q, rows_in, K - cols[s0 + q] * C, add, res);
              }
            }
          }
        }
      });
}
#endif

// Scalar path: each in-matrix dot of a live block in batch order.
template <Value T, ColumnIndex Index, int R, int C, class In>
void block_sddmm_scalar(const BlockPaddedCSR<T, Index, R, C>& W, ConstMatrixView<In> dY, ConstMatrixView<In> X,
                        std::span<T> grad, Update mode, KernelWorkspace<T>& ws) {
  constexpr std::int64_t RC = std::int64_t{R} * C;
  const auto& P = W.pattern();
  ws.partition.update(P);
  const Index* cols = P.col_indices().data();
  const std::int64_t M = W.rows(), K = W.cols(), Bw = X.cols();
  const bool overwrite = mode == Update::overwrite;
  const bool dead = P.dead_slots() > 0;
  run_partitioned(
      ws.partition, P.nnz() * RC * Bw,
      [&](int t, int n) {
        if (overwrite && dead) {
          const std::int64_t S = std::ssize(grad);
          std::fill(grad.data() + S * t / n, grad.data() + S * (t + 1) / n, T(0));
        }
      },
      [&](std::int64_t r0, std::int64_t r1) {
        for (std::int64_t bi = r0; bi < r1; ++bi) {
          const std::int64_t s0 = P.row_start(bi), nb = P.row_nnz(bi);
          for (std::int64_t q = 0; q < nb; ++q) {
            const std::int64_t bj = cols[s0 + q];
            T* g = grad.data() + (s0 + q) * RC;
            for (std::int64_t r = 0; r < R; ++r)
              for (std::int64_t c = 0; c < C; ++c) {
                T& e = g[r * C + c];
                if (bi * R + r < M && bj * C + c < K) {
                  const In* d = dY.row(bi * R + r);
                  const In* x = X.row(bj * C + c);
                  T acc = T(0);
                  for (std::int64_t b = 0; b < Bw; ++b) acc += operand_value<T>(d[b]) * operand_value<T>(x[b]);
                  e = overwrite ? acc : e + acc;
                } else if (overwrite) {
                  e = T(0);
                }
              }
          }
          if (overwrite) std::fill(grad.data() + (s0 + nb) * RC, grad.data() + (s0 + P.row_capacity(bi)) * RC, T(0));
        }
      });
}

// The shapes (ShapeError) and grad apart from dY, X and W's values (ArgumentError), for
// block_sddmm and bf16_block_sddmm (In: T, or bf16).
template <class T, class In, ColumnIndex Index, int R, int C>
void check_block_sddmm_operands(const char* fn, const BlockPaddedCSR<T, Index, R, C>& W, ConstMatrixView<In> dY,
                                ConstMatrixView<In> X, std::span<T> grad) {
  const std::int64_t RC = std::int64_t{R} * C;
  if (dY.rows() != W.rows() || X.rows() != W.cols() || dY.cols() != X.cols() ||
      std::ssize(grad) != W.storage_size() * RC)
    throw ShapeError(message(fn, ": W is ", W.rows(), "x", W.cols(), " (", R, "x", C, " blocks) with ",
                             W.storage_size(), " slots, dY is ", dY.rows(), "x", dY.cols(), ", X is ", X.rows(), "x",
                             X.cols(), ", grad has ", grad.size(), " entries (need dY ", W.rows(), "xB, X ", W.cols(),
                             "xB, grad ", W.storage_size() * RC, ")"));
  check_no_overlap(fn, "grad", grad, "dY", dY);
  check_no_overlap(fn, "grad", grad, "X", X);
  check_no_overlap(fn, "grad", grad, "W's values", W.values());
}

}  // namespace detail

// grad (=|+=) the weight gradient of W's live blocks, with a caller-owned workspace: for every
// live block slot s = (bi, bj) and every (r, c) with bi*R + r < M and bj*C + c < K,
// grad[s*R*C + r*C + c] (=|+=) dot(dY[bi*R + r, :], X[bj*C + c, :]).
// Preconditions: dY is W.rows() x B, X is W.cols() x B and grad.size() == W.storage_size() *
// R * C (else ShapeError); grad shares no memory with dY, X or W.values() (else
// ArgumentError). Overwrite writes every entry (0 at padding and dead slots and at the
// out-of-matrix entries of edge blocks) and never reads grad; accumulate leaves those
// unchanged. W's values are never read, and no row of dY or X outside the matrix is.
// Complexity: O(nnz_blocks x R x C x B) multiply-adds, plus O((M + K) x B) to pack dY and X
// where they are not read in place, and O(block rows) per topology change (partition).
// Threads: OpenMP over nnz-balanced block-row ranges; bitwise identical for any thread count.
// The workspace must not be shared by concurrent calls.
template <Value T, ColumnIndex Index, int R, int C>
void block_sddmm(const BlockPaddedCSR<T, Index, R, C>& W, std::type_identity_t<ConstMatrixView<T>> dY,
                 std::type_identity_t<ConstMatrixView<T>> X, std::type_identity_t<std::span<T>> grad,
                 KernelWorkspace<T>& workspace, Update mode = Update::overwrite) {
  detail::check_block_sddmm_operands("sprig::block_sddmm", W, dY, X, grad);
  if (X.cols() == 0 || W.nnz_blocks() == 0) {  // every dot is empty
    if (mode == Update::overwrite) std::fill(grad.begin(), grad.end(), T(0));
    return;
  }
#if SPRIG_KERNEL_SIMD
  if constexpr (detail::kSimdFor<T>) {
    detail::block_sddmm_simd<detail::KernelArch>(W, dY, X, grad, mode, workspace);
    return;
  }
#endif
  detail::block_sddmm_scalar(W, dY, X, grad, mode, workspace);
}

// The same with a temporary workspace (allocates per call).
template <Value T, ColumnIndex Index, int R, int C>
void block_sddmm(const BlockPaddedCSR<T, Index, R, C>& W, std::type_identity_t<ConstMatrixView<T>> dY,
                 std::type_identity_t<ConstMatrixView<T>> X, std::type_identity_t<std::span<T>> grad,
                 Update mode = Update::overwrite) {
  KernelWorkspace<T> workspace;
  block_sddmm(W, dY, X, grad, workspace, mode);
}

}  // namespace sprig
