// sprig/nn/gpt_generate.hpp — GPTGenerator<Model>: text generation from a GPT (nn/gpt.hpp)
// with a key/value cache, so the prefix is never recomputed while the context fits.
//
// The cache holds, per block, the qkv projection's output [3 d_model x block_size] of every
// position so far (rows [d, 2d) the keys, [2d, 3d) the values; a column per position).
// append(tokens) runs n new positions through the model on n columns only: embeddings, then
// per block LN1, qkv (its output written straight into the cache's columns), causal attention
// of the n queries over the cached keys/values, proj, the residual, LN2, fc, GELU, fc_proj,
// the residual; then LN_f and the head on the last new position. A decoding step is n = 1.
//
// generate(prompt, new_tokens, temperature, seed) is sprig::generate (nn/sampling.hpp) with
// the same contract and the same tokens: the i-th new token is drawn from the logits of the
// last position of the context = the last min(block_size, tokens so far) tokens, with
// u = CounterRng(seed, i, kSampleStream).uniform01(). While the context grows (at most
// block_size tokens) each new token costs one n = 1 append (the prompt one append of its
// tokens). Context full, the window slides: the positional embeddings are absolute, so every
// cached key and value changes when the window moves by one, and a rebuilt cache would serve
// one token only. generate then runs GPT::forward on the window, as the uncached generate
// does (same cost, the same logits bitwise), and the cache stays empty. So the cache saves
// the work of the first block_size - prompt tokens; past them, nothing.
//
// Numerics: the same operations as GPT::forward on the same columns, but LayerNorm and the
// attention's softmax are computed here (column by column, LayerNorm in nn/layer_norm.hpp's
// formula with its double accumulation), sparse projections of at most kNarrowSpmmMaxColumns
// columns run on narrow_spmm, and the attention sums in another order: logits agree with
// GPT::forward's to float rounding (about 1e-5 relative), not bitwise. Tokens agree unless two
// logits tie to within that rounding.
//
// The model is held by reference and must outlive the generator; its weights are read at
// each call, never copied. append writes none of the model's state (its LayerNorms' and
// projections' forward caches are untouched, except that SparseLinear::forward on more than
// kNarrowSpmmMaxColumns columns may regroup W's slots, as any forward does); generate past the
// block size calls GPT::forward, which replaces the model's last forward (as sprig::generate). After the
// weights change, the cached keys/values are stale: call reset() (generate does).
//
// Cost: append of n tokens at position p: O(n x weights) for the projections and
// O(layers x d_model x n x (p + n)) for the attention; memory 3 d_model x block_size values
// per block plus [d_ff x block_size] of scratch; allocates only in the constructor and in
// generate (its result). Deterministic; one thread (the projections' kernels may thread
// themselves at wide n). One generator serves one thread at a time.
#pragma once

#include <type_traits>

#include <algorithm>
#include <concepts>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <variant>
#include <vector>

#include "../core/error.hpp"
#include "../core/matrix.hpp"
#include "../core/padded_csr.hpp"
#include "../core/rng.hpp"
#include "../kernels/narrow_spmm.hpp"
#include "gelu.hpp"
#include "gpt.hpp"
#include "layer_norm.hpp"
#include "sampling.hpp"
#include "sequential.hpp"

namespace sprig {

template <class Model>
class GPTGenerator {
public:
  using T = typename Model::value_type;
  using Index = typename Model::index_type;

  // An empty cache for model (held by reference). O(layers x d_model x block_size) memory.
  explicit GPTGenerator(Model& model) : model_(model) {
    const GPTConfig& c = model.config();
    cache_.reserve(static_cast<std::size_t>(c.layers));
    for (std::int64_t l = 0; l < c.layers; ++l) cache_.emplace_back(3 * c.d_model, c.block_size);
    const std::int64_t widest = Sequential<T, Index>::activation_stride(c.block_size);
    for (Matrix<T>* m : {&x_, &h_, &att_, &y_}) *m = Matrix<T>(c.d_model, widest);
    f_ = Matrix<T>(c.d_ff, widest);
    g_ = Matrix<T>(c.d_ff, widest);
    lnf_ = Matrix<T>(c.d_model, 1);
    logits_ = Matrix<T>(c.vocab, 1);
    scores_.resize(static_cast<std::size_t>(c.block_size));
  }

