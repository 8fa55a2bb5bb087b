// sprig/nn/gpt.hpp — GPT<T, Index, SparseLayer>: a decoder-only transformer language model
// (nanoGPT's architecture: pre-LN blocks, learned positions, untied head) whose four
// projections per block are each a dense Linear or a SparseLayer (SparseLinear by default;
// BlockSparseLinear<T, Index, R, C> for weights in dense R x C blocks: models::build_block_gpt),
// and which owns every activation and gradient buffer between its layers.
//
// Architecture, for N = batch * seq_len tokens (feature-major, [features x N]):
//     x = tok_emb(tokens) + pos_emb                                     [d_model x N]
//     per block l:  x += proj(attn(qkv(LN1(x))))                        (attention)
//                   x += fc_proj(gelu(fc(LN2(x))))                      (FFN)
//     logits = head(LN_f(x))                                            [vocab x N]
// qkv is one layer [3 d_model x d_model] (nanoGPT's c_attn): rows [0, d), [d, 2d), [2d, 3d)
// of its output are Q, K and V. proj is [d x d], fc [d_ff x d], fc_proj [d x d_ff], each a
// SparseLinear when its GPTBlockDensity entry is in (0, 1) and a Linear at 1; head is a dense
// Linear [vocab x d] with a bias. GELU is the tanh form (nn/gelu.hpp); attention is causal
// (nn/attention.hpp), with d_model / heads features per head.
//
// Tokens map to columns: `tokens` holds batch sequences of seq_len ids one after the other;
// tokens[b * seq_len + t] is token t of sequence b, and it is column b * seq_len + t of every
// activation, of the logits and of output_grad() (nn/embedding.hpp). Logit column n predicts
// the token after token n; a loss over the logits takes labels in the same order.
//
// A training step:
//     auto Z = model.forward(tokens, batch, seq_len);           // tokens held by view
//     loss.forward_backward(Z, labels, model.output_grad());   // after forward (it shapes it)
//     model.backward();                                         // every parameter's grad
//     opt.step(model);
//
// Parameters (for_each_parameter, in this fixed order): tok_emb.table, pos_emb.table; per
// block: LN1 gain, bias; qkv weight, bias; proj weight, bias; LN2 gain, bias; fc weight,
// bias; fc_proj weight, bias; then LN_f gain, bias; head weight, bias. Embeddings, layer
// norms and biases are not decayed (decay = false), the projection and head weights are.
// Initialisation: normal(0, 0.02) embeddings, projections and head by GPTOptions::init (GPTInit),
// zero biases, LayerNorm gain 1 and bias 0, drawn from (options.seed, layer key): key 0 the
// token table, 1 the positional table, 2 + 4 l + j projection j of block l (j as
// GPTProjection), 2 + 4 layers the head. The same config, densities and options give the
// same model on any run and for any thread count.
//
// A GPT is a TrainableModel (nn/model.hpp): optimizers, DST, checkpoints walk it.
//
// Sparse layers (sparse_layers()): one SparseLayerRef per sparse projection (a block-sparse
// one through its stand-in over the block grid, SparseLayerRef::blocks), in model order, with
// position = 4 * block + j (j: 0 qkv, 1 proj, 2 fc, 3 fc_proj); input = the X it saw in the
// last forward (LN1's output, the attention output, LN2's output, the GELU output) and
// output_grad = the dY it got in the last backward (empty after a forward no backward has
// followed yet, and for proj and fc_proj without GPTOptions::keep_output_grads), valid after
// backward() until the next forward. proj's and fc_proj's dY are the residual-stream
// gradients a block keeps; qkv's and fc's dY go to a spare buffer
// of the model, and where that layer is sparse, backward swaps the spare with the block's
// qkv_out or fc_out, dead once the attention core's backward has read Q, K, V (and
// fc_proj's gelu'): their memory keeps the dY for DST and the dead buffer is the next
// block's spare. So no dY buffer per layer; the price: backward consumes the forward's Q, K,
// V and gelu', so it runs once per forward (a second call throws).
//
// Buffers: every activation and gradient is a Matrix<T> member with Sequential's
// activation_stride, reshaped only when batch * seq_len changes: a steady-state step (same
// N, no topology change) allocates nothing (the swaps move buffers, never allocate). Per
// block the model keeps 8 activations (LN1 out, QKV out, attention out, the residual after
// attention, LN2 out, fc's output, the GELU output, the residual after the FFN); proj's and
// fc_proj's dY take the memory of the residuals they are the gradients of, dead when each is
// written (GPTBlock::kept_grad; the last fc_proj's its own). fc's output buffer holds
// gelu'(fc's output) after forward (GELU::forward_keep_derivative), from which fc_proj's
// backward applies the GELU's backward to its dX (FusedActivation::gelu): no GELU backward.
//
// What lives from forward to backward: per block the 8 activations and the attention core's
// probability cache (nn/attention.hpp), the embeddings' output, LN_f's output and the logits;
// each sparse projection's own caches (its W^T). Within backward only: the last block's
// residual gradient (a shared one instead without GPTOptions::keep_output_grads), the two
// spares ([3 d_model x N] and [d_ff x N]), 3 [d_model x N] scratch gradients and the shared
// packing buffer.
//
// Scratch: the model owns one ModelScratch (nn/model_scratch.hpp), handed to every sparse
// projection when it is built: one packing buffer (and one bf16 rounding buffer) for the
// kernels of all of them, sized by the largest request, instead of private ones per
// projection; the layers run one after another, so sharing is safe and gives the same bits.
// Precision: GPTOptions::precision is every projection's (set_precision); the head's is fp32.
// A bf16 projection's input (LN1's, the attention's, LN2's or the GELU's output) is kept in
// bf16 (ProjectionInput, nn/projection_input.hpp; GPTOptions::bf16_inputs = false keeps it in
// float): written in float into a buffer dead in forward (a scratch gradient, fc's spare) and
// rounded once, the same bits the projection would round it to, so the results do not
// change; DST then sees it as SparseLayerRef::input_bf16. The attention core then runs in
// bf16 too (nn/attention.hpp; GPTOptions::bf16_attention = false keeps it float). With both,
// GPTOptions::bf16_activations (default) keeps Q, K, V and gelu' in bf16 too (qkv16, fc16 in
// place of qkv_out, fc_out: qkv's and fc's float outputs go through the dead spares and are
// rounded once), and a sparse qkv's and fc's dY replace them in bf16 (no swap); the residual
// gradients flow through one shared float buffer, and a sparse proj's and fc_proj's dY are
// kept in bf16 in the block's x_out, dead by then (GPTBlock::kept_dy16). Each sparse layer
// reads its bf16 dY as is and DST sees it as SparseLayerRef::output_grad_bf16. Q, K, V in
// bf16 give the same bits; fc's dY becomes bf16(dX * bf16(gelu')) and the sparse layers' bias
// gradients sum their rounded dY, so the last bits differ from bf16_activations = false.
//
// Cost: the layers' passes once each per forward and backward; O(parameters) memory plus,
// per block, (8 d_model + 2 d_ff) x N activation values (of which (3 d_model + d_ff) x N in
// bf16 where the projections run in bf16, and (6 d_model + 2 d_ff) x N with
// bf16_activations), no gradient values (the kept dY take the residuals' memory), and once
// (7 d_model + d_ff) x N for the last block's (or the shared) residual gradient, the spares
// and the scratch gradients, whichever projections are sparse (3 d_model fewer where every
// qkv is sparse and keeps Q, K, V in bf16: the attention core's backward writes its dY over
// them, GPTBlock::backward_attention). Threads: every layer gives the same bits for any OpenMP
// thread count (Linear on a threaded CBLAS excepted: kernels/dense_gemm.hpp), so the model
// does. One model serves one thread at a time.
//
// Throws: ArgumentError from the constructor for a config entry < 1, d_model not divisible
// by heads, densities.size() not 0 or layers, a density outside (0, 1], a padding_ratio or
// growth_reserve outside [0, 64], a precision the layers lack; from forward, before any layer runs, ArgumentError for
// batch < 1, seq_len outside [1, block_size] or a token id outside [0, vocab) (naming the id
// and its position), ShapeError for tokens.size() != batch * seq_len; ArgumentError from
// output_grad() and backward() without a successful forward, and from a second backward()
// after one forward. Layers' own errors pass through.
#pragma once

