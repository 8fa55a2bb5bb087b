// sprig/nn/gpt_config.hpp — what a GPT (nn/gpt.hpp) is built from: its shape (GPTConfig), the
// density of each block's projections (GPTBlockDensity), and its seed, initialisation,
// storage and precision (GPTOptions).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <span>
#include <utility>
#include <vector>

#include "../core/error.hpp"
#include "../core/padded_csr.hpp"
#include "../core/precision.hpp"
#include "init.hpp"
#include "phase_clock.hpp"

namespace sprig {

// The shape of a GPT: blocks, attention heads, width, FFN width, longest sequence, vocabulary.
struct GPTConfig {
  std::int64_t layers = 1, heads = 1, d_model = 1, d_ff = 1, block_size = 1, vocab = 1;
};

// The density of each projection of one block: 1 = a dense Linear, in (0, 1) a SparseLinear
// with that fraction of live weights.
struct GPTBlockDensity {
  double qkv = 1, proj = 1, fc = 1, fc_proj = 1;
};

// How the projections and the head are drawn. gpt2 (the default): GPT-2's and nanoGPT's
// normal(0, 0.02), the residual projections (proj, fc_proj) at 0.02 / sqrt(2 layers), a sparse
// one's std scaled by sqrt(in / effective fan-in) so its outputs' variance at init is the
// dense one's (init.hpp). kaiming_uniform: each layer's Kaiming-uniform with its effective
// fan-in (init.hpp), the default before 0.2.0. gpt2 is the default because it trains to a
// lower loss, dense and sparse (docs/transformers.md, "Initialisation").
enum class GPTInit { kaiming_uniform, gpt2 };

// Seed of every layer's initialisation and topology, and the SparseLinear storage options.
struct GPTOptions {
  std::uint64_t seed = 0;
  GPTInit init = GPTInit::gpt2;
  double padding_ratio = kDefaultPaddingRatio;  // spare slots per row, in [0, 64] (PaddedCSR)
  double growth_reserve = 0;              // > 0 for dynamic sparse training (SparseParameter::reserve_growth), <= 64
  Precision precision = Precision::fp32;  // of the four projections (set_precision; the head: fp32)
  // With bf16 projections, keep their inputs in bf16 between forward and backward (GPT's
  // "Buffers"): the same results in half the memory. false keeps them in float.
  bool bf16_inputs = true;
  // With bf16 projections, run the attention core in bf16 (CausalSelfAttention::set_precision:
  // Q, K, V, P and dS rounded, P cached in bf16). false keeps it float.
  bool bf16_attention = true;
  // With both of those, also keep Q, K and V, the GELU's derivative and the sparse layers'
  // output gradients (kept for DST) in bf16 (GPT's "Precision"): 6 d_model + 2 d_ff bytes
  // fewer per token and block, and 2 d_model to 4 d_model for the residual gradients. fc's dY
  // is then the float dX times the rounded derivative, and the sparse layers' bias gradients
  // sum their rounded dY (the last bits differ). false keeps them in float.
  bool bf16_activations = true;
  // Keep the sparse proj's and fc_proj's dY after backward, for DST rules that read gradients
  // (SparsityAlgorithm::needs_gradients: RigL, SNFS, GraNet's regrow). They take the memory of
  // activations dead by then (GPT's "Buffers"), so keeping them costs d_model values per token
  // once, for the last block. false: every block's residual gradients flow through one shared
  // buffer of that size, and sparse_layers() shows proj's and fc_proj's output gradient empty
  // (such a rule then throws ArgumentError); the results are the same bits.
  bool keep_output_grads = true;
  // One W^T cache for all the sparse projections (ModelScratch::share_transposes), rebuilt
  // for each one's backward (O(live weights), one thread) instead of kept per projection:
  // 6 bytes per live weight fewer with 16-bit indices, 8 with 32-bit (block-sparse layers: per
  // live block), for one rebuild pass per projection and step. The same bits either way.
  bool share_transposes = false;
};

// The four projections of a block, in model order (SparseLayerRef::position = 4 * block + j).
enum class GPTProjection : std::size_t { qkv = 0, proj = 1, fc = 2, fc_proj = 3 };

// The phases of a GPT's forward and backward that a GPTPhaseClock times (GPT::set_phase_clock),
// in the order they first run, each summed over the blocks. A layer norm's phase includes
// rounding its output to bf16 where the next projection keeps its input so; a projection's,
// rounding its output (Q, K, V) or dY to bf16 where the model keeps them so; fc_proj's
// backward, the GELU's backward (fused into its dX pass or not).
enum class GPTPhase : std::size_t {
  embeddings_forward,
  layer_norms_forward,
  qkv_forward,
  attention_forward,
  proj_forward,
  residual_forward,
  fc_forward,
  gelu_forward,
  fc_proj_forward,
  head_forward,
  head_backward,
  layer_norms_backward,
  fc_proj_backward,
  fc_backward,
  proj_backward,
  attention_backward,
  qkv_backward,
  residual_backward,
  embeddings_backward,
  count
};
using GPTPhaseClock = PhaseClock<GPTPhase, static_cast<std::size_t>(GPTPhase::count)>;

// What phase p covers, as a profile prints it ("?" for count). O(1).
inline const char* gpt_phase_name(GPTPhase p) noexcept {
  constexpr const char* names[] = {"embeddings forward (token gather + positions)",
                                   "layer norms forward (LN1, LN2, LN_f)",
                                   "qkv projection forward",
                                   "attention core forward (scores, causal softmax, weighted sum)",
                                   "proj projection forward",
                                   "residual adds forward",
                                   "fc projection forward",
                                   "GELU forward (keeps its derivative)",
                                   "fc_proj projection forward",
                                   "head forward (dense, + bias)",
                                   "head backward",
                                   "layer norms backward",
                                   "fc_proj projection backward (+ GELU backward in its dX pass)",
                                   "fc projection backward",
                                   "proj projection backward",
                                   "attention core backward",
                                   "qkv projection backward",
                                   "residual adds backward",
                                   "embeddings backward (scatter-add)"};
  static_assert(std::size(names) == static_cast<std::size_t>(GPTPhase::count));
  const auto i = static_cast<std::size_t>(p);
  return i < std::size(names) ? names[i] : "?";
}

namespace detail {
inline const char* gpt_projection_name(std::size_t j) noexcept {
  constexpr const char* names[] = {"qkv", "proj", "fc", "fc_proj"};
  return j < 4 ? names[j] : "?";
}

// Validates a GPTConfig, naming fn. O(1).
inline void check_gpt_config(const char* fn, const GPTConfig& c) {
  const std::pair<const char*, std::int64_t> entries[] = {{"layers", c.layers},         {"heads", c.heads},
                                                          {"d_model", c.d_model},       {"d_ff", c.d_ff},
                                                          {"block_size", c.block_size}, {"vocab", c.vocab}};
  for (const auto& [name, v] : entries)
    if (v < 1) throw ArgumentError(message(fn, ": ", name, " must be >= 1, got ", v));
  if (c.d_model % c.heads != 0)
    throw ArgumentError(message(fn, ": d_model ", c.d_model, " is not divisible by heads ", c.heads));
}

// Validates a GPT's densities (one per layer, or none for a dense model; each in (0, 1]) and
// storage options, naming fn: ArgumentError. O(layers).
inline void check_gpt_densities(const char* fn, const GPTConfig& c, const std::vector<GPTBlockDensity>& densities,
                                const GPTOptions& options) {
  if (!densities.empty() && std::ssize(densities) != c.layers)
    throw ArgumentError(message(fn, ": ", densities.size(), " densities for ", c.layers,
                                " layers (give one per layer, or none for a dense model)"));
  for (const auto& [name, v] :
       {std::pair{"padding_ratio", options.padding_ratio}, {"growth_reserve", options.growth_reserve}})
    if (!(v >= 0.0 && v <= 64.0)) throw ArgumentError(message(fn, ": ", name, " ", v, " outside [0, 64]"));
  for (std::size_t l = 0; l < densities.size(); ++l) {
    const double dens[] = {densities[l].qkv, densities[l].proj, densities[l].fc, densities[l].fc_proj};
    for (std::size_t j = 0; j < 4; ++j)
      if (!(dens[j] > 0.0 && dens[j] <= 1.0))
        throw ArgumentError(
            message(fn, ": density ", dens[j], " of block ", l, "'s ", gpt_projection_name(j), " outside (0, 1]"));
  }
}

// Validates a forward's arguments against c, naming fn: ArgumentError for batch < 1, seq_len
// outside [1, block_size] or a token id outside [0, vocab) (with its position), ShapeError for
// tokens.size() != batch * seq_len. O(tokens).
inline void check_gpt_tokens(const char* fn, const GPTConfig& c, std::span<const std::int32_t> tokens,
                             std::int64_t batch, std::int64_t seq_len) {
  if (batch < 1) throw ArgumentError(message(fn, ": batch ", batch, " must be >= 1"));
  if (seq_len < 1) throw ArgumentError(message(fn, ": sequence length ", seq_len, " must be >= 1"));
  if (seq_len > c.block_size)
    throw ArgumentError(message(fn, ": sequence length ", seq_len, " > block size ", c.block_size));
  if (std::ssize(tokens) != batch * seq_len)
    throw ShapeError(message(fn, ": ", tokens.size(), " tokens for batch ", batch, " x sequence length ", seq_len,
                             " = ", batch * seq_len));
  for (std::size_t n = 0; n < tokens.size(); ++n)
    if (const std::int32_t id = tokens[n]; id < 0 || id >= c.vocab)
      throw ArgumentError(message(fn, ": token id ", id, " at position ", n, " (sequence ",
                                  static_cast<std::int64_t>(n) / seq_len, ", token ",
                                  static_cast<std::int64_t>(n) % seq_len, ") outside [0, vocab ", c.vocab, ")"));
}

// The WeightInit of a projection (residual: proj or fc_proj) or the head under `init`.
inline WeightInit gpt_weight_init(GPTInit init, std::int64_t layers, bool residual) {
  if (init == GPTInit::kaiming_uniform) return {};
  return WeightInit::normal(residual ? 0.02 / std::sqrt(2.0 * static_cast<double>(layers)) : 0.02);
}

}  // namespace detail

}  // namespace sprig
