// sprig/data/text.hpp — a character-level text data set (Tiny Shakespeare and the like),
// prepared as nanoGPT prepares it.
//
// Tokens are bytes: the alphabet is the set of distinct bytes of the text in ascending
// order, and token t stands for alphabet[t] (Tiny Shakespeare: 65 tokens). Multi-byte
// UTF-8 characters therefore become several tokens, which keeps the reader exact for any
// input. split_tokens cuts the text into a training part (the first 90% in nanoGPT) and a
// validation part (the rest).
//
// Two kinds of training examples, both read from window starts s:
// - Sequence windows (a GPT, nanoGPT's get_batch): input tokens[s, s + T), targets
//   tokens[s + 1, s + T + 1), the next token at every position. gather_sequence_windows lays
//   B windows out as B*T token ids, window b at [b*T, (b+1)*T) (the order of
//   nn/embedding.hpp's columns). Training windows are random (sample_window_starts, as
//   torch.randint(len - T)); evaluation windows are a fixed, evenly spaced set
//   (evaluation_window_starts), so every evaluation of a run sees the same windows.
// - Next-character windows (an MLP language model in the style of Bengio et al. 2003): input
//   tokens[s, s + context), target tokens[s + context], gathered one-hot as a feature-major
//   matrix [context * vocab x B] (gather_one_hot_windows).
// A start s needs s + T < n (or s + context < n): its window and its last target fit.
// Everything runs on the calling thread; random windows depend on (seed, step) alone, and no
// gather allocates.
#pragma once

#include <type_traits>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "../core/concepts.hpp"
#include "../core/error.hpp"
#include "../core/matrix.hpp"
#include "../core/rng.hpp"

namespace sprig {

// Stream key separating text window draws from other users of the same seed.
inline constexpr std::uint64_t kTextStream = 0x5445'5854'5749'4E44ULL;  // "TEXTWIND"

// A text encoded over its own byte alphabet.
struct CharText {
  std::vector<unsigned char> alphabet;       // distinct bytes, ascending: token t is alphabet[t]
  std::array<std::int32_t, 256> token_of{};  // byte -> token, -1 for bytes not in the text
  std::vector<std::int32_t> tokens;          // the text, encoded

  std::int64_t vocab_size() const noexcept { return static_cast<std::int64_t>(alphabet.size()); }
  std::int64_t size() const noexcept { return static_cast<std::int64_t>(tokens.size()); }

  // Encodes text over this alphabet, O(text); a byte outside it is an ArgumentError naming
  // the byte and its position.
  std::vector<std::int32_t> encode(std::string_view text) const {
    std::vector<std::int32_t> out(text.size());
    for (std::size_t i = 0; i < text.size(); ++i) {
      const auto byte = static_cast<unsigned char>(text[i]);
      if (token_of[byte] < 0)
        throw ArgumentError(detail::message("CharText::encode: byte ", int(byte), " at position ", i,
                                            " is not in the alphabet of ", alphabet.size(), " characters"));
      out[i] = token_of[byte];
    }
    return out;
  }

  // The bytes of `ids`, O(ids); a token outside [0, vocab_size()) is an ArgumentError.
  std::string decode(std::span<const std::int32_t> ids) const {
    std::string out(ids.size(), '\0');
    for (std::size_t i = 0; i < ids.size(); ++i) {
      if (ids[i] < 0 || ids[i] >= vocab_size())
        throw ArgumentError(detail::message("CharText::decode: token ", ids[i], " at position ", i, " is outside [0, ",
                                            vocab_size(), ")"));
      out[i] = static_cast<char>(alphabet[static_cast<std::size_t>(ids[i])]);
    }
    return out;
  }
};

// Builds the alphabet of `text` and encodes it. O(text + 256); no throw but std::bad_alloc.
inline CharText char_text(std::string_view text) {
  CharText out;
  std::array<bool, 256> present{};
  for (char c : text) present[static_cast<unsigned char>(c)] = true;
  out.token_of.fill(-1);
  for (int b = 0; b < 256; ++b)
    if (present[static_cast<std::size_t>(b)]) {
      out.token_of[static_cast<std::size_t>(b)] = static_cast<std::int32_t>(out.alphabet.size());
      out.alphabet.push_back(static_cast<unsigned char>(b));
    }
  out.tokens.resize(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) out.tokens[i] = out.token_of[static_cast<unsigned char>(text[i])];
  return out;
}

// Reads a regular file of at most max_bytes (default 1 GiB) and builds its CharText, O(file).
// FormatError for a missing, unreadable, empty, non-regular or oversized file, naming the
// path.
inline CharText read_char_text(const std::filesystem::path& path, std::uint64_t max_bytes = std::uint64_t{1} << 30) {
  const std::string name = path.string();
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(status))
    throw FormatError(detail::message("read_char_text: cannot open '", name, "': no such file"));
  if (!std::filesystem::is_regular_file(status))
    throw FormatError(detail::message("read_char_text: '", name, "' is not a regular file"));
  const auto size = std::filesystem::file_size(path, ec);
  if (ec) throw FormatError(detail::message("read_char_text: '", name, "': cannot read its size: ", ec.message()));
  if (size == 0) throw FormatError(detail::message("read_char_text: '", name, "' is empty"));
  if (size > max_bytes)
    throw FormatError(
        detail::message("read_char_text: '", name, "' holds ", size, " bytes, more than the limit of ", max_bytes));
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) throw FormatError(detail::message("read_char_text: cannot open '", name, "'"));
  std::string text(static_cast<std::size_t>(size), '\0');
  const std::size_t got = std::fread(text.data(), 1, text.size(), f);
  std::fclose(f);
  if (got != text.size())
    throw FormatError(detail::message("read_char_text: '", name, "': read ", got, " of ", size, " bytes"));
  return char_text(text);
}

