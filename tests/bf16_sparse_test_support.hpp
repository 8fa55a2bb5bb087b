// tests/bf16_sparse_test_support.hpp — operands and error bounds for the bf16 sparse kernel
// tests (test_bf16_spmm, test_bf16_sddmm).
//
// - BfOperand<T>: a rows x cols view (T = bfloat16 or float) inside a larger buffer whose other
//   elements hold a guard value, with kernel_test_support.hpp's placements (tight, strided,
//   unaligned). Inputs put NaN there (a kernel that folds it into a result is caught), outputs
//   check it was not written.
// - Error bound. The kernels form exact products (a bf16 times a bf16 fits a float's 24-bit
//   significand) and add n terms (the products, plus the old value when accumulating) in float
//   in some order. Any order gives |computed - exact| <= gamma_{n-1} S <= gamma_n S, S = sum of
//   |terms|, gamma_n = n u / (1 - n u), u = 2^-24 (Higham, Accuracy and Stability of Numerical
//   Algorithms, 2nd ed., 4.2). The reference sums the same exact products in double (error
//   below n 2^-53 S, added to the bound). A bf16 output adds one rounding to nearest: at most
//   2^-8 of the float result's magnitude.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "sprig/core/bfloat16.hpp"
#include "sprig/core/matrix.hpp"
#include "sprig/core/rng.hpp"

#include "kernel_test_support.hpp"

namespace sprig::test {

inline double gamma_float(double n) {
  const double u = std::ldexp(1.0, -24);
  return n * u / (1.0 - n * u);
}

// The bound above for a float result: n terms of absolute sum S.
inline double float_sum_bound(double n, double S) { return gamma_float(n) * S + n * std::ldexp(1.0, -52) * S; }

// A value uniform in [-1, 1) rounded to bf16, never in the subnormal range (vdpbf16ps treats
// those as zero: the kernels' contract).
inline bfloat16 random_bf16(CounterRng& rng) {
  float v = static_cast<float>(rng.uniform(-1.0, 1.0));
  if (std::fabs(v) < 1e-30f) v = 0.5f;
  return bfloat16(v);
}

template <class T>
bool same_bits_any(T a, T b) {
  return std::memcmp(&a, &b, sizeof(T)) == 0;
}

template <class T>
T nan_of() {
  if constexpr (std::is_same_v<T, bfloat16>)
    return bfloat16(std::numeric_limits<float>::quiet_NaN());
  else
    return std::numeric_limits<T>::quiet_NaN();
}

template <class T>
class BfOperand {
public:
  BfOperand(std::int64_t rows, std::int64_t cols, Placement p, T guard) : rows_(rows), cols_(cols), guard_(guard) {
    std::int64_t buf_rows = rows;
    stride_ = cols;
    switch (p) {
      case Placement::tight: break;
      case Placement::strided: {
        constexpr std::int64_t line = 64 / sizeof(T);
        stride_ = (cols + line - 1) / line * line + line;
        buf_rows = rows + 1;
        break;
      }
      case Placement::unaligned:
        r0_ = 1;
        c0_ = 1;
        stride_ = cols + 5;
        buf_rows = rows + 2;
        break;
    }
    buf_.assign(static_cast<std::size_t>(buf_rows * stride_ + 32), guard);
    // 64-byte aligned start (tight, strided) or one element past it (unaligned).
    base_ = static_cast<std::int64_t>((64 - reinterpret_cast<std::uintptr_t>(buf_.data()) % 64) % 64 / sizeof(T));
    if (base_ + buf_rows * stride_ > std::ssize(buf_)) base_ = 0;
  }

  T* data() { return buf_.data() + base_ + r0_ * stride_ + c0_; }
  const T* data() const { return buf_.data() + base_ + r0_ * stride_ + c0_; }
  MatrixView<T> view() { return {rows_ * cols_ == 0 ? buf_.data() : data(), rows_, cols_, stride_}; }
  ConstMatrixView<T> cview() const { return {rows_ * cols_ == 0 ? buf_.data() : data(), rows_, cols_, stride_}; }
  T& operator()(std::int64_t i, std::int64_t j) { return data()[i * stride_ + j]; }
  T operator()(std::int64_t i, std::int64_t j) const { return data()[i * stride_ + j]; }
  double at(std::int64_t i, std::int64_t j) const { return static_cast<double>(static_cast<float>((*this)(i, j))); }

  void fill_random(CounterRng& rng) {
    for (std::int64_t i = 0; i < rows_; ++i)
      for (std::int64_t j = 0; j < cols_; ++j) {
        if constexpr (std::is_same_v<T, bfloat16>)
          (*this)(i, j) = random_bf16(rng);
        else
          (*this)(i, j) = static_cast<float>(random_bf16(rng)) * 3.0f;
      }
  }
  void fill(T v) {
    for (std::int64_t i = 0; i < rows_; ++i)
      for (std::int64_t j = 0; j < cols_; ++j) (*this)(i, j) = v;
  }
  // Elements outside the view whose bits differ from the guard.
  std::int64_t guard_violations() const {
    std::int64_t bad = 0;
    const std::int64_t lo = base_ + r0_ * stride_ + c0_;
    for (std::int64_t k = 0; k < std::ssize(buf_); ++k) {
      const std::int64_t off = k - lo;
      const bool inside = rows_ * cols_ > 0 && off >= 0 && off / stride_ < rows_ && off % stride_ < cols_;
      if (!inside && !same_bits_any(buf_[static_cast<std::size_t>(k)], guard_)) ++bad;
    }
    return bad;
  }
  // The view's contents, row by row.
  std::vector<T> contents() const {
    std::vector<T> out;
    for (std::int64_t i = 0; i < rows_; ++i)
      for (std::int64_t j = 0; j < cols_; ++j) out.push_back((*this)(i, j));
    return out;
  }
  std::int64_t rows() const { return rows_; }
  std::int64_t cols() const { return cols_; }

private:
  std::vector<T> buf_;
  std::int64_t base_ = 0, r0_ = 0, c0_ = 0, rows_, cols_, stride_ = 0;
  T guard_;
};

template <class T>
std::int64_t bitwise_differences_of(const std::vector<T>& a, const std::vector<T>& b) {
  if (a.size() != b.size()) return -1;
  std::int64_t n = 0;
  for (std::size_t k = 0; k < a.size(); ++k) n += !same_bits_any(a[k], b[k]);
  return n;
}

// The bf16 shadow of W's values (every slot rounded), computed here from the scalar
// conversion, independent of the kernels' vector conversion.
template <ColumnIndex Index>
std::vector<bfloat16> shadow_of(const PaddedCSR<float, Index>& W) {
  std::vector<bfloat16> out;
  for (float v : W.values()) out.push_back(bfloat16(v));
  return out;
}

}  // namespace sprig::test
