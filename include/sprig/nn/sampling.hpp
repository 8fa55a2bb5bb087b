// sprig/nn/sampling.hpp — drawing tokens from a language model's logits: one token from a
// column of logits (sample_token), and a continuation of a prompt (generate), as nanoGPT's
// sample.py does with top_k off.
//
// sample_token draws from softmax(logits[:, column] / temperature) by the inverse CDF of a
// uniform u in [0, 1): the smallest token i with p_0 + ... + p_i > u. The softmax is computed
// in double and shifted by the column's maximum, so logits of any size (1e4 and more) give
// exp(0) = 1 for the largest and no overflow. temperature 0 is greedy decoding: the first
// token of largest logit, whatever u. A logit of -inf is a token of probability 0, never drawn.
//
// generate continues a prompt one token at a time: the model sees at most its last
// block_size() tokens (the context is cropped to the block, as nanoGPT's generate), the token
// is drawn from the logits of the last position with u = CounterRng(seed, i,
// kSampleStream).uniform01() for the i-th new token (0-based), so a continuation is a function
// of (model, prompt, new_tokens, temperature, seed) alone.
//
// The model (LM) is any class with
//   ConstMatrixView<T> forward(std::span<const std::int32_t> tokens, std::int64_t batch,
//                              std::int64_t seq_len);   // logits [vocab x batch * seq_len]
//   std::int64_t block_size() const;
// called with batch 1 and seq_len = tokens.size(); column t of the logits is position t
// (nn/embedding.hpp's column order), so the last column predicts the next token.
//
// Cost: sample_token O(vocab), no allocation; generate new_tokens forward passes on contexts
// of up to block_size() tokens, plus one allocation (the result). Both run on the calling
// thread (the model's forward may thread itself) and are deterministic.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <type_traits>
#include <vector>

#include "../core/concepts.hpp"
#include "../core/error.hpp"
#include "../core/matrix.hpp"
#include "../core/rng.hpp"

namespace sprig {

// Stream key of generate's uniforms, apart from other users of the same seed.
inline constexpr std::uint64_t kSampleStream = 0x5341'4D50'4C54'4F4BULL;  // "SAMPLTOK"

namespace detail {
inline void check_temperature(const char* fn, double temperature) {
  if (!(temperature >= 0.0 && std::isfinite(temperature)))
    throw ArgumentError(message(fn, ": temperature ", temperature, " must be finite and >= 0"));
}
}  // namespace detail

// A token drawn from softmax(logits[:, column] / temperature) with the uniform u (see the
// header comment); temperature 0 takes the first largest logit. Throws ArgumentError for a
// temperature that is negative or not finite, a u outside [0, 1) or NaN, a column outside
// [0, logits.cols()), and a column holding a NaN or +inf logit or only -inf ones (naming the
// value and its row); ShapeError for logits without rows or with more rows than int32 ids.
template <Value T>
std::int32_t sample_token(ConstMatrixView<T> logits, std::int64_t column, double temperature, double u) {
  const std::int64_t vocab = logits.rows();
  if (vocab < 1 || vocab > std::numeric_limits<std::int32_t>::max())
    throw ShapeError(detail::message("sample_token: logits have ", vocab, " rows (tokens); need 1 to ",
                                     std::numeric_limits<std::int32_t>::max()));
  if (column < 0 || column >= logits.cols())
    throw ArgumentError(detail::message("sample_token: column ", column, " is outside [0, ", logits.cols(), ")"));
  detail::check_temperature("sample_token", temperature);
  if (!(u >= 0.0 && u < 1.0)) throw ArgumentError(detail::message("sample_token: u ", u, " is outside [0, 1)"));

  std::int64_t best = -1;
  double top = -std::numeric_limits<double>::infinity();
  for (std::int64_t i = 0; i < vocab; ++i) {
    const double z = static_cast<double>(logits(i, column));
    if (std::isnan(z) || z == std::numeric_limits<double>::infinity())
      throw ArgumentError(detail::message("sample_token: logit ", z, " at row ", i, " of column ", column,
                                          " (a logit must be finite or -inf)"));
    if (z > top) {
      top = z;
      best = i;
    }
  }
  if (best < 0)
    throw ArgumentError(
        detail::message("sample_token: every logit of column ", column, " is -inf: no token has a probability"));
  if (temperature == 0.0) return static_cast<std::int32_t>(best);

  // exp((z - max) / temperature): the largest is exactly 1, so total >= 1
  double total = 0.0;
  for (std::int64_t i = 0; i < vocab; ++i)
    total += std::exp((static_cast<double>(logits(i, column)) - top) / temperature);
  const double target = u * total;
  double cumulative = 0.0;
  std::int64_t last_positive = best;
  for (std::int64_t i = 0; i < vocab; ++i) {
    const double w = std::exp((static_cast<double>(logits(i, column)) - top) / temperature);
    if (w > 0.0) last_positive = i;
    cumulative += w;
    if (cumulative > target) return static_cast<std::int32_t>(i);
  }
  // u * total rounded up to total (u within an ulp of 1): the last token that has a probability
  return static_cast<std::int32_t>(last_positive);
}

template <Value T>
std::int32_t sample_token(MatrixView<T> logits, std::int64_t column, double temperature, double u) {
  return sample_token(ConstMatrixView<T>(logits), column, temperature, u);
}

// prompt followed by new_tokens tokens drawn from the model (see the header comment). Throws,
// before the model runs: ArgumentError for an empty prompt, new_tokens < 0, a bad temperature
// (as sample_token), a block_size() < 1; then ShapeError if the model's logits do not have one
// column per context token, and what the model's forward and sample_token throw (a token id
// the model does not know is its forward's error).
template <class LM>
std::vector<std::int32_t> generate(LM& model, std::span<const std::int32_t> prompt, std::int64_t new_tokens,
                                   double temperature, std::uint64_t seed) {
  if (prompt.empty()) throw ArgumentError("generate: the prompt is empty (give at least one token)");
  if (new_tokens < 0) throw ArgumentError(detail::message("generate: new_tokens ", new_tokens, " must be >= 0"));
  detail::check_temperature("generate", temperature);
  const std::int64_t block = static_cast<std::int64_t>(model.block_size());
  if (block < 1) throw ArgumentError(detail::message("generate: the model's block_size() is ", block));

  std::vector<std::int32_t> out;
  out.reserve(prompt.size() + static_cast<std::size_t>(new_tokens));
  out.assign(prompt.begin(), prompt.end());
  for (std::int64_t i = 0; i < new_tokens; ++i) {
    const std::int64_t len = std::min<std::int64_t>(block, std::ssize(out));
    const std::span<const std::int32_t> context =
        std::span<const std::int32_t>(out).last(static_cast<std::size_t>(len));
    const auto logits = model.forward(context, 1, len);
    using T = typename std::remove_cvref_t<decltype(logits)>::value_type;
    const ConstMatrixView<T> view = logits;
    if (view.cols() != len)
      throw ShapeError(detail::message("generate: the model's forward returned ", view.rows(), "x", view.cols(),
                                       " logits for a context of ", len, " tokens (expected one column per token)"));
    CounterRng rng(seed, static_cast<std::uint64_t>(i), kSampleStream);
    out.push_back(sample_token(view, len - 1, temperature, rng.uniform01()));
  }
  return out;
}

}  // namespace sprig