#include <type_traits>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <utility>
#include <variant>
#include <vector>

#include "../core/concepts.hpp"
#include "../core/error.hpp"
#include "../core/matrix.hpp"
#include "../core/padded_csr.hpp"
#include "../core/precision.hpp"
#include "attention.hpp"
#include "embedding.hpp"
#include "gelu.hpp"
#include "gpt_block.hpp"
#include "gpt_config.hpp"
#include "layer_norm.hpp"
#include "linear.hpp"
#include "model.hpp"
#include "model_scratch.hpp"
#include "parameter.hpp"
#include "projection_input.hpp"
#include "residual.hpp"
#include "sequential.hpp"
#include "sparse_linear.hpp"

namespace sprig {

template <Value T, ColumnIndex Index = std::int32_t, class SparseLayer = SparseLinear<T, Index>>
class GPT {
public:
  using value_type = T;
  using index_type = Index;
  using Projection = std::variant<Linear<T>, SparseLayer>;

  // Builds the model (see the top for the layers and their initialisation). densities: one
  // entry per block, or empty for an all-dense model. O(parameters) time for the dense
  // layers, O(live weights) for the sparse ones. Throws ArgumentError as listed at the top.
  GPT(const GPTConfig& config, std::vector<GPTBlockDensity> densities, const GPTOptions& options = {})
      : config_(checked_config(config)),
        tok_(config.vocab, config.d_model, options.seed, 0),
        pos_(config.block_size, config.d_model, options.seed, 1),
        ln_f_(config.d_model),
        head_(config.d_model, config.vocab, options.seed, 2 + 4 * static_cast<std::uint64_t>(config.layers),
              detail::gpt_weight_init(options.init, config.layers, false)) {
    detail::check_gpt_densities("GPT", config, densities, options);
    if (densities.empty()) densities.resize(static_cast<std::size_t>(config.layers));
    const std::int64_t d = config.d_model, f = config.d_ff;
    const WeightInit in = detail::gpt_weight_init(options.init, config.layers, false),
                     res = detail::gpt_weight_init(options.init, config.layers, true);
    blocks_.reserve(densities.size());
    for (std::size_t l = 0; l < densities.size(); ++l) {
      const std::uint64_t key = 2 + 4 * static_cast<std::uint64_t>(l);
      blocks_.emplace_back(d, config.heads, make_projection(d, 3 * d, densities[l].qkv, options, key, in),
                           make_projection(d, d, densities[l].proj, options, key + 1, res),
                           make_projection(d, f, densities[l].fc, options, key + 2, in),
                           make_projection(f, d, densities[l].fc_proj, options, key + 3, res));
      if (options.precision == Precision::bf16 && options.bf16_attention)
        blocks_.back().attn.set_precision(Precision::bf16);
    }
    scratch_.share_transposes(options.share_transposes);
    share_scratch_with_layers();
    bf16_inputs_ = options.bf16_inputs;
    bf16_activations_ = options.bf16_activations;
    keep_output_grads_ = options.keep_output_grads;
  }

