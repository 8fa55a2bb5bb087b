// sprig/nn/bf16_scratch.hpp — Bf16Scratch: where a layer trained in bf16 (Precision::bf16)
// rounds its float operands (X, dY) to bfloat16 for the bf16 kernels; Bf16Operands, what
// such a layer keeps (its precision, the bf16 shadow of its weights, its scratch); and
// narrow_rows / narrow_transposed, which do the rounding (and a dense layer's transposes).
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
#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "../core/aligned_allocator.hpp"
#include "../core/bfloat16.hpp"
#include "../core/error.hpp"
#include "../core/matrix.hpp"
#include "../core/precision.hpp"
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
  // Consecutive parts of sizes[0], sizes[1], ... elements, each starting on a 64-byte line (a
  // part of size 0 gets a valid pointer), contents unspecified, valid until the next call;
  // grows as data(n) does, to the last part's end. For a call that needs its rounded operands
  // and a kernel's packing memory side by side.
  template <std::size_t N>
  std::array<bfloat16*, N> parts(const std::array<std::int64_t, N>& sizes) {
    std::array<std::int64_t, N> offsets{};
    std::int64_t total = 0;
    for (std::size_t i = 0; i < N; ++i) {
      offsets[i] = total;
      total += i + 1 < N ? (sizes[i] + kLine - 1) / kLine * kLine : sizes[i];
    }
    bfloat16* base = data(total);
    std::array<bfloat16*, N> out{};
    for (std::size_t i = 0; i < N; ++i) out[i] = base + offsets[i];
    return out;
  }
  // Bytes owned.
  std::int64_t memory_bytes() const noexcept {
    return static_cast<std::int64_t>(buffer_.capacity() * sizeof(bfloat16));
  }

private:
  static constexpr std::int64_t kLine = static_cast<std::int64_t>(kAlignment / sizeof(bfloat16));
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

