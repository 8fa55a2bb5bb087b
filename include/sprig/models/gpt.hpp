// sprig/models/gpt.hpp — builds a GPT (nn/gpt.hpp) from a spec: its shape, and the
// sparsity of the attention projections and of the FFN separately.
//
// The two groups: attention = every block's qkv [3d x d] and proj [d x d]; FFN = every
// block's fc [d_ff x d] and fc_proj [d x d_ff]. Embeddings, layer norms and the head stay
// dense. Uniform: every matrix of a group at 1 - that group's sparsity. ERK: the group's
// sparsity spread over its matrices by ERK (density.hpp), so the group's live count is
// (1 - sparsity) x its size up to rounding; a matrix that ERK makes dense, or a group at
// sparsity 0, is a dense Linear. (fc and fc_proj have the same ERK weight, so ERK leaves the
// FFN uniform; in attention proj gets the higher density, 3/2 of qkv's.)
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "../core/error.hpp"
#include "../core/precision.hpp"
#include "../core/padded_csr.hpp"
#include "../nn/block_sparse_linear.hpp"
#include "../nn/gpt.hpp"
#include "density.hpp"
#include "mlp.hpp"

namespace sprig::models {

// What build_gpt builds. Every layer's values and topology come from spec.seed and the
// layer's key (nn/gpt.hpp), so a spec gives the same model on every run and thread count.
struct GPTSpec {
  GPTConfig config;
  double attn_sparsity = 0, ffn_sparsity = 0;  // each in [0, 1)
  Distribution distribution = Distribution::uniform;
  std::uint64_t seed = 0;
  GPTInit init = GPTInit::gpt2;                 // of the projections and the head (GPTOptions::init)
  double padding_ratio = kDefaultPaddingRatio;  // spare capacity per row, in [0, 64] (PaddedCSR)
  double growth_reserve = 0;  // > 0 for dynamic sparse training (SparseParameter::reserve_growth), <= 64
  Precision precision = Precision::fp32;  // of the projections (GPTOptions::precision)
  bool keep_output_grads = true;          // false where no DST rule reads gradients (GPTOptions::keep_output_grads)
  bool share_transposes = false;          // one W^T cache for the model (GPTOptions::share_transposes)
};

namespace detail {
// gpt_densities with `fn` (the public call) named in its errors; ERK over the block grids of
// R x C blocks (R = C = 1: the matrices themselves).
inline std::vector<GPTBlockDensity> gpt_densities(const char* fn, const GPTSpec& spec, std::int64_t R = 1,
                                                  std::int64_t C = 1) {
  sprig::detail::check_gpt_config(fn, spec.config);
  if (!(spec.attn_sparsity >= 0.0 && spec.attn_sparsity < 1.0))
    throw ArgumentError(sprig::detail::message(fn, ": attn_sparsity ", spec.attn_sparsity, " outside [0, 1)"));
  if (!(spec.ffn_sparsity >= 0.0 && spec.ffn_sparsity < 1.0))
    throw ArgumentError(sprig::detail::message(fn, ": ffn_sparsity ", spec.ffn_sparsity, " outside [0, 1)"));
  const auto L = static_cast<std::size_t>(spec.config.layers);
  const std::int64_t d = spec.config.d_model, f = spec.config.d_ff;
  auto grid = [&](std::int64_t rows, std::int64_t cols) {
    return LayerShape{blocks_covering(rows, R), blocks_covering(cols, C)};
  };
  std::vector<LayerShape> attn, ffn;
  for (std::size_t l = 0; l < L; ++l) {
    attn.push_back(grid(3 * d, d));
    attn.push_back(grid(d, d));
    ffn.push_back(grid(f, d));
    ffn.push_back(grid(d, f));
  }
  auto spread = [&](const std::vector<LayerShape>& shapes, double sparsity) {
    if (sparsity == 0.0) return std::vector<double>(shapes.size(), 0.0);
    return spec.distribution == Distribution::erk ? erk_sparsities(fn, shapes, sparsity)
                                                  : uniform_sparsities(fn, shapes, sparsity);
  };
  const std::vector<double> sa = spread(attn, spec.attn_sparsity), sf = spread(ffn, spec.ffn_sparsity);
  auto density = [](double s) { return s > 0.0 ? 1.0 - s : 1.0; };
  std::vector<GPTBlockDensity> out(L);
  for (std::size_t l = 0; l < L; ++l)
    out[l] = {.qkv = density(sa[2 * l]),
              .proj = density(sa[2 * l + 1]),
              .fc = density(sf[2 * l]),
              .fc_proj = density(sf[2 * l + 1])};
  return out;
}
}  // namespace detail

// The density of every projection (1 = dense) that `spec` leads to, one entry per block.
// O(layers) (ERK: O(layers^2) at worst). Throws ArgumentError, naming models::gpt_densities,
// for a config entry < 1, d_model not divisible by heads, or attn_sparsity / ffn_sparsity
// outside [0, 1) (naming which and its value).
inline std::vector<GPTBlockDensity> gpt_densities(const GPTSpec& spec) {
  return detail::gpt_densities("models::gpt_densities", spec);
}

// The sparsity of every sparse projection `spec` leads to (those gpt_densities puts below 1),
// in model order (GPT::sparse_layers(): block by block, qkv, proj, fc, fc_proj): the per-layer
// lists GraNetOptions takes. With a block shape, over the R x C block grids, as build_block_gpt
// draws them. O(layers) (ERK: O(layers^2) at worst). Throws what gpt_densities throws, naming
// models::gpt_sparsities, and ArgumentError for a block shape below 1x1.
inline std::vector<double> gpt_sparsities(const GPTSpec& spec, std::int64_t block_rows = 1,
                                          std::int64_t block_cols = 1) {
  constexpr const char* fn = "models::gpt_sparsities";
  if (block_rows < 1 || block_cols < 1)
    throw ArgumentError(
        sprig::detail::message(fn, ": block shape ", block_rows, "x", block_cols, " (rows and columns must be >= 1)"));
  std::vector<double> out;
  for (const GPTBlockDensity& b : detail::gpt_densities(fn, spec, block_rows, block_cols))
    for (const double d : {b.qkv, b.proj, b.fc, b.fc_proj})
      if (d < 1.0) out.push_back(1.0 - d);
  return out;
}

namespace detail {
// The GPT of `spec` (a GPT type), its densities over grids of R x C blocks (1 x 1: SparseLinear).
template <class Model>
Model build_gpt_with(const char* fn, const GPTSpec& spec, std::int64_t R, std::int64_t C) {
  using Index = typename Model::index_type;
  const std::vector<GPTBlockDensity> densities = gpt_densities(fn, spec, R, C);
  if (!(spec.padding_ratio >= 0.0 && spec.padding_ratio <= 64.0))
    throw ArgumentError(sprig::detail::message(fn, ": padding_ratio ", spec.padding_ratio, " outside [0, 64]"));
  if (!(spec.growth_reserve >= 0.0 && spec.growth_reserve <= 64.0))
    throw ArgumentError(sprig::detail::message(fn, ": growth_reserve ", spec.growth_reserve, " outside [0, 64]"));
  constexpr auto max_index = static_cast<std::int64_t>(std::numeric_limits<Index>::max());
  const std::int64_t d = spec.config.d_model, f = spec.config.d_ff;
  const bool blocks = R * C > 1;
  for (std::size_t l = 0; l < densities.size(); ++l) {
    const double dens[] = {densities[l].qkv, densities[l].proj, densities[l].fc, densities[l].fc_proj};
    const std::int64_t rows[] = {3 * d, d, f, d}, cols[] = {d, d, d, f};
    for (std::size_t j = 0; j < 4; ++j) {
      if (dens[j] >= 1.0) continue;
      const char* name = sprig::detail::gpt_projection_name(j);
      const std::int64_t grid_rows = blocks_covering(rows[j], R), grid_cols = blocks_covering(cols[j], C);
      if (grid_cols - 1 > max_index)
        throw ArgumentError(sprig::detail::message(fn, ": block ", l, "'s ", name, " has ", grid_cols,
                                                   blocks ? " block columns" : " columns", ", more than a ",
                                                   sizeof(Index) * 8, "-bit column index addresses (at most ",
                                                   max_index, " + 1)"));
      if (std::llround(dens[j] * static_cast<double>(grid_rows) * static_cast<double>(grid_cols)) == 0)
        throw ArgumentError(sprig::detail::message(fn, ": block ", l, "'s ", name, " (", rows[j], "x", cols[j],
                                                   ") at density ", dens[j], " keeps no ",
                                                   blocks ? "block" : "weight"));
    }
  }
  return Model(spec.config, densities,
               {.seed = spec.seed,
                .init = spec.init,
                .padding_ratio = spec.padding_ratio,
                .growth_reserve = spec.growth_reserve,
                .precision = spec.precision,
                .keep_output_grads = spec.keep_output_grads,
                .share_transposes = spec.share_transposes});
}
}  // namespace detail

// Builds the GPT of `spec`: SparseLinear projections at the densities of gpt_densities,
// Linear ones where that is 1. O(dense parameters + live weights). Deterministic for
// spec.seed. Throws, naming models::build_gpt, what gpt_densities throws, and ArgumentError for
// a padding_ratio or growth_reserve outside [0, 64], a sparse projection whose columns Index
// cannot address, or one whose density rounds to no weight.
template <Value T, ColumnIndex Index = std::int32_t>
GPT<T, Index> build_gpt(const GPTSpec& spec) {
  return detail::build_gpt_with<GPT<T, Index>>("models::build_gpt", spec, 1, 1);
}

// The same GPT with its sparse projections in dense R x C blocks (BlockSparseLinear at block
// density = the projection's density; ERK over the block grids). Throws as build_gpt, naming
// models::build_block_gpt, for block columns Index cannot address or a density that keeps no block.
template <Value T, ColumnIndex Index, int R, int C>
GPT<T, Index, BlockSparseLinear<T, Index, R, C>> build_block_gpt(const GPTSpec& spec) {
  using Layer = BlockSparseLinear<T, Index, R, C>;
  return detail::build_gpt_with<GPT<T, Index, Layer>>("models::build_block_gpt", spec, R, C);
}

}  // namespace sprig::models