  const GPTConfig& config() const noexcept { return config_; }
  std::int64_t block_size() const noexcept { return config_.block_size; }
  std::int64_t vocab_size() const noexcept { return config_.vocab; }
  std::int64_t layers() const noexcept { return config_.layers; }

  // The layers, for inspection (their parameters are what for_each_parameter visits).
  // projection(): throws ArgumentError for block >= layers().
  TokenEmbedding<T>& token_embedding() noexcept { return tok_; }
  const TokenEmbedding<T>& token_embedding() const noexcept { return tok_; }
  PositionalEmbedding<T>& positional_embedding() noexcept { return pos_; }
  const PositionalEmbedding<T>& positional_embedding() const noexcept { return pos_; }
  Projection& projection(std::size_t block, GPTProjection which) { return blocks_[checked(block)].projection(which); }
  const Projection& projection(std::size_t block, GPTProjection which) const {
    return blocks_[checked(block)].projection(which);
  }
  // Block l's LayerNorm before its attention (LN1) and before its FFN (LN2), read by the
  // cached generator (nn/gpt_generate.hpp). Throw ArgumentError for block >= layers().
  const LayerNorm<T>& attention_norm(std::size_t block) const { return blocks_[checked(block)].ln1; }
  const LayerNorm<T>& ffn_norm(std::size_t block) const { return blocks_[checked(block)].ln2; }
  LayerNorm<T>& final_norm() noexcept { return ln_f_; }
  const LayerNorm<T>& final_norm() const noexcept { return ln_f_; }
  Linear<T>& head() noexcept { return head_; }
  const Linear<T>& head() const noexcept { return head_; }

