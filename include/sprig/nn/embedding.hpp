// sprig/nn/embedding.hpp — learned embeddings of a token sequence: TokenEmbedding<T> (a
// V x d table looked up by token id) and PositionalEmbedding<T> (a block_size x d table looked
// up by position in the sequence), as a GPT's input x = tok_emb[tokens] + pos_emb[positions].
//
// Tokens map to columns: a batch of B sequences of length T is N = B*T token ids in sequence
// order, `tokens[b*T + t]` is token t of sequence b, and it is column n = b*T + t of every
// feature-major activation [d x N] (so sequence b is the contiguous column run [b*T, (b+1)*T)
// and its position is t = n % T).
//
//   TokenEmbedding:      forward   Y[:, n] = E[tokens[n], :]^T                    E: V x d
//                        backward  dE[v, :] = sum over n with tokens[n] = v of dY[:, n]^T
//   PositionalEmbedding: forward   Y[:, n] = P[n % T, :]^T   (forward_add: Y[:, n] += it)
//                        backward  dP[t, :] = sum over b of dY[:, b*T + t]^T  (t < T; rows
//                                  t >= T of dP are 0)                        P: block x d
//
// Both tables are DenseParameter<T> with decay = false (no weight decay on embeddings) and
// start as draws of normal(0, 0.02) (nanoGPT's and GPT-2's initialisation) from the stream
// CounterRng(seed, layer_key, a key per kind of table), so the same (seed, layer_key) gives a
// token table and a positional table that are not copies of each other.
// backward overwrites the table's gradient (as Linear's backward does) and is a scatter-add.
//
// Cost: each pass O(d x N) (backward also O(d x rows of the table) to clear the gradient); no
// allocation. Threads: the passes split the d features over OpenMP threads (rows.hpp) for
// d x N >= kParallelMinWork; feature i of every column and gradient row is handled by one
// thread, walking the tokens in their order, so results are bitwise identical for any thread
// count (repeated tokens included). One layer serves one thread at a time.
//
// Throws (before writing anything): ShapeError for mismatched shapes (Y or dY not d x N with
// N = tokens.size(), a column count that is not a multiple of the sequence length),
// ArgumentError for a token id outside [0, V) (naming the id and its position) and for a
// sequence length outside [1, block_size].
#pragma once

#include <type_traits>

#include <cstdint>
#include <span>

#include "../core/concepts.hpp"
#include "../core/error.hpp"
#include "../core/matrix.hpp"
#include "../core/rng.hpp"
#include "parameter.hpp"
#include "rows.hpp"

namespace sprig {

// The standard deviation of the embeddings' normal initialisation (nanoGPT, GPT-2).
inline constexpr double kEmbeddingInitStd = 0.02;

template <Value T>
class TokenEmbedding {
public:
  using value_type = T;

  DenseParameter<T> table;  // vocabulary x d_model, row v is token v's embedding; not decayed

  // normal(0, 0.02) entries from CounterRng(seed, layer_key, kInitKey). O(V x d). Throws
  // ShapeError unless vocabulary and d_model are > 0.
  TokenEmbedding(std::int64_t vocabulary, std::int64_t d_model, std::uint64_t seed, std::uint64_t layer_key = 0) {
    if (vocabulary <= 0 || d_model <= 0)
      throw ShapeError(
          detail::message("TokenEmbedding: vocabulary and d_model must be > 0, got ", vocabulary, " and ", d_model));
    table = DenseParameter<T>(vocabulary, d_model);
    table.decay = false;
    CounterRng rng(seed, layer_key, kInitKey);
    for (T& v : table.value) v = static_cast<T>(kEmbeddingInitStd * rng.normal());
  }

  std::int64_t vocabulary() const noexcept { return table.rows; }
  std::int64_t d_model() const noexcept { return table.cols; }

