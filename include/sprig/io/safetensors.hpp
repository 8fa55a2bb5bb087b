// sprig/io/safetensors.hpp — export any TrainableModel's weights to a safetensors file that
// PyTorch's load_state_dict takes as it is, and import one back (docs/safetensors.md).
// Needs nlohmann-json (Debian nlohmann-json3-dev), for this header and its io/safetensors_*.hpp
// parts only: not in the umbrella header.
//
//   sprig::save_safetensors("model.safetensors", model);                      // dense F32
//   sprig::save_safetensors("model.safetensors", model, {.sparse_form = sprig::SparseForm::compressed});
//   sprig::save_safetensors("model.safetensors", model, {.dtype = sprig::SafetensorsDtype::bf16});
//   sprig::load_safetensors("model.safetensors", model);                      // all or nothing
//
// Tensor names (safetensors_names), in for_each_parameter order:
//   GPT (nn/gpt.hpp): the PyTorch GPT of bench/compare_python/gpt_torch.py: tok_emb.weight
//     [vocab, d], pos_emb.weight [block, d], blocks.<l>.{ln1, qkv, proj, ln2, fc, fc_proj}.
//     {weight, bias}, ln_f.{weight, bias}, head.{weight, bias}. LayerNorm gains are ".weight".
//   Sequential (nn/sequential.hpp): layers.<k>.weight and layers.<k>.bias, k the layer's index
//     in the model (element-wise layers count, as in a PyTorch nn.Sequential held as `layers`).
//   Any other TrainableModel: parameters.<k>, k the visiting order.
// Shapes: weights and embeddings [rows, cols] (sprig and PyTorch's Linear both store [out, in]);
// biases and LayerNorm gains/biases 1-D [rows] (GPT and Sequential); parameters.<k> 2-D.
// `rename` maps these names to others (e.g. nanoGPT's) on export and import alike.
// dtype of the values (every dense tensor and every <name>.compressed): F32 for a float model,
// F64 for a double one; with SafetensorsDtype::bf16 (float models only), BF16, each value the
// nearest bfloat16, ties to even (sprig::bfloat16, core/bfloat16.hpp: no flush of subnormals,
// overflow to infinity, NaN kept a NaN). Integer tensors (.shape, .bitmask, .row_offsets) keep
// their dtypes.
//
// Sparse weights (SparseParameter, BlockSparseParameter):
//   dense form (default): materialised [rows, cols], zeros outside the pattern.
//   compressed form: compressed-tensors' sparse-bitmask layout, four tensors per weight:
//     <name>.shape I64 [2], <name>.compressed [live] (values, row-major, columns ascending),
//     <name>.bitmask U8 [rows, ceil(cols / 8)] (bit c % 8 of byte c / 8 of a row, least
//     significant bit first: numpy.packbits(axis=-1, bitorder="little"), what compressed-tensors'
//     pack_bitmasks calls), <name>.row_offsets I64 [rows] (offset of each row's first value).
//     The bitmask marks sprig's live positions (a live weight may be exactly 0); a block-sparse
//     weight's mask marks every in-matrix entry of its live blocks. Dense parameters stay dense.
// Metadata: format "pt", sprig_version, per sparse weight "sprig.sparsity.<name>" (1 - density;
// of blocks for a block-sparse one) and "sprig.block_shape.<name>" ("1x1", "4x4", ...); the
// compressed form adds sparsity_config, a JSON string {"format": "sparse-bitmask", ...}.
//
// Import (decode_safetensors, load_safetensors) into a model of the same parameter shapes: each
// parameter takes the tensor of its name, dense or (any 2-D parameter) compressed, with values
// (the dense tensor, or <name>.compressed) of the model's dtype (F32 or F64) or BF16, widened
// exactly; one file may mix them, and pruning on import reads either. Every name, dtype and
// shape is checked, and the file as a whole (parse_safetensors), before anything is written:
// FormatError naming the tensor for a missing tensor, one the model has no parameter for, a
// wrong shape or dtype (naming the dtypes accepted), a weight given both dense and compressed,
// an inconsistent compressed form; the model is then unchanged.
//   A sparse weight keeps its pattern on a dense import and takes the values at its live
//   positions (values elsewhere are dropped). A SparseParameter given in compressed form takes
//   the file's pattern (its bitmask) and values; its gradient is zeroed and its optimizer state
//   emptied (the optimizer recreates it). A block-sparse weight keeps its block pattern in both
//   forms. With prune_sparsity in [0, 1), a SparseLinear weight given dense is pruned by
//   magnitude into a new pattern at that sparsity (one-shot: gradient zeroed, state emptied);
//   with prune_to_model_density, into a new pattern of its current live count.
//   Cost O(file bytes + parameters' dense sizes); one staged copy of the imported values.
// Throws ArgumentError (before reading) for a prune_sparsity that is NaN or >= 1, or one >= 0
// together with prune_to_model_density. Export throws ArgumentError for SafetensorsDtype::bf16
// with a double model (rounding through float would round twice).
#pragma once

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <map>
#include <set>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "../core/concepts.hpp"
#include "../core/error.hpp"
#include "../nn/gpt.hpp"
#include "../nn/model.hpp"
#include "../nn/sequential.hpp"
#include "../version.hpp"
#include "atomic_file.hpp"
#include "safetensors_format.hpp"
#include "safetensors_model.hpp"