  // Runs the model on batch sequences of seq_len tokens (token t of sequence b at
  // tokens[b * seq_len + t]) and returns the logits [vocab x batch * seq_len] (column
  // b * seq_len + t for token t of sequence b; a view valid until the next forward). tokens is
  // held by view until backward(): the caller keeps it alive and unchanged. Throws (before any
  // layer runs) as listed at the top; after a throw, output_grad() and backward() throw until a
  // forward succeeds.
  ConstMatrixView<T> forward(std::span<const std::int32_t> tokens, std::int64_t batch, std::int64_t seq_len) {
    forwarded_ = backward_started_ = backward_done_ = false;
    detail::check_gpt_tokens("GPT::forward", config_, tokens, batch, seq_len);
    tokens_ = tokens;
    seq_len_ = seq_len;
    shape_buffers(batch * seq_len);

    using enum GPTPhase;
    const auto time = [this](GPTPhase p, auto&& fn) { detail::timed(clock_, p, fn); };
    time(embeddings_forward, [&] {
      tok_.forward(tokens, x0_.view());
      pos_.forward_add(seq_len, x0_.view());
    });
    for (std::size_t l = 0; l < blocks_.size(); ++l) {
      Block& b = blocks_[l];
      const ConstMatrixView<T> x = input_of(l);
      // (the lent scratch buffers are dead in forward: a bf16 input is written there, then narrowed)
      time(layer_norms_forward,
           [&] { b.ln1_out.write([&](MatrixView<T> y) { b.ln1.forward(x, y); }, scratch_a_.view()); });
      // (fc's float output, and Q, K, V where qkv writes no bf16, go through the dead spares first)
      time(qkv_forward, [&] { b.forward_qkv(spare_qkv_.view()); });
      time(attention_forward, [&] { b.forward_attention(batch, seq_len, scratch_a_.view()); });
      time(proj_forward, [&] { Block::run_forward(b.proj, b.att_out, b.x_mid.view()); });
      time(residual_forward, [&] { add_into<T>(x, b.x_mid.view()); });
      time(layer_norms_forward,
           [&] { b.ln2_out.write([&](MatrixView<T> y) { b.ln2.forward(b.x_mid.view(), y); }, scratch_a_.view()); });
      if (b.gelu_bf16) {
        b.forward_ffn_in_chunks(gelu_, spare_fc_.view(), clock_);  // fc16 := gelu'(fc's output)
      } else {
        time(fc_forward, [&] { Block::run_forward(b.fc, b.ln2_out, b.fc_out.view()); });
        time(gelu_forward, [&] {  // fc_out := gelu'(fc's output)
          b.gelu_out.write([&](MatrixView<T> y) { gelu_.forward_keep_derivative(b.fc_out.view(), y); },
                           spare_fc_.view());
        });
      }
      time(fc_proj_forward, [&] { Block::run_forward(b.fc_proj, b.gelu_out, b.x_out.view()); });
      time(residual_forward, [&] { add_into<T>(b.x_mid.view(), b.x_out.view()); });
    }
    time(layer_norms_forward, [&] { ln_f_.forward(input_of(blocks_.size()), lnf_out_.view()); });
    time(head_forward, [&] { head_.forward(lnf_out_.view(), logits_.view()); });
    forwarded_ = true;
    return logits_.view();
  }

  // Attaches a clock to which forward() and backward() add each GPTPhase's time (nullptr, the
  // default: none). Held by pointer: it outlives the model or is detached first. Same results.
  void set_phase_clock(GPTPhaseClock* clock) noexcept { clock_ = clock; }

  // dLoss/dlogits of the last forward (same shape as its logits): the loss writes it before
  // backward(). Throws ArgumentError without a successful forward.
  MatrixView<T> output_grad() {
    if (!forwarded_) throw ArgumentError("GPT::output_grad: call forward first (no successful forward yet)");
    return dlogits_.view();
  }