  // Y[:, n] = table[tokens[n], :], Y [d_model x tokens.size()]. Throws ShapeError for Y's
  // shape, ArgumentError for a token id outside [0, vocabulary()).
  void forward(std::span<const std::int32_t> tokens, std::type_identity_t<MatrixView<T>> Y) const {
    check("TokenEmbedding::forward", tokens, Y.rows(), Y.cols(), "Y");
    const std::int64_t d = d_model(), n_tokens = Y.cols();
    const T* __restrict e = table.value.data();
    const std::int32_t* __restrict tok = tokens.data();
    detail::for_rows(d, n_tokens, [&](std::int64_t i) {
      T* __restrict y = Y.row(i);
      for (std::int64_t n = 0; n < n_tokens; ++n) y[n] = e[static_cast<std::int64_t>(tok[n]) * d + i];
    });
  }

  // table.grad = the scatter-add of dY's columns into the rows of their tokens (overwritten,
  // rows of tokens absent from the batch 0), dY [d_model x tokens.size()]. Throws as forward,
  // and ShapeError if the table's arrays are misaligned.
  void backward(std::span<const std::int32_t> tokens, std::type_identity_t<ConstMatrixView<T>> dY) {
    check("TokenEmbedding::backward", tokens, dY.rows(), dY.cols(), "dY");
    table.check_aligned("TokenEmbedding::backward");
    const std::int64_t d = d_model(), V = vocabulary(), n_tokens = dY.cols();
    T* __restrict g = table.grad.data();
    const std::int32_t* __restrict tok = tokens.data();
    detail::for_rows(d, n_tokens, [&](std::int64_t i) {
      for (std::int64_t v = 0; v < V; ++v) g[v * d + i] = T(0);
      const T* __restrict dy = dY.row(i);
      for (std::int64_t n = 0; n < n_tokens; ++n) g[static_cast<std::int64_t>(tok[n]) * d + i] += dy[n];
    });
  }

  // Calls fn(table): what an optimizer's step visits.
  template <class Fn>
  void for_each_parameter(Fn&& fn) {
    fn(table);
  }
  template <class Fn>
  void for_each_parameter(Fn&& fn) const {
    fn(table);
  }

  // Bytes of the table; the same (dense); and everything the layer owns (table, gradient,
  // optimizer state).
  std::int64_t weight_bytes() const noexcept { return table.weight_bytes(); }
  std::int64_t dense_weight_bytes() const noexcept {
    return vocabulary() * d_model() * static_cast<std::int64_t>(sizeof(T));
  }
  std::int64_t memory_bytes() const noexcept { return weight_bytes() + table.state_bytes(); }

private:
  void check(const char* fn, std::span<const std::int32_t> tokens, std::int64_t rows, std::int64_t cols,
             const char* name) const {
    if (rows != d_model() || cols != std::ssize(tokens))
      throw ShapeError(detail::message(fn, ": ", name, " is ", rows, "x", cols, ", expected ", d_model(), "x",
                                       tokens.size(), " (d_model x tokens)"));
    const std::int64_t V = vocabulary();
    for (std::size_t n = 0; n < tokens.size(); ++n) {
      const std::int32_t t = tokens[n];
      if (t < 0) throw ArgumentError(detail::message(fn, ": token id ", t, " < 0 at position ", n));
      if (t >= V) throw ArgumentError(detail::message(fn, ": token id ", t, " >= vocabulary ", V, " at position ", n));
    }
  }

  static constexpr std::uint64_t kInitKey = 0x70CE'E3BDULL;
};

template <Value T>
class PositionalEmbedding {
public:
  using value_type = T;

  DenseParameter<T> table;  // block_size x d_model, row t is position t's embedding; not decayed

  // normal(0, 0.02) entries from CounterRng(seed, layer_key, kInitKey). O(block x d). Throws
  // ShapeError unless block_size and d_model are > 0.
  PositionalEmbedding(std::int64_t block_size, std::int64_t d_model, std::uint64_t seed, std::uint64_t layer_key = 0) {
    if (block_size <= 0 || d_model <= 0)
      throw ShapeError(detail::message("PositionalEmbedding: block_size and d_model must be > 0, got ", block_size,
                                       " and ", d_model));
    table = DenseParameter<T>(block_size, d_model);
    table.decay = false;
    CounterRng rng(seed, layer_key, kInitKey);
    for (T& v : table.value) v = static_cast<T>(kEmbeddingInitStd * rng.normal());
  }

