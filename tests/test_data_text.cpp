#include "sprig/data/text.hpp"
#include "sprig/io/text.hpp"  // the old path forwards for one release (docs/changes.md)

#include "sprig/core/rng.hpp"

#include <catch2/catch.hpp>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;

fs::path write_text(const std::string& name, const std::string& text) {
  const fs::path dir =
      fs::temp_directory_path() / ("sprig_test_io_text_" + std::to_string(static_cast<long long>(::getpid())));
  fs::create_directories(dir);
  const fs::path p = dir / name;
  std::ofstream(p, std::ios::binary) << text;
  return p;
}

std::span<std::int32_t> none_of(std::vector<std::int32_t>& v) { return std::span<std::int32_t>(v).first(0); }

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

}  // namespace

TEST_CASE("char_text builds a sorted byte alphabet and round-trips the text", "[io][text]") {
  std::string text = "hello, world!\nHELLO\t\x01\xff\xc3\xa9";  // control, high and UTF-8 bytes
  const auto ct = sprig::char_text(text);
  const std::set<unsigned char> distinct(text.begin(), text.end());
  REQUIRE(ct.vocab_size() == static_cast<std::int64_t>(distinct.size()));
  CHECK(std::vector<unsigned char>(distinct.begin(), distinct.end()) == ct.alphabet);
  REQUIRE(ct.size() == static_cast<std::int64_t>(text.size()));
  for (std::size_t i = 0; i < text.size(); ++i)
    CHECK(ct.alphabet[static_cast<std::size_t>(ct.tokens[i])] == static_cast<unsigned char>(text[i]));
  CHECK(ct.decode(ct.tokens) == text);
  CHECK(ct.encode(text) == ct.tokens);
  for (int b = 0; b < 256; ++b)
    CHECK((ct.token_of[static_cast<std::size_t>(b)] >= 0) == (distinct.count(static_cast<unsigned char>(b)) == 1));

  CHECK_THROWS_AS(ct.encode("hello?"), sprig::ArgumentError);  // '?' is not in the text
  const std::vector<std::int32_t> bad{0, static_cast<std::int32_t>(ct.vocab_size())};
  CHECK_THROWS_AS(ct.decode(bad), sprig::ArgumentError);
}

TEST_CASE("read_char_text reads a file and reports bad ones by path", "[io][text]") {
  const auto p = write_text("small.txt", "to be or not to be");
  const auto ct = sprig::read_char_text(p);
  CHECK(ct.decode(ct.tokens) == "to be or not to be");
  CHECK(ct.vocab_size() == 7);  // ' ', b, e, n, o, r, t

  auto error = [](const fs::path& path, std::uint64_t limit = std::uint64_t{1} << 30) -> std::string {
    try {
      (void)sprig::read_char_text(path, limit);
    } catch (const sprig::FormatError& e) {
      return e.what();
    }
    return "";
  };
  const fs::path missing = p.parent_path() / "missing.txt";
  CHECK(contains(error(missing), missing.string()));
  CHECK(contains(error(write_text("empty.txt", "")), "empty"));
  CHECK(contains(error(p.parent_path()), "not a regular file"));
  CHECK(contains(error(p, 10), "more than the limit of 10"));
}

TEST_CASE("split_tokens cuts at ceil(fraction * n)", "[io][text]") {
  const std::vector<std::int32_t> t(10, 0);
  auto [a, b] = sprig::split_tokens(t, 0.9);
  CHECK(a.size() == 9);
  CHECK(b.size() == 1);
  CHECK(b.data() == t.data() + 9);
  CHECK(sprig::split_tokens(t, 0.0).first.empty());
  CHECK(sprig::split_tokens(t, 1.0).second.empty());
  CHECK(sprig::split_tokens(t, 0.25).first.size() == 3);
  CHECK_THROWS_AS(sprig::split_tokens(t, 1.5), sprig::ArgumentError);
  CHECK_THROWS_AS(sprig::split_tokens(t, std::nan("")), sprig::ArgumentError);
}

