// sprig/io/safetensors_import.hpp — internals of io/safetensors.hpp's import: each parameter's
// tensor (dense or sparse-bitmask; values of the model's dtype or BF16) checked against it and
// staged, then committed with non-throwing copies and moves. The contracts are stated in
// io/safetensors.hpp.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "../core/aligned_allocator.hpp"
#include "../core/bfloat16.hpp"
#include "../core/error.hpp"
#include "../core/padded_csr.hpp"
#include "safetensors_format.hpp"

namespace sprig::detail::st {

// What an import writes into one parameter once everything is valid: new values (a dense
// parameter's, or a sparse weight's at every slot), or a new pattern with its zeroed gradient.
template <class T, class Index>
struct Staged {
  AlignedVector<T> values;
  std::optional<PaddedCSR<T, Index>> pattern;
  AlignedVector<T> grad;
};

inline std::string shape_text(const std::vector<std::int64_t>& s) { return nlohmann::json(s).dump(); }

// Tensor `name` with the given dtype (any of `dtypes`) and shape, marked used; FormatError
// naming the tensor and the dtypes accepted else.
inline const SafetensorsTensor& expect(const SafetensorsFile& f, const std::string& name,
                                       std::initializer_list<const char*> dtypes,
                                       const std::vector<std::int64_t>& shape, std::set<std::string>& used) {
  const auto it = f.tensors.find(name);
  if (it == f.tensors.end()) fail(f.source, "tensor '", name, "' is missing from the file");
  const SafetensorsTensor& t = it->second;
  if (std::none_of(dtypes.begin(), dtypes.end(), [&](const char* d) { return t.dtype == d; })) {
    std::string accepted;
    for (const char* d : dtypes) accepted += (accepted.empty() ? "" : " or ") + std::string(d);
    fail(f.source, "tensor '", name, "' has dtype ", t.dtype, ", the model expects ", accepted);
  }
  if (t.shape != shape)
    fail(f.source, "tensor '", name, "' has shape ", shape_text(t.shape), ", the model's parameter is ",
         shape_text(shape));
  used.insert(name);
  return t;
}

// The values of a float tensor as T: its dtype is dtype_name<T>() (read as it is) or BF16
// (widened exactly: the 16 bits become a float's top half). Precondition: k in range.
template <class T>
struct FloatValues {
  const std::byte* data = nullptr;
  bool bf16 = false;
  T operator[](std::int64_t k) const noexcept {
    if (bf16) return static_cast<T>(static_cast<float>(bfloat16::from_bits(get_le<std::uint16_t>(data, k))));
    return get_le<T>(data, k);
  }
};

// Reads t, whose dtype expect() checked to be dtype_name<T>() or BF16.
template <class T>
FloatValues<T> float_values(const SafetensorsTensor& t) noexcept {
  return {t.data.data(), t.dtype == "BF16"};
}

// Element k of an integer tensor of dtype I64 or I32.
inline std::int64_t integer_at(const SafetensorsTensor& t, std::int64_t k) noexcept {
  return t.dtype == "I64" ? get_le<std::int64_t>(t.data.data(), k) : get_le<std::int32_t>(t.data.data(), k);
}

// The sparse-bitmask form of `name` (a rows x cols parameter) as element rows, every part
// checked: the four tensors present, .shape = [rows, cols], .bitmask [rows, ceil(cols/8)]
// with zero padding bits, .compressed one value per set bit, .row_offsets each row's first.
template <class T>
ElementRows<T> read_compressed(const SafetensorsFile& f, const std::string& name, std::int64_t rows, std::int64_t cols,
                               std::set<std::string>& used) {
  const SafetensorsTensor& shape = expect(f, name + ".shape", {"I64", "I32"}, {2}, used);
  if (integer_at(shape, 0) != rows || integer_at(shape, 1) != cols)
    fail(f.source, "tensor '", name, ".shape' holds [", integer_at(shape, 0), ", ", integer_at(shape, 1),
         "], the model's parameter is [", rows, ", ", cols, "]");
  const std::int64_t row_bytes = (cols + 7) / 8;
  const SafetensorsTensor& mask = expect(f, name + ".bitmask", {"U8"}, {rows, row_bytes}, used);
  const SafetensorsTensor& offsets = expect(f, name + ".row_offsets", {"I64", "I32"}, {rows}, used);
  ElementRows<T> out{rows, cols};
  for (std::int64_t i = 0; i < rows; ++i) {
    if (integer_at(offsets, i) != std::ssize(out.col))
      fail(f.source, "tensor '", name, ".row_offsets' gives row ", i, " offset ", integer_at(offsets, i),
           " but the bitmask's rows above hold ", out.col.size(), " values");
    for (std::int64_t b = 0; b < row_bytes; ++b) {
      const auto byte = static_cast<unsigned>(mask.data[static_cast<std::size_t>(i * row_bytes + b)]);
      for (int bit = 0; bit < 8; ++bit)
        if (byte >> bit & 1u) {
          if (b * 8 + bit >= cols)
            fail(f.source, "tensor '", name, ".bitmask' sets bit ", b * 8 + bit, " of row ", i, ", past the ", cols,
                 " columns");
          out.col.push_back(b * 8 + bit);
        }
    }
    out.row_ptr.push_back(std::ssize(out.col));
  }
  const FloatValues<T> values =
      float_values<T>(expect(f, name + ".compressed", {dtype_name<T>(), "BF16"}, {std::ssize(out.col)}, used));
  for (std::int64_t k = 0; k < std::ssize(out.col); ++k) out.value.push_back(values[k]);
  return out;
}

// The parameter's values staged from `at(k)`, the dense row-major element k: a dense
// parameter's every value; a sparse weight's at its live slots (its pattern kept).
template <class T, class Index, class P, class At>
Staged<T, Index> stage_values(const P& p, At&& at) {
  Staged<T, Index> s;
  if constexpr (requires { p.matrix.block_density(); }) {
    using W = std::remove_cvref_t<decltype(p.matrix)>;
    constexpr std::int64_t R = W::kBlockRows, C = W::kBlockCols;
    const std::int64_t rows = p.matrix.rows(), cols = p.matrix.cols();
    s.values.assign(p.matrix.values().size(), T(0));
    p.matrix.for_each_block([&](std::int64_t i, std::int64_t j, std::int64_t slot, const T*) {
      for (std::int64_t r = 0; r < R && i * R + r < rows; ++r)
        for (std::int64_t c = 0; c < C && j * C + c < cols; ++c)
          s.values[slot * R * C + r * C + c] = at((i * R + r) * cols + j * C + c);
    });
  } else if constexpr (requires { p.matrix; }) {
    s.values.assign(p.matrix.values().size(), T(0));
    const std::int64_t cols = p.matrix.cols();
    p.matrix.for_each_live(
        [&](std::int64_t r, std::int64_t c, T, std::int64_t slot) { s.values[slot] = at(r * cols + c); });
  } else {
    s.values.resize(p.value.size());
    for (std::size_t k = 0; k < s.values.size(); ++k) s.values[k] = at(static_cast<std::int64_t>(k));
  }
  return s;
}

// A new pattern for a SparseParameter: the element rows laid out tight, zero gradient.
template <class T, class Index>
Staged<T, Index> stage_pattern(const ElementRows<T>& m, double padding_ratio) {
  Staged<T, Index> s;
  s.pattern.emplace(PaddedCSR<T, Index>::from_csr(m.rows, m.cols, std::span<const std::int64_t>(m.row_ptr),
                                                  std::span<const std::int64_t>(m.col), std::span<const T>(m.value),
                                                  padding_ratio));
  s.grad.assign(static_cast<std::size_t>(s.pattern->storage_size()), T(0));
  return s;
}

// One-shot magnitude pruning of a dense rows x cols tensor (dtype_name<T>() or BF16): the
// `keep` entries of largest |v| (ties to the lower row-major index; NaN ranks below every
// number), as element rows. O(rows x cols) time and memory.
template <class T>
ElementRows<T> prune(const SafetensorsTensor& t, std::int64_t rows, std::int64_t cols, std::int64_t keep) {
  const std::int64_t n = rows * cols;
  const FloatValues<T> values = float_values<T>(t);
  auto magnitude = [&](std::int64_t k) {
    const T v = values[k];
    return v != v ? T(-1) : (v < T(0) ? -v : v);
  };
  std::vector<std::int64_t> order(static_cast<std::size_t>(n));
  for (std::int64_t k = 0; k < n; ++k) order[k] = k;
  const auto by_magnitude = [&](std::int64_t a, std::int64_t b) {
    const T ma = magnitude(a), mb = magnitude(b);
    return ma > mb || (ma == mb && a < b);
  };
  std::nth_element(order.begin(), order.begin() + keep, order.end(), by_magnitude);
  order.resize(static_cast<std::size_t>(keep));
  std::sort(order.begin(), order.end());
  ElementRows<T> out{rows, cols};
  std::int64_t row = 0;
  for (std::int64_t k : order) {
    for (; row < k / cols; ++row) out.row_ptr.push_back(std::ssize(out.col));
    out.col.push_back(k % cols);
    out.value.push_back(values[k]);
  }
  for (; row < rows; ++row) out.row_ptr.push_back(std::ssize(out.col));
  return out;
}

// Checks the file's tensor(s) for parameter `n` and stages them (see io/safetensors.hpp);
// prune_sparsity >= 0 prunes a dense tensor into a SparseParameter's new pattern at that
// sparsity, prune_to_density into one of the parameter's current live count.
template <class T, class Index, class P>
Staged<T, Index> stage(const SafetensorsFile& f, const ParameterName& n, const P& p, std::set<std::string>& used,
                       double prune_sparsity, bool prune_to_density = false) {
  constexpr bool sparse = requires { p.matrix; };
  constexpr bool unstructured = requires { p.matrix.density(); };  // a SparseParameter
  std::int64_t rows = 0, cols = 0;
  if constexpr (sparse)
    rows = p.matrix.rows(), cols = p.matrix.cols();
  else
    rows = p.rows, cols = p.cols;
  const bool vector = !sparse && n.vector && cols == 1;
  const std::vector<std::int64_t> shape =
      vector ? std::vector<std::int64_t>{rows} : std::vector<std::int64_t>{rows, cols};
  const bool dense_form = f.tensors.contains(n.name), compressed_form = f.tensors.contains(n.name + ".compressed");
  if (dense_form && compressed_form)
    fail(f.source, "tensor '", n.name, "' is given both dense and compressed ('", n.name, ".compressed')");
  if (!compressed_form) {
    const SafetensorsTensor& t = expect(f, n.name, {dtype_name<T>(), "BF16"}, shape, used);
    if constexpr (unstructured) {
      if (prune_sparsity >= 0.0 || prune_to_density) {
        const double live = (1.0 - prune_sparsity) * static_cast<double>(rows) * static_cast<double>(cols);
        const auto keep =
            prune_to_density ? p.matrix.nnz() : std::min(rows * cols, static_cast<std::int64_t>(std::llround(live)));
        return stage_pattern<T, Index>(prune<T>(t, rows, cols, keep), p.matrix.padding_ratio());
      }
    }
    const FloatValues<T> values = float_values<T>(t);
    return stage_values<T, Index>(p, [&](std::int64_t k) { return values[k]; });
  }
  if (vector) fail(f.source, "tensor '", n.name, "' is 1-D: its compressed form is not supported");
  const ElementRows<T> m = read_compressed<T>(f, n.name, rows, cols, used);
  if constexpr (unstructured) {
    return stage_pattern<T, Index>(m, p.matrix.padding_ratio());
  } else {
    std::vector<T> dense(static_cast<std::size_t>(rows * cols), T(0));
    for (std::int64_t i = 0; i < rows; ++i)
      for (std::int64_t q = m.row_ptr[i]; q < m.row_ptr[i + 1]; ++q) dense[i * cols + m.col[q]] = m.value[q];
    return stage_values<T, Index>(p, [&](std::int64_t k) { return dense[static_cast<std::size_t>(k)]; });
  }
}

// Writes a staged parameter (no throw); returns whether a sparse weight took a new pattern.
template <class T, class Index, class P>
bool commit(Staged<T, Index>& s, P& p) noexcept {
  if constexpr (requires { p.matrix.density(); }) {  // a SparseParameter
    if (s.pattern) {
      p.matrix = std::move(*s.pattern);
      p.grad.swap(s.grad);
      for (auto& state : p.state) AlignedVector<T>().swap(state);
      AlignedVector<std::uint16_t>().swap(p.step_counts);
      return true;
    }
  }
  if constexpr (requires { p.matrix; })
    std::copy(s.values.begin(), s.values.end(), p.matrix.values().begin());
  else
    std::copy(s.values.begin(), s.values.end(), p.value.begin());
  return false;
}

}  // namespace sprig::detail::st