  std::int64_t block_size() const noexcept { return table.rows; }
  std::int64_t d_model() const noexcept { return table.cols; }

  // Y[:, n] = table[n % seq_len, :] for Y [d_model x B*seq_len]. Throws ArgumentError unless
  // 1 <= seq_len <= block_size(), ShapeError unless Y has d_model rows and a multiple of
  // seq_len columns.
  void forward(std::int64_t seq_len, std::type_identity_t<MatrixView<T>> Y) const {
    check("PositionalEmbedding::forward", seq_len, Y.rows(), Y.cols(), "Y");
    apply<false>(seq_len, Y);
  }

  // Y[:, n] += table[n % seq_len, :]: the token embedding's output plus the positions, in
  // place. Throws as forward.
  void forward_add(std::int64_t seq_len, std::type_identity_t<MatrixView<T>> Y) const {
    check("PositionalEmbedding::forward_add", seq_len, Y.rows(), Y.cols(), "Y");
    apply<true>(seq_len, Y);
  }

  // table.grad[t, :] = sum over the B sequences of dY[:, b*seq_len + t] (b in order), rows
  // t >= seq_len 0 (overwritten). Throws as forward, and ShapeError if the table's arrays are
  // misaligned.
  void backward(std::int64_t seq_len, std::type_identity_t<ConstMatrixView<T>> dY) {
    check("PositionalEmbedding::backward", seq_len, dY.rows(), dY.cols(), "dY");
    table.check_aligned("PositionalEmbedding::backward");
    const std::int64_t d = d_model(), P = block_size(), Tn = seq_len, B = dY.cols() / seq_len;
    T* __restrict g = table.grad.data();
    detail::for_rows(d, dY.cols(), [&](std::int64_t i) {
      const T* __restrict dy = dY.row(i);
      for (std::int64_t t = 0; t < P; ++t) g[t * d + i] = t < Tn && B > 0 ? dy[t] : T(0);
      for (std::int64_t b = 1; b < B; ++b)
        for (std::int64_t t = 0; t < Tn; ++t) g[t * d + i] += dy[b * Tn + t];
    });
  }

  // Calls fn(table): what an optimizer's step visits.
  template <class Fn>
  void for_each_parameter(Fn&& fn) {
    fn(table);
  }
  template <class Fn>
  void for_each_parameter(Fn&& fn) const {
    fn(table);
  }

  // Bytes of the table; the same (dense); and everything the layer owns.
  std::int64_t weight_bytes() const noexcept { return table.weight_bytes(); }
  std::int64_t dense_weight_bytes() const noexcept {
    return block_size() * d_model() * static_cast<std::int64_t>(sizeof(T));
  }
  std::int64_t memory_bytes() const noexcept { return weight_bytes() + table.state_bytes(); }

private:
  void check(const char* fn, std::int64_t seq_len, std::int64_t rows, std::int64_t cols, const char* name) const {
    if (seq_len < 1) throw ArgumentError(detail::message(fn, ": sequence length ", seq_len, " must be >= 1"));
    if (seq_len > block_size())
      throw ArgumentError(detail::message(fn, ": sequence length ", seq_len, " > block size ", block_size()));
    if (rows != d_model() || cols % seq_len != 0)
      throw ShapeError(detail::message(fn, ": ", name, " is ", rows, "x", cols, ", expected ", d_model(),
                                       " rows and a multiple of the sequence length ", seq_len, " columns"));
  }

  template <bool Add>
  void apply(std::int64_t seq_len, MatrixView<T> Y) const {
    const std::int64_t d = d_model(), B = Y.cols() / seq_len;
    const T* __restrict p = table.value.data();
    detail::for_rows(d, Y.cols(), [&](std::int64_t i) {
      T* __restrict y = Y.row(i);
      for (std::int64_t b = 0; b < B; ++b)
        for (std::int64_t t = 0; t < seq_len; ++t) {
          if constexpr (Add)
            y[b * seq_len + t] += p[t * d + i];
          else
            y[b * seq_len + t] = p[t * d + i];
        }
    });
  }

  static constexpr std::uint64_t kInitKey = 0x9051'7E3BULL;
};

}  // namespace sprig