TEST_CASE("sample_window_starts is seeded, in range and covers every start", "[io][text]") {
  const std::int64_t n = 20, context = 4;  // starts 0..15
  std::vector<std::int64_t> s1(4000), s2(4000), s3(4000);
  sprig::sample_window_starts(n, context, 1, 0, s1);
  sprig::sample_window_starts(n, context, 1, 0, s2);
  sprig::sample_window_starts(n, context, 1, 1, s3);
  CHECK(s1 == s2);
  CHECK(s1 != s3);
  std::vector<int> count(16, 0);
  for (auto s : s1) {
    REQUIRE((s >= 0 && s <= n - context - 1));
    ++count[static_cast<std::size_t>(s)];
  }
  // 250 expected per start, binomial sd ~15.
  for (int c : count) CHECK(std::abs(c - 250) < 90);
  CHECK_THROWS_AS(sprig::sample_window_starts(4, 4, 0, 0, s1), sprig::ArgumentError);
  CHECK_THROWS_AS(sprig::sample_window_starts(4, 0, 0, 0, s1), sprig::ArgumentError);
}

TEMPLATE_TEST_CASE("gather_one_hot_windows writes one-hot columns and next-token targets", "[io][text]", float,
                   double) {
  using T = TestType;
  const auto ct = sprig::char_text("abracadabra, said the cat");
  const std::int64_t vocab = ct.vocab_size(), context = 3, batch = 6;
  std::vector<std::int64_t> starts(batch);
  sprig::sample_window_starts(ct.size(), context, 5, 2, starts);
  starts[0] = 0;
  starts[1] = ct.size() - context - 1;  // the last window whose target exists
  sprig::Matrix<T> x(context * vocab, batch, batch + 3, T(9));
  std::vector<std::int32_t> targets(batch, -1);
  sprig::gather_one_hot_windows<T>(ct.tokens, vocab, context, starts, x.view(), targets);
  for (std::int64_t b = 0; b < batch; ++b) {
    const auto s = starts[static_cast<std::size_t>(b)];
    CHECK(targets[static_cast<std::size_t>(b)] == ct.tokens[static_cast<std::size_t>(s + context)]);
    for (std::int64_t j = 0; j < context; ++j)
      for (std::int64_t t = 0; t < vocab; ++t)
        CHECK(x(j * vocab + t, b) == (t == ct.tokens[static_cast<std::size_t>(s + j)] ? T(1) : T(0)));
  }
  starts[2] = ct.size() - context;  // no target
  CHECK_THROWS_AS(sprig::gather_one_hot_windows<T>(ct.tokens, vocab, context, starts, x.view(), targets),
                  sprig::ArgumentError);
  starts[2] = 0;
  CHECK_THROWS_AS(sprig::gather_one_hot_windows<T>(ct.tokens, vocab - 1, context, starts, x.view(), targets),
                  sprig::ShapeError);
  sprig::Matrix<T> wide_vocab(context * (vocab + 1), batch);
  CHECK_NOTHROW(sprig::gather_one_hot_windows<T>(ct.tokens, vocab + 1, context, starts, wide_vocab.view(), targets));
  sprig::Matrix<T> small_vocab(context * 2, batch);
  CHECK_THROWS_AS(sprig::gather_one_hot_windows<T>(ct.tokens, 2, context, starts, small_vocab.view(), targets),
                  sprig::ArgumentError);  // tokens >= 2 exist
}

