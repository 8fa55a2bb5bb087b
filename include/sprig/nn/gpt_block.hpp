// sprig/nn/gpt_block.hpp — detail::GPTBlock<T, Projection>: one transformer block of
// nn/gpt.hpp's GPT, its layers and the buffers its forward and backward keep (GPT's
// "Buffers" says which hold what when). GPT alone builds and runs it.
#pragma once

#include <cstdint>
#include <utility>

#include "../core/concepts.hpp"
#include "../core/matrix.hpp"
#include "attention.hpp"
#include "layer_norm.hpp"
#include "projection_input.hpp"

namespace sprig::detail {

template <Value T, class Projection>
struct GPTBlock {
  GPTBlock(std::int64_t d, std::int64_t heads, Projection qkv_, Projection proj_, Projection fc_, Projection fc_proj_)
      : ln1(d),
        ln2(d),
        attn(d, heads),
        qkv(std::move(qkv_)),
        proj(std::move(proj_)),
        fc(std::move(fc_)),
        fc_proj(std::move(fc_proj_)) {}
  LayerNorm<T> ln1, ln2;
  CausalSelfAttention<T> attn;
  Projection qkv, proj, fc, fc_proj;
  // activations of the last forward (fc_out holds gelu' of fc's output); after backward,
  // qkv_out and fc_out hold a sparse qkv's and fc's dY instead (GPT::backward); the
  // projections' inputs in bf16 where the projection runs in bf16
  ProjectionInput<T> ln1_out, att_out, ln2_out, gelu_out;
  Matrix<T> qkv_out, x_mid, fc_out, x_out;
  // residual-stream gradients at x_mid (proj's dY) and x_out (fc_proj's dY)
  Matrix<T> g_mid, g_out;
};

}  // namespace sprig::detail
