// sprig/io/safetensors_model.hpp — internals of io/safetensors.hpp: parameter names, the
// element rows of a sparse weight, the compressed (sparse-bitmask) form, and the staging that
// makes an import all or nothing. The contracts are stated in io/safetensors.hpp.
#pragma once

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "../core/aligned_allocator.hpp"
#include "../core/bfloat16.hpp"
#include "../core/error.hpp"
#include "../core/padded_csr.hpp"
#include "../version.hpp"
#include "safetensors_format.hpp"

namespace sprig::detail::st {

struct ParameterName {
  std::string name;
  bool vector = false;  // written 1-D [rows] when the parameter has one column (biases, norms)
};

inline std::string version_string() {
  return message(SPRIG_VERSION_MAJOR, ".", SPRIG_VERSION_MINOR, ".", SPRIG_VERSION_PATCH);
}

template <class T>
const char* dtype_name() noexcept {
  return sizeof(T) == 4 ? "F32" : "F64";
}

// The dtype an export writes a model's values as: dtype_name<T>(), or BF16.
template <class T>
const char* export_dtype_name(bool bf16) noexcept {
  return bf16 ? "BF16" : dtype_name<T>();
}

// Appends v little-endian as T, or (bf16, float models only) rounded to the nearest bfloat16,
// ties to even (core/bfloat16.hpp).
template <class T>
void put_value(std::vector<std::byte>& out, T v, bool bf16) {
  if constexpr (std::is_same_v<T, float>) {
    if (bf16) {
      put_le<std::uint16_t>(out, bfloat16(v).bits);
      return;
    }
  }
  put_le(out, v);
}

// The GPT's names (gpt_torch.py's module names), in GPT::for_each_parameter's order.
inline std::vector<ParameterName> gpt_names(std::int64_t layers) {
  std::vector<ParameterName> out{{"tok_emb.weight"}, {"pos_emb.weight"}};
  const char* parts[][2] = {{"ln1", "weight"},  {"ln1", "bias"},  {"qkv", "weight"},     {"qkv", "bias"},
                            {"proj", "weight"}, {"proj", "bias"}, {"ln2", "weight"},     {"ln2", "bias"},
                            {"fc", "weight"},   {"fc", "bias"},   {"fc_proj", "weight"}, {"fc_proj", "bias"}};
  for (std::int64_t l = 0; l < layers; ++l)
    for (const auto& [module, what] : parts) {
      const std::string m = module;
      const bool matrix = std::string(what) == "weight" && m != "ln1" && m != "ln2";
      out.push_back({message("blocks.", l, ".", m, ".", what), !matrix});
    }
  for (const char* n : {"ln_f.weight", "ln_f.bias"}) out.push_back({n, true});
  out.push_back({"head.weight", false});
  out.push_back({"head.bias", true});
  return out;
}

// Sequential's names: layers.<k>.weight, layers.<k>.bias (then .param<j> for any further one).
template <class M>
std::vector<ParameterName> sequential_names(const M& model) {
  std::vector<ParameterName> out;
  for (std::size_t k = 0; k < model.size(); ++k)
    std::visit(
        [&](const auto& layer) {
          if constexpr (requires { layer.for_each_parameter([](const auto&) {}); }) {
            int j = 0;
            layer.for_each_parameter([&](const auto&) {
              const char* what = j == 0 ? "weight" : j == 1 ? "bias" : nullptr;
              out.push_back({what ? message("layers.", k, ".", what) : message("layers.", k, ".param", j), j == 1});
              ++j;
            });
          }
        },
        model.layer(k));
  return out;
}

// Every parameter's file name (renamed) in for_each_parameter order. Throws ArgumentError for
// two parameters of one name.
template <class M>
std::vector<ParameterName> parameter_names(const M& model, const std::map<std::string, std::string>& rename) {
  std::vector<ParameterName> names;
  std::size_t count = 0;
  model.for_each_parameter([&](const auto&) { ++count; });
  if constexpr (requires {
                  model.config().layers;
                  model.token_embedding();
                  model.final_norm();
                  model.head();
                })
    names = gpt_names(model.config().layers);
  else if constexpr (requires {
                       model.size();
                       model.layer(std::size_t{0});
                     })
    names = sequential_names(model);
  if (names.size() != count) {  // a model of neither shape (or a changed one): generic names
    names.clear();
    for (std::size_t k = 0; k < count; ++k) names.push_back({message("parameters.", k)});
  }
  std::set<std::string> seen;
  for (ParameterName& n : names) {
    if (const auto r = rename.find(n.name); r != rename.end()) n.name = r->second;
    if (!seen.insert(n.name).second)
      throw ArgumentError(message("safetensors: two parameters would be named '", n.name, "' (check rename)"));
  }
  return names;
}

// A sparse weight as element rows: row_ptr [rows + 1], columns ascending within each row.
template <class T>
struct ElementRows {
  std::int64_t rows = 0, cols = 0;
  std::vector<std::int64_t> row_ptr{0};
  std::vector<std::int64_t> col{};
  std::vector<T> value{};
};

template <class T, class Index>
ElementRows<T> rows_of(const PaddedCSR<T, Index>& m) {
  ElementRows<T> out{m.rows(), m.cols()};
  std::vector<std::pair<std::int64_t, T>> row;
  for (std::int64_t i = 0; i < m.rows(); ++i) {
    const auto r = m.row(i);
    row.clear();
    for (std::size_t s = 0; s < r.cols.size(); ++s) row.emplace_back(r.cols[s], r.values[s]);
    std::sort(row.begin(), row.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    for (const auto& [c, v] : row) {
      out.col.push_back(c);
      out.value.push_back(v);
    }
    out.row_ptr.push_back(std::ssize(out.col));
  }
  return out;
}

// A SparseParameter's live entries, or every in-matrix entry of a BlockSparseParameter's live
// blocks. O(live log row length).
template <class P>
auto element_rows(const P& p) {
  if constexpr (requires { p.matrix.to_padded_csr(0.0); })
    return rows_of(p.matrix.to_padded_csr(0.0));
  else
    return rows_of(p.matrix);
}

template <class T>
std::vector<std::byte> dense_bytes(const ElementRows<T>& m, bool bf16) {
  std::vector<T> dense(static_cast<std::size_t>(m.rows * m.cols), T(0));
  for (std::int64_t i = 0; i < m.rows; ++i)
    for (std::int64_t p = m.row_ptr[i]; p < m.row_ptr[i + 1]; ++p) dense[i * m.cols + m.col[p]] = m.value[p];
  std::vector<std::byte> out;
  out.reserve(dense.size() * (bf16 ? 2 : sizeof(T)));
  for (T v : dense) put_value(out, v, bf16);
  return out;
}

// <name>.shape, .compressed (BF16 when bf16), .bitmask, .row_offsets (see io/safetensors.hpp).
template <class T>
void put_compressed(std::vector<SafetensorsEntry>& out, const std::string& name, const ElementRows<T>& m, bool bf16) {
  const std::int64_t row_bytes = (m.cols + 7) / 8;
  std::vector<std::byte> shape, values, bitmask(static_cast<std::size_t>(m.rows * row_bytes)), offsets;
  put_le<std::int64_t>(shape, m.rows);
  put_le<std::int64_t>(shape, m.cols);
  for (T v : m.value) put_value(values, v, bf16);
  for (std::int64_t i = 0; i < m.rows; ++i) {
    put_le<std::int64_t>(offsets, m.row_ptr[i]);
    for (std::int64_t p = m.row_ptr[i]; p < m.row_ptr[i + 1]; ++p)
      bitmask[i * row_bytes + m.col[p] / 8] |= std::byte(1u << (m.col[p] % 8));
  }
  out.push_back({name + ".shape", "I64", {2}, std::move(shape)});
  out.push_back({name + ".compressed", export_dtype_name<T>(bf16), {std::ssize(m.value)}, std::move(values)});
  out.push_back({name + ".bitmask", "U8", {m.rows, row_bytes}, std::move(bitmask)});
  out.push_back({name + ".row_offsets", "I64", {m.rows}, std::move(offsets)});
}

// The sparse weights seen by an export, for the metadata.
struct SparsitySummary {
  std::vector<std::string> targets;
  double live = 0, total = 0;
  std::string config() const {
    const nlohmann::ordered_json c = {{"format", "sparse-bitmask"},
                                      {"global_sparsity", total > 0 ? 1.0 - live / total : 0.0},
                                      {"sparsity_structure", "unstructured"},
                                      {"targets", targets},
                                      {"ignore", nlohmann::json::array()}};
    return c.dump();
  }
};

inline std::string shortest(double v) {
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

template <class P>
void note_sparse(std::map<std::string, std::string>& metadata, SparsitySummary& s, const std::string& name,
                 const P& p) {
  double density = 0;
  std::string block = "1x1";
  if constexpr (requires { p.matrix.block_density(); }) {
    using W = std::remove_cvref_t<decltype(p.matrix)>;
    density = p.matrix.block_density();
    block = message(W::kBlockRows, "x", W::kBlockCols);
  } else {
    density = p.matrix.density();
  }
  metadata["sprig.sparsity." + name] = shortest(1.0 - density);
  metadata["sprig.block_shape." + name] = block;
  s.targets.push_back(name);
  s.live += density * static_cast<double>(p.matrix.rows()) * static_cast<double>(p.matrix.cols());
  s.total += static_cast<double>(p.matrix.rows()) * static_cast<double>(p.matrix.cols());
}

}  // namespace sprig::detail::st

#include "safetensors_import.hpp"
