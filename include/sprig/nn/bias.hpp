// sprig/nn/bias.hpp — per-feature bias on feature-major activations [features x batch].
// Both passes run over rows on OpenMP threads for large activations (rows.hpp); a row's
// result never depends on the thread count.
#pragma once

#include <cstdint>
#include <span>

#include "../core/bfloat16.hpp"
#include "../core/matrix.hpp"
#include "../kernels/bfloat16_convert.hpp"
#include "../kernels/row_epilogue.hpp"
#include "../kernels/simd.hpp"
#include "rows.hpp"

namespace sprig::detail {

// Y[i, :] = act(Y[i, :] + b[i]): one pass for the bias and a fused activation (the same
// arithmetic as spmm's epilogue, row_epilogue.hpp). Precondition (unchecked, internal):
// b.size() >= Y.rows(), act is none or relu. O(rows x cols).
template <class T>
void add_bias(std::span<const T> b, MatrixView<T> Y, FusedActivation act = FusedActivation::none) noexcept {
  for_rows(Y.rows(), Y.cols(), [&](std::int64_t i) {
    T* __restrict y = Y.row(i);
    const T bi = b[static_cast<std::size_t>(i)];
    if (act == FusedActivation::relu)
      for (std::int64_t j = 0; j < Y.cols(); ++j) {
        const T v = y[j] + bi;
        y[j] = v > T(0) ? v : T(0);
      }
    else
      for (std::int64_t j = 0; j < Y.cols(); ++j) y[j] += bi;
  });
}

// g[i] = sum_j dY[i, j]  (the bias gradient). With SIMD the row is summed lane-wise (lane l
// adds elements l, l + N, l + 2N, ...), the lanes are reduced, then the tail added in order:
// a fixed order per (row, batch width), 8-16 independent additions per cycle instead of one
// dependent chain. Precondition (unchecked, internal): g.size() >= dY.rows(), g apart from
// dY. O(rows x cols).
template <class T, class Arch = KernelArch>
void sum_rows(ConstMatrixView<T> dY, std::span<T> g) noexcept {
  for_rows(dY.rows(), dY.cols(), [&](std::int64_t i) {
    const T* __restrict d = dY.row(i);
    const std::int64_t n = dY.cols();
    std::int64_t j = 0;
    T acc = T(0);
#if SPRIG_KERNEL_SIMD
    if constexpr (kSimdFor<T, Arch>) {
      using B = Batch<T, Arch>;
      constexpr std::int64_t N = B::size;
      if (n >= N) {
        B lanes(T(0));
        for (; j + N <= n; j += N) lanes += B::load_unaligned(d + j);
        acc = reduce_add(lanes);
      }
    }
#endif
    for (; j < n; ++j) acc += d[j];
    g[static_cast<std::size_t>(i)] = acc;
  });
}

// The same for a bf16 dY: g[i] = sum_j float(dY[i, j]), bitwise the float form's result on the
// widened dY (each register widened as it is loaded, summed in the float form's lane order).
// O(rows x cols); allocates nothing.
template <class Arch = KernelArch>
void sum_rows(ConstMatrixView<bfloat16> dY, std::span<float> g) noexcept {
  for_rows(dY.rows(), dY.cols(), [&](std::int64_t i) {
    const bfloat16* d = dY.row(i);
    const std::int64_t n = dY.cols();
    std::int64_t j = 0;
    float acc = 0.0f;
#if SPRIG_KERNEL_SIMD
    if constexpr (kSimdFor<float, Arch>) {
      using B = Batch<float, Arch>;
      constexpr std::int64_t N = B::size;
      if (n >= N) {
        B lanes(0.0f);
        for (; j + N <= n; j += N) lanes += load_bfloat16<Arch>(d + j);
        acc = reduce_add(lanes);
      }
    }
#endif
    for (; j < n; ++j) acc += static_cast<float>(d[j]);
    g[static_cast<std::size_t>(i)] = acc;
  });
}

}  // namespace sprig::detail
