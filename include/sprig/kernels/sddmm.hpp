// sprig/kernels/sddmm.hpp — the weight gradient at live slots: grad[s] = dot(dY[i,:], X[c,:])
// for every live slot s = (i, c) of W, written into an array aligned with W.values().
//
// How (docs/design.md, "sddmm"): X is cut into panels of whole registers (panels.hpp) and
// each thread works panel by panel over its rows, over spmm's column blocks where K rows of a
// panel would not fit L2 (a dot does not depend on the block it is done in). For one row and
// one panel, dY[i, panel] is loaded into registers once; N slots of the row (N = SIMD width)
// are in flight at a time, each one accumulator fed by the panel's FMAs that share those dY
// registers, and one batched horizontal sum (simd.hpp: batched_hsum) reduces the N
// accumulators into one register of N dots, stored straight into grad. Panels after the
// first add their partial dots to grad.
//
// Determinism: every grad[s] is summed in an order fixed by its row and B alone, so the
// result is bitwise identical for every thread count and column-block budget.
#pragma once

#include <type_traits>

#include <algorithm>
#include <cstdint>
#include <span>

#include "../core/config.hpp"
#include "../core/error.hpp"
#include "../core/matrix.hpp"
#include "../core/padded_csr.hpp"
#include "../core/tuning.hpp"
#include "panels.hpp"
#include "parallel.hpp"
#include "row_partition.hpp"
#include "simd.hpp"
#include "spmm.hpp"
#include "update_mode.hpp"
#include "workspace.hpp"