  // Positions in the cache; reset() empties it (O(1)).
  std::int64_t length() const noexcept { return length_; }
  void reset() noexcept { length_ = 0; }

  // Runs tokens at positions length() .. length() + n - 1 (see the top) and returns the logits
  // of the last one [vocab x 1] (a view valid until the next call). Throws ArgumentError,
  // before anything runs, for no tokens, length() + n > block_size, or a token id outside
  // [0, vocab) (naming it and its index).
  ConstMatrixView<T> append(std::span<const std::int32_t> tokens) {
    constexpr const char* fn = "GPTGenerator::append";
    const std::int64_t n = std::ssize(tokens), block = model_.block_size();
    if (n < 1) throw ArgumentError(detail::message(fn, ": no tokens"));
    if (length_ + n > block)
      throw ArgumentError(detail::message(fn, ": ", length_, " cached + ", n, " new tokens > block size ", block,
                                          " (reset() and append the last ", block, " at most)"));
    check_ids(fn, tokens);
    embed(tokens);
    for (std::size_t l = 0; l < cache_.size(); ++l) run_block(l, n);
    length_ += n;
    const std::int64_t d = model_.config().d_model;
    layer_norm(model_.final_norm(), columns(x_, d, n).block(0, n - 1, d, 1), lnf_.view());
    model_.head().forward(lnf_.view(), logits_.view());
    return logits_.view();
  }

  // prompt followed by new_tokens tokens drawn as sprig::generate draws them (see the top).
  // Throws ArgumentError, before the model runs, for an empty prompt, new_tokens < 0, a
  // temperature that is negative or not finite, a prompt token id outside [0, vocab).
  std::vector<std::int32_t> generate(std::span<const std::int32_t> prompt, std::int64_t new_tokens, double temperature,
                                     std::uint64_t seed) {
    constexpr const char* fn = "GPTGenerator::generate";
    if (prompt.empty()) throw ArgumentError(detail::message(fn, ": the prompt is empty (give at least one token)"));
    if (new_tokens < 0) throw ArgumentError(detail::message(fn, ": new_tokens ", new_tokens, " must be >= 0"));
    detail::check_temperature(fn, temperature);
    check_ids(fn, prompt);
    std::vector<std::int32_t> out;
    out.reserve(prompt.size() + static_cast<std::size_t>(new_tokens));
    out.assign(prompt.begin(), prompt.end());
    const std::int64_t block = model_.block_size(), vocab = model_.vocab_size();
    reset();
    for (std::int64_t i = 0; i < new_tokens; ++i) {
      const std::int64_t len = std::min<std::int64_t>(block, std::ssize(out)), first = std::ssize(out) - len;
      const std::span<const std::int32_t> all(out);
      ConstMatrixView<T> logits;
      if (first > 0) {  // the window slid: no cached key/value is valid, and none would be reused
        reset();
        logits = model_.forward(all.subspan(static_cast<std::size_t>(first)), 1, len).block(0, len - 1, vocab, 1);
      } else if (length_ == len - 1) {
        logits = append(all.last(1));  // the context grew by one token: one column
      } else {
        reset();
        logits = append(all);  // the prompt
      }
      CounterRng rng(seed, static_cast<std::uint64_t>(i), kSampleStream);
      out.push_back(sample_token(logits, 0, temperature, rng.uniform01()));
    }
    return out;
  }

