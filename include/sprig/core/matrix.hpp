// sprig/core/matrix.hpp — dense row-major matrices: owning Matrix<T> (64-byte aligned)
// and the non-owning MatrixView<T> / ConstMatrixView<T> (pointer, rows, cols, row stride).
//
// Convention: activations are feature-major, a [features x batch] matrix with the batch
// contiguous, so every training kernel streams contiguous rows.
#pragma once

#include <type_traits>

#include <algorithm>
#include <cstdint>
#include <span>

#include "aligned_allocator.hpp"
#include "bfloat16.hpp"
#include "concepts.hpp"
#include "config.hpp"
#include "error.hpp"

namespace sprig {

namespace detail {

template <class Ptr>
struct ViewBase {
  Ptr data_ = nullptr;
  std::int64_t rows_ = 0;
  std::int64_t cols_ = 0;
  std::int64_t stride_ = 0;

  ViewBase() = default;
  ViewBase(Ptr data, std::int64_t rows, std::int64_t cols, std::int64_t stride)
      : data_(data), rows_(rows), cols_(cols), stride_(stride) {
    if (rows < 0 || cols < 0) throw ShapeError(message("MatrixView: negative shape ", rows, "x", cols));
    if (stride < cols) throw ShapeError(message("MatrixView: row stride ", stride, " is smaller than cols ", cols));
    if (data == nullptr && rows * cols != 0) throw ArgumentError("MatrixView: null data for a non-empty view");
  }
};

}  // namespace detail

// A mutable view of a row-major block: element (i, j) is data()[i * stride() + j]. The
// constructor throws ShapeError for a negative shape or a stride below cols, ArgumentError
// for null data with a non-empty shape. Copying a view copies the pointer, never the data;
// element access is unchecked (SPRIG_ASSERT in debug builds). All accessors O(1).
template <class T>
class MatrixView : private detail::ViewBase<T*> {
  using Base = detail::ViewBase<T*>;

public:
  using value_type = T;
  MatrixView() = default;
  MatrixView(T* data, std::int64_t rows, std::int64_t cols) : Base(data, rows, cols, cols) {}
  MatrixView(T* data, std::int64_t rows, std::int64_t cols, std::int64_t stride) : Base(data, rows, cols, stride) {}

  T* data() const noexcept { return this->data_; }
  std::int64_t rows() const noexcept { return this->rows_; }
  std::int64_t cols() const noexcept { return this->cols_; }
  std::int64_t stride() const noexcept { return this->stride_; }
  T* row(std::int64_t i) const noexcept { return this->data_ + i * this->stride_; }
  T& operator()(std::int64_t i, std::int64_t j) const noexcept {
    SPRIG_ASSERT(i >= 0 && i < rows() && j >= 0 && j < cols(), "MatrixView index");
    return this->data_[i * this->stride_ + j];
  }

  // The sub-block [r0, r0 + nr) x [c0, c0 + nc), sharing this view's stride.
  MatrixView block(std::int64_t r0, std::int64_t c0, std::int64_t nr, std::int64_t nc) const {
    if (r0 < 0 || c0 < 0 || nr < 0 || nc < 0 || r0 + nr > rows() || c0 + nc > cols())
      throw ShapeError(detail::message("MatrixView::block: [", r0, "+", nr, ") x [", c0, "+", nc, ") exceeds ", rows(),
                                       "x", cols()));
    return MatrixView(nr * nc == 0 && data() == nullptr ? nullptr : row(r0) + c0, nr, nc, stride());
  }

  void fill(T value) const {
    for (std::int64_t i = 0; i < rows(); ++i) std::fill_n(row(i), cols(), value);
  }
};

// A read-only view; every MatrixView converts to it. Same contract as MatrixView.
template <class T>
class ConstMatrixView : private detail::ViewBase<const T*> {
  using Base = detail::ViewBase<const T*>;

public:
  using value_type = T;
  ConstMatrixView() = default;
  ConstMatrixView(const T* data, std::int64_t rows, std::int64_t cols) : Base(data, rows, cols, cols) {}
  ConstMatrixView(const T* data, std::int64_t rows, std::int64_t cols, std::int64_t stride)
      : Base(data, rows, cols, stride) {}
  ConstMatrixView(MatrixView<T> v)  // NOLINT: implicit by design
      : Base(v.data(), v.rows(), v.cols(), v.stride()) {}

