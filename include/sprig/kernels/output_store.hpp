// sprig/kernels/output_store.hpp — store_output: one register of a kernel's sums into its
// outputs, float or bf16, through the forward's epilogue (spmm.hpp's finish, in float).
//
//   store_output<A>(y, v, count, accumulate, bias, relu[, scale])
//       y[j] = finish(v[j], y[j], ...) for j < count (<= the register's width): the old value
//       added first when accumulating, then *bias (when not null), then the ReLU; a bf16 y
//       read widened and the result rounded once, at the end (core/bfloat16.hpp's rounding).
//       With scale (T = float), v[j] is multiplied by float(scale[j]) first: an input gradient
//       times the derivative of the activation that made the input (a GELU's, kept in bf16).
//       y may be scale itself (each lane read, then written).
//
//   store_output<A>(..., scale, stream)
//       with stream, a whole register of a T output goes out with a streaming store
//       (store_streaming); y must then be aligned to the register's width.
//
//   check_x_derivative(fn, dX, D)
//       the checks of an input gradient's x_derivative operand (the scale above).
//
// The spmm kernels with bf16 operands (bf16_spmm.hpp, bf16_block_amx.hpp) and the block
// kernels (block_spmm.hpp) store through it, so a bf16 Y is bitwise a float Y rounded.
// Preconditions (not checked): y holds count values; bf16 outputs only for T = float.
#pragma once

#include <cstdint>
#include <type_traits>

#include "../core/bfloat16.hpp"
#include "../core/error.hpp"
#include "../core/matrix.hpp"
#include "bfloat16_convert.hpp"
#include "simd.hpp"
#include "spmm.hpp"

#if defined(__SSE2__)
#  include <immintrin.h>
#endif

namespace sprig::detail {

#if SPRIG_KERNEL_SIMD
// Whether store_streaming writes around the caches for registers of architecture A (x86's
// non-temporal stores; elsewhere it is a plain aligned store).
template <class A, class T>
inline constexpr bool kStreamingStores =
#  if defined(__SSE2__)
    std::is_floating_point_v<T> && sizeof(Batch<T, A>) >= 16;
#  else
    false;
#  endif

// y = v (all lanes), a non-temporal store where kStreamingStores; y aligned to the register.
// Such stores are weakly ordered: the thread that made them calls streaming_fence() before
// anything else may read y.
template <class A, class T>
SPRIG_ALWAYS_INLINE void store_streaming(T* y, Batch<T, A> v) noexcept {
#  if defined(__SSE2__)
  constexpr std::size_t bytes = sizeof(Batch<T, A>);
  if constexpr (std::is_same_v<T, float> && bytes == 16)
    _mm_stream_ps(y, v);
  else if constexpr (std::is_same_v<T, double> && bytes == 16)
    _mm_stream_pd(y, v);
#    if defined(__AVX__)
  else if constexpr (std::is_same_v<T, float> && bytes == 32)
    _mm256_stream_ps(y, v);
  else if constexpr (std::is_same_v<T, double> && bytes == 32)
    _mm256_stream_pd(y, v);
#    endif
#    if defined(__AVX512F__)
  else if constexpr (std::is_same_v<T, float> && bytes == 64)
    _mm512_stream_ps(y, v);
  else if constexpr (std::is_same_v<T, double> && bytes == 64)
    _mm512_stream_pd(y, v);
#    endif
  else
    v.store_aligned(y);
#  else
  v.store_aligned(y);
#  endif
}
#endif

// The x_derivative operand D of an input gradient stored as dX = D * (W^T dY): ShapeError
// unless D has dX's shape; ArgumentError where it overlaps dX, except as dX itself (the same
// data and stride, a bf16 dX: each lane read, then written).
template <class Out>
void check_x_derivative(const char* fn, const MatrixView<Out>& dX, const ConstMatrixView<bfloat16>& D) {
  if (D.rows() != dX.rows() || D.cols() != dX.cols())
    throw ShapeError(message(fn, ": x_derivative is ", D.rows(), "x", D.cols(), ", dX is ", dX.rows(), "x", dX.cols()));
  const bool in_place = std::is_same_v<Out, bfloat16> &&
                        static_cast<const void*>(D.data()) == static_cast<const void*>(dX.data()) &&
                        D.stride() == dX.stride();
  if (!in_place) check_no_overlap(fn, "dX", dX, "x_derivative", D);
}

// Orders the calling thread's streaming stores before its later stores (and so before what
// other threads read after a barrier). No-op where there are none.
inline void streaming_fence() noexcept {
#if defined(__SSE2__)
  _mm_sfence();
#endif
}

#if SPRIG_KERNEL_SIMD
template <class A, class T, class Out>
SPRIG_ALWAYS_INLINE void store_output(Out* y, Batch<T, A> v, std::int64_t count, bool accumulate, const T* bias,
                                      bool relu, const bfloat16* scale = nullptr, bool stream = false) noexcept {
  static_assert(std::is_same_v<Out, T> || (std::is_same_v<Out, bfloat16> && std::is_same_v<T, float>));
  using F = Batch<T, A>;
  constexpr std::int64_t N = F::size;
  if constexpr (std::is_same_v<T, float>)
    if (scale && count == N) v *= load_bfloat16<A>(scale);
  if (count == N) {
    if constexpr (std::is_same_v<Out, T>) {
      if (accumulate) v += F::load_unaligned(y);
    } else {
      if (accumulate) v += load_bfloat16<A>(y);
    }
    if (bias) v += F(*bias);
    if (relu) v = xsimd::select(v > F(T(0)), v, F(T(0)));
    if constexpr (std::is_same_v<Out, T>) {
      if (stream)
        store_streaming<A>(y, v);
      else
        v.store_unaligned(y);
    } else
      store_bfloat16<A>(y, v);
    return;
  }
  alignas(64) T tmp[N];
  v.store_aligned(tmp);
  for (std::int64_t j = 0; j < count; ++j) {
    const T old = accumulate ? static_cast<T>(y[j]) : T(0);
    const T sum = scale ? tmp[j] * static_cast<T>(static_cast<float>(scale[j])) : tmp[j];
    y[j] = static_cast<Out>(finish(sum, &old, accumulate, bias, relu));
  }
}
#endif

}  // namespace sprig::detail