  // Back-propagates output_grad() through the model, overwriting every parameter's gradient,
  // and leaves each sparse layer's dY where sparse_layers() shows it (see the top). Once per
  // forward: it consumes the activations the dY replace. Precondition: the tokens of the last
  // forward are alive and unchanged. Throws ArgumentError without a successful forward or
  // when backward has already run (or thrown) since it, and what a layer throws (ShapeError
  // for a sparse layer whose topology changed without weight.apply; then call forward again).
  void backward() {
    if (!forwarded_) throw ArgumentError("GPT::backward: call forward first (no successful forward yet)");
    if (backward_started_)
      throw ArgumentError(
          "GPT::backward: backward already ran after the last forward (it keeps the sparse layers' output "
          "gradients in activations it has consumed); call forward again first");
    backward_started_ = true;
    using enum GPTPhase;
    const auto time = [this](GPTPhase p, auto&& fn) { detail::timed(clock_, p, fn); };
    time(head_backward, [&] { head_.backward(lnf_out_.view(), dlogits_.view(), scratch_a_.view()); });
    time(layer_norms_backward,
         [&] { ln_f_.backward(input_of(blocks_.size()), scratch_a_.view(), blocks_.back().g_out_in(grad_)); });
    for (std::size_t l = blocks_.size(); l-- > 0;) {
      Block& b = blocks_[l];
      const MatrixView<T> g_out = b.g_out_in(grad_), g_mid = b.g_mid_in(grad_);
      if (b.gelu_bf16) {
        b.backward_ffn_bf16(g_out, b.g16(GPTProjection::fc_proj, grad16_), spare_fc_, scratch_a_.view(), clock_);
      } else {
        time(fc_proj_backward, [&] {
          Block::run_backward(b.fc_proj, b.gelu_out, g_out, spare_fc_.view(), FusedActivation::gelu, b.fc_out.view());
        });
        // fc_out (gelu') is dead now: a sparse fc's dY stays in it, and its old buffer is the next spare
        if (Block::is_sparse(b.fc)) std::swap(b.fc_out, spare_fc_);
        time(fc_backward,
             [&] { Block::run_backward(b.fc, b.ln2_out, dy_buffer(b, GPTProjection::fc), scratch_a_.view()); });
      }
      time(layer_norms_backward, [&] { b.ln2.backward(b.x_mid.view(), scratch_a_.view(), scratch_b_.view()); });
      time(residual_backward, [&] { residual_add<T>(g_out, scratch_b_.view(), g_mid); });
      time(proj_backward, [&] {
        Block::backward_from(b.proj, b.att_out, g_mid, b.grad_bf16, b.g16(GPTProjection::proj, grad16_),
                             scratch_a_.view());
      });
      b.backward_attention(spare_qkv_, scratch_a_.view(), clock_);
      time(layer_norms_backward, [&] { b.ln1.backward(input_of(l), scratch_a_.view(), scratch_b_.view()); });
      time(residual_backward,
           [&] { residual_add<T>(g_mid, scratch_b_.view(), l > 0 ? blocks_[l - 1].g_out_in(grad_) : g_in_.view()); });
    }
    time(embeddings_backward, [&] {
      tok_.backward(tokens_, g_in_.view());
      pos_.backward(seq_len_, g_in_.view());
    });
    backward_done_ = true;
  }

  // Calls fn(SparseParameter<T, Index>&) or fn(DenseParameter<T>&) for every parameter in the
  // order listed at the top: what an optimizer's step visits. The const form visits the same
  // parameters in the same order (a checkpoint writes with it). O(parameters visited).
  template <class Fn>
  void for_each_parameter(Fn&& fn) {
    visit_parameters(*this, fn);
  }
  template <class Fn>
  void for_each_parameter(Fn&& fn) const {
    visit_parameters(*this, fn);
  }