// The first ceil(fraction * n) tokens and the rest (train / validation; nanoGPT uses 0.9),
// as views of `tokens`. O(1); ArgumentError unless 0 <= fraction <= 1.
inline std::pair<std::span<const std::int32_t>, std::span<const std::int32_t>> split_tokens(
    std::span<const std::int32_t> tokens, double fraction) {
  if (!(fraction >= 0.0 && fraction <= 1.0))
    throw ArgumentError(detail::message("split_tokens: fraction ", fraction, " is outside [0, 1]"));
  const auto cut = std::min(tokens.size(), static_cast<std::size_t>(std::ceil(fraction * double(tokens.size()))));
  return {tokens.first(cut), tokens.subspan(cut)};
}

// Draws starts.size() window starts, uniform in [0, n - context - 1] (nanoGPT's
// torch.randint(n - context)), from CounterRng(seed, step, kTextStream): every start has
// s + context <= n - 1, so a window of `context` tokens and its target, or its shifted
// targets, fit. O(starts). ArgumentError unless 0 < context < n.
inline void sample_window_starts(std::int64_t n, std::int64_t context, std::uint64_t seed, std::uint64_t step,
                                 std::span<std::int64_t> starts) {
  if (context <= 0 || n <= context)
    throw ArgumentError(
        detail::message("sample_window_starts: ", n, " tokens cannot hold a window of ", context, " plus its target"));
  CounterRng rng(seed, step, kTextStream);
  for (auto& s : starts) s = static_cast<std::int64_t>(rng.uniform_below(static_cast<std::uint64_t>(n - context)));
}

// Gathers the windows at `starts` one-hot into x [context * vocab x B] (feature-major,
// B = starts.size()) and their next-token targets. Every token must lie in [0, vocab).
// O(context * vocab * B) (the fill) and no allocation. Validates everything before writing:
// ArgumentError for vocab or context <= 0, a start without room for its window and target,
// or a token outside [0, vocab); ShapeError for x or targets of the wrong size.
template <Value T>
void gather_one_hot_windows(std::span<const std::int32_t> tokens, std::int64_t vocab, std::int64_t context,
                            std::span<const std::int64_t> starts, std::type_identity_t<MatrixView<T>> x,
                            std::span<std::int32_t> targets) {
  const auto batch = static_cast<std::int64_t>(starts.size());
  const auto n = static_cast<std::int64_t>(tokens.size());
  if (vocab <= 0 || context <= 0)
    throw ArgumentError(
        detail::message("gather_one_hot_windows: vocab ", vocab, " and context ", context, " must be positive"));
  if (x.rows() != context * vocab || x.cols() != batch || static_cast<std::int64_t>(targets.size()) != batch)
    throw ShapeError(detail::message("gather_one_hot_windows: x must be ", context * vocab, "x", batch, " and targets ",
                                     batch, " long, got x ", x.rows(), "x", x.cols(), " and ", targets.size(),
                                     " targets"));
  for (std::int64_t b = 0; b < batch; ++b) {
    const std::int64_t s = starts[static_cast<std::size_t>(b)];
    if (s < 0 || s + context >= n)
      throw ArgumentError(detail::message("gather_one_hot_windows: start ", s, " at position ", b,
                                          " leaves no room for ", context, " tokens and a target in ", n));
    for (std::int64_t j = 0; j <= context; ++j) {
      const std::int32_t t = tokens[static_cast<std::size_t>(s + j)];
      if (t < 0 || t >= vocab)
        throw ArgumentError(
            detail::message("gather_one_hot_windows: token ", t, " at ", s + j, " is outside [0, ", vocab, ")"));
    }
  }
  x.fill(T(0));
  for (std::int64_t b = 0; b < batch; ++b) {
    const std::int64_t s = starts[static_cast<std::size_t>(b)];
    for (std::int64_t j = 0; j < context; ++j) x(j * vocab + tokens[static_cast<std::size_t>(s + j)], b) = T(1);
    targets[static_cast<std::size_t>(b)] = tokens[static_cast<std::size_t>(s + context)];
  }
}