namespace sprig {

namespace detail {

// Overwrite's zeros at the padding of rows [r0, r1): the slots past each row's live ones up
// to its capacity (dead slots, owned by no row, are zeroed by storage range).
template <class T, ColumnIndex Index>
SPRIG_ALWAYS_INLINE void zero_row_padding(const PaddedCSR<T, Index>& W, T* grad, std::int64_t r0,
                                          std::int64_t r1) noexcept {
  for (std::int64_t i = r0; i < r1; ++i) {
    const std::int64_t s = W.row_start(i);
    std::fill(grad + s + W.row_nnz(i), grad + s + W.row_capacity(i), T(0));
  }
}

#if SPRIG_KERNEL_SIMD
// The lane-wise dot of one weight over R batch registers: sum over r of u[r] * v(r), v(r) the
// r-th register of the other row (a load in sddmm, a register in sddmm_dx's one pass). Two
// chains, even and odd registers, added at the end: one chain is R dependent multiply-adds,
// and in sddmm_dx, where each weight also feeds dX's accumulators, that latency bound the
// pass (docs/design.md, "sddmm"). sddmm and sddmm_dx share this order, so they give the same
// bits.
template <int R, class B, class V>
SPRIG_ALWAYS_INLINE B lane_dot(const B* u, V&& v) noexcept {
  B even = u[0] * v(0);
  if constexpr (R == 1) {
    return even;
  } else {
    B odd = u[1] * v(1);
    SPRIG_UNROLL for (int r = 2; r + 1 < R; r += 2) {
      even = xsimd::fma(u[r], v(r), even);
      odd = xsimd::fma(u[r + 1], v(r + 1), odd);
    }
    if constexpr (R % 2 == 1) even = xsimd::fma(u[R - 1], v(R - 1), even);
    return even + odd;
  }
}

// Partial dots of one row over one panel: d holds R * N elements of dY[i, panel] (zero past
// the batch), X panel rows `xs` elements apart from xp; grad slots g[0, n).
template <class A, class T, class Index, int R>
SPRIG_ALWAYS_INLINE void sddmm_tile(const Index* __restrict cols, std::int64_t n, const T* __restrict d,
                                    const T* __restrict xp, std::int64_t xs, T* __restrict g, bool add) noexcept {
  using B = Batch<T, A>;
  constexpr std::int64_t N = B::size;
  constexpr std::int64_t row_bytes = R * N * static_cast<std::int64_t>(sizeof(T));
  B dv[R];
  SPRIG_UNROLL for (int r = 0; r < R; ++r) dv[r] = B::load_unaligned(d + r * N);
  B acc[N];
  std::int64_t q = 0;
  for (; q + N <= n; q += N) {
    // The X rows of the next group, asked for ahead: wide tiles (R >= 4) ask for each one
    // beside a slot's loads, N slots ahead (all N at once before the group lost; docs/design.md,
    // "sddmm"); narrow tiles have too little work per slot to hide a test per slot, so they ask
    // for the whole next group at once.
    constexpr bool interleaved = R >= 4;
    if (!interleaved && q + 2 * N <= n)
      SPRIG_UNROLL for (std::int64_t k = 0; k < N; ++k)
          prefetch_row_start<row_bytes>(xp + static_cast<std::int64_t>(cols[q + N + k]) * xs);
    SPRIG_UNROLL for (std::int64_t k = 0; k < N; ++k) {
      if (interleaved && q + k + N < n)
        prefetch_row_start<row_bytes>(xp + static_cast<std::int64_t>(cols[q + k + N]) * xs);
      const T* x = xp + static_cast<std::int64_t>(cols[q + k]) * xs;
      acc[k] = lane_dot<R>(dv, [x](int r) SPRIG_ALWAYS_INLINE_LAMBDA { return B::load_unaligned(x + r * N); });
    }
    B s = batched_hsum(acc);
    if (add) s += B::load_unaligned(g + q);
    s.store_unaligned(g + q);
  }
  if (q < n) {
    const std::int64_t m = n - q;
    SPRIG_UNROLL for (std::int64_t k = 0; k < N; ++k) {
      if (k < m) {
        const T* x = xp + static_cast<std::int64_t>(cols[q + k]) * xs;
        acc[k] = lane_dot<R>(dv, [x](int r) SPRIG_ALWAYS_INLINE_LAMBDA { return B::load_unaligned(x + r * N); });
      } else {
        acc[k] = B(T(0));
      }
    }
    alignas(64) T tmp[N];
    batched_hsum(acc).store_aligned(tmp);
    for (std::int64_t k = 0; k < m; ++k) g[q + k] = add ? g[q + k] + tmp[k] : tmp[k];
  }
}

// Rows [r0, r1) over one panel. Without bounds each row is one tile; with column-block
// bounds (panels.hpp: ColumnBlocks) block by block, each block's slots of the row (a dot does
// not depend on the block it is done in: the same bits either way); a row whose columns do
// not ascend is done whole with the first block.
template <class A, class T, class Index, int R>
void sddmm_panel_rows(const PaddedCSR<T, Index>& W, std::int64_t r0, std::int64_t r1, ConstMatrixView<T> dY,
                      std::int64_t b0, std::int64_t valid, const T* xp, std::int64_t xs, T* grad, bool add,
                      const std::int64_t* bounds, std::int64_t blocks) noexcept {
  constexpr std::int64_t N = Batch<T, A>::size;
  const Index* cols = W.col_indices().data();
  alignas(64) T dpad[R * N];
  for_each_row_segment(
      W, r0, r1, bounds, blocks, [](std::int64_t) SPRIG_ALWAYS_INLINE_LAMBDA {},
      [&](std::int64_t i, std::int64_t s, std::int64_t n, bool, bool) SPRIG_ALWAYS_INLINE_LAMBDA {
        if (n == 0) return;
        const T* d = dY.row(i) + b0;
        if (valid < R * N) {  // batch tail: zero-padded copy, so no load reads past the row
          std::copy_n(d, valid, dpad);
          std::fill(dpad + valid, dpad + R * N, T(0));
          d = dpad;
        }
        sddmm_tile<A, T, Index, R>(cols + s, n, d, xp, xs, grad + s, add);
      });
}

// The widest panel sddmm's tile takes on architecture A, in registers: N accumulators + R dY
// registers + a load must fit the register file: 32 registers with AVX-512 (64-byte
// registers), 16 on SSE/AVX2 (8 + 4 + 1 at R = 4); NEON has 32 registers of 4 lanes, so
// R <= 8 fits.
template <class T, class A>
constexpr std::int64_t sddmm_max_regs() noexcept {
  constexpr std::int64_t N = Batch<T, A>::size;
  return (N * sizeof(T) == 64 || N <= 4) ? kMaxPanelRegs : 4;
}

template <class A, Value T, ColumnIndex Index>
void sddmm_simd(const PaddedCSR<T, Index>& W, ConstMatrixView<T> dY, ConstMatrixView<T> X, std::span<T> grad,
                Update mode, KernelWorkspace<T>& ws) {
  constexpr std::int64_t N = Batch<T, A>::size;
  const std::int64_t K = X.rows(), Bw = X.cols();
  constexpr std::int64_t max_regs = sddmm_max_regs<T, A>();
  // Full-width panels over column blocks where K rows of one would overflow L2: spmm's blocks
  // (the same bounds serve both kernels of a layer).
  const ColumnBlocks blocks = spmm_column_blocks<T, A>(K, Bw, ws.column_block_bytes);
  const PanelPlan plan(Bw, std::min(K, blocks.width), N, sizeof(T), SPRIG_SDDMM_PANEL_BUDGET_BYTES, max_regs);
  const bool in_place = plan.in_place();
  T* packed = in_place ? nullptr : ws.buffer(static_cast<std::size_t>(plan.packed_size(K)));
  const std::int64_t* bounds = blocks.count > 1 ? ws.column_bounds(W, blocks) : nullptr;
  ws.partition.update(W);
  const bool overwrite = mode == Update::overwrite;
  const bool dead = W.dead_slots() > 0;
  run_partitioned(
      ws.partition, W.nnz() * Bw,
      [&](int t, int n) {
        if (!in_place) pack_panels(plan, X, packed, K * t / n, K * (t + 1) / n);
        if (overwrite && dead) {  // slots owned by no row: zeroed by storage range
          const std::int64_t S = std::ssize(grad);
          std::fill(grad.data() + S * t / n, grad.data() + S * (t + 1) / n, T(0));
        }
      },
      [&](std::int64_t r0, std::int64_t r1) {
        if (overwrite) zero_row_padding(W, grad.data(), r0, r1);
        for (std::int64_t p = 0; p < plan.count(); ++p) {
          const std::int64_t b0 = plan.begin(p), regs = plan.regs_of(p);
          const T* xp = in_place ? X.data() : packed + K * b0;
          const std::int64_t xs = in_place ? X.stride() : regs * N;
          const std::int64_t valid = plan.columns(p);
          const bool add = !overwrite || p > 0;
          with_panel_regs(regs, [&]<int R>(std::integral_constant<int, R>) {
            sddmm_panel_rows<A, T, Index, R>(W, r0, r1, dY, b0, valid, xp, xs, grad.data(), add, bounds, blocks.count);
          });
        }
      });
}
#endif

// Scalar path: one dot per live slot, in batch order, in T (W's value type and grad's):
// operands of type Op (T, or bfloat16 with T = float) widened to T element by element.
template <class Op, Value T, ColumnIndex Index>
void sddmm_scalar(const PaddedCSR<T, Index>& W, ConstMatrixView<Op> dY, ConstMatrixView<Op> X, std::span<T> grad,
                  Update mode, KernelWorkspace<T>& ws) {
  ws.partition.update(W);
  const Index* cols = W.col_indices().data();
  const std::int64_t Bw = X.cols();
  const bool overwrite = mode == Update::overwrite;
  const bool dead = W.dead_slots() > 0;
  run_partitioned(
      ws.partition, W.nnz() * Bw,
      [&](int t, int n) {
        if (overwrite && dead) {
          const std::int64_t S = std::ssize(grad);
          std::fill(grad.data() + S * t / n, grad.data() + S * (t + 1) / n, T(0));
        }
      },
      [&](std::int64_t r0, std::int64_t r1) {
        if (overwrite) zero_row_padding(W, grad.data(), r0, r1);
        for (std::int64_t i = r0; i < r1; ++i) {
          const std::int64_t s = W.row_start(i), n = W.row_nnz(i);
          const Op* d = dY.row(i);
          for (std::int64_t q = 0; q < n; ++q) {
            const Op* x = X.row(cols[s + q]);
            T acc = T(0);
            for (std::int64_t b = 0; b < Bw; ++b) acc += static_cast<T>(d[b]) * static_cast<T>(x[b]);
            grad[s + q] = overwrite ? acc : grad[s + q] + acc;
          }
        }
      });
}

// The kernel on architecture A once the operands are checked and X.cols() and W.nnz() are
// not 0: what a dispatching build's table points to (dispatch.hpp).
template <class A, Value T, ColumnIndex Index>
void sddmm_on(const PaddedCSR<T, Index>& W, ConstMatrixView<T> dY, ConstMatrixView<T> X, std::span<T> grad,
              KernelWorkspace<T>& ws, Update mode) {
#if SPRIG_KERNEL_SIMD
  if constexpr (kSimdFor<T, A>) {
    sddmm_simd<A>(W, dY, X, grad, mode, ws);
    return;
  }
#endif
  sddmm_scalar(W, dY, X, grad, mode, ws);
}

}  // namespace detail

// grad (=|+=) the weight gradient at W's live slots, with a caller-owned workspace.
// Preconditions: dY is W.rows() x B, X is W.cols() x B and grad.size() == W.storage_size()
// (else ShapeError); grad shares no memory with dY, X or W.values() (else ArgumentError).
// Overwrite writes every slot (0 at padding and dead slots) and never reads grad; accumulate
// leaves non-live slots unchanged. W's values are never read (a grad over them would
// overwrite the weights, hence the check).
// Complexity: O(nnz(W) x B) multiply-adds, plus O(K x B) to pack X where it is not read in
// place and O(nnz(W)) per topology change (partition, block bounds).
// Threads: OpenMP over nnz-balanced row ranges; bitwise identical for any thread count. The
// workspace must not be shared by concurrent calls.
template <Value T, ColumnIndex Index>
void sddmm(const PaddedCSR<T, Index>& W, std::type_identity_t<ConstMatrixView<T>> dY,
           std::type_identity_t<ConstMatrixView<T>> X, std::type_identity_t<std::span<T>> grad,
           KernelWorkspace<T>& workspace, Update mode = Update::overwrite) {
  if (dY.rows() != W.rows() || X.rows() != W.cols() || dY.cols() != X.cols() || std::ssize(grad) != W.storage_size())
    throw ShapeError(detail::message("sprig::sddmm: W is ", W.rows(), "x", W.cols(), " with ", W.storage_size(),
                                     " slots, dY is ", dY.rows(), "x", dY.cols(), ", X is ", X.rows(), "x", X.cols(),
                                     ", grad has ", grad.size(), " entries (need dY ", W.rows(), "xB, X ", W.cols(),
                                     "xB, grad ", W.storage_size(), ")"));
  detail::check_no_overlap("sprig::sddmm", "grad", grad, "dY", dY);
  detail::check_no_overlap("sprig::sddmm", "grad", grad, "X", X);
  detail::check_no_overlap("sprig::sddmm", "grad", grad, "W's values", W.values());
  if (X.cols() == 0 || W.nnz() == 0) {  // every dot is empty
    if (mode == Update::overwrite) std::fill(grad.begin(), grad.end(), T(0));
    return;
  }
  detail::sddmm_kernel<T, Index>()(W, dY, X, grad, workspace, mode);
}

// The same with a temporary workspace (allocates per call).
template <Value T, ColumnIndex Index>
void sddmm(const PaddedCSR<T, Index>& W, std::type_identity_t<ConstMatrixView<T>> dY,
           std::type_identity_t<ConstMatrixView<T>> X, std::type_identity_t<std::span<T>> grad,
           Update mode = Update::overwrite) {
  KernelWorkspace<T> workspace;
  sddmm(W, dY, X, grad, workspace, mode);
}

}  // namespace sprig