TEST_CASE("read_char_text on a generated play: vocabulary, 90/10 split and round trip", "[io][text]") {
  // A text of known characters, in the shape of Tiny Shakespeare (speaker lines, blank lines),
  // generated from a fixed seed: every byte of `alphabet` occurs, no other.
  const std::string alphabet = "\n !',-.:;?ABCEFHILMNORSTWabcdefghiklmnoprstuvwyz";
  std::string text;
  sprig::CounterRng rng(2024, 7);
  for (char c : alphabet) text += c;  // each character at least once
  while (text.size() < 5000) {
    text += "First Citizen:\n";
    for (int w = 0; w < 12; ++w) {
      for (int k = 0, len = 1 + static_cast<int>(rng.uniform_below(7)); k < len; ++k)
        text += alphabet[11 + rng.uniform_below(alphabet.size() - 11)];
      text += w == 11 ? ".\n\n" : " ";
    }
  }
  const auto p = write_text("play.txt", text);
  const auto ct = sprig::read_char_text(p);

  std::string sorted = alphabet;
  std::sort(sorted.begin(), sorted.end());
  REQUIRE(ct.vocab_size() == static_cast<std::int64_t>(alphabet.size()));
  CHECK(std::string(ct.alphabet.begin(), ct.alphabet.end()) == sorted);  // sorted distinct bytes
  CHECK(ct.alphabet.front() == '\n');
  CHECK(ct.token_of[static_cast<unsigned char>('A')] == static_cast<std::int32_t>(sorted.find('A')));
  CHECK(ct.token_of[static_cast<unsigned char>('#')] == -1);
  REQUIRE(ct.size() == static_cast<std::int64_t>(text.size()));
  CHECK(ct.decode(ct.tokens) == text);
  CHECK(ct.encode(text) == ct.tokens);

  // 90 / 10: the first ceil(0.9 n) tokens train, the rest validate, together the text
  const auto [train, val] = sprig::split_tokens(ct.tokens, 0.9);
  const auto n = text.size();
  CHECK(train.size() == static_cast<std::size_t>(std::ceil(0.9 * static_cast<double>(n))));
  CHECK(train.size() + val.size() == n);
  CHECK(ct.decode(train) + ct.decode(val) == text);
  CHECK(ct.decode(val) == text.substr(train.size()));

  // bad input
  CHECK_THROWS_WITH(ct.encode("First Citizen?#"), Catch::Matchers::Contains("byte 35 at position 14"));
  const std::vector<std::int32_t> negative{3, -1};
  CHECK_THROWS_WITH(ct.decode(negative), Catch::Matchers::Contains("token -1 at position 1"));
  CHECK_THROWS_AS(sprig::split_tokens(ct.tokens, -0.1), sprig::ArgumentError);
  std::vector<std::int64_t> starts(4);
  CHECK_THROWS_AS(sprig::sample_window_starts(ct.size(), ct.size(), 1, 0, starts), sprig::ArgumentError);
}

// The real file, compiled in only where the repository ships it (tests/io.cmake).
#if defined(SPRIG_TINY_SHAKESPEARE)
TEST_CASE("read_char_text reads Tiny Shakespeare", "[io][text][dataset]") {
  const auto ct = sprig::read_char_text(SPRIG_TINY_SHAKESPEARE);
  CHECK(ct.size() == 1115394);
  CHECK(ct.vocab_size() == 65);
  const std::vector<std::int32_t> head(ct.tokens.begin(), ct.tokens.begin() + 13);
  CHECK(ct.decode(head) == "First Citizen");
}
#endif

TEST_CASE("gather_sequence_windows lays out nanoGPT's x and y window by window", "[io][text]") {
  const auto ct = sprig::char_text("abcdefgh");     // tokens 0..7
  const std::vector<std::int64_t> starts{0, 3, 1};  // 3 = n - seq_len - 1, the last valid start
  std::vector<std::int32_t> x(12, -7), y(12, -7);
  sprig::gather_sequence_windows(ct.tokens, starts, 4, x, y);
  CHECK(x == std::vector<std::int32_t>{0, 1, 2, 3, 3, 4, 5, 6, 1, 2, 3, 4});
  CHECK(y == std::vector<std::int32_t>{1, 2, 3, 4, 4, 5, 6, 7, 2, 3, 4, 5});
  CHECK(ct.decode(std::span<const std::int32_t>(x).subspan(4, 4)) == "defg");
  CHECK(ct.decode(std::span<const std::int32_t>(y).subspan(4, 4)) == "efgh");

  // no windows: nothing to do
  std::vector<std::int32_t> none;
  CHECK_NOTHROW(sprig::gather_sequence_windows(ct.tokens, {}, 4, none, none));
}