// The sequence windows at `starts`, nanoGPT's x and y: for window b at start s and t < seq_len,
//   inputs[b * seq_len + t] = tokens[s + t],   targets[b * seq_len + t] = tokens[s + t + 1].
// O(starts * seq_len), no allocation. Validates everything before writing: ArgumentError for
// seq_len < 1, a start outside [0, n - seq_len - 1] (n = tokens.size(); naming the start and
// its position) or inputs / targets that overlap each other or tokens; ShapeError unless
// inputs and targets hold starts.size() * seq_len entries. Token values are copied as they
// are (the embedding checks them against its vocabulary).
inline void gather_sequence_windows(std::span<const std::int32_t> tokens, std::span<const std::int64_t> starts,
                                    std::int64_t seq_len, std::span<std::int32_t> inputs,
                                    std::span<std::int32_t> targets) {
  const auto n = static_cast<std::int64_t>(tokens.size());
  const auto batch = static_cast<std::int64_t>(starts.size());
  if (seq_len < 1) throw ArgumentError(detail::message("gather_sequence_windows: seq_len ", seq_len, " must be >= 1"));
  if ((batch > 0 && seq_len > std::numeric_limits<std::int64_t>::max() / batch) ||
      static_cast<std::int64_t>(inputs.size()) != batch * seq_len ||
      static_cast<std::int64_t>(targets.size()) != batch * seq_len)
    throw ShapeError(detail::message("gather_sequence_windows: inputs and targets must hold ", batch, " x ", seq_len,
                                     " tokens, got ", inputs.size(), " and ", targets.size()));
  auto overlap = [](auto a, auto b) {
    if (a.empty() || b.empty()) return false;
    const auto* a0 = reinterpret_cast<const unsigned char*>(a.data());
    const auto* b0 = reinterpret_cast<const unsigned char*>(b.data());
    return std::less<>{}(a0, b0 + b.size_bytes()) && std::less<>{}(b0, a0 + a.size_bytes());
  };
  if (overlap(inputs, targets) || overlap(inputs, tokens) || overlap(targets, tokens))
    throw ArgumentError("gather_sequence_windows: inputs, targets and tokens must not overlap");
  for (std::int64_t b = 0; b < batch; ++b) {
    const std::int64_t s = starts[static_cast<std::size_t>(b)];
    if (s < 0 || s > n - seq_len - 1)
      throw ArgumentError(detail::message("gather_sequence_windows: start ", s, " at position ", b, " is outside [0, ",
                                          n - seq_len - 1, "]: a window of ", seq_len,
                                          " tokens and its targets need start + ", seq_len, " < ", n));
  }
  for (std::int64_t b = 0; b < batch; ++b) {
    const auto s = static_cast<std::size_t>(starts[static_cast<std::size_t>(b)]);
    const auto o = static_cast<std::size_t>(b * seq_len);
    const auto len = static_cast<std::size_t>(seq_len);
    std::copy_n(tokens.begin() + static_cast<std::ptrdiff_t>(s), len, inputs.begin() + static_cast<std::ptrdiff_t>(o));
    std::copy_n(tokens.begin() + static_cast<std::ptrdiff_t>(s + 1), len,
                targets.begin() + static_cast<std::ptrdiff_t>(o));
  }
}

// A fixed set of `count` evaluation windows over a split of n tokens: starts evenly spaced
// over every valid start [0, last] with last = n - seq_len - 1, s_k = floor(k * last /
// (count - 1)) for k = 0 .. count - 1 (the first and the last window included; count 1 gives
// {0}). Deterministic, no seed: every evaluation of a run, and every run on the same split,
// reads the same windows (nanoGPT draws fresh random ones per evaluation, which adds noise to
// the curve). Windows overlap when count * seq_len > n; with count > last + 1 some starts
// repeat, each about equally often. Ascending. O(count). ArgumentError for count < 1,
// seq_len < 1, or a split too short for one window and its targets (n <= seq_len).
inline std::vector<std::int64_t> evaluation_window_starts(std::int64_t n, std::int64_t seq_len, std::int64_t count) {
  if (count < 1) throw ArgumentError(detail::message("evaluation_window_starts: count ", count, " must be >= 1"));
  if (seq_len < 1) throw ArgumentError(detail::message("evaluation_window_starts: seq_len ", seq_len, " must be >= 1"));
  if (n <= seq_len)
    throw ArgumentError(detail::message("evaluation_window_starts: a split of ", n, " tokens cannot hold a window of ",
                                        seq_len, " tokens and its targets (needs at least ", seq_len + 1, ")"));
  const auto last = static_cast<std::uint64_t>(n - seq_len - 1);
  std::vector<std::int64_t> starts(static_cast<std::size_t>(count), 0);
  if (count == 1) return starts;
  const auto den = static_cast<std::uint64_t>(count - 1);
  for (std::int64_t k = 0; k < count; ++k)
    starts[static_cast<std::size_t>(k)] =
        static_cast<std::int64_t>(static_cast<detail::uint128>(static_cast<std::uint64_t>(k)) * last / den);
  return starts;
}

}  // namespace sprig
