// Run settings in a training-state file (io/checkpoint.hpp, section "RUNS"): round trip,
// files without them, validation at save and at read, and corruption named by section.
#include <sprig/io/checkpoint.hpp>

#include <unistd.h>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <sprig/dst/rigl.hpp>
#include <sprig/nn/softmax_cross_entropy.hpp>

#include "file_test_support.hpp"
#include "fuzz/reseal.hpp"

using namespace sprig;
namespace fs = std::filesystem;

namespace {

using test::TempDir;
using test::WhatHas;

void write_bytes(const fs::path& p, const std::vector<std::byte>& b) {
  std::ofstream(p, std::ios::binary)
      .write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

using Model = Sequential<float, std::int32_t>;
using Algo = dst::RigL<float, std::int32_t>;
const dst::UpdateSchedule kSchedule{.delta_t = 2, .t_begin = 0, .t_end = 8, .alpha = 0.3};

Model small_model(std::uint64_t seed) {
  Model m;
  m.add(SparseLinear<float, std::int32_t>(6, 8, {.density = 0.4, .seed = seed, .padding_ratio = 0.0}));
  m.add(ReLU<float>{});
  m.add(Linear<float>(8, 3, seed, 1));
  return m;
}

// A model, optimizer and algorithm trained a few steps (through a topology update).
struct Run {
  Model model = small_model(1);
  SGD<float> opt{{.lr = 0.1, .momentum = 0.9}};
  Algo algo{kSchedule, 8};
  TrainingProgress progress{.step = 5, .epoch = 1, .batch = 2, .seed = 9};
  Run() {
    Matrix<float> X(6, 4);
    for (std::int64_t f = 0; f < 6; ++f)
      for (std::int64_t b = 0; b < 4; ++b) X(f, b) = static_cast<float>((f * 7 + b * 3) % 5) - 2.0f;
    const std::vector<int> y = {0, 1, 2, 1};
    SoftmaxCrossEntropy<float> loss;
    for (std::int64_t t = 0; t < 5; ++t) {
      const auto Z = model.forward(X.view());
      loss.forward_backward(Z, y, model.output_grad());
      model.backward();
      dst::apply_step(algo, opt, model, t);
    }
  }
};

const RunSettings kSettings = {{"heads", "4"},
                               {"width", "128"},
                               {"attn-sparsity", "0.7"},
                               {"data", std::string("a\0b\xff", 4)},  // values are any bytes
                               {"empty value", ""}};

std::size_t settings_section(const std::vector<std::byte>& f) {
  const auto s = sprig_test::sections_of(f);
  REQUIRE(!s.empty());
  REQUIRE(s.back().tag == binary::tag("RUNS"));
  return s.size() - 1;
}

}  // namespace

TEST_CASE("run settings: saved, read back in order, and the state still loads", "[io][checkpoint][settings]") {
  TempDir dir;
  const Run run;
  save_training_state(dir.path / "s.sprig", run.model, run.opt, run.progress, &run.algo, kSettings);
  CHECK(read_run_settings(dir.path / "s.sprig") == kSettings);

  // the state loads as the same state saved without settings does
  save_training_state(dir.path / "plain.sprig", run.model, run.opt, run.progress, &run.algo);
  Model m = small_model(77), m2 = small_model(78);
  SGD<float> o({.lr = 0.1, .momentum = 0.9}), o2 = o;
  Algo a(kSchedule, 8), a2 = a;
  CHECK(load_training_state(dir.path / "s.sprig", m, o, &a) == run.progress);
  CHECK(load_training_state(dir.path / "plain.sprig", m2, o2, &a2) == run.progress);
  CHECK(encode_training_state(m, o, run.progress, &a) == encode_training_state(m2, o2, run.progress, &a2));

  // the settings are one section after "PROG"; everything before it is as without them
  const auto with = encode_training_state(run.model, run.opt, run.progress, &run.algo, kSettings);
  const auto without = encode_training_state(run.model, run.opt, run.progress, &run.algo);
  const auto sw = sprig_test::sections_of(with), so = sprig_test::sections_of(without);
  REQUIRE(sw.size() == so.size() + 1);
  CHECK(so.back().tag == binary::tag("PROG"));
  CHECK(sw.back().tag == binary::tag("RUNS"));
  CHECK(std::equal(without.begin() + 24, without.end(), with.begin() + 24));

  // one setting, without a DST algorithm
  const RunSettings one = {{"k", "v"}};
  CHECK(decode_run_settings(encode_training_state(run.model, run.opt, run.progress, nullptr, one), "x") == one);
}

TEST_CASE("run settings: a file without them reads as empty and loads as before", "[io][checkpoint][settings]") {
  TempDir dir;
  const Run run;
  // as written before settings existed (no argument) and with empty settings: the same bytes
  const auto old_file = encode_training_state(run.model, run.opt, run.progress, &run.algo);
  CHECK(encode_training_state(run.model, run.opt, run.progress, &run.algo, RunSettings{}) == old_file);
  CHECK(sprig_test::sections_of(old_file).back().tag == binary::tag("PROG"));
  write_bytes(dir.path / "old.sprig", old_file);
  CHECK(read_run_settings(dir.path / "old.sprig").empty());
  Model m = small_model(77);
  SGD<float> o({.lr = 0.1, .momentum = 0.9});
  Algo a(kSchedule, 8);
  CHECK(load_training_state(dir.path / "old.sprig", m, o, &a) == run.progress);

  // not a training-state file, or no file
  save_padded_csr(dir.path / "csr.sprig", PaddedCSR<float, std::int32_t>::random_density(3, 4, 0.5, 1));
  CHECK_THROWS_MATCHES(read_run_settings(dir.path / "csr.sprig"), FormatError,
                       WhatHas("csr.sprig") && WhatHas("expected a training-state file"));
  CHECK_THROWS_MATCHES(read_run_settings(dir.path / "none.sprig"), FormatError, WhatHas("none.sprig"));
}

TEST_CASE("run settings: bad keys and values are rejected at save, the file unchanged", "[io][checkpoint][settings]") {
  TempDir dir;
  const Run run;
  const fs::path path = dir.path / "s.sprig";
  save_training_state(path, run.model, run.opt, run.progress, &run.algo, kSettings);
  auto rejected = [&](const RunSettings& s, const std::string& what) {
    INFO(what);
    CHECK_THROWS_MATCHES(save_training_state(path, run.model, run.opt, run.progress, &run.algo, s), ArgumentError,
                         WhatHas("sprig::save_training_state") && WhatHas(what));
    CHECK_THROWS_AS(encode_training_state(run.model, run.opt, run.progress, &run.algo, s), ArgumentError);
    CHECK(read_run_settings(path) == kSettings);
  };
  rejected({{"heads", "4"}, {"width", "8"}, {"heads", "8"}}, "settings 0 and 2 have the same key 'heads'");
  rejected({{"heads", "4"}, {"", "8"}}, "setting 1 has an empty key");
  rejected({{"a\nb", "8"}}, "setting 0's key has the non-printable byte 10");
  rejected({{std::string(257, 'k'), "8"}}, "a key of 257 bytes, more than 256");
  rejected({{"big", std::string(65537, 'v')}}, "has a value of 65537 bytes, more than 65536");
  // the limits themselves are allowed
  const RunSettings edge = {{std::string(256, 'k'), std::string(65536, 'v')}, {" ~", ""}};
  save_training_state(path, run.model, run.opt, run.progress, &run.algo, edge);
  CHECK(read_run_settings(path) == edge);
}

TEST_CASE("run settings: a corrupt section is a FormatError naming it, the target unchanged",
          "[io][checkpoint][settings][corrupt]") {
  TempDir dir;
  const Run run;
  const auto good = encode_training_state(run.model, run.opt, run.progress, &run.algo, kSettings);
  const auto sec = sprig_test::sections_of(good)[settings_section(good)];
  const std::string name = "'RUNS'";

  // Both readers reject `bad` with a message naming the file, the section and `what`; a
  // failed load leaves the target as it was.
  auto rejects = [&](const std::vector<std::byte>& bad, const std::string& what) {
    INFO(what);
    write_bytes(dir.path / "bad.sprig", bad);
    CHECK_THROWS_MATCHES(read_run_settings(dir.path / "bad.sprig"), FormatError,
                         WhatHas("bad.sprig") && WhatHas(name) && WhatHas(what));
    Model m = small_model(77);
    SGD<float> o({.lr = 0.1, .momentum = 0.9});
    Algo a(kSchedule, 8);
    const auto before = encode_training_state(m, o, {}, &a);
    CHECK_THROWS_MATCHES(decode_training_state(bad, "bad.sprig", m, o, &a), FormatError,
                         WhatHas("bad.sprig") && WhatHas(name) && WhatHas(what));
    CHECK(encode_training_state(m, o, {}, &a) == before);
  };
  // payload offsets: count u32 at 0; key 0 length u32 at 4, its bytes ("heads") at 8;
  // value 0 length at 13, its byte at 17; key 1 length at 18
  auto patched = [&](std::size_t at, std::uint64_t v, std::size_t n, bool reseal = true) {
    auto b = good;
    sprig_test::store_le(b.data() + sec.payload + at, v, n);
    if (reseal) sprig_test::reseal(b);
    return b;
  };
  REQUIRE(sprig_test::load_le(good.data() + sec.payload, 4) == kSettings.size());
  REQUIRE(sprig_test::load_le(good.data() + sec.payload + 4, 4) == 5);

  SECTION("every flipped byte of the section is caught by its checksum") {
    for (std::size_t k = 0; k < sec.length; k += 7) {
      auto bad = good;
      bad[sec.payload + k] ^= std::byte{0x20};
      rejects(bad, "payload checksum mismatch");
    }
  }
  SECTION("truncated inside the section") {
    for (const std::size_t keep : {std::size_t{0}, std::size_t{3}, sec.length / 2, sec.length - 1})
      rejects(std::vector<std::byte>(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(sec.payload + keep)),
              "truncated");
  }
  SECTION("checksummed but invalid content") {
    rejects(patched(0, 0xFFFFFFFFu, 4), "setting count 4294967295 needs at least");
    rejects(patched(0, kSettings.size() + 1, 4), "truncated: setting key");
    rejects(patched(0, kSettings.size() - 1, 4), "unexpected bytes after the last field");
    rejects(patched(4, 0xFFFFFFF0u, 4), "setting key has length 4294967280, more than the allowed 256");
    rejects(patched(4, 200, 4), "truncated: setting key needs 200 bytes");
    rejects(patched(13, 0x7FFFFFFFu, 4), "setting value has length 2147483647, more than the allowed 65536");
    rejects(patched(13, 60000, 4), "truncated: setting value needs 60000 bytes");
    rejects(patched(4, 0, 4), "setting 0 has an empty key");  // the key's bytes then read as its value
    rejects(patched(8, 0x07, 1), "setting 0's key has the non-printable byte 7");
    // "heads" -> "width": key 1 repeated
    auto dup = good;
    std::memcpy(dup.data() + sec.payload + 8, "width", 5);
    sprig_test::reseal(dup);
    rejects(dup, "settings 0 and 1 have the same key 'width'");
  }
  SECTION("a settings section anywhere but last") {
    auto bad = good;
    const auto all = sprig_test::sections_of(good);
    const auto& prog = all[all.size() - 2];
    // swap "PROG" and "RUNS" (headers and payloads)
    std::vector<std::byte> swapped(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(prog.header));
    swapped.insert(swapped.end(), good.begin() + static_cast<std::ptrdiff_t>(sec.header), good.end());
    swapped.insert(swapped.end(), good.begin() + static_cast<std::ptrdiff_t>(prog.header),
                   good.begin() + static_cast<std::ptrdiff_t>(sec.header));
    write_bytes(dir.path / "swapped.sprig", swapped);
    CHECK_THROWS_MATCHES(read_run_settings(dir.path / "swapped.sprig"), FormatError,
                         WhatHas(name) && WhatHas("must be the last section"));
    Model m = small_model(77);
    SGD<float> o({.lr = 0.1, .momentum = 0.9});
    Algo a(kSchedule, 8);
    CHECK_THROWS_MATCHES(decode_training_state(swapped, "swapped.sprig", m, o, &a), FormatError,
                         WhatHas("expected section 'PROG'"));
  }
}
