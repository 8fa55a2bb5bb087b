#include "sprig/data/idx.hpp"
#include "sprig/io/idx.hpp"  // the old path forwards for one release (docs/changes.md)

#include <catch2/catch.hpp>

#include "file_test_support.hpp"
#include "observed_new.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <fstream>
#include <new>
#include <string>
#include <vector>

#include "sprig/core/rng.hpp"

#include "fashion_mnist_data.hpp"  // examples/ (tests/io.cmake adds the include path)

#if !defined(SPRIG_NO_ZLIB)
#  include <zlib.h>
#endif

// Largest single heap request while `g_track` is set: proves that absurd headers are
// rejected before a buffer is sized from them.
namespace {
std::atomic<bool> g_track{false};
std::atomic<std::size_t> g_largest{0};
}  // namespace

void sprig_test_observe_new(std::size_t n) noexcept {
  if (g_track.load(std::memory_order_relaxed)) {
    std::size_t prev = g_largest.load(std::memory_order_relaxed);
    while (n > prev && !g_largest.compare_exchange_weak(prev, n)) {
    }
  }
}

namespace {

namespace fs = std::filesystem;
using Bytes = std::vector<std::uint8_t>;

// A fresh directory per test process, removed at exit.
const fs::path& tmp() {
  static sprig::test::TempDir dir("sprig_test_data_idx_");
  return dir.path;
}

void put_be32(Bytes& out, std::uint32_t v) {
  out.push_back(static_cast<std::uint8_t>(v >> 24));
  out.push_back(static_cast<std::uint8_t>(v >> 16));
  out.push_back(static_cast<std::uint8_t>(v >> 8));
  out.push_back(static_cast<std::uint8_t>(v));
}

// An IDX image written from the format description, independently of the reader.
Bytes make_idx(std::uint32_t magic, const std::vector<std::uint32_t>& dims, const Bytes& payload) {
  Bytes out;
  put_be32(out, magic);
  for (auto d : dims) put_be32(out, d);
  out.insert(out.end(), payload.begin(), payload.end());
  return out;
}

Bytes random_bytes(std::size_t n, std::uint64_t seed) {
  sprig::CounterRng rng(seed, 11);
  Bytes out(n);
  for (auto& b : out) b = static_cast<std::uint8_t>(rng());
  return out;
}

fs::path write_file(const std::string& name, const Bytes& bytes) {
  const fs::path p = tmp() / name;
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  REQUIRE(f.good());
  return p;
}

#if !defined(SPRIG_NO_ZLIB)
// A single gzip member (deflate with a gzip wrapper), written through zlib's deflate.
Bytes gzip(const Bytes& in, int level = 6) {
  z_stream zs{};
  REQUIRE(deflateInit2(&zs, level, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY) == Z_OK);
  Bytes out(deflateBound(&zs, static_cast<uLong>(in.size())) + 32);
  zs.next_in = const_cast<Bytef*>(in.data());
  zs.avail_in = static_cast<uInt>(in.size());
  zs.next_out = out.data();
  zs.avail_out = static_cast<uInt>(out.size());
  REQUIRE(deflate(&zs, Z_FINISH) == Z_STREAM_END);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}
#endif

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// The FormatError message of read_idx(path), or "" when it does not throw.
std::string read_error(const fs::path& p, const sprig::IdxReadOptions& options = {}) {
  try {
    (void)sprig::read_idx(p, options);
  } catch (const sprig::FormatError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("read_idx reads plain files of any rank, from disk and memory", "[io][idx]") {
  sprig::CounterRng rng(1, 2);
  for (int trial = 0; trial < 20; ++trial) {
    const int rank = 1 + static_cast<int>(rng.uniform_below(4));
    std::vector<std::uint32_t> dims;
    std::size_t count = 1;
    for (int d = 0; d < rank; ++d) {
      dims.push_back(static_cast<std::uint32_t>(rng.uniform_below(trial == 0 ? 1 : 9)));  // zero dims too
      count *= dims.back();
    }
    const Bytes payload = random_bytes(count, static_cast<std::uint64_t>(trial));
    const Bytes file = make_idx(0x0800u | static_cast<std::uint32_t>(rank), dims, payload);
    const auto p = write_file("roundtrip.idx", file);
    for (const sprig::IdxArray& a : {sprig::read_idx(p), sprig::read_idx(std::span<const std::uint8_t>(file))}) {
      REQUIRE(a.rank() == rank);
      for (int d = 0; d < rank; ++d) CHECK(a.dims[static_cast<std::size_t>(d)] == dims[static_cast<std::size_t>(d)]);
      CHECK(a.data == payload);
    }
  }
}

TEST_CASE("read_idx checks the expected rank", "[io][idx]") {
  const auto p = write_file("labels.idx", make_idx(0x801, {3}, {0, 1, 2}));
  CHECK(sprig::read_idx(p, {.expected_rank = 1}).data == Bytes{0, 1, 2});
  const std::string msg = read_error(p, {.expected_rank = 3});
  CHECK(contains(msg, "rank 1"));
  CHECK(contains(msg, "0x00000803"));
  CHECK(contains(msg, p.string()));
}

TEST_CASE("read_idx rejects a wrong magic, type code or rank 0", "[io][idx]") {
  const Bytes payload{1, 2, 3, 4};
  SECTION("not an IDX file") {
    const auto p = write_file("magic.idx", make_idx(0x12340803, {4}, payload));
    const std::string msg = read_error(p);
    CHECK(contains(msg, "wrong magic 0x12340803"));
    CHECK(contains(msg, "offset 0"));
    CHECK(contains(msg, p.string()));
  }
  SECTION("a type other than unsigned byte") {
    for (std::uint32_t type : {0x09u, 0x0Bu, 0x0Cu, 0x0Du, 0x0Eu, 0x01u}) {
      const auto p = write_file("type.idx", make_idx((type << 8) | 1, {4}, payload));
      const std::string msg = read_error(p);
      CHECK(contains(msg, "unsupported IDX type code"));
      CHECK(contains(msg, "offset 2"));
    }
  }
  SECTION("rank 0") {
    const auto p = write_file("rank0.idx", make_idx(0x800, {}, {}));
    CHECK(contains(read_error(p), "rank 0"));
  }
}

TEST_CASE("read_idx names the path of a missing or unreadable file", "[io][idx]") {
  const fs::path missing = tmp() / "no_such_dir" / "no_such_file-idx3-ubyte.gz";
  const std::string msg = read_error(missing);
  CHECK(contains(msg, missing.string()));
  CHECK(contains(msg, "No such file"));
  CHECK(contains(read_error(tmp()), "not a regular file"));
  CHECK(contains(read_error("/dev/zero"), "not a regular file"));  // would never end
  CHECK_THROWS_AS(sprig::read_idx(write_file("empty.idx", {})), sprig::FormatError);
}

TEST_CASE("read_idx rejects a plain file truncated at every byte offset, or with trailing bytes", "[io][idx]") {
  const Bytes file = make_idx(0x803, {2, 3, 4}, random_bytes(24, 5));
  for (std::size_t len = 0; len < file.size(); ++len) {
    const Bytes cut(file.begin(), file.begin() + static_cast<std::ptrdiff_t>(len));
    const auto p = write_file("cut.idx", cut);
    INFO("length " << len);
    const std::string msg = read_error(p);
    CHECK(contains(msg, p.string()));
    CHECK(contains(msg, "truncated"));
    CHECK_THROWS_AS(sprig::read_idx(std::span<const std::uint8_t>(cut)), sprig::FormatError);
  }
  Bytes longer = file;
  longer.push_back(0);
  CHECK(contains(read_error(write_file("long.idx", longer)), "trailing bytes"));
}

TEST_CASE("read_idx rejects absurd dimensions without allocating for them", "[io][idx]") {
  struct Case {
    std::vector<std::uint32_t> dims;
    const char* expect;
  };
  const std::vector<Case> cases = {
      {{0x80000000u, 0x80000000u}, "exceed the limit"},               // 2^62 bytes
      {{0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu}, "exceed the limit"},  // overflows 64 bits
      {{60000, 28, 28}, "truncated"},                                 // fine by the limit, not by the file size
      {{1u << 20, 1u << 11}, "truncated"},                            // 2 GiB, under the 4 GiB limit
  };
  for (const auto& c : cases) {
    const auto p =
        write_file("absurd.idx", make_idx(0x800u | static_cast<std::uint32_t>(c.dims.size()), c.dims, {1, 2, 3}));
    g_largest = 0;
    g_track = true;
    const std::string msg = read_error(p);
    g_track = false;
    INFO(msg);
    CHECK(contains(msg, c.expect));
    CHECK(g_largest.load() < (std::size_t{1} << 20));
  }
  // The limit is the caller's to set.
  const auto p = write_file("limit.idx", make_idx(0x801, {100}, Bytes(100, 7)));
  CHECK(contains(read_error(p, {.max_bytes = 99}), "exceed the limit of 99"));
  CHECK(sprig::read_idx(p, {.max_bytes = 100}).size() == 100);
}

#if !defined(SPRIG_NO_ZLIB)

TEST_CASE("read_idx reads gzip files, detected by content", "[io][idx][gzip]") {
  sprig::CounterRng rng(3, 4);
  for (int trial = 0; trial < 10; ++trial) {
    const std::vector<std::uint32_t> dims{static_cast<std::uint32_t>(1 + rng.uniform_below(50)), 28, 28};
    // Compressible content (few distinct values), like real images.
    Bytes payload(dims[0] * 28 * 28);
    for (auto& b : payload) b = static_cast<std::uint8_t>(rng.uniform_below(4) * 60);
    const Bytes raw = make_idx(0x803, dims, payload);
    const Bytes gz = gzip(raw, trial % 10);
    const auto p = write_file("images.idx", gz);  // no .gz suffix: detection is by magic
    const auto a = sprig::read_idx(p);
    REQUIRE(a.dims == std::vector<std::int64_t>{dims[0], 28, 28});
    CHECK(a.data == payload);
    CHECK(sprig::read_idx(std::span<const std::uint8_t>(gz)).data == payload);
  }
}

TEST_CASE("read_idx reads concatenated gzip members as one stream", "[io][idx][gzip]") {
  const Bytes payload = random_bytes(1000, 9);
  const Bytes raw = make_idx(0x801, {1000}, payload);
  for (std::size_t split : {std::size_t{0}, std::size_t{3}, std::size_t{8}, std::size_t{500}, raw.size()}) {
    Bytes gz = gzip(Bytes(raw.begin(), raw.begin() + static_cast<std::ptrdiff_t>(split)));
    const Bytes second = gzip(Bytes(raw.begin() + static_cast<std::ptrdiff_t>(split), raw.end()));
    gz.insert(gz.end(), second.begin(), second.end());
    CHECK(sprig::read_idx(write_file("multi.idx.gz", gz)).data == payload);
  }
}

TEST_CASE("read_idx rejects a gzip file truncated at every byte offset", "[io][idx][gzip]") {
  const Bytes gz = gzip(make_idx(0x803, {2, 3, 4}, random_bytes(24, 6)));
  for (std::size_t len = 0; len < gz.size(); ++len) {
    INFO("length " << len << " of " << gz.size());
    const Bytes cut(gz.begin(), gz.begin() + static_cast<std::ptrdiff_t>(len));
    const auto p = write_file("cut.idx.gz", cut);
    const std::string msg = read_error(p);
    CHECK(contains(msg, p.string()));
    CHECK_THROWS_AS(sprig::read_idx(std::span<const std::uint8_t>(cut)), sprig::FormatError);
  }
}

TEST_CASE("read_idx rejects trailing data in or after a gzip stream", "[io][idx][gzip]") {
  const Bytes raw = make_idx(0x801, {10}, random_bytes(10, 7));
  SECTION("more decompressed bytes than the header declares") {
    Bytes longer = raw;
    longer.push_back(42);
    const std::string msg = read_error(write_file("long.idx.gz", gzip(longer)));
    CHECK(contains(msg, "trailing bytes"));
    CHECK(contains(msg, "decompressed offset 18"));
  }
  SECTION("garbage after the gzip member") {
    for (const Bytes& tail : {Bytes{0}, Bytes{0, 0, 0, 0}, Bytes{'h', 'e', 'l', 'l', 'o'}, Bytes{0x1f, 0x8b}}) {
      Bytes gz = gzip(raw);
      gz.insert(gz.end(), tail.begin(), tail.end());
      const std::string msg = read_error(write_file("tail.idx.gz", gz));
      INFO(msg);
      CHECK(!msg.empty());
    }
  }
}

TEST_CASE("read_idx rejects corrupt gzip data or returns the original: never wrong data", "[io][idx][gzip]") {
  const Bytes payload = random_bytes(64, 8);
  const Bytes gz = gzip(make_idx(0x802, {8, 8}, payload));
  int rejected = 0;
  for (std::size_t i = 0; i < gz.size(); ++i) {
    for (std::uint8_t flip : {std::uint8_t{0x01}, std::uint8_t{0x80}, std::uint8_t{0xFF}}) {
      Bytes bad = gz;
      bad[i] ^= flip;
      INFO("byte " << i << " xor " << int(flip));
      try {
        const auto a = sprig::read_idx(std::span<const std::uint8_t>(bad));
        // Only bits the decoder ignores may change without error: gzip MTIME, XFL and OS
        // (bytes 4-9), the FTEXT hint (bit 0 of byte 3) and the padding bits after the
        // last deflate code (high bits of the byte before the 8-byte trailer).
        CHECK(((i >= 4 && i < 10) || (i == 3 && flip == 0x01) || (i == gz.size() - 9 && flip == 0x80)));
        CHECK(a.data == payload);
      } catch (const sprig::FormatError&) {
        ++rejected;
      }
    }
  }
  CHECK(rejected >= 3 * (static_cast<int>(gz.size()) - 6) - 2);
  // The CRC-32 in the trailer is checked.
  Bytes bad_crc = gz;
  bad_crc[gz.size() - 8] ^= 1;
  const std::string msg = read_error(write_file("crc.idx.gz", bad_crc));
  CHECK(contains(msg, "corrupt gzip data"));
  CHECK(contains(msg, "compressed offset"));
}

TEST_CASE("read_idx bounds a gzip header's claim by the file and by the bytes that arrive", "[io][idx][gzip]") {
  SECTION("more than deflate can expand the file to") {
    const auto p = write_file("bomb.idx.gz", gzip(make_idx(0x803, {1000, 1000, 1000}, Bytes(100, 0))));
    g_largest = 0;
    g_track = true;
    const std::string msg = read_error(p);
    g_track = false;
    CHECK(contains(msg, "more than a gzip file of"));
    CHECK(g_largest.load() < (std::size_t{1} << 20));
  }
  SECTION("plausible for the file size, but the stream is short") {
    // 300 KB of incompressible data claiming 100 MB: passes the 1032:1 bound, so the
    // buffer may grow, but only to about what actually arrives.
    const auto p = write_file("short.idx.gz", gzip(make_idx(0x801, {100'000'000}, random_bytes(300'000, 10))));
    g_largest = 0;
    g_track = true;
    const std::string msg = read_error(p);
    g_track = false;
    CHECK(contains(msg, "truncated"));
    CHECK(g_largest.load() <= (std::size_t{1} << 21));
  }
}

#else  // SPRIG_NO_ZLIB

TEST_CASE("read_idx without zlib rejects gzip input by name", "[io][idx][gzip]") {
  const Bytes gz_magic{0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3};
  try {
    (void)sprig::read_idx(std::span<const std::uint8_t>(gz_magic), "file.gz");
    FAIL("no error");
  } catch (const sprig::FormatError& e) {
    CHECK(contains(e.what(), "file.gz"));
    CHECK(contains(e.what(), "SPRIG_NO_ZLIB"));
  }
}

#endif  // SPRIG_NO_ZLIB

TEST_CASE("load_idx_images scales pixels to [0, 1] example-major and checks labels", "[io][idx]") {
  const std::uint32_t n = 5, h = 3, w = 2;
  const Bytes pixels = random_bytes(n * h * w, 12);
  const Bytes labels{0, 9, 3, 3, 7};
  const auto images_path = write_file("img-idx3-ubyte", make_idx(0x803, {n, h, w}, pixels));
  const auto labels_path = write_file("lab-idx1-ubyte", make_idx(0x801, {n}, labels));

  const auto set = sprig::load_idx_images<double>(images_path, labels_path, 10);
  REQUIRE(set.size() == n);
  REQUIRE(set.features() == h * w);
  CHECK(set.height == h);
  CHECK(set.width == w);
  for (std::uint32_t i = 0; i < n; ++i) {
    CHECK(set.labels[i] == labels[i]);
    for (std::uint32_t f = 0; f < h * w; ++f) {
      CHECK(set.images(i, f) == Approx(pixels[i * h * w + f] / 255.0).epsilon(1e-15));
      CHECK((set.images(i, f) >= 0.0 && set.images(i, f) <= 1.0));
    }
  }

  SECTION("count mismatch names both files") {
    const auto short_labels = write_file("short-idx1-ubyte", make_idx(0x801, {n - 1}, Bytes(n - 1, 0)));
    try {
      (void)sprig::load_idx_images<float>(images_path, short_labels);
      FAIL("no error");
    } catch (const sprig::FormatError& e) {
      CHECK(contains(e.what(), images_path.string()));
      CHECK(contains(e.what(), short_labels.string()));
      CHECK(contains(e.what(), "5 examples"));
    }
  }
  SECTION("label out of range") {
    try {
      (void)sprig::load_idx_images<float>(images_path, labels_path, 9);
      FAIL("no error");
    } catch (const sprig::FormatError& e) {
      CHECK(contains(e.what(), "label 9 of example 1"));
    }
  }
  SECTION("images and labels swapped") {
    CHECK_THROWS_AS(sprig::load_idx_images<float>(labels_path, images_path), sprig::FormatError);
  }
}

// examples/fashion_mnist_data.hpp (the examples' loader) on a small data set written here:
// the file names it looks for, .gz before plain, 28 x 28 images and labels below 10.
TEST_CASE("load_fashion_mnist reads the four files of a directory", "[io][idx][fashion_mnist]") {
  const fs::path dir = tmp() / "fashion";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::uint32_t n_train = 7, n_test = 3;
  auto images = [](std::uint32_t n, std::uint64_t seed, std::uint32_t h = 28) {
    return make_idx(0x803, {n, h, 28}, random_bytes(std::size_t{n} * h * 28, seed));
  };
  auto labels = [](std::uint32_t n, std::uint8_t first) {
    Bytes l(n);
    for (std::uint32_t i = 0; i < n; ++i) l[i] = static_cast<std::uint8_t>((first + i) % 10);
    return make_idx(0x801, {n}, l);
  };
  auto put = [&](const std::string& name, const Bytes& b) {
    std::ofstream f(dir / name, std::ios::binary | std::ios::trunc);
    f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
    REQUIRE(f.good());
  };
  const Bytes train_images = images(n_train, 1);
#if !defined(SPRIG_NO_ZLIB)
  put("train-images-idx3-ubyte.gz", gzip(train_images));
  put("train-images-idx3-ubyte", images(n_train, 99));  // the .gz is taken first
#else
  put("train-images-idx3-ubyte", train_images);
#endif
  put("train-labels-idx1-ubyte", labels(n_train, 4));
  put("t10k-images-idx3-ubyte", images(n_test, 2));
  put("t10k-labels-idx1-ubyte", labels(n_test, 0));

  const auto data = examples::load_fashion_mnist<float>(dir);
  REQUIRE(data.train.size() == n_train);
  REQUIRE(data.test.size() == n_test);
  CHECK(data.train.features() == 784);
  CHECK(data.train.height == 28);
  CHECK(data.train.width == 28);
  for (std::int64_t i = 0; i < data.train.size(); ++i) {
    CHECK(data.train.labels[static_cast<std::size_t>(i)] == (4 + i) % 10);
    for (std::int64_t f = 0; f < 784; f += 97)
      CHECK(data.train.images(i, f) == static_cast<float>(train_images[16 + i * 784 + f]) * (1.0f / 255.0f));
  }
  CHECK(data.test.labels == std::vector<std::int32_t>{0, 1, 2});

  auto message_of = [](const fs::path& d) -> std::string {
    try {
      (void)examples::load_fashion_mnist<float>(d);
    } catch (const sprig::FormatError& e) {
      return e.what();
    }
    return "no error";
  };
  CHECK(contains(message_of(dir / "nonexistent"), "load_fashion_mnist: neither"));
  CHECK(contains(message_of(dir / "nonexistent"), "train-images-idx3-ubyte.gz"));
  put("t10k-labels-idx1-ubyte", make_idx(0x801, {n_test}, Bytes{0, 10, 1}));  // label 10
  CHECK(contains(message_of(dir), "label 10 of example 1"));
  put("t10k-labels-idx1-ubyte", labels(n_test, 0));
  put("t10k-images-idx3-ubyte", images(n_test, 2, 27));  // 27 x 28
  CHECK(contains(message_of(dir), "holds 27 x 28 images, expected 28 x 28"));
  fs::remove_all(dir);
}

// The real data set, compiled in only where tests/io.cmake found Debian's
// dataset-fashion-mnist package at configure time.
#if defined(SPRIG_TEST_FASHION_MNIST_INSTALLED) && !defined(SPRIG_NO_ZLIB)
TEST_CASE("load_fashion_mnist reads the Debian data set", "[io][idx][dataset]") {
  const auto data = examples::load_fashion_mnist<float>();
  REQUIRE(data.train.size() == 60000);
  REQUIRE(data.test.size() == 10000);
  CHECK(data.train.features() == 784);
  // Fashion-MNIST is balanced: 6000 / 1000 images per class.
  std::vector<int> train_count(10), test_count(10);
  for (auto l : data.train.labels) ++train_count.at(static_cast<std::size_t>(l));
  for (auto l : data.test.labels) ++test_count.at(static_cast<std::size_t>(l));
  CHECK(train_count == std::vector<int>(10, 6000));
  CHECK(test_count == std::vector<int>(10, 1000));
  float lo = 1, hi = 0;
  for (std::int64_t f = 0; f < 784; ++f) {
    lo = std::min(lo, data.train.images(0, f));
    hi = std::max(hi, data.train.images(0, f));
  }
  CHECK(lo == 0.0f);
  CHECK(hi <= 1.0f);
  CHECK(hi > 0.5f);
}
#endif