TEST_CASE("gather_sequence_windows takes every start sample_window_starts draws", "[io][text]") {
  // tokens[i] = (7 i + 3) mod 11, so a window is identified by its values
  const std::int64_t n = 40, seq_len = 9, batch = 500;
  std::vector<std::int32_t> tokens(n);
  for (std::int64_t i = 0; i < n; ++i)
    tokens[static_cast<std::size_t>(i)] = static_cast<std::int32_t>((7 * i + 3) % 11);
  std::vector<std::int64_t> starts(batch);
  sprig::sample_window_starts(n, seq_len, 9, 4, starts);
  CHECK(*std::max_element(starts.begin(), starts.end()) == n - seq_len - 1);  // reached, never passed
  CHECK(*std::min_element(starts.begin(), starts.end()) == 0);
  std::vector<std::int32_t> x(batch * seq_len), y(batch * seq_len);
  sprig::gather_sequence_windows(tokens, starts, seq_len, x, y);
  for (std::int64_t b = 0; b < batch; ++b) {
    const std::int64_t s = starts[static_cast<std::size_t>(b)];
    for (std::int64_t t = 0; t < seq_len; ++t) {
      CHECK(x[static_cast<std::size_t>(b * seq_len + t)] == (7 * (s + t) + 3) % 11);
      CHECK(y[static_cast<std::size_t>(b * seq_len + t)] == (7 * (s + t + 1) + 3) % 11);
    }
  }
}

TEST_CASE("gather_sequence_windows rejects bad starts, sizes and overlaps, writing nothing", "[io][text]") {
  const auto ct = sprig::char_text("abcdefgh");
  std::vector<std::int32_t> x(8, -7), y(8, -7);
  const std::vector<std::int32_t> untouched(8, -7);
  const std::vector<std::int64_t> past{0, 4};  // 4 + 4 = n: the last target would be tokens[8]
  CHECK_THROWS_AS(sprig::gather_sequence_windows(ct.tokens, past, 4, x, y), sprig::ArgumentError);
  CHECK_THROWS_WITH(sprig::gather_sequence_windows(ct.tokens, past, 4, x, y),
                    Catch::Matchers::Contains("start 4 at position 1") && Catch::Matchers::Contains("[0, 3]"));
  const std::vector<std::int64_t> negative{-1, 0};
  CHECK_THROWS_WITH(sprig::gather_sequence_windows(ct.tokens, negative, 4, x, y),
                    Catch::Matchers::Contains("start -1 at position 0"));
  CHECK(x == untouched);
  CHECK(y == untouched);

  const std::vector<std::int64_t> ok{0, 1};
  CHECK_THROWS_WITH(sprig::gather_sequence_windows(ct.tokens, ok, 0, x, y), Catch::Matchers::Contains("seq_len 0"));
  std::vector<std::int32_t> short_y(7);
  CHECK_THROWS_AS(sprig::gather_sequence_windows(ct.tokens, ok, 4, x, short_y), sprig::ShapeError);
  CHECK_THROWS_WITH(sprig::gather_sequence_windows(ct.tokens, ok, 4, x, short_y),
                    Catch::Matchers::Contains("2 x 4 tokens, got 8 and 7"));
  CHECK_THROWS_AS(sprig::gather_sequence_windows(ct.tokens, ok, 3, x, y), sprig::ShapeError);  // 6 != 8
  // 4 x 2^62 tokens overflow 64 bits: a ShapeError, not a wrapped product that matches
  const std::vector<std::int64_t> four{0, 0, 0, 0};
  CHECK_THROWS_AS(sprig::gather_sequence_windows(ct.tokens, four, std::int64_t{1} << 62, none_of(x), none_of(y)),
                  sprig::ShapeError);

  // overlapping outputs
  std::vector<std::int32_t> buffer(12, -7);
  std::span<std::int32_t> all(buffer);
  CHECK_THROWS_WITH(sprig::gather_sequence_windows(ct.tokens, ok, 4, all.first(8), all.subspan(4)),
                    Catch::Matchers::Contains("must not overlap"));
  std::vector<std::int32_t> tokens = ct.tokens;
  CHECK_THROWS_AS(sprig::gather_sequence_windows(tokens, ok, 4, std::span<std::int32_t>(tokens), y),
                  sprig::ArgumentError);
  CHECK(std::all_of(buffer.begin(), buffer.end(), [](std::int32_t v) { return v == -7; }));
}

