// sprig/kernels/operands.hpp — the input elements of a kernel written once for float and
// bf16 operands (the block kernels: block_spmm.hpp, block_sddmm.hpp): an element as the
// accumulation type, a register of them loaded (bf16: widened, exact), and a packing buffer of
// them carved from a float workspace. Accumulation is always in T; a bf16 operand is only
// ever widened, never rounded, so the float and bf16 instantiations differ in their loads alone.
#pragma once

#include <cstdint>
#include <type_traits>

#include "../core/bfloat16.hpp"
#include "../core/config.hpp"
#include "../core/matrix.hpp"
#include "bfloat16_convert.hpp"
#include "panels.hpp"
#include "simd.hpp"
#include "workspace.hpp"

namespace sprig::detail {

// An input element (X, dY or a weight: float, double or bf16) as the accumulation type T.
template <class T, class In>
SPRIG_ALWAYS_INLINE T operand_value(In v) noexcept {
  return static_cast<T>(v);
}

// n elements of In from a workspace of T (the same buffer the float kernels pack into, so
// layers share one whichever precision they run in).
template <class In, class T>
In* operand_buffer(KernelWorkspace<T>& ws, std::int64_t n) {
  const std::int64_t units = (n * std::int64_t{sizeof(In)} + std::int64_t{sizeof(T)} - 1) / std::int64_t{sizeof(T)};
  return reinterpret_cast<In*>(ws.buffer(static_cast<std::size_t>(units)));
}

// The vdpbf16ps paths of the bf16 block kernels (bf16_block_kernels.hpp) exist where the
// kernels are compiled for AVX-512 with AVX512-BF16 (-march on such a CPU): they reuse the
// block kernels' tiles, whose registers are then 512 bits wide.
#if SPRIG_KERNEL_SIMD && defined(__AVX512F__) && defined(__AVX512BF16__) && defined(__AVX512BW__)
#  define SPRIG_BF16_BLOCK_DP 1
#  include <immintrin.h>
#else
#  define SPRIG_BF16_BLOCK_DP 0
#endif

// Two bf16 inputs of one batch column from consecutive rows 2k (low half) and 2k + 1 (high
// half): the packed layout the forward vdpbf16ps path reads, one pair row per two input rows.
struct Bf16Pair {
  std::uint32_t bits;
};
// Input rows per packed row: 2 for pairs, else 1.
template <class In>
inline constexpr int kRowsPerLine = std::is_same_v<In, Bf16Pair> ? 2 : 1;

#if SPRIG_KERNEL_SIMD
// Batch<T, A>::size inputs at p as a register of T: loaded, or bf16 widened (exact), so one
// kernel body serves float and bf16 operands (a bf16 load reads half the bytes).
template <class A, class T, class In>
SPRIG_ALWAYS_INLINE Batch<T, A> load_operand(const In* p) noexcept {
  if constexpr (std::is_same_v<In, bfloat16>)
    return load_bfloat16<A>(p);
  else
    return Batch<T, A>::load_unaligned(p);
}

// Rows [k0, k1) of the pair layout of X over `lines` pair rows, panel by panel as pack_panels
// (plan.simd pairs a register): pair row k holds X rows 2k and 2k + 1, zero past X.rows() and
// past the batch. O((k1 - k0) x B).
template <class A>
void pack_bf16_pairs(const PanelPlan& plan, ConstMatrixView<bfloat16> X, std::int64_t lines, Bf16Pair* packed,
                     std::int64_t k0, std::int64_t k1) noexcept {
  using U = xsimd::batch<std::uint32_t, A>;
  constexpr std::int64_t N = U::size;
  const std::int64_t K = X.rows();
  for (std::int64_t p = 0; p < plan.count(); ++p) {
    const std::int64_t b0 = plan.begin(p), nb = plan.columns(p), stride = plan.regs_of(p) * plan.simd;
    for (std::int64_t k = k0; k < k1; ++k) {
      auto* dst = reinterpret_cast<std::uint32_t*>(packed + lines * b0 + k * stride);
      const auto* lo = 2 * k < K ? reinterpret_cast<const std::uint16_t*>(X.row(2 * k) + b0) : nullptr;
      const auto* hi = 2 * k + 1 < K ? reinterpret_cast<const std::uint16_t*>(X.row(2 * k + 1) + b0) : nullptr;
      std::int64_t j = 0;
      for (; j + N <= nb; j += N) {
        const U l = lo ? load_widened_u16<A>(lo + j) : U(0u), h = hi ? load_widened_u16<A>(hi + j) : U(0u);
        (l | (h << 16)).store_unaligned(dst + j);
      }
      for (; j < stride; ++j)
        dst[j] = j < nb ? (lo ? std::uint32_t{lo[j]} : 0u) | (hi ? std::uint32_t{hi[j]} << 16 : 0u) : 0u;
    }
  }
}
#endif

}  // namespace sprig::detail