  // Bytes the generator owns (cache and scratch).
  std::int64_t memory_bytes() const noexcept {
    std::int64_t bytes = 0;
    for (const Matrix<T>& m : cache_) bytes += m.memory_bytes();
    for (const Matrix<T>* m : {&x_, &h_, &att_, &y_, &f_, &g_, &lnf_, &logits_}) bytes += m->memory_bytes();
    return bytes + static_cast<std::int64_t>(scores_.capacity() * sizeof(T));
  }

private:
  void check_ids(const char* fn, std::span<const std::int32_t> tokens) const {
    const std::int64_t vocab = model_.vocab_size();
    for (std::size_t k = 0; k < tokens.size(); ++k)
      if (tokens[k] < 0 || tokens[k] >= vocab)
        throw ArgumentError(
            detail::message(fn, ": token id ", tokens[k], " at index ", k, " outside [0, vocab ", vocab, ")"));
  }

  // x_[:, j] = tok_emb[tokens[j]] + pos_emb[length_ + j], as TokenEmbedding then forward_add.
  void embed(std::span<const std::int32_t> tokens) {
    const std::int64_t d = model_.config().d_model;
    const T* tok = model_.token_embedding().table.value.data();
    const T* pos = model_.positional_embedding().table.value.data();
    const MatrixView<T> x = columns(x_, d, std::ssize(tokens));
    for (std::size_t j = 0; j < tokens.size(); ++j) {
      const T* e = tok + static_cast<std::int64_t>(tokens[j]) * d;
      const T* p = pos + (length_ + static_cast<std::int64_t>(j)) * d;
      for (std::int64_t i = 0; i < d; ++i) x(i, static_cast<std::int64_t>(j)) = e[i] + p[i];
    }
  }

  // Block l on the n new columns of x_ (in place), their q, k, v into the cache.
  void run_block(std::size_t l, std::int64_t n) {
    const std::int64_t d = model_.config().d_model, f = model_.config().d_ff;
    const MatrixView<T> x = columns(x_, d, n), h = columns(h_, d, n), a = columns(att_, d, n), y = columns(y_, d, n);
    layer_norm(model_.attention_norm(l), x, h);
    project(model_.projection(l, GPTProjection::qkv), h, cache_[l].view().block(0, length_, 3 * d, n));
    attend(cache_[l].view(), n, a);
    project(model_.projection(l, GPTProjection::proj), a, y);
    add_into(y, x);
    layer_norm(model_.ffn_norm(l), x, h);
    const MatrixView<T> fc = columns(f_, f, n), g = columns(g_, f, n);
    project(model_.projection(l, GPTProjection::fc), h, fc);
    GELU<T>{}.forward(fc, g);
    project(model_.projection(l, GPTProjection::fc_proj), g, y);
    add_into(y, x);
  }

  // The first n columns of scratch m as a [rows x n] view: row stride n at n <=
  // kNarrowSpmmMaxColumns, so a decoding step's column is contiguous (with the block size as
  // stride, a power of two, the rows X[c, 0] a sparse product gathers alias in the cache),
  // else Sequential's activation stride for n.
  static MatrixView<T> columns(Matrix<T>& m, std::int64_t rows, std::int64_t n) noexcept {
    const std::int64_t stride = n <= kNarrowSpmmMaxColumns ? n : Sequential<T, Index>::activation_stride(n);
    return MatrixView<T>(m.data(), rows, n, stride);
  }

  // x += y, element-wise.
  static void add_into(ConstMatrixView<T> y, MatrixView<T> x) {
    for (std::int64_t i = 0; i < x.rows(); ++i) {
      const T* __restrict s = y.row(i);
      T* __restrict t = x.row(i);
      for (std::int64_t j = 0; j < x.cols(); ++j) t[j] += s[j];
    }
  }