  // One SparseLayerRef per sparse projection, in model order (see the top: position = 4 * block +
  // j); views of the last forward's inputs and of the output gradients of the backward that
  // followed it (inputs empty before the first forward, output gradients empty until that
  // backward has finished), valid until the next forward. O(layers); allocates the vector.
  std::vector<SparseLayerRef<T, Index>> sparse_layers() {
    std::vector<SparseLayerRef<T, Index>> out;
    for (std::size_t l = 0; l < blocks_.size(); ++l) {
      Block& b = blocks_[l];
      for (std::size_t j = 0; j < 4; ++j) {
        const auto which = static_cast<GPTProjection>(j);
        if (auto* s = std::get_if<SparseLayer>(&b.projection(which))) {
          const ProjectionInput<T>& in = b.input(which);
          const ConstMatrixView<bfloat16> dy16 = b.dy16(which);
          const bool narrow = dy16.data() != nullptr;
          const ConstMatrixView<T> dy =
              backward_done_ && !narrow ? ConstMatrixView<T>(dy_buffer(b, which)) : ConstMatrixView<T>{};
          const ConstMatrixView<bfloat16> dyb = backward_done_ && narrow ? dy16 : ConstMatrixView<bfloat16>{};
          if constexpr (requires { s->topology_stand_in(); })
            out.push_back({4 * l + j, out.size(), &s->topology_stand_in(), in.wide(), dy, s, in.narrow(), dyb});
          else
            out.push_back({4 * l + j, out.size(), s, in.wide(), dy, nullptr, in.narrow(), dyb});
        }
      }
    }
    return out;
  }

  // Reserves room for topology growth in every sparse projection
  // (SparseParameter::reserve_growth). Throws ArgumentError unless 0 <= fraction <= 64.
  void reserve_growth(double fraction = SparseParameter<T, Index>::kGrowthReserve) {
    for (Block& b : blocks_)
      for (std::size_t j = 0; j < 4; ++j)
        if (auto* s = std::get_if<SparseLayer>(&b.projection(static_cast<GPTProjection>(j))))
          s->weight.reserve_growth(fraction);
  }

  // Hands the model's scratch to every sparse projection, as the constructor does: after a
  // projection was assigned over another (projection(l, j) = ...). O(layers).
  void share_scratch_with_layers() noexcept {
    for (Block& b : blocks_)
      for (Projection* p : {&b.qkv, &b.proj, &b.fc, &b.fc_proj})
        std::visit([&](auto& layer) { scratch_.share_with(layer); }, *p);
  }

  // Bytes of all weights as stored (sparse projections: every PaddedCSR array incl. padding);
  // the same model with every projection dense; everything the model owns (weights,
  // gradients, optimizer state, layer caches, activation and gradient buffers, the shared
  // scratch once); the kernels' packing buffers (the shared scratch plus any a projection
  // still owns).
  std::int64_t weight_bytes() const {
    return sum_layers([](const auto& l) { return l.weight_bytes(); });
  }
  std::int64_t dense_weight_bytes() const {
    return sum_layers([](const auto& l) { return l.dense_weight_bytes(); });
  }
  std::int64_t memory_bytes() const {
    std::int64_t bytes = sum_layers([](const auto& l) { return l.memory_bytes(); });
    for (const Block& b : blocks_) bytes += b.buffer_bytes();
    for (const Matrix<T>* m :
         {&x0_, &lnf_out_, &logits_, &dlogits_, &scratch_a_, &scratch_b_, &g_in_, &spare_qkv_, &spare_fc_, &grad_})
      bytes += m->memory_bytes();
    return bytes + grad16_.memory_bytes() + scratch_.memory_bytes();
  }
  std::int64_t scratch_bytes() const {
    std::int64_t bytes = scratch_.memory_bytes();
    for (const Block& b : blocks_)
      for (const Projection* p : {&b.qkv, &b.proj, &b.fc, &b.fc_proj})
        std::visit(
            [&](const auto& layer) {
              if constexpr (requires { layer.scratch_bytes(); }) bytes += layer.scratch_bytes();
            },
            *p);
    return bytes;
  }

private:
  using Block = detail::GPTBlock<T, Projection>;

  static GPTConfig checked_config(const GPTConfig& c) {
    detail::check_gpt_config("GPT", c);
    return c;
  }

  static Projection make_projection(std::int64_t in, std::int64_t out, double density, const GPTOptions& o,
                                    std::uint64_t key, const WeightInit& init) {
    using Sparse = typename SparseLayer::Options;
    Projection p = density >= 1.0 ? Projection(std::in_place_type<Linear<T>>, in, out, o.seed, key, init)
                                  : Projection(std::in_place_type<SparseLayer>, in, out,
                                               Sparse{.density = density,
                                                      .seed = o.seed,
                                                      .layer_key = key,
                                                      .init = init,
                                                      .padding_ratio = o.padding_ratio,
                                                      .growth_reserve = o.growth_reserve});
    std::visit(
        [&](auto& layer) {
          if constexpr (requires { layer.set_precision(o.precision); })
            layer.set_precision(o.precision);
          else if (o.precision != Precision::fp32)
            throw ArgumentError(detail::message("GPT: precision ", precision_name(o.precision),
                                                " needs projection layers with set_precision"));
        },
        p);
    return p;
  }

