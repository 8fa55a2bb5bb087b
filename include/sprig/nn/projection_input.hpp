// sprig/nn/projection_input.hpp — ProjectionInput<T>: an activation that a model keeps from
// forward to backward only as the input of a linear layer (a GPT's LN outputs, attention
// output and GELU output), stored in T or, when that layer runs its products in bf16, in
// bfloat16.
//
// Why: a layer in Precision::bf16 rounds its X to bf16 in forward and again in backward, so a
// float copy kept in between serves nothing but those roundings. Kept in bf16 instead, it
// takes half the memory, backward rounds nothing, and the layer's results are the same bits
// (it reads the bf16 values it would have rounded to). The producer writes float into a
// scratch the caller lends (a buffer dead at that moment), which is then narrowed once.
// Not thread-safe; the narrowing pass uses OpenMP threads for a large activation and gives the
// same bits for any thread count. O(rows x cols) per write; reshape allocates only when the
// shape or the storage type changes.
#pragma once

#include <type_traits>

#include <cstdint>
#include <span>

#include "../core/bfloat16.hpp"
#include "../core/concepts.hpp"
#include "../core/error.hpp"
#include "../core/matrix.hpp"
#include "../kernels/bfloat16_convert.hpp"
#include "rows.hpp"

namespace sprig {

template <Value T>
class ProjectionInput {
public:
  // Shapes the buffer rows x cols (row stride `stride`), in bf16 when `bf16` (T = float only;
  // else ArgumentError); the other storage is released. Contents unspecified after a change.
  void reshape(std::int64_t rows, std::int64_t cols, std::int64_t stride, bool bf16) {
    if (bf16 && !std::is_same_v<T, float>) throw ArgumentError("ProjectionInput: bf16 storage needs a float model");
    bf16_ = bf16;
    if (bf16) {
      if (narrow_.rows() != rows || narrow_.cols() != cols) narrow_.resize(rows, cols, stride);
      wide_ = Matrix<T>();
    } else {
      if (wide_.rows() != rows || wide_.cols() != cols) wide_.resize(rows, cols, stride);
      narrow_ = Matrix<bfloat16>();
    }
  }
  bool bf16() const noexcept { return bf16_; }
  std::int64_t rows() const noexcept { return bf16_ ? narrow_.rows() : wide_.rows(); }
  std::int64_t cols() const noexcept { return bf16_ ? narrow_.cols() : wide_.cols(); }

  // Fills the buffer: produce(MatrixView<T> out) writes the activation into out, which is the
  // buffer itself in T, or `scratch` (the buffer's shape, lent by the caller and clobbered)
  // that is then rounded into the bf16 buffer. Throws ShapeError for a scratch of another
  // shape (bf16 only), and what produce throws.
  template <class Produce>
  void write(Produce&& produce, MatrixView<T> scratch) {
    if (!bf16_) {
      produce(wide_.view());
      return;
    }
    if (scratch.rows() != narrow_.rows() || scratch.cols() != narrow_.cols())
      throw ShapeError(detail::message("ProjectionInput::write: scratch ", scratch.rows(), "x", scratch.cols(),
                                       " for a ", narrow_.rows(), "x", narrow_.cols(), " activation"));
    produce(scratch);
    if constexpr (std::is_same_v<T, float>) {
      const std::int64_t B = scratch.cols();
      detail::for_rows(scratch.rows(), B, [&](std::int64_t i) {
        to_bfloat16(std::span<const float>(scratch.row(i), static_cast<std::size_t>(B)),
                    std::span<bfloat16>(narrow_.row(i), static_cast<std::size_t>(B)));
      });
    }
  }

  // fn(ConstMatrixView<T>) or fn(ConstMatrixView<bfloat16>) on the stored activation; returns
  // what fn returns (both forms must return one type).
  template <class Fn>
  decltype(auto) visit(Fn&& fn) const {
    if constexpr (std::is_same_v<T, float>)
      if (bf16_) return fn(narrow_.view());
    return fn(wide_.view());
  }
  ConstMatrixView<T> wide() const noexcept { return bf16_ ? ConstMatrixView<T>{} : wide_.view(); }
  ConstMatrixView<bfloat16> narrow() const noexcept { return bf16_ ? narrow_.view() : ConstMatrixView<bfloat16>{}; }
  // The bf16 storage to write in place (a producer that rounds itself; empty unless bf16()).
  MatrixView<bfloat16> narrow_buffer() noexcept { return bf16_ ? narrow_.view() : MatrixView<bfloat16>{}; }

  // Bytes owned.
  std::int64_t memory_bytes() const noexcept { return wide_.memory_bytes() + narrow_.memory_bytes(); }

private:
  Matrix<T> wide_;
  Matrix<bfloat16> narrow_;
  bool bf16_ = false;
};

}  // namespace sprig
