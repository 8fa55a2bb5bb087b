// sprig/nn/bf16_scratch.hpp — Bf16Scratch: where a layer trained in bf16 (Precision::bf16)
// rounds its float operands (X, dY) to bfloat16 for the bf16 kernels, and narrow_rows /
// narrow_transposed, which do the rounding (and a dense layer's transposes).
//
// Why a scratch and not a per-layer copy: the rounded X and dY matter only within one forward
// or backward call (backward rounds X again rather than keep it from forward), so a model
// hands one Bf16Scratch to all its layers (ModelScratch does) and pays for the largest
// request once, not for a bf16 copy of every activation.
// Not thread-safe: it serves one layer call at a time, as a model's layers run one after
// another (a call may itself use OpenMP threads).
#pragma once

#include <type_traits>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "../core/aligned_allocator.hpp"
#include "../core/bfloat16.hpp"
#include "../core/matrix.hpp"
#include "../kernels/bfloat16_convert.hpp"
#include "rows.hpp"

namespace sprig {

class Bf16Scratch {
public:
  // At least n elements, contents unspecified; grows to the largest request and never
  // shrinks. Throws std::bad_alloc.
  bfloat16* data(std::int64_t n) {
    if (n > std::ssize(buffer_)) buffer_.resize(static_cast<std::size_t>(n));
    return buffer_.data();
  }
  // Bytes owned.
  std::int64_t memory_bytes() const noexcept {
    return static_cast<std::int64_t>(buffer_.capacity() * sizeof(bfloat16));
  }

private:
  std::vector<bfloat16, AlignedAllocator<bfloat16>> buffer_;
};

using SharedBf16Scratch = std::shared_ptr<Bf16Scratch>;

namespace detail {
// out (a tight X.rows() x X.cols() block) = X rounded to bfloat16 element by element (nearest
// even), rows split over OpenMP threads for a large X; returns the view of out. The same bits
// for any thread count. O(rows x cols).
inline ConstMatrixView<bfloat16> narrow_rows(ConstMatrixView<float> X, bfloat16* out) {
  const std::int64_t B = X.cols();
  for_rows(X.rows(), B, [&](std::int64_t i) {
    to_bfloat16(std::span<const float>(X.row(i), static_cast<std::size_t>(B)),
                std::span<bfloat16>(out + i * B, static_cast<std::size_t>(B)));
  });
  return ConstMatrixView<bfloat16>(out, X.rows(), B);
}

// out (a tight A.cols() x A.rows() block) = A^T rounded to bfloat16 (A float) or copied (A
// bfloat16); returns the view of out. In 32 x 32 tiles, rows of out split over OpenMP
// threads for a large A; the same bits for any thread count. O(rows x cols).
template <class In>
ConstMatrixView<bfloat16> narrow_transposed(ConstMatrixView<In> A, bfloat16* out) {
  constexpr std::int64_t tile = 32;
  const std::int64_t R = A.rows(), C = A.cols(), tiles = (C + tile - 1) / tile;
  for_rows(tiles, R * tile, [&](std::int64_t t) {
    const std::int64_t c0 = t * tile, c1 = std::min(C, c0 + tile);
    for (std::int64_t r0 = 0; r0 < R; r0 += tile)
      for (std::int64_t c = c0; c < c1; ++c)
        for (std::int64_t r = r0, r1 = std::min(R, r0 + tile); r < r1; ++r) {
          if constexpr (std::is_same_v<In, bfloat16>)
            out[c * R + r] = A.row(r)[c];
          else
            out[c * R + r] = bfloat16(A.row(r)[c]);
        }
  });
  return ConstMatrixView<bfloat16>(out, C, R);
}
}  // namespace detail

}  // namespace sprig
