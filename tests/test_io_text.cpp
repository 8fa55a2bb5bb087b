#include "sprig/io/text.hpp"

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
  const fs::path dir = fs::temp_directory_path() / ("sprig_test_io_text_" + std::to_string(static_cast<long long>(::getpid())));
  fs::create_directories(dir);
  const fs::path p = dir / name;
  std::ofstream(p, std::ios::binary) << text;
  return p;
}

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

TEMPLATE_TEST_CASE("gather_one_hot_windows writes one-hot columns and next-token targets", "[io][text]", float, double) {
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