  std::size_t checked(std::size_t block) const {
    if (block >= blocks_.size())
      throw ArgumentError(detail::message("GPT: block ", block, " of a model with ", blocks_.size(), " blocks"));
    return block;
  }

  // Where a projection's float dY is written (qkv's and fc's: where backward leaves them, once
  // it has passed that layer; qkv's before it is rounded into qkv16); proj's and fc_proj's
  // where the block keeps them in float, else an empty view.
  MatrixView<T> dy_buffer(Block& b, GPTProjection which) noexcept {
    switch (which) {
      case GPTProjection::qkv: return b.qkv_dy(spare_qkv_).view();
      case GPTProjection::fc: return (Block::is_sparse(b.fc) ? b.fc_out : spare_fc_).view();
      default: return b.keeps_float_grads() ? b.kept_grad(which, grad_).view() : MatrixView<T>{};
    }
  }

  // The residual stream entering block l (l = layers: the input of LN_f).
  ConstMatrixView<T> input_of(std::size_t l) const noexcept {
    return l == 0 ? x0_.view() : blocks_[l - 1].x_out.view();
  }

  // Whether projection p's input is kept in bf16: it runs its products in bf16 (and the
  // options asked for it).
  bool bf16_input(const Projection& p) const noexcept {
    if (!bf16_inputs_) return false;
    return std::visit(
        [](const auto& layer) {
          if constexpr (std::is_same_v<T, float> && requires { layer.precision(); })
            return layer.precision() == Precision::bf16;
          else
            return false;
        },
        p);
  }

  static void reshape(Matrix<T>& m, std::int64_t rows, std::int64_t cols) {
    Block::reshape(m, rows, cols, Sequential<T, Index>::activation_stride(cols));
  }

  // Shapes every buffer for N columns (a no-op when N is unchanged).
  void shape_buffers(std::int64_t n) {
    const std::int64_t d = config_.d_model, f = config_.d_ff, v = config_.vocab;
    const std::int64_t stride = Sequential<T, Index>::activation_stride(n);
    bool shared_grads = false, shared16 = false;
    for (Block& b : blocks_) {
      for (Matrix<T>* m : {&b.x_mid, &b.x_out}) reshape(*m, d, n);
      // GPTOptions::bf16_activations: with a bf16 attention core, and a bf16 fc_proj input; a
      // sparse qkv or fc then takes its dY in bf16, which needs its input in bf16
      b.qkv_bf16 =
          bf16_activations_ && b.attn.precision() == Precision::bf16 && (!Block::is_sparse(b.qkv) || bf16_input(b.qkv));
      b.gelu_bf16 = bf16_activations_ && bf16_input(b.fc_proj) && (!Block::is_sparse(b.fc) || bf16_input(b.fc));
      b.grad_bf16 = b.gelu_bf16 && (!Block::is_sparse(b.proj) || bf16_input(b.proj));
      b.keep_grads = keep_output_grads_;
      shared_grads = shared_grads || b.grad_bf16 || !b.keep_grads;
      shared16 = shared16 || (b.grad_bf16 && !b.keep_grads);
      Block::reshape_one_of(b.qkv_out, b.qkv16, b.qkv_bf16, 3 * d, n, stride);
      Block::reshape_one_of(b.fc_out, b.fc16, b.gelu_bf16, f, n, stride);
      b.shape_residual_grads(d, n, stride, &b == &blocks_.back());
      b.ln1_out.reshape(d, n, stride, bf16_input(b.qkv));
      b.att_out.reshape(d, n, stride, bf16_input(b.proj));
      b.ln2_out.reshape(d, n, stride, bf16_input(b.fc));
      b.gelu_out.reshape(f, n, stride, bf16_input(b.fc_proj));
    }
    for (Matrix<T>* m : {&x0_, &lnf_out_, &scratch_a_, &scratch_b_, &g_in_}) reshape(*m, d, n);
    reshape(logits_, v, n);
    reshape(dlogits_, v, n);
    // none where every qkv's dY goes over Q, K, V; fc's float output goes through spare_fc_ in
    // chunks where backward needs no float [d_ff x N]
    const auto any = [&](auto pred) { return std::any_of(blocks_.begin(), blocks_.end(), pred); };
    any([](const Block& b) { return !b.dqkv_over_qkv(); }) ? reshape(spare_qkv_, 3 * d, n)
                                                           : void(spare_qkv_ = Matrix<T>());
    const bool full_fc = any([](const Block& b) { return b.ffn_needs_full_spare(); });
    reshape(spare_fc_, f, full_fc ? n : std::min<std::int64_t>(n, 256));
    shared_grads ? reshape(grad_, d, n) : void(grad_ = Matrix<T>());
    if (!shared16)
      grad16_ = Matrix<bfloat16>();
    else if (grad16_.rows() != d || grad16_.cols() != n)
      grad16_.resize(d, n);
  }

