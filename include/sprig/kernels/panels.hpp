// sprig/kernels/panels.hpp — the batch dimension cut into column panels of whole SIMD
// registers, X packed panel by panel, and W's columns cut into blocks where K rows of a panel
// would overflow L2.
//
// Why: CSR kernels load one X row segment per multiply-add, so where X lives sets their speed
// (about half as fast from L2 as from L1, and half again from L3; docs/design.md). Working one
// panel at a time over all rows keeps the K x panel slice of X in L2 (kPanelBudgetBytes).
// Packed, a panel is contiguous and zero-padded to whole registers, so no row stride can alias
// cache sets and the batch tail needs no masked loads.
#pragma once

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstring>
#include <span>
#include <type_traits>
#include <utility>

#include "../core/block_order.hpp"
#include "../core/matrix.hpp"
#include "../core/tuning.hpp"
#include "simd.hpp"

namespace sprig::detail {

// The budgets and the prefetch width, from core/tuning.hpp (each knob's reason is there).
inline constexpr std::int64_t kPanelBudgetBytes = SPRIG_PANEL_BUDGET_BYTES;
inline constexpr std::int64_t kColumnBlockBytes = SPRIG_COLUMN_BLOCK_BYTES;
inline constexpr std::int64_t kPrefetchRowBytes = SPRIG_PREFETCH_ROW_BYTES;

// Most registers a panel tile may span: the kernels are compiled for 1 .. kMaxPanelRegs
// registers (with_panel_regs). Each kernel keeps its tile within a 16-register ISA at this
// width (spmm: spmm_chains; sddmm: its max_regs).
inline constexpr std::int64_t kMaxPanelRegs = 8;

// Calls fn(std::integral_constant<int, R>{}) with R = regs for regs in [1, kMaxPanelRegs),
// and R = kMaxPanelRegs for any other value: the one place where a panel's runtime register
// count becomes a kernel's compile-time tile width.
template <int R = 1, class Fn>
SPRIG_ALWAYS_INLINE void with_panel_regs(std::int64_t regs, Fn&& fn) {
  if constexpr (R >= kMaxPanelRegs) {
    fn(std::integral_constant<int, static_cast<int>(kMaxPanelRegs)>{});
  } else {
    if (regs == R)
      fn(std::integral_constant<int, R>{});
    else
      with_panel_regs<R + 1>(regs, std::forward<Fn>(fn));
  }
}

// Asks for the first min(row_bytes, kPrefetchRowBytes) bytes of an X row segment of
// row_bytes bytes, one cache line at a time. Never faults (prefetch).
template <std::int64_t row_bytes, class T>
SPRIG_ALWAYS_INLINE void prefetch_row_start(const T* row) noexcept {
  const char* p = reinterpret_cast<const char*>(row);
  for (std::int64_t off = 0; off < std::min(row_bytes, kPrefetchRowBytes); off += 64) prefetch(p + off);
}

// The batch's panels: panel p covers batch columns [p * width, min(B, (p + 1) * width)); it is
// computed with regs_of(p) registers of N elements, regs_of(p) * N >= its column count.
// Packed, panel p starts at offset K * p * width (all earlier panels are full) and its rows
// are regs_of(p) * N apart. All members O(1), noexcept.
struct PanelPlan {
  std::int64_t batch = 0;  // B
  std::int64_t simd = 1;   // N
  std::int64_t regs = 1;   // registers of a full panel
  std::int64_t width = 1;  // regs * N

  // Full panels of the widest whole-register width that keeps K rows of one panel within
  // budget_bytes (and at most max_regs registers). Wide panels amortise each weight's index
  // and broadcast over more multiply-adds; the budget keeps the panel in L2.
  PanelPlan(std::int64_t B, std::int64_t K, std::int64_t N, std::int64_t elem_bytes, std::int64_t budget_bytes,
            std::int64_t max_regs)
      : batch(B), simd(N) {
    regs = std::clamp<std::int64_t>(budget_bytes / (std::max<std::int64_t>(K, 1) * N * elem_bytes), 1, max_regs);
    width = regs * N;
  }
  std::int64_t count() const noexcept { return (batch + width - 1) / width; }
  std::int64_t begin(std::int64_t p) const noexcept { return p * width; }
  std::int64_t columns(std::int64_t p) const noexcept { return std::min(width, batch - p * width); }
  std::int64_t regs_of(std::int64_t p) const noexcept { return (columns(p) + simd - 1) / simd; }
  std::int64_t packed_size(std::int64_t K) const noexcept { return K * count() * width; }
  // Whether X can be read in place: one panel whose columns fill its registers exactly (the
  // packed copy would only repeat X). Several panels are always packed: a large row stride
  // (512 floats = 2 KiB) maps a panel's rows onto few cache sets and evicts it from L2.
  bool in_place() const noexcept { return count() == 1 && batch % simd == 0; }
};

// Packs rows [c0, c1) of X (K x B) into `packed` (plan.packed_size(K) elements) with the
// plan's layout, zero padding. O((c1 - c0) x B); threads pack disjoint row ranges.
template <class T>
void pack_panels(const PanelPlan& plan, ConstMatrixView<T> X, T* packed, std::int64_t c0, std::int64_t c1) noexcept {
  const std::int64_t K = X.rows();
  for (std::int64_t p = 0; p < plan.count(); ++p) {
    const std::int64_t b0 = plan.begin(p), nb = plan.columns(p), stride = plan.regs_of(p) * plan.simd;
    T* base = packed + K * b0;
    for (std::int64_t c = c0; c < c1; ++c) {
      T* dst = base + c * stride;
      std::memcpy(dst, X.row(c) + b0, static_cast<std::size_t>(nb) * sizeof(T));
      for (std::int64_t j = nb; j < stride; ++j) dst[j] = T(0);
    }
  }
}

// W's K columns cut into `count` blocks of `width` = 2^shift columns (the last may be
// shorter): the widest power of two whose rows of a panel `row_bytes` wide take at most
// budget_bytes; count 1 if all K do.
//
// Why: X is read one row segment per live weight, at random rows. Once K rows of a panel
// overflow L2 (K = 4096 at B = 128: 2 MiB), every read comes from L3; narrower panels fit,
// but then every weight's index and broadcast serve fewer multiply-adds. Blocking the
// columns instead keeps full-width panels and an L2-sized X: every row's live weights of
// block b are done before block b + 1. A row's weights of one block must be contiguous:
// rows grouped by block (PaddedCSR::group_columns; SparseLinear keeps wide layers grouped).
// Powers of two nest, so rows grouped for one width are grouped for every wider one. A row
// that is not grouped is done whole with the first block.
struct ColumnBlocks {
  int shift = 0;
  std::int64_t width = 1;
  std::int64_t count = 1;