namespace sprig {

// How sparse weights are written: materialised dense, or compressed-tensors' sparse-bitmask.
enum class SparseForm { dense, compressed };

// The dtype of exported values: the model's own (F32 or F64), or BF16 (float models only).
enum class SafetensorsDtype { native, bf16 };

struct SafetensorsExportOptions {
  SparseForm sparse_form = SparseForm::dense;
  SafetensorsDtype dtype = SafetensorsDtype::native;
  std::map<std::string, std::string> rename{};    // sprig's name -> the file's, for any it lists
  std::map<std::string, std::string> metadata{};  // added to __metadata__ (over sprig's own keys)
};

struct SafetensorsImportOptions {
  std::map<std::string, std::string> rename{};  // sprig's name -> the file's, as on export
  // One-shot magnitude pruning, off when negative: a SparseLinear weight given a dense tensor
  // takes a new pattern, the round((1 - prune_sparsity) * rows * cols) entries of largest
  // magnitude (ties to the lower row-major index), as a compressed import does. In [0, 1).
  double prune_sparsity = -1;
  // One-shot magnitude pruning to the model's own densities: a SparseLinear weight given a
  // dense tensor takes a new pattern of as many entries as it holds live now, those of largest
  // magnitude (ties as above). So the per-layer densities a model was built with (uniform or
  // ERK per group, models/gpt.hpp) carry over. Not together with prune_sparsity >= 0.
  bool prune_to_model_density = false;
};

// The file names of the model's parameters, in for_each_parameter order (see the top), after
// `rename`. O(parameters).
template <TrainableModel M>
std::vector<std::string> safetensors_names(const M& model, const std::map<std::string, std::string>& rename = {}) {
  std::vector<std::string> out;
  for (const auto& n : detail::st::parameter_names(model, rename)) out.push_back(n.name);
  return out;
}

// The bytes of a safetensors file of the model's weights (see the top). Reads the model only.
// Throws ArgumentError if `rename` gives two parameters one name, or for options.dtype bf16 with
// a model whose value_type is not float; otherwise only bad_alloc. O(dense size of every
// parameter).
template <TrainableModel M>
std::vector<std::byte> encode_safetensors(const M& model, const SafetensorsExportOptions& options = {}) {
  namespace st = detail::st;
  using T = typename M::value_type;
  const bool bf16 = options.dtype == SafetensorsDtype::bf16;
  if (bf16 && !std::is_same_v<T, float>)
    throw ArgumentError(detail::message("encode_safetensors: BF16 export needs a float model (this one's values are ",
                                        st::dtype_name<T>(), "; rounding through float would round twice)"));
  const char* dtype = st::export_dtype_name<T>(bf16);
  const auto names = st::parameter_names(model, options.rename);
  std::vector<SafetensorsEntry> tensors;
  std::map<std::string, std::string> metadata{{"format", "pt"}, {"sprig_version", st::version_string()}};
  st::SparsitySummary summary;
  std::size_t k = 0;
  model.for_each_parameter([&](const auto& p) {
    const st::ParameterName& n = names[k++];
    if constexpr (requires { p.matrix; }) {
      const st::ElementRows<T> rows = st::element_rows(p);
      st::note_sparse(metadata, summary, n.name, p);
      if (options.sparse_form == SparseForm::compressed)
        st::put_compressed(tensors, n.name, rows, bf16);
      else
        tensors.push_back({n.name, dtype, {rows.rows, rows.cols}, st::dense_bytes(rows, bf16)});
    } else {
      std::vector<std::int64_t> shape{p.rows, p.cols};
      if (n.vector && p.cols == 1) shape = {p.rows};
      std::vector<std::byte> data;
      data.reserve(p.value.size() * (bf16 ? 2 : sizeof(T)));
      for (T v : p.value) st::put_value(data, v, bf16);
      tensors.push_back({n.name, dtype, std::move(shape), std::move(data)});
    }
  });
  if (options.sparse_form == SparseForm::compressed && !summary.targets.empty())
    metadata["sparsity_config"] = summary.config();
  for (const auto& [key, value] : options.metadata) metadata[key] = value;
  return encode_safetensors_tensors(tensors, metadata);
}

// Writes encode_safetensors's bytes to `path` atomically (io/atomic_file.hpp). Throws
// sprig::Error naming the path and errno's text when it cannot be written (path unchanged).
template <TrainableModel M>
void save_safetensors(const std::filesystem::path& path, const M& model, const SafetensorsExportOptions& options = {}) {
  const auto bytes = encode_safetensors(model, options);
  detail::ckpt::write_file_atomically(path, bytes, "sprig::save_safetensors");
}

// Imports the weights of a safetensors file held in `bytes` into `model` (see the top):
// validates the whole file and every tensor against the model first, then writes with
// non-throwing copies and moves; on any error the model is unchanged. `source` names the file
// in errors. Throws FormatError, and ArgumentError for a bad options.prune_sparsity.
template <TrainableModel M>
void decode_safetensors(std::span<const std::byte> bytes, std::string source, M& model,
                        const SafetensorsImportOptions& options = {}) {
  namespace st = detail::st;
  using T = typename M::value_type;
  using Index = typename M::index_type;
  if (!(options.prune_sparsity < 1.0))  // NaN included
    throw ArgumentError(detail::message("decode_safetensors: prune_sparsity ", options.prune_sparsity,
                                        " outside [0, 1) (negative: no pruning)"));
  if (options.prune_sparsity >= 0.0 && options.prune_to_model_density)
    throw ArgumentError(detail::message("decode_safetensors: prune_sparsity ", options.prune_sparsity,
                                        " and prune_to_model_density both set: choose one"));
  const SafetensorsFile file = parse_safetensors(bytes, std::move(source));
  const auto names = st::parameter_names(static_cast<const M&>(model), options.rename);
  std::set<std::string> used;
  std::vector<st::Staged<T, Index>> staged;
  std::size_t k = 0;
  static_cast<const M&>(model).for_each_parameter([&](const auto& p) {
    staged.push_back(
        st::stage<T, Index>(file, names[k++], p, used, options.prune_sparsity, options.prune_to_model_density));
  });
  for (const auto& [name, t] : file.tensors)
    if (!used.contains(name))
      st::fail(file.source, "tensor '", name, "' matches no parameter of the model (", names.size(), " parameters)");
  // Everything is valid: commit.
  bool new_pattern = false;
  k = 0;
  model.for_each_parameter([&](auto& p) { new_pattern |= st::commit(staged[k++], p); });
  if (new_pattern)
    for (const SparseLayerRef<T, Index>& l : model.sparse_layers()) l.layer->transpose_cache().invalidate();
}

// Reads `path` and imports it as decode_safetensors does (all or nothing). Throws FormatError
// naming the file for a missing, unreadable or invalid file.
template <TrainableModel M>
void load_safetensors(const std::filesystem::path& path, M& model, const SafetensorsImportOptions& options = {}) {
  const auto bytes = detail::ckpt::read_file(path);
  decode_safetensors(std::span<const std::byte>(bytes), path.string(), model, options);
}

}  // namespace sprig