// out = X rounded to bfloat16 (same shape, any strides), as the form above.
inline void narrow_rows(ConstMatrixView<float> X, MatrixView<bfloat16> out) {
  const std::int64_t B = X.cols();
  for_rows(X.rows(), B, [&](std::int64_t i) {
    to_bfloat16(std::span<const float>(X.row(i), static_cast<std::size_t>(B)),
                std::span<bfloat16>(out.row(i), static_cast<std::size_t>(B)));
  });
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

// The bf16 side of a layer whose masters are T (Linear, (Block)SparseLinear): its Precision, the
// bf16 shadow of its weight values (refreshed by the layer before each forward's products),
// and the Bf16Scratch its operands are rounded in: its own (made on first use) or one shared
// by a model (share). A copy shares a shared scratch and gets its own (empty) in place of
// an owned one, so memory_bytes counts every buffer once. Not thread-safe (as Bf16Scratch).
template <class T>
class Bf16Operands {
public:
  Bf16Operands() = default;
  Bf16Operands(const Bf16Operands& o) : precision_(o.precision_), shadow_(o.shadow_) {
    if (!o.owns_scratch_) scratch_ = o.scratch_;
  }
  Bf16Operands& operator=(const Bf16Operands& o) {
    if (this != &o) *this = Bf16Operands(o);
    return *this;
  }
  Bf16Operands(Bf16Operands&&) noexcept = default;
  Bf16Operands& operator=(Bf16Operands&&) noexcept = default;

  // Sets the precision; `layer` names the layer in the error. Throws ArgumentError for bf16
  // when T is not float (double -> bf16 would round the masters' products twice over).
  // fp32 frees the shadow. O(1).
  void set_precision(Precision p, const char* layer) {
    if (p == Precision::bf16 && !std::is_same_v<T, float>)
      throw ArgumentError(std::string(layer) + "::set_precision: bf16 needs float master weights");
    precision_ = p;
    if (p == Precision::fp32) decltype(shadow_)().swap(shadow_);  // (= {} would keep the capacity)
  }
  Precision precision() const noexcept { return precision_; }
  bool bf16() const noexcept { return precision_ == Precision::bf16; }

  // Rounds operands in `scratch` from now on; nullptr returns to a scratch of the layer's own.
  void share(const SharedBf16Scratch& scratch) noexcept {
    scratch_ = scratch;
    owns_scratch_ = false;
  }
  // The scratch in use (the layer's own, made on the first call, unless one was shared).
  Bf16Scratch& scratch() {
    if (!scratch_) {
      scratch_ = std::make_shared<Bf16Scratch>();
      owns_scratch_ = true;
    }
    return *scratch_;
  }

  // X rounded to bf16 in the scratch (valid until the scratch's next use); a bf16 X as it is.
  ConstMatrixView<bfloat16> rounded(ConstMatrixView<float> X) {
    return detail::narrow_rows(X, scratch().data(X.rows() * X.cols()));
  }
  static ConstMatrixView<bfloat16> rounded(ConstMatrixView<bfloat16> X) noexcept { return X; }
  // X rounded as above and `workspace` more elements of the scratch on their own 64-byte line
  // (a kernel's packing memory), both valid until the scratch's next use; a bf16 X as it is.
  std::pair<ConstMatrixView<bfloat16>, std::span<bfloat16>> rounded_with_workspace(ConstMatrixView<float> X,
                                                                                   std::int64_t workspace) {
    const auto [x, w] = scratch().parts(std::array{X.rows() * X.cols(), workspace});
    return {detail::narrow_rows(X, x), std::span<bfloat16>(w, static_cast<std::size_t>(workspace))};
  }
  std::pair<ConstMatrixView<bfloat16>, std::span<bfloat16>> rounded_with_workspace(ConstMatrixView<bfloat16> X,
                                                                                   std::int64_t workspace) {
    return {X, std::span<bfloat16>(scratch().data(workspace), static_cast<std::size_t>(workspace))};
  }
  // X and dY rounded to bf16, side by side in the scratch (valid until its next use).
  std::pair<ConstMatrixView<bfloat16>, ConstMatrixView<bfloat16>> rounded(ConstMatrixView<float> X,
                                                                          ConstMatrixView<float> dY) {
    bfloat16* buffer = scratch().data((X.rows() + dY.rows()) * X.cols());
    return {detail::narrow_rows(X, buffer), detail::narrow_rows(dY, buffer + X.rows() * X.cols())};
  }
  std::pair<ConstMatrixView<bfloat16>, ConstMatrixView<bfloat16>> rounded(ConstMatrixView<bfloat16> X,
                                                                          ConstMatrixView<float> dY) {
    return {X, rounded(dY)};
  }
  static std::pair<ConstMatrixView<bfloat16>, ConstMatrixView<bfloat16>> rounded(
      ConstMatrixView<bfloat16> X, ConstMatrixView<bfloat16> dY) noexcept {
    return {X, dY};
  }

  // Throws ArgumentError naming `where` unless the layer is in Precision::bf16: what a layer
  // checks before it takes a bf16 X (a float layer's products need a float X).
  void require_bf16_input(const char* where) const {
    if (!bf16())
      throw ArgumentError(std::string(where) +
                          ": a bf16 X needs the layer in Precision::bf16 (set_precision); this layer runs in fp32");
  }

  // The shadow, resized to n values (contents unspecified after a size change).
  std::span<bfloat16> shadow(std::size_t n) {
    shadow_.resize(n);
    return std::span<bfloat16>(shadow_);
  }
  // The shadow as the last forward left it; throws ArgumentError, naming `where`, unless it
  // holds n values (backward before any bf16 forward).
  std::span<const bfloat16> forwarded_shadow(std::size_t n, const char* where) const {
    if (shadow_.size() != n)
      throw ArgumentError(std::string(where) + ": a bf16 layer's backward needs its forward first (no bf16 weights yet)");
    return std::span<const bfloat16>(shadow_);
  }

  // Bytes owned: the shadow, and the scratch when it is the layer's own.
  std::int64_t memory_bytes() const noexcept {
    return static_cast<std::int64_t>(shadow_.capacity() * sizeof(bfloat16)) +
           (owns_scratch_ && scratch_ ? scratch_->memory_bytes() : 0);
  }

private:
  Precision precision_ = Precision::fp32;
  std::vector<bfloat16, AlignedAllocator<bfloat16>> shadow_;
  SharedBf16Scratch scratch_;
  bool owns_scratch_ = false;
};


}  // namespace sprig
