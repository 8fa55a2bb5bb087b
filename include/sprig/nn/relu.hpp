// sprig/nn/relu.hpp — ReLU<T>: y = max(x, 0), elementwise on [features x batch].
// backward uses the subgradient 0 at x == 0. Each pass is O(rows x cols), allocates nothing,
// runs over rows on OpenMP threads for large inputs (rows.hpp) and gives the same bits for
// any thread count. A ReLU has no parameters and no state: one object may serve many threads.
// The operands are checked for shape only: a partial overlap is not detected.
#pragma once

#include <type_traits>

#include <cstdint>

#include "../core/concepts.hpp"
#include "../core/error.hpp"
#include "../core/matrix.hpp"
#include "../kernels/row_epilogue.hpp"
#include "rows.hpp"

namespace sprig {

namespace detail {
// Throws ShapeError, naming fn and the two operands, unless x and y have one shape.
template <class T>
void check_same_shape(const char* fn, const char* a, ConstMatrixView<T> x, const char* b, ConstMatrixView<T> y) {
  if (x.rows() != y.rows() || x.cols() != y.cols())
    throw ShapeError(
        detail::message(fn, ": ", a, " is ", x.rows(), "x", x.cols(), " but ", b, " is ", y.rows(), "x", y.cols()));
}
}  // namespace detail

template <Value T>
class ReLU {
public:
  using value_type = T;

  // Y = max(X, 0). Y must not overlap X. Throws ShapeError unless X and Y have one shape.
  void forward(std::type_identity_t<ConstMatrixView<T>> X, std::type_identity_t<MatrixView<T>> Y) const {
    detail::check_same_shape<T>("ReLU::forward", "X", X, "Y", Y);
    detail::for_rows(X.rows(), X.cols(), [&](std::int64_t i) {
      const T* __restrict x = X.row(i);
      T* __restrict y = Y.row(i);
      for (std::int64_t j = 0; j < X.cols(); ++j) y[j] = x[j] > T(0) ? x[j] : T(0);
    });
  }

  // dX = dY where X > 0, else +0 (NaN in X included). dX may be dY (element by element, in
  // place); X must not overlap dX. Throws ShapeError unless X, dY and dX have one shape.
  static constexpr bool backward_in_place = true;
  void backward(std::type_identity_t<ConstMatrixView<T>> X, std::type_identity_t<ConstMatrixView<T>> dY,
                std::type_identity_t<MatrixView<T>> dX) const {
    detail::check_same_shape<T>("ReLU::backward", "X", X, "dY", dY);
    detail::check_same_shape<T>("ReLU::backward", "X", X, "dX", dX);
    detail::for_rows(X.rows(), X.cols(), [&](std::int64_t i) {
      const T* __restrict x = X.row(i);
      const T* d = dY.row(i);  // may alias g
      T* g = dX.row(i);
      for (std::int64_t j = 0; j < X.cols(); ++j) g[j] = relu_backward(x[j], d[j]);
    });
  }
};

}  // namespace sprig