  const T* data() const noexcept { return this->data_; }
  std::int64_t rows() const noexcept { return this->rows_; }
  std::int64_t cols() const noexcept { return this->cols_; }
  std::int64_t stride() const noexcept { return this->stride_; }
  const T* row(std::int64_t i) const noexcept { return this->data_ + i * this->stride_; }
  const T& operator()(std::int64_t i, std::int64_t j) const noexcept {
    SPRIG_ASSERT(i >= 0 && i < rows() && j >= 0 && j < cols(), "ConstMatrixView index");
    return this->data_[i * this->stride_ + j];
  }
  ConstMatrixView block(std::int64_t r0, std::int64_t c0, std::int64_t nr, std::int64_t nc) const {
    if (r0 < 0 || c0 < 0 || nr < 0 || nc < 0 || r0 + nr > rows() || c0 + nc > cols())
      throw ShapeError(detail::message("ConstMatrixView::block: [", r0, "+", nr, ") x [", c0, "+", nc, ") exceeds ",
                                       rows(), "x", cols()));
    return ConstMatrixView(nr * nc == 0 && data() == nullptr ? nullptr : row(r0) + c0, nr, nc, stride());
  }
};

// An owning, 64-byte aligned, row-major matrix. The row stride defaults to cols; a larger
// stride may be requested (for example to move it off a power of two, which avoids cache
// set conflicts when a kernel walks many rows at once). Constructors and resize throw
// ShapeError for a negative shape or a stride below cols (and std::bad_alloc); element
// access is unchecked (SPRIG_ASSERT in debug builds). T: float, double, or bfloat16 (storage
// only: an activation kept in bf16, nn/projection_input.hpp).
template <class T>
  requires Value<T> || std::is_same_v<T, bfloat16>
class Matrix {
public:
  using value_type = T;
  Matrix() = default;
  Matrix(std::int64_t rows, std::int64_t cols, T init = T(0)) : Matrix(rows, cols, cols, init) {}
  Matrix(std::int64_t rows, std::int64_t cols, std::int64_t stride, T init) { resize(rows, cols, stride, init); }

  // Reshapes, reusing the allocation when it is large enough; contents become `init`.
  void resize(std::int64_t rows, std::int64_t cols, std::int64_t stride, T init = T(0)) {
    if (rows < 0 || cols < 0) throw ShapeError(detail::message("Matrix: negative shape ", rows, "x", cols));
    if (stride < cols) throw ShapeError(detail::message("Matrix: row stride ", stride, " is smaller than cols ", cols));
    rows_ = rows;
    cols_ = cols;
    stride_ = stride;
    storage_.assign(static_cast<std::size_t>(rows * stride), init);
  }
  void resize(std::int64_t rows, std::int64_t cols) { resize(rows, cols, cols); }

  std::int64_t rows() const noexcept { return rows_; }
  std::int64_t cols() const noexcept { return cols_; }
  std::int64_t stride() const noexcept { return stride_; }
  std::int64_t size() const noexcept { return rows_ * cols_; }
  T* data() noexcept { return storage_.data(); }
  const T* data() const noexcept { return storage_.data(); }
  T* row(std::int64_t i) noexcept { return data() + i * stride_; }
  const T* row(std::int64_t i) const noexcept { return data() + i * stride_; }
  T& operator()(std::int64_t i, std::int64_t j) noexcept {
    SPRIG_ASSERT(i >= 0 && i < rows_ && j >= 0 && j < cols_, "Matrix index");
    return storage_[static_cast<std::size_t>(i * stride_ + j)];
  }
  const T& operator()(std::int64_t i, std::int64_t j) const noexcept {
    SPRIG_ASSERT(i >= 0 && i < rows_ && j >= 0 && j < cols_, "Matrix index");
    return storage_[static_cast<std::size_t>(i * stride_ + j)];
  }

  MatrixView<T> view() noexcept { return {data(), rows_, cols_, stride_}; }
  ConstMatrixView<T> view() const noexcept { return {data(), rows_, cols_, stride_}; }
  operator MatrixView<T>() noexcept { return view(); }             // NOLINT: implicit by design
  operator ConstMatrixView<T>() const noexcept { return view(); }  // NOLINT: implicit by design