TEST_CASE("evaluation_window_starts spaces a fixed set of windows evenly over the split", "[io][text]") {
  // n 20, seq_len 4: valid starts 0..15; k * 15 / 4 rounded down
  CHECK(sprig::evaluation_window_starts(20, 4, 5) == std::vector<std::int64_t>{0, 3, 7, 11, 15});
  CHECK(sprig::evaluation_window_starts(20, 4, 1) == std::vector<std::int64_t>{0});
  CHECK(sprig::evaluation_window_starts(20, 4, 2) == std::vector<std::int64_t>{0, 15});
  std::vector<std::int64_t> every(16);
  for (std::int64_t s = 0; s < 16; ++s) every[static_cast<std::size_t>(s)] = s;
  CHECK(sprig::evaluation_window_starts(20, 4, 16) == every);
  CHECK(sprig::evaluation_window_starts(5, 4, 3) == std::vector<std::int64_t>{0, 0, 0});  // one window only

  // more windows than starts: ascending, every start once or twice
  const auto many = sprig::evaluation_window_starts(20, 4, 31);
  CHECK(std::is_sorted(many.begin(), many.end()));
  for (std::int64_t s = 0; s < 16; ++s) {
    const auto c = std::count(many.begin(), many.end(), s);
    CHECK((c == 1 || c == 2));
  }

  // the same windows at every call
  CHECK(sprig::evaluation_window_starts(1000, 33, 17) == sprig::evaluation_window_starts(1000, 33, 17));

  // a split large enough that k * last overflows 64 bits: last = 999e14, s_k = k * 1e14
  const std::int64_t last = 99'900'000'000'000'000;
  const auto big = sprig::evaluation_window_starts(last + 130, 129, 1000);
  REQUIRE(big.size() == 1000);
  for (std::int64_t k = 0; k < 1000; ++k) CHECK(big[static_cast<std::size_t>(k)] == k * 100'000'000'000'000);

  CHECK_THROWS_WITH(sprig::evaluation_window_starts(20, 4, 0), Catch::Matchers::Contains("count 0"));
  CHECK_THROWS_WITH(sprig::evaluation_window_starts(20, 0, 3), Catch::Matchers::Contains("seq_len 0"));
  CHECK_THROWS_WITH(sprig::evaluation_window_starts(4, 4, 3),
                    Catch::Matchers::Contains("4 tokens") && Catch::Matchers::Contains("at least 5"));
  CHECK_THROWS_AS(sprig::evaluation_window_starts(0, 4, 3), sprig::ArgumentError);
}

TEST_CASE("validation windows of a 90/10 split gather, the same at every evaluation", "[io][text]") {
  std::string text;
  sprig::CounterRng rng(5, 5);
  while (text.size() < 3000) text += static_cast<char>('a' + rng.uniform_below(26));
  const auto ct = sprig::char_text(text);
  const auto [train, val] = sprig::split_tokens(ct.tokens, 0.9);
  const std::int64_t seq_len = 32, count = 20;
  const auto starts = sprig::evaluation_window_starts(static_cast<std::int64_t>(val.size()), seq_len, count);
  CHECK(starts.front() == 0);
  CHECK(starts.back() == static_cast<std::int64_t>(val.size()) - seq_len - 1);  // the last full window
  std::vector<std::int32_t> x1(count * seq_len), y1(count * seq_len), x2(count * seq_len), y2(count * seq_len);
  sprig::gather_sequence_windows(val, starts, seq_len, x1, y1);
  sprig::gather_sequence_windows(val,
                                 sprig::evaluation_window_starts(static_cast<std::int64_t>(val.size()), seq_len, count),
                                 seq_len, x2, y2);
  CHECK(x1 == x2);
  CHECK(y1 == y2);
  // the windows come from the validation text (positions after the training part)
  CHECK(ct.decode(std::span<const std::int32_t>(x1).first(seq_len)) == text.substr(train.size(), seq_len));
  CHECK(ct.decode(std::span<const std::int32_t>(y1).last(seq_len)) == text.substr(text.size() - seq_len));
}