  // fn(param) over every parameter of `self` (GPT or const GPT) in the documented order.
  template <class Self, class Fn>
  static void visit_parameters(Self& self, Fn& fn) {
    fn(self.tok_.table);
    fn(self.pos_.table);
    auto proj = [&](auto& p) {
      std::visit(
          [&](auto& layer) {
            fn(layer.weight);
            fn(layer.bias);
          },
          p);
    };
    for (auto& b : self.blocks_) {
      fn(b.ln1.gain);
      fn(b.ln1.bias);
      proj(b.qkv);
      proj(b.proj);
      fn(b.ln2.gain);
      fn(b.ln2.bias);
      proj(b.fc);
      proj(b.fc_proj);
    }
    fn(self.ln_f_.gain);
    fn(self.ln_f_.bias);
    fn(self.head_.weight);
    fn(self.head_.bias);
  }

  // Sum of fn(layer) over every layer with parameters.
  template <class Fn>
  std::int64_t sum_layers(Fn&& fn) const {
    std::int64_t s = fn(tok_) + fn(pos_) + fn(ln_f_) + fn(head_);
    for (const Block& b : blocks_) {
      s += fn(b.ln1) + fn(b.ln2);
      for (const Projection* p : {&b.qkv, &b.proj, &b.fc, &b.fc_proj})
        s += std::visit([&](const auto& layer) { return fn(layer); }, *p);
    }
    return s;
  }

  GPTConfig config_;
  TokenEmbedding<T> tok_;
  PositionalEmbedding<T> pos_;
  std::vector<Block> blocks_;
  LayerNorm<T> ln_f_;
  Linear<T> head_;
  GELU<T> gelu_;

  Matrix<T> x0_;       // embeddings: the residual stream entering block 0
  Matrix<T> lnf_out_;  // LN_f's output, the head's input
  Matrix<T> logits_, dlogits_;
  Matrix<T> scratch_a_, scratch_b_;  // [d x N] gradients used within one layer's backward
  Matrix<T> g_in_;                   // gradient at x0 (the embeddings' dY)
  // qkv's and fc's dY while backward runs; swapped with a block's dead qkv_out / fc_out
  // where that layer is sparse (see backward)
  Matrix<T> spare_qkv_, spare_fc_;
  Matrix<T> grad_;           // the residual gradient of the blocks with grad_bf16 (GPTBlock::g_out_in)
  Matrix<bfloat16> grad16_;  // proj's and fc_proj's bf16 dY where the blocks keep none (GPTBlock::g16)
  std::span<const std::int32_t> tokens_;
  std::int64_t seq_len_ = 0;
  bool forwarded_ = false;
  bool backward_started_ = false;   // since the last forward (a second backward throws)
  bool backward_done_ = false;      // and finished: sparse_layers() shows the dY
  ModelScratch<T> scratch_;         // the sparse projections' packing buffer (see the top)
  bool bf16_inputs_ = true;         // GPTOptions::bf16_inputs
  bool bf16_activations_ = true;    // GPTOptions::bf16_activations
  bool keep_output_grads_ = true;   // GPTOptions::keep_output_grads
  GPTPhaseClock* clock_ = nullptr;  // set_phase_clock
};

}  // namespace sprig