  void fill(T value) { std::fill(storage_.begin(), storage_.end(), value); }
  // Bytes owned (allocation capacity, not just the live rows x cols).
  std::int64_t memory_bytes() const noexcept { return static_cast<std::int64_t>(storage_.capacity() * sizeof(T)); }

private:
  std::int64_t rows_ = 0;
  std::int64_t cols_ = 0;
  std::int64_t stride_ = 0;
  AlignedVector<T> storage_;
};

// The address range [begin, end) that a view's or span's elements lie in: from its first
// element to one past the last element of its last row (so a strided view's range also holds
// the gaps between its rows); begin == end for an empty one.
struct ByteRange {
  std::uintptr_t begin = 0, end = 0;
};

template <class T>
ByteRange byte_range(ConstMatrixView<T> v) noexcept {
  if (v.rows() == 0 || v.cols() == 0) return {};
  const auto first = reinterpret_cast<std::uintptr_t>(v.data());
  const auto elems = static_cast<std::uintptr_t>((v.rows() - 1) * v.stride() + v.cols());
  return {first, first + elems * sizeof(T)};
}
template <class T>
ByteRange byte_range(MatrixView<T> v) noexcept {
  return byte_range(ConstMatrixView<T>(v));
}
template <class T>
ByteRange byte_range(std::span<T> s) noexcept {
  if (s.empty()) return {};
  const auto first = reinterpret_cast<std::uintptr_t>(s.data());
  return {first, first + s.size_bytes()};
}

// Whether a and b (MatrixView, ConstMatrixView or std::span, in any pairing) may share
// memory: true when their byte ranges meet. Conservative: side-by-side column blocks of the
// same rows interleave in memory and count as overlapping although no element is shared.
// Empty views and spans overlap nothing. O(1), noexcept.
template <class A, class B>
bool overlaps(const A& a, const B& b) noexcept {
  const ByteRange ra = byte_range(a), rb = byte_range(b);
  return ra.begin < ra.end && rb.begin < rb.end && ra.begin < rb.end && rb.begin < ra.end;
}

namespace detail {

// Throws ArgumentError naming the call and both operands when an output may share memory
// with an input (overlaps): a kernel would read values it has already overwritten.
template <class Out, class In>
void check_no_overlap(const char* fn, const char* out_name, const Out& out, const char* in_name, const In& in) {
  if (!overlaps(out, in)) return;
  const ByteRange o = byte_range(out), i = byte_range(in);
  throw ArgumentError(message(fn, ": ", out_name, " overlaps ", in_name, " (", out_name, " spans bytes [0x", std::hex,
                              o.begin, ", 0x", o.end, "), ", in_name, " [0x", i.begin, ", 0x", i.end, ")", std::dec,
                              "); an output must not share memory with an input or another output"));
}

}  // namespace detail

// dst = src^T. Converts batch-major data ([batch x features]) to sprig's feature-major
// layout ([features x batch]) and back. Throws ShapeError unless dst is src.cols() x
// src.rows(), ArgumentError if dst overlaps src. O(rows x cols), in 32 x 32 tiles (both sides
// stay in L1); one thread.
template <Value T>
void transpose_into(std::type_identity_t<ConstMatrixView<T>> src, std::type_identity_t<MatrixView<T>> dst) {
  if (dst.rows() != src.cols() || dst.cols() != src.rows())
    throw ShapeError(detail::message("transpose_into: src is ", src.rows(), "x", src.cols(), " but dst is ", dst.rows(),
                                     "x", dst.cols(), " (expected ", src.cols(), "x", src.rows(), ")"));
  detail::check_no_overlap("transpose_into", "dst", dst, "src", src);
  constexpr std::int64_t tile = 32;  // keeps both the read and the write side in L1
  for (std::int64_t i0 = 0; i0 < src.rows(); i0 += tile)
    for (std::int64_t j0 = 0; j0 < src.cols(); j0 += tile)
      for (std::int64_t i = i0; i < std::min(i0 + tile, src.rows()); ++i)
        for (std::int64_t j = j0; j < std::min(j0 + tile, src.cols()); ++j) dst(j, i) = src(i, j);
}

// src^T as a new tight matrix (see transpose_into).
template <Value T>
Matrix<T> transposed(std::type_identity_t<ConstMatrixView<T>> src) {
  Matrix<T> out(src.cols(), src.rows());
  transpose_into<T>(src, out.view());
  return out;
}

}  // namespace sprig