  // Y = ln(X) column by column, nn/layer_norm.hpp's forward formula (its caches untouched).
  static void layer_norm(const LayerNorm<T>& ln, ConstMatrixView<T> X, MatrixView<T> Y) {
    const std::int64_t d = X.rows();
    const double inv_d = 1.0 / static_cast<double>(d);
    const T* g = ln.gain.value.data();
    const T* b = ln.bias.value.data();
    for (std::int64_t j = 0; j < X.cols(); ++j) {
      double s = 0.0, q = 0.0;
      for (std::int64_t i = 0; i < d; ++i) s += static_cast<double>(X(i, j));
      s *= inv_d;
      for (std::int64_t i = 0; i < d; ++i) {
        const double c = static_cast<double>(X(i, j)) - s;
        q += c * c;
      }
      const T mean = static_cast<T>(s), rstd = static_cast<T>(1.0 / std::sqrt(q * inv_d + ln.eps()));
      for (std::int64_t i = 0; i < d; ++i) Y(i, j) = (X(i, j) - mean) * rstd * g[i] + b[i];
    }
  }

  // Y = layer(X): a SparseLinear on at most kNarrowSpmmMaxColumns columns by narrow_spmm,
  // anything else by its own forward.
  static void project(typename Model::Projection& p, ConstMatrixView<T> X, MatrixView<T> Y) {
    std::visit(
        [&](auto& layer) {
          if constexpr (requires {
                          { layer.weight.matrix } -> std::same_as<PaddedCSR<T, Index>&>;
                        }) {
            if (X.cols() <= kNarrowSpmmMaxColumns) {
              narrow_spmm(layer.weight.matrix, X, Y, std::span<const T>(layer.bias.value));
              return;
            }
          }
          layer.forward(X, Y);
        },
        p);
  }

  // out[:, j] = causal attention of the query at position p = length_ + j over the cached
  // keys/values at positions [0, p], per head: softmax(q . k / sqrt(d_head)) weighted values.
  void attend(ConstMatrixView<T> kv, std::int64_t n, MatrixView<T> out) {
    const std::int64_t d = model_.config().d_model, heads = model_.config().heads, dh = d / heads;
    const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(dh)));
    T* __restrict s = scores_.data();
    for (std::int64_t j = 0; j < n; ++j) {
      const std::int64_t p = length_ + j, keys = p + 1;
      for (std::int64_t h = 0; h < heads; ++h) {
        std::fill(s, s + keys, T(0));
        for (std::int64_t i = h * dh; i < (h + 1) * dh; ++i) {
          const T q = kv(i, p);
          const T* __restrict k = kv.row(d + i);
          for (std::int64_t t = 0; t < keys; ++t) s[t] += q * k[t];
        }
        T top = -std::numeric_limits<T>::infinity();
        for (std::int64_t t = 0; t < keys; ++t) top = std::max(top, s[t] *= scale);
        T sum = T(0);
        for (std::int64_t t = 0; t < keys; ++t) sum += (s[t] = std::exp(s[t] - top));
        const T inv = T(1) / sum;
        for (std::int64_t i = h * dh; i < (h + 1) * dh; ++i) {
          const T* __restrict v = kv.row(2 * d + i);
          T acc = T(0);
          for (std::int64_t t = 0; t < keys; ++t) acc += s[t] * v[t];
          out(i, j) = acc * inv;
        }
      }
    }
  }

  Model& model_;
  std::vector<Matrix<T>> cache_;  // per block, the qkv output of every cached position
  Matrix<T> x_, h_, att_, y_;     // d_model rows (columns(): the new positions): residual, LN, attention, projection
  Matrix<T> f_, g_;               // d_ff rows: fc's output, the GELU's
  Matrix<T> lnf_, logits_;        // the last position's LN_f output and logits
  std::vector<T> scores_;         // one query's attention scores
  std::int64_t length_ = 0;
};

// prompt followed by new_tokens tokens, as sprig::generate draws them, with a key/value cache
// (GPTGenerator::generate; throws as it does).
template <class Model>
std::vector<std::int32_t> generate_cached(Model& model, std::span<const std::int32_t> prompt, std::int64_t new_tokens,
                                          double temperature, std::uint64_t seed) {
  GPTGenerator<Model> gen(model);
  return gen.generate(prompt, new_tokens, temperature, seed);
}

}  // namespace sprig