  ColumnBlocks(std::int64_t K, std::int64_t row_bytes, std::int64_t budget_bytes) {
    const std::int64_t fit = std::max<std::int64_t>(1, budget_bytes / std::max<std::int64_t>(row_bytes, 1));
    while (shift < 62 && (std::int64_t{2} << shift) <= fit) ++shift;
    width = std::int64_t{1} << shift;
    count = K > width ? ((K - 1) >> shift) + 1 : 1;
  }

  // For each row i of [r0, r1): bounds[i * (count + 1) + b] = offset (from the row's start) of
  // its first live weight in block b, for b = 0 .. count (the last is row_nnz); -1 at b = 0
  // for a row not grouped by block. Branch-free passes over each row's columns: a pass over
  // every live weight, so a workspace keeps them per topology (KernelWorkspace::column_bounds).
  template <class Index>
  void bounds(const Index* cols, std::span<const std::int64_t> starts, std::span<const std::int64_t> nnzs,
              std::int64_t r0, std::int64_t r1, std::int64_t* bounds) const noexcept {
    for (std::int64_t i = r0; i < r1; ++i) {
      const Index* c = cols + starts[i];
      const std::int64_t n = nnzs[i];
      std::int64_t* o = bounds + i * (count + 1);
      o[count] = n;
      if (n > INT32_MAX) {  // too long for the 32-bit counts below: done whole
        std::fill(o, o + count, 0);
        o[0] = -1;
        continue;
      }
      o[0] = in_block_order(c, n, shift) ? 0 : -1;
      for (std::int64_t b = 1; b < count; ++b) {
        const auto edge = static_cast<Index>(b << shift);  // < K, so it fits the Index
        std::int32_t below = 0;                            // 32-bit counts and Index compares vectorise; 64-bit did not
        for (std::int64_t q = 0; q < n; ++q) below += c[q] < edge;
        o[b] = below;
      }
    }
  }
};

// Row i's live weights of block b, as ColumnBlocks::bounds laid them out (`count` blocks):
// offsets [lo, hi) from the row's start; for a row not grouped by block, all of it with
// block 0 (grouped false) and nothing after (skip, at b > 0).
struct BlockSegment {
  std::int64_t lo, hi;
  bool grouped, skip;
};
inline BlockSegment block_segment(const std::int64_t* bounds, std::int64_t count, std::int64_t i, std::int64_t b,
                                  std::int64_t row_nnz) noexcept {
  const std::int64_t* o = bounds + i * (count + 1);
  if (o[0] >= 0) return {o[b], o[b + 1], true, false};
  return {0, row_nnz, false, b > 0};
}
// Where row i + 1's weights of block b start, from that row's start: what a kernel asks
// for while it works on row i (the next row's segment lies elsewhere in W).
inline std::int64_t next_row_block_offset(const std::int64_t* bounds, std::int64_t count, std::int64_t i,
                                          std::int64_t b) noexcept {
  return std::max<std::int64_t>(bounds[(i + 1) * (count + 1) + b], 0);
}

// The column blocks spmm uses for a K-column W and batch B with N elements of `value_bytes`
// per register (one block on the scalar path, N = 1). sddmm and sddmm_dx use the same ones,
// so rows grouped for these (PaddedCSR::group_columns(shift)) serve every kernel of a layer.
// O(log budget).
inline ColumnBlocks column_blocks_for_width(std::int64_t N, std::int64_t value_bytes, std::int64_t K, std::int64_t B,
                                            std::int64_t budget_bytes) noexcept {
  if (N == 1) return ColumnBlocks(K, 1, K);
  const std::int64_t regs = std::min<std::int64_t>((B + N - 1) / N, kMaxPanelRegs);
  return ColumnBlocks(K, regs * N * value_bytes, budget_bytes);
}

// The same for T on architecture A.
template <class T, class A = KernelArch>
ColumnBlocks spmm_column_blocks(std::int64_t K, std::int64_t B,
                                std::int64_t budget_bytes = kColumnBlockBytes) noexcept {
  return column_blocks_for_width(static_cast<std::int64_t>(simd_width<T, A>()), static_cast<std::int64_t>(sizeof(T)), K,
                                 B, budget_bytes);
}

}  // namespace sprig::detail
