#if !defined(SPRIG_NO_NLOHMANN_JSON)
#  include "sprig/io/safetensors.hpp"
#endif

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <variant>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>

#if !defined(SPRIG_NO_NLOHMANN_JSON)
#  include "file_test_support.hpp"
#  include "sprig/core/bfloat16.hpp"
#  include "sprig/models/gpt.hpp"
#  include "sprig/nn/block_sparse_linear.hpp"
#  include "sprig/optim/adamw.hpp"

namespace {

using sprig::test::WhatHas;
using Block44 = sprig::BlockSparseLinear<float, std::int32_t, 4, 4>;
using Model = sprig::Sequential<float, std::int32_t, Block44>;

// SparseLinear 6 -> 10, ReLU, Linear 10 -> 9, ReLU, BlockSparseLinear 9 -> 5.
Model small_model(std::uint64_t seed) {
  Model m;
  m.add(sprig::SparseLinear<float, std::int32_t>(6, 10, {.density = 0.4, .seed = seed, .layer_key = 0}));
  m.add(sprig::ReLU<float>{});
  m.add(sprig::Linear<float>(10, 9, seed, 1));
  m.add(sprig::ReLU<float>{});
  m.add(Block44(9, 5, {.density = 0.5, .seed = seed, .layer_key = 2}));
  return m;
}

// Every parameter's values and (for sparse ones) pattern, as bits, in visiting order.
template <class M>
std::vector<std::uint32_t> bits(const M& m) {
  std::vector<std::uint32_t> out;
  auto put = [&](float v) { out.push_back(std::bit_cast<std::uint32_t>(v)); };
  m.for_each_parameter([&](const auto& p) {
    if constexpr (requires { p.matrix.rows(); }) {
      const auto d = p.matrix.to_dense();
      for (std::int64_t i = 0; i < d.rows(); ++i)
        for (std::int64_t j = 0; j < d.cols(); ++j) put(d(i, j));
      if constexpr (requires { p.matrix.find(0, 0); })
        p.matrix.for_each_live([&](std::int64_t r, std::int64_t c, float, std::int64_t) {
          out.push_back(static_cast<std::uint32_t>(r * 100000 + c));
        });
    } else {
      for (float v : p.value) put(v);
    }
  });
  return out;
}

// Adds a distinct pattern to every value (sparse weights at live slots only).
template <class M>
void perturb(M& m, float by) {
  m.for_each_parameter([&](auto& p) {
    float k = by;
    if constexpr (requires { p.matrix; }) {
      if constexpr (requires { p.matrix.find(0, 0); })
        p.matrix.for_each_live(
            [&](std::int64_t, std::int64_t, float, std::int64_t s) { p.matrix.values()[s] += (k += 0.01f); });
      else
        for (float& v : p.matrix.values()) v += v != 0.0f ? (k += 0.01f) : 0.0f;
    } else {
      for (float& v : p.value) v += (k += 0.01f);
    }
  });
}

// Rounds every value to the nearest bfloat16 with sprig::bfloat16: the oracle for what a BF16
// export then import gives.
template <class M>
void round_to_bf16(M& m) {
  auto round = [](float& v) { v = static_cast<float>(sprig::bfloat16(v)); };
  m.for_each_parameter([&](auto& p) {
    if constexpr (requires { p.matrix; })
      for (float& v : p.matrix.values()) round(v);
    else
      for (float& v : p.value) round(v);
  });
}

const sprig::SafetensorsExportOptions kBF16{.dtype = sprig::SafetensorsDtype::bf16};

// The file's tensors rewritten through `edit(name, entry)` and encoded again.
template <class Edit>
std::vector<std::byte> rewritten(const std::vector<std::byte>& bytes, Edit edit) {
  const auto f = sprig::parse_safetensors(bytes, "in");
  std::vector<sprig::SafetensorsEntry> entries;
  for (const auto& [name, t] : f.tensors) {
    entries.push_back({name, t.dtype, t.shape, {t.data.begin(), t.data.end()}});
    edit(name, entries.back());
  }
  return sprig::encode_safetensors_tensors(entries, f.metadata);
}

sprig::GPT<float, std::int32_t> small_gpt(std::uint64_t seed) {
  return sprig::models::build_gpt<float, std::int32_t>(
      {.config = {.layers = 2, .heads = 2, .d_model = 8, .d_ff = 16, .block_size = 6, .vocab = 11},
       .attn_sparsity = 0.5,
       .ffn_sparsity = 0.75,
       .seed = seed});
}

// A file built from raw header text and data bytes.
std::vector<std::byte> raw_file(const std::string& header, std::size_t data_bytes = 0, std::uint64_t length = 0) {
  std::vector<std::byte> out;
  sprig::detail::st::put_le<std::uint64_t>(out, length ? length : header.size());
  for (char c : header) out.push_back(static_cast<std::byte>(c));
  out.resize(out.size() + data_bytes, std::byte{0});
  return out;
}

void parse(const std::vector<std::byte>& b) { (void)sprig::parse_safetensors(b, "t.safetensors"); }

}  // namespace

TEST_CASE("safetensors: Sequential names, shapes and metadata", "[io][safetensors]") {
  const Model m = small_model(1);
  CHECK(sprig::safetensors_names(m) == std::vector<std::string>{"layers.0.weight", "layers.0.bias", "layers.2.weight",
                                                                "layers.2.bias", "layers.4.weight", "layers.4.bias"});
  const auto bytes = sprig::encode_safetensors(m);
  const auto f = sprig::parse_safetensors(bytes, "m");
  CHECK(sprig::detail::st::get_le<std::uint64_t>(bytes.data(), 0) % 8 == 0);
  CHECK(f.tensors.at("layers.0.weight").shape == std::vector<std::int64_t>{10, 6});
  CHECK(f.tensors.at("layers.0.bias").shape == std::vector<std::int64_t>{10});
  CHECK(f.tensors.at("layers.4.weight").shape == std::vector<std::int64_t>{5, 9});
  CHECK(f.tensors.at("layers.2.weight").dtype == "F32");
  CHECK(f.metadata.at("format") == "pt");
  CHECK(f.metadata.at("sprig_version") == "0.1.0");
  CHECK(f.metadata.at("sprig.sparsity.layers.0.weight") == "0.6");
  CHECK(f.metadata.at("sprig.block_shape.layers.0.weight") == "1x1");
  CHECK(f.metadata.at("sprig.block_shape.layers.4.weight") == "4x4");
  CHECK(f.metadata.count("sparsity_config") == 0);
  // The dense weight of the sparse layer holds its live values and zeros elsewhere.
  const auto& w = std::get<sprig::SparseLinear<float, std::int32_t>>(m.layer(0)).weight.matrix;
  const auto dense = w.to_dense();
  const auto& t = f.tensors.at("layers.0.weight");
  for (std::int64_t i = 0; i < 10; ++i)
    for (std::int64_t j = 0; j < 6; ++j)
      CHECK(sprig::detail::st::get_le<float>(t.data.data(), i * 6 + j) == dense(i, j));
}

TEST_CASE("safetensors: GPT names follow gpt_torch.py", "[io][safetensors]") {
  const auto g = small_gpt(3);
  const auto names = sprig::safetensors_names(g);
  REQUIRE(names.size() == 2 + 2 * 12 + 4);
  CHECK(names[0] == "tok_emb.weight");
  CHECK(names[1] == "pos_emb.weight");
  CHECK(names[2] == "blocks.0.ln1.weight");
  CHECK(names[4] == "blocks.0.qkv.weight");
  CHECK(names[13] == "blocks.0.fc_proj.bias");
  CHECK(names[14] == "blocks.1.ln1.weight");
  CHECK(names.back() == "head.bias");
  const auto bytes = sprig::encode_safetensors(g);
  const auto f = sprig::parse_safetensors(bytes, "g");
  CHECK(f.tensors.at("tok_emb.weight").shape == std::vector<std::int64_t>{11, 8});
  CHECK(f.tensors.at("pos_emb.weight").shape == std::vector<std::int64_t>{6, 8});
  CHECK(f.tensors.at("blocks.1.qkv.weight").shape == std::vector<std::int64_t>{24, 8});
  CHECK(f.tensors.at("blocks.1.qkv.bias").shape == std::vector<std::int64_t>{24});
  CHECK(f.tensors.at("blocks.0.ln2.weight").shape == std::vector<std::int64_t>{8});
  CHECK(f.tensors.at("blocks.0.fc.weight").shape == std::vector<std::int64_t>{16, 8});
  CHECK(f.tensors.at("blocks.0.fc_proj.weight").shape == std::vector<std::int64_t>{8, 16});
  CHECK(f.tensors.at("head.weight").shape == std::vector<std::int64_t>{11, 8});
  CHECK(f.tensors.at("head.bias").shape == std::vector<std::int64_t>{11});
  CHECK(f.metadata.count("sprig.sparsity.blocks.0.fc.weight") == 1);
}

TEST_CASE("safetensors: export then import is bitwise, dense and compressed", "[io][safetensors]") {
  for (const auto form : {sprig::SparseForm::dense, sprig::SparseForm::compressed}) {
    INFO("form " << static_cast<int>(form));
    Model a = small_model(1);
    perturb(a, 0.5f);
    const auto bytes = sprig::encode_safetensors(a, {.sparse_form = form});
    Model b = small_model(1);  // the same patterns, other values
    REQUIRE(bits(b) != bits(a));
    sprig::decode_safetensors(bytes, "a", b);
    CHECK(bits(b) == bits(a));
    CHECK(sprig::encode_safetensors(b, {.sparse_form = form}) == bytes);

    auto g = small_gpt(5);
    perturb(g, 0.25f);
    const auto gbytes = sprig::encode_safetensors(g, {.sparse_form = form});
    auto h = small_gpt(5);
    sprig::decode_safetensors(gbytes, "g", h);
    CHECK(bits(h) == bits(g));
  }
}

TEST_CASE("safetensors: a block-sparse GPT round trip", "[io][safetensors]") {
  const sprig::models::GPTSpec spec{
      .config = {.layers = 1, .heads = 2, .d_model = 8, .d_ff = 16, .block_size = 4, .vocab = 7},
      .attn_sparsity = 0.5,
      .ffn_sparsity = 0.5,
      .seed = 2};
  auto g = sprig::models::build_block_gpt<float, std::int32_t, 2, 2>(spec);
  perturb(g, 0.125f);
  for (const auto form : {sprig::SparseForm::dense, sprig::SparseForm::compressed}) {
    const auto bytes = sprig::encode_safetensors(g, {.sparse_form = form});
    CHECK(sprig::parse_safetensors(bytes, "g").metadata.at("sprig.block_shape.blocks.0.fc.weight") == "2x2");
    auto h = sprig::models::build_block_gpt<float, std::int32_t, 2, 2>(spec);
    sprig::decode_safetensors(bytes, "g", h);
    CHECK(bits(h) == bits(g));
  }
}

TEST_CASE("safetensors: pruning on import keeps the largest magnitudes", "[io][safetensors]") {
  // A dense 10 x 6 weight in the file: value (i * 6 + j - 29.5), so |v| ranks are known.
  sprig::Sequential<float, std::int32_t> dense;
  dense.add(sprig::Linear<float>(6, 10, 1));
  auto& w = std::get<sprig::Linear<float>>(dense.layer(0)).weight;
  for (std::int64_t k = 0; k < 60; ++k) w.value[k] = static_cast<float>(k) - 29.5f;
  const auto bytes = sprig::encode_safetensors(dense);
  sprig::Sequential<float, std::int32_t> sparse;
  sparse.add(sprig::SparseLinear<float, std::int32_t>(6, 10, {.density = 0.5, .seed = 3}));
  sprig::AdamW<float> opt;
  opt.step(sparse);
  REQUIRE(!std::get<sprig::SparseLinear<float, std::int32_t>>(sparse.layer(0)).weight.state.at(0).empty());
  sprig::decode_safetensors(bytes, "d", sparse, {.prune_sparsity = 0.8});
  const auto& p = std::get<sprig::SparseLinear<float, std::int32_t>>(sparse.layer(0)).weight;
  CHECK(p.matrix.nnz() == 12);  // round(0.2 * 60)
  p.matrix.check_invariants();
  CHECK(p.grad.size() == static_cast<std::size_t>(p.matrix.storage_size()));
  for (const auto& s : p.state) CHECK(s.empty());
  // The 12 largest |k - 29.5|: k in [0, 6) and [54, 60).
  p.matrix.for_each_live([&](std::int64_t r, std::int64_t c, float v, std::int64_t) {
    const std::int64_t k = r * 6 + c;
    CHECK((k < 6 || k >= 54));
    CHECK(v == static_cast<float>(k) - 29.5f);
  });
  CHECK_THROWS_AS(sprig::decode_safetensors(bytes, "d", sparse, {.prune_sparsity = 1.0}), sprig::ArgumentError);
}

TEST_CASE("safetensors: pruning to the model's own densities, ERK per group", "[io][safetensors]") {
  // A dense GPT's file pruned into a GPT built with ERK densities (attention 0.7, FFN 0.9):
  // every sparse weight keeps its own live count, and the entries it keeps are the largest
  // |v| of its dense tensor (threshold from a sort of the file's values, not the code's).
  const sprig::models::GPTSpec dense_spec{
      .config = {.layers = 2, .heads = 2, .d_model = 16, .d_ff = 40, .block_size = 6, .vocab = 11}, .seed = 5};
  const auto dense = sprig::models::build_gpt<float, std::int32_t>(dense_spec);
  const auto bytes = sprig::encode_safetensors(dense);
  sprig::models::GPTSpec sparse_spec = dense_spec;
  sparse_spec.attn_sparsity = 0.7;
  sparse_spec.ffn_sparsity = 0.9;
  sparse_spec.distribution = sprig::models::Distribution::erk;
  sparse_spec.seed = 9;
  auto sparse = sprig::models::build_gpt<float, std::int32_t>(sparse_spec);
  std::vector<std::int64_t> counts;
  sparse.for_each_parameter([&](const auto& p) {
    if constexpr (requires { p.matrix.nnz(); }) counts.push_back(p.matrix.nnz());
  });
  REQUIRE(counts.size() == 8);
  CHECK(counts[0] != counts[1]);           // ERK: qkv and proj of one layer differ
  std::vector<std::vector<float>> source;  // the dense model's values, in visiting order
  dense.for_each_parameter([&](const auto& p) {
    if constexpr (requires { p.matrix; }) {  // build_gpt's projections are sparse at density 1
      REQUIRE(p.matrix.density() == 1.0);
      const auto d = p.matrix.to_dense();
      std::vector<float> v;
      for (std::int64_t i = 0; i < d.rows(); ++i)
        for (std::int64_t j = 0; j < d.cols(); ++j) v.push_back(d(i, j));
      source.push_back(std::move(v));
    } else {
      source.emplace_back(p.value.begin(), p.value.end());
    }
  });

  CHECK_THROWS_AS(sprig::decode_safetensors(bytes, "d", sparse,
                                            {.prune_sparsity = 0.5, .prune_to_model_density = true}),
                  sprig::ArgumentError);
  sprig::decode_safetensors(bytes, "d", sparse, {.prune_to_model_density = true});
  std::size_t k = 0, s = 0;
  sparse.for_each_parameter([&](const auto& p) {
    const std::vector<float>& src = source[k++];
    if constexpr (requires { p.matrix.nnz(); }) {
      p.matrix.check_invariants();
      const std::int64_t keep = counts[s++];
      CHECK(p.matrix.nnz() == keep);
      std::vector<float> mags;
      for (float v : src) mags.push_back(std::abs(v));
      std::sort(mags.begin(), mags.end(), std::greater<>());
      const float threshold = mags[static_cast<std::size_t>(keep - 1)];
      const std::int64_t cols = p.matrix.cols();
      std::int64_t above = 0;
      for (float m : mags) above += m > threshold;
      std::int64_t live_above = 0;
      p.matrix.for_each_live([&](std::int64_t r, std::int64_t c, float v, std::int64_t) {
        CHECK(v == src[static_cast<std::size_t>(r * cols + c)]);
        CHECK(std::abs(v) >= threshold);
        live_above += std::abs(v) > threshold;
      });
      CHECK(live_above == above);  // every entry above the threshold is kept
      for (const auto& st : p.state) CHECK(st.empty());
    } else {
      CHECK(std::equal(p.value.begin(), p.value.end(), src.begin(), src.end()));
    }
  });
  CHECK(s == counts.size());
}

TEST_CASE("safetensors: compressed import takes the file's pattern", "[io][safetensors]") {
  Model a = small_model(1);
  Model b = small_model(2);  // other patterns
  REQUIRE(bits(a) != bits(b));
  sprig::AdamW<float> opt;
  b.for_each_parameter([](auto& p) { p.zero_grad(); });
  opt.step(b);  // creates optimizer state
  REQUIRE(!std::get<sprig::SparseLinear<float, std::int32_t>>(b.layer(0)).weight.state.at(0).empty());
  const auto bytes = sprig::encode_safetensors(a, {.sparse_form = sprig::SparseForm::compressed});
  const auto f = sprig::parse_safetensors(bytes, "a");
  CHECK(f.tensors.count("layers.0.weight") == 0);
  CHECK(f.tensors.at("layers.0.weight.bitmask").shape == std::vector<std::int64_t>{10, 1});
  CHECK(f.tensors.at("layers.0.weight.row_offsets").dtype == "I64");
  CHECK(f.metadata.at("sparsity_config").find("\"format\":\"sparse-bitmask\"") != std::string::npos);
  sprig::decode_safetensors(bytes, "a", b);
  const auto& wa = std::get<sprig::SparseLinear<float, std::int32_t>>(a.layer(0)).weight;
  const auto& wb = std::get<sprig::SparseLinear<float, std::int32_t>>(b.layer(0)).weight;
  CHECK(wb.matrix.nnz() == wa.matrix.nnz());
  const auto da = wa.matrix.to_dense(), db = wb.matrix.to_dense();
  for (std::int64_t i = 0; i < da.rows(); ++i)
    for (std::int64_t j = 0; j < da.cols(); ++j) CHECK(db(i, j) == da(i, j));
  CHECK(wb.grad.size() == static_cast<std::size_t>(wb.matrix.storage_size()));
  for (const auto& s : wb.state) CHECK(s.empty());
  wb.matrix.check_invariants();
  // The model still trains.
  sprig::Matrix<float> X(6, 3, 0.5f);
  b.forward(X.view());
}

TEST_CASE("safetensors: dense import into a sparse layer keeps its pattern", "[io][safetensors]") {
  Model a = small_model(1);
  Model b = small_model(2);
  const auto before = std::get<sprig::SparseLinear<float, std::int32_t>>(b.layer(0)).weight.matrix;
  sprig::decode_safetensors(sprig::encode_safetensors(a), "a", b);
  const auto& w = std::get<sprig::SparseLinear<float, std::int32_t>>(b.layer(0)).weight.matrix;
  const auto da = std::get<sprig::SparseLinear<float, std::int32_t>>(a.layer(0)).weight.matrix.to_dense();
  CHECK(w.nnz() == before.nnz());
  w.for_each_live([&](std::int64_t r, std::int64_t c, float v, std::int64_t s) {
    CHECK(before.col_indices()[s] == c);
    CHECK(v == da(r, c));
  });
}

TEST_CASE("safetensors: a model of other shapes is rejected and unchanged", "[io][safetensors]") {
  const Model a = small_model(1);
  Model other;
  other.add(sprig::SparseLinear<float, std::int32_t>(6, 10, {.density = 0.4, .seed = 7}));
  other.add(sprig::ReLU<float>{});
  other.add(sprig::Linear<float>(10, 8, 7, 1));  // 8 outputs, not 9
  other.add(sprig::ReLU<float>{});
  other.add(Block44(8, 5, {.density = 0.5, .seed = 7, .layer_key = 2}));
  const auto before = bits(other);
  for (const auto form : {sprig::SparseForm::dense, sprig::SparseForm::compressed})
    CHECK_THROWS_MATCHES(sprig::decode_safetensors(sprig::encode_safetensors(a, {.sparse_form = form}), "a", other),
                         sprig::FormatError, WhatHas("tensor 'layers.2.weight' has shape [9,10]"));
  CHECK(bits(other) == before);

  Model shorter;
  shorter.add(sprig::SparseLinear<float, std::int32_t>(6, 10, {.density = 0.4, .seed = 7}));
  const auto before_short = bits(shorter);
  CHECK_THROWS_MATCHES(sprig::decode_safetensors(sprig::encode_safetensors(a), "a", shorter), sprig::FormatError,
                       WhatHas("tensor 'layers.2.bias' matches no parameter"));
  CHECK(bits(shorter) == before_short);

  Model b = small_model(2);
  const auto before_b = bits(b);
  CHECK_THROWS_MATCHES(sprig::decode_safetensors(sprig::encode_safetensors(shorter), "s", b), sprig::FormatError,
                       WhatHas("tensor 'layers.2.weight' is missing"));
  CHECK(bits(b) == before_b);

  sprig::Sequential<double, std::int32_t> wide;
  wide.add(sprig::SparseLinear<double, std::int32_t>(6, 10, {.density = 0.4, .seed = 7}));
  CHECK_THROWS_MATCHES(sprig::decode_safetensors(sprig::encode_safetensors(shorter), "s", wide), sprig::FormatError,
                       WhatHas("tensor 'layers.0.weight' has dtype F32, the model expects F64 or BF16"));
}

TEST_CASE("safetensors: rename maps names both ways", "[io][safetensors]") {
  Model a = small_model(1);
  const std::map<std::string, std::string> rename{{"layers.0.weight", "fc1.weight"}};
  const auto bytes = sprig::encode_safetensors(a, {.rename = rename, .metadata = {{"note", "x"}}});
  const auto f = sprig::parse_safetensors(bytes, "a");
  CHECK(f.tensors.count("fc1.weight") == 1);
  CHECK(f.metadata.at("note") == "x");
  Model b = small_model(1);
  perturb(b, 1.0f);
  CHECK_THROWS_AS(sprig::decode_safetensors(bytes, "a", b), sprig::FormatError);
  sprig::decode_safetensors(bytes, "a", b, {.rename = rename});
  CHECK(bits(b) == bits(a));
}

TEST_CASE("safetensors: files on disk", "[io][safetensors]") {
  sprig::test::TempDir dir;
  Model a = small_model(1);
  sprig::save_safetensors(dir.path / "m.safetensors", a);
  Model b = small_model(2);
  sprig::load_safetensors(dir.path / "m.safetensors", b);
  CHECK_THROWS_MATCHES(sprig::load_safetensors(dir.path / "none.safetensors", b), sprig::FormatError,
                       WhatHas("none.safetensors"));
}

// ---- BF16 values: export rounds to nearest even, import widens exactly ------------------------

TEST_CASE("safetensors import: BF16 values widen exactly, dense and compressed", "[io][safetensors]") {
  for (const auto form : {sprig::SparseForm::dense, sprig::SparseForm::compressed}) {
    INFO("form " << static_cast<int>(form));
    Model a = small_model(1);
    perturb(a, 0.5f);
    // The F32 file with every float tensor narrowed here, value by value, with sprig::bfloat16.
    const auto bytes = rewritten(sprig::encode_safetensors(a, {.sparse_form = form}), [](const std::string&,
                                                                                         sprig::SafetensorsEntry& e) {
      if (e.dtype != "F32") return;
      std::vector<std::byte> narrow;
      for (std::int64_t k = 0; k < std::ssize(e.data) / 4; ++k)
        sprig::detail::st::put_le<std::uint16_t>(
            narrow, sprig::bfloat16(sprig::detail::st::get_le<float>(e.data.data(), k)).bits);
      e.dtype = "BF16";
      e.data = std::move(narrow);
    });
    Model want = small_model(1);
    perturb(want, 0.5f);
    round_to_bf16(want);
    REQUIRE(bits(want) != bits(a));
    Model b = small_model(1);
    sprig::decode_safetensors(bytes, "bf16", b);
    CHECK(bits(b) == bits(want));
  }
}

TEST_CASE("safetensors: a BF16 round trip gives the rounded values, bytes stable", "[io][safetensors]") {
  for (const auto form : {sprig::SparseForm::dense, sprig::SparseForm::compressed}) {
    INFO("form " << static_cast<int>(form));
    const sprig::SafetensorsExportOptions options{.sparse_form = form, .dtype = sprig::SafetensorsDtype::bf16};
    // make() perturbed by `scale`, exported in bf16 and imported into a fresh make(): the
    // values rounded by sprig::bfloat16 here, and the same bytes exported again. Returns the
    // imported model and the expected one.
    const auto round_trip = [&](auto make, float scale, const char* source) {
      auto a = make();
      perturb(a, scale);
      auto want = make();
      perturb(want, scale);
      round_to_bf16(want);
      REQUIRE(bits(want) != bits(a));  // the rounding changes values
      const auto bytes = sprig::encode_safetensors(a, options);
      auto b = make();
      sprig::decode_safetensors(bytes, source, b);
      CHECK(bits(b) == bits(want));
      CHECK(sprig::encode_safetensors(b, options) == bytes);
      return std::pair(std::move(b), std::move(want));
    };
    round_trip([] { return small_model(1); }, 0.5f, "a");
    auto [h, gwant] = round_trip([] { return small_gpt(5); }, 0.25f, "g");
    // The rounded values exported as F32 import to the same model.
    auto h32 = small_gpt(5);
    perturb(h32, 1.0f);
    sprig::decode_safetensors(sprig::encode_safetensors(gwant, {.sparse_form = form}), "g32", h32);
    CHECK(bits(h32) == bits(h));
  }
}

TEST_CASE("safetensors: a BF16 export writes BF16 values and keeps integer dtypes", "[io][safetensors]") {
  const Model a = small_model(1);
  const auto g = small_gpt(3);
  for (const auto form : {sprig::SparseForm::dense, sprig::SparseForm::compressed}) {
    INFO("form " << static_cast<int>(form));
    const auto f32_bytes = sprig::encode_safetensors(a, {.sparse_form = form});
    const auto bf16_bytes = sprig::encode_safetensors(a, {.sparse_form = form, .dtype = sprig::SafetensorsDtype::bf16});
    const auto f32 = sprig::parse_safetensors(f32_bytes, "f32");
    const auto bf16 = sprig::parse_safetensors(bf16_bytes, "bf16");
    REQUIRE(f32.tensors.size() == bf16.tensors.size());
    CHECK(bf16.metadata == f32.metadata);
    std::int64_t floats = 0;
    for (const auto& [name, t] : bf16.tensors) {
      INFO(name);
      const auto& t32 = f32.tensors.at(name);
      CHECK(t.shape == t32.shape);
      if (name.ends_with(".bitmask") || name.ends_with(".shape") || name.ends_with(".row_offsets")) {
        CHECK(t.dtype == (name.ends_with(".bitmask") ? "U8" : "I64"));
        CHECK(t.dtype == t32.dtype);
        CHECK(std::equal(t.data.begin(), t.data.end(), t32.data.begin(), t32.data.end()));
      } else {
        CHECK(t.dtype == "BF16");
        CHECK(t32.dtype == "F32");
        CHECK(2 * t.data.size() == t32.data.size());
        ++floats;
      }
    }
    CHECK(floats == 6);  // three weights (a sparse one's .compressed in that form), three biases
    const auto gf = sprig::parse_safetensors(
        sprig::encode_safetensors(g, {.sparse_form = form, .dtype = sprig::SafetensorsDtype::bf16}), "g");
    for (const auto& [name, t] : gf.tensors) {
      INFO(name);
      const bool integer = name.ends_with(".bitmask") || name.ends_with(".shape") || name.ends_with(".row_offsets");
      CHECK((t.dtype == "BF16") == !integer);
    }
  }
}

TEST_CASE("safetensors: a BF16 export rounds to nearest, ties to even", "[io][safetensors]") {
  // float bits -> the bfloat16 bits they must round to, worked out by hand.
  const std::pair<std::uint32_t, std::uint16_t> weights[] = {
      {0x3F808000u, 0x3F80u},  // 1 + 2^-8, halfway between 1 and 1 + 2^-7: to the even 1
      {0x3F818000u, 0x3F82u},  // 1 + 3 * 2^-8, halfway: to the even 1 + 2^-6 (up)
      {0x3F808001u, 0x3F81u},  // just above halfway: up
      {0xBF807FFFu, 0xBF80u},  // just below halfway, negative: toward zero
      {0x7F7FFFFFu, 0x7F80u},  // FLT_MAX: past bfloat16's largest finite value, +infinity
      {0x00008000u, 0x0000u},  // a subnormal halfway between 0 and the least bfloat16: the even 0
  };
  const std::pair<std::uint32_t, std::uint16_t> biases[] = {
      {0x00018000u, 0x0002u},  // subnormal, halfway between 1 and 2 ulps: to the even 2
      {0xC0490FDBu, 0xC049u},  // -pi: below halfway
  };
  sprig::Sequential<float, std::int32_t> m;
  m.add(sprig::Linear<float>(3, 2, 1));
  auto& l = std::get<sprig::Linear<float>>(m.layer(0));
  for (std::size_t k = 0; k < 6; ++k) l.weight.value[k] = std::bit_cast<float>(weights[k].first);
  for (std::size_t k = 0; k < 2; ++k) l.bias.value[k] = std::bit_cast<float>(biases[k].first);
  const auto bytes = sprig::encode_safetensors(m, kBF16);
  const auto f = sprig::parse_safetensors(bytes, "m");
  const auto& w = f.tensors.at("layers.0.weight");
  const auto& b = f.tensors.at("layers.0.bias");
  REQUIRE(w.data.size() == 12);
  REQUIRE(b.data.size() == 4);
  for (std::size_t k = 0; k < 6; ++k)
    CHECK(sprig::detail::st::get_le<std::uint16_t>(w.data.data(), static_cast<std::int64_t>(k)) == weights[k].second);
  for (std::size_t k = 0; k < 2; ++k)
    CHECK(sprig::detail::st::get_le<std::uint16_t>(b.data.data(), static_cast<std::int64_t>(k)) == biases[k].second);
  // Import widens exactly: the 16 bits become the float's top half.
  sprig::Sequential<float, std::int32_t> back;
  back.add(sprig::Linear<float>(3, 2, 2));
  sprig::decode_safetensors(bytes, "m", back);
  const auto& lb = std::get<sprig::Linear<float>>(back.layer(0));
  for (std::size_t k = 0; k < 6; ++k)
    CHECK(std::bit_cast<std::uint32_t>(lb.weight.value[k]) == std::uint32_t{weights[k].second} << 16);
  for (std::size_t k = 0; k < 2; ++k)
    CHECK(std::bit_cast<std::uint32_t>(lb.bias.value[k]) == std::uint32_t{biases[k].second} << 16);
}

TEST_CASE("safetensors: BF16 and double models", "[io][safetensors]") {
  sprig::Sequential<float, std::int32_t> f;
  f.add(sprig::Linear<float>(6, 10, 3));
  sprig::Sequential<double, std::int32_t> d;
  d.add(sprig::Linear<double>(6, 10, 4));
  CHECK_THROWS_MATCHES(sprig::encode_safetensors(d, kBF16), sprig::ArgumentError,
                       WhatHas("BF16 export needs a float model"));
  // Import into a double model widens BF16 exactly too.
  sprig::decode_safetensors(sprig::encode_safetensors(f, kBF16), "f", d);
  const auto& lf = std::get<sprig::Linear<float>>(f.layer(0));
  const auto& ld = std::get<sprig::Linear<double>>(d.layer(0));
  for (std::size_t k = 0; k < lf.weight.value.size(); ++k)
    CHECK(ld.weight.value[k] == static_cast<double>(static_cast<float>(sprig::bfloat16(lf.weight.value[k]))));
  for (std::size_t k = 0; k < lf.bias.value.size(); ++k)
    CHECK(ld.bias.value[k] == static_cast<double>(static_cast<float>(sprig::bfloat16(lf.bias.value[k]))));
  CHECK_THROWS_MATCHES(sprig::decode_safetensors(sprig::encode_safetensors(f), "f", d), sprig::FormatError,
                       WhatHas("tensor 'layers.0.weight' has dtype F32, the model expects F64 or BF16"));
}

TEST_CASE("safetensors: pruning on import reads BF16 values", "[io][safetensors]") {
  // value (k - 29.5) * 1.01, k = i * 6 + j: not all bfloat16 numbers; rounding keeps |v|'s order
  // (the values are more than bfloat16's spacing apart), so the 12 kept are k in [0, 6), [54, 60).
  sprig::Sequential<float, std::int32_t> dense;
  dense.add(sprig::Linear<float>(6, 10, 1));
  auto& w = std::get<sprig::Linear<float>>(dense.layer(0)).weight;
  for (std::int64_t k = 0; k < 60; ++k) w.value[k] = (static_cast<float>(k) - 29.5f) * 1.01f;
  const auto bytes = sprig::encode_safetensors(dense, kBF16);
  for (const bool to_model : {false, true}) {
    INFO("prune_to_model_density " << to_model);
    sprig::Sequential<float, std::int32_t> sparse;
    sparse.add(sprig::SparseLinear<float, std::int32_t>(6, 10, {.density = 0.2, .seed = 3}));
    REQUIRE(std::get<sprig::SparseLinear<float, std::int32_t>>(sparse.layer(0)).weight.matrix.nnz() == 12);
    if (to_model)
      sprig::decode_safetensors(bytes, "d", sparse, {.prune_to_model_density = true});
    else
      sprig::decode_safetensors(bytes, "d", sparse, {.prune_sparsity = 0.8});
    const auto& p = std::get<sprig::SparseLinear<float, std::int32_t>>(sparse.layer(0)).weight;
    CHECK(p.matrix.nnz() == 12);
    p.matrix.check_invariants();
    std::int64_t changed = 0;
    p.matrix.for_each_live([&](std::int64_t r, std::int64_t c, float v, std::int64_t) {
      const std::int64_t k = r * 6 + c;
      CHECK((k < 6 || k >= 54));
      CHECK(v == static_cast<float>(sprig::bfloat16(w.value[k])));
      changed += v != w.value[k];
    });
    CHECK(changed > 0);
  }
}

TEST_CASE("safetensors import: a float tensor of another dtype is named", "[io][safetensors]") {
  Model a = small_model(1);
  for (const auto form : {sprig::SparseForm::dense, sprig::SparseForm::compressed}) {
    const auto good = sprig::encode_safetensors(a, {.sparse_form = form, .dtype = sprig::SafetensorsDtype::bf16});
    const std::string target = form == sprig::SparseForm::dense ? "layers.0.weight" : "layers.0.weight.compressed";
    // Relabel the target (BF16, 2 bytes a value) as F16 (same size): a dtype the import refuses.
    const auto bad = rewritten(good, [&](const std::string& name, sprig::SafetensorsEntry& e) {
      if (name == target) e.dtype = "F16";
    });
    Model b = small_model(2);
    const auto before = bits(b);
    CHECK_THROWS_MATCHES(sprig::decode_safetensors(bad, "bad", b), sprig::FormatError,
                         WhatHas("tensor '" + target + "' has dtype F16, the model expects F32 or BF16"));
    CHECK(bits(b) == before);
  }
  // An F32 tensor relabelled BF16 has twice the bytes its shape needs: the reader says so.
  const auto f32 = sprig::encode_safetensors(a);
  const auto f = sprig::parse_safetensors(f32, "f32");
  std::string header(reinterpret_cast<const char*>(f32.data() + 8),
                     static_cast<std::size_t>(sprig::detail::st::get_le<std::uint64_t>(f32.data(), 0)));
  const auto at = header.find(R"("dtype":"F32")");
  REQUIRE(at != std::string::npos);
  const auto data_begin = f32.begin() + 8 + static_cast<std::ptrdiff_t>(header.size());
  header.replace(at, 13, R"("dtype":"BF16")");
  auto relabelled = raw_file(header);
  relabelled.insert(relabelled.end(), data_begin, f32.end());
  Model b = small_model(2);
  const auto before = bits(b);
  CHECK_THROWS_MATCHES(sprig::decode_safetensors(relabelled, "relabelled", b), sprig::FormatError,
                       WhatHas("of BF16 needs"));
  CHECK(bits(b) == before);
}

// ---- malformed files: each a FormatError naming the problem ----------------------------------

TEST_CASE("safetensors reader: shorter than the length", "[io][safetensors]") {
  CHECK_THROWS_MATCHES(parse(std::vector<std::byte>(5)), sprig::FormatError, WhatHas("shorter than the 8-byte"));
}

TEST_CASE("safetensors reader: header length past the file", "[io][safetensors]") {
  CHECK_THROWS_MATCHES(parse(raw_file("{}", 0, 40)), sprig::FormatError, WhatHas("runs past the end of the file"));
}

TEST_CASE("safetensors reader: header length absurdly large", "[io][safetensors]") {
  CHECK_THROWS_MATCHES(parse(raw_file("{}", 0, std::uint64_t{1} << 62)), sprig::FormatError, WhatHas("absurdly large"));
}

TEST_CASE("safetensors reader: JSON garbage", "[io][safetensors]") {
  CHECK_THROWS_MATCHES(parse(raw_file("{\"a\": [1, ")), sprig::FormatError, WhatHas("not valid JSON"));
  CHECK_THROWS_MATCHES(parse(raw_file("\xff\xfe")), sprig::FormatError, WhatHas("not valid JSON"));
}

TEST_CASE("safetensors reader: header not an object", "[io][safetensors]") {
  CHECK_THROWS_MATCHES(parse(raw_file("[1, 2]")), sprig::FormatError, WhatHas("not a JSON object (it is a array)"));
  CHECK_THROWS_MATCHES(parse(raw_file(R"({"a": 3})")), sprig::FormatError,
                       WhatHas("tensor 'a': its entry is not a JSON object"));
}

TEST_CASE("safetensors reader: offsets past the data", "[io][safetensors]") {
  CHECK_THROWS_MATCHES(parse(raw_file(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})", 4)),
                       sprig::FormatError, WhatHas("tensor 'a': data_offsets [0, 8] run past the 4 data bytes"));
}

TEST_CASE("safetensors reader: offsets reversed", "[io][safetensors]") {
  CHECK_THROWS_MATCHES(parse(raw_file(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 0]}})", 4)),
                       sprig::FormatError, WhatHas("tensor 'a': data_offsets [4, 0] are reversed"));
}

TEST_CASE("safetensors reader: offsets negative or not integers", "[io][safetensors]") {
  CHECK_THROWS_MATCHES(parse(raw_file(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [-4, 0]}})", 4)),
                       sprig::FormatError, WhatHas("data_offsets begin is negative"));
  CHECK_THROWS_MATCHES(parse(raw_file(R"({"a": {"dtype": "F32", "shape": [1.5], "data_offsets": [0, 4]}})", 4)),
                       sprig::FormatError, WhatHas("a shape entry is not an integer"));
  CHECK_THROWS_MATCHES(parse(raw_file(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0]}})", 4)),
                       sprig::FormatError, WhatHas("no \"data_offsets\" array of two integers"));
}

TEST_CASE("safetensors reader: overlapping tensors", "[io][safetensors]") {
  CHECK_THROWS_MATCHES(parse(raw_file(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},)"
                                      R"( "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})",
                                      12)),
                       sprig::FormatError, WhatHas("tensors 'a' and 'b' overlap"));
}

TEST_CASE("safetensors reader: holes", "[io][safetensors]") {
  CHECK_THROWS_MATCHES(parse(raw_file(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},)"
                                      R"( "b": {"dtype": "F32", "shape": [1], "data_offsets": [8, 12]}})",
                                      12)),
                       sprig::FormatError, WhatHas("a hole: data bytes [4, 8) after 'a'"));
  CHECK_THROWS_MATCHES(parse(raw_file(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})", 8)),
                       sprig::FormatError, WhatHas("a hole: data bytes [0, 4) at the start"));
  CHECK_THROWS_MATCHES(parse(raw_file(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})", 6)),
                       sprig::FormatError, WhatHas("a hole: data bytes [4, 6) at the end"));
}

TEST_CASE("safetensors reader: unknown dtype", "[io][safetensors]") {
  CHECK_THROWS_MATCHES(parse(raw_file(R"({"a": {"dtype": "F31", "shape": [1], "data_offsets": [0, 4]}})", 4)),
                       sprig::FormatError, WhatHas("tensor 'a': unknown dtype 'F31'"));
  CHECK_THROWS_MATCHES(parse(raw_file(R"({"a": {"dtype": 3, "shape": [1], "data_offsets": [0, 4]}})", 4)),
                       sprig::FormatError, WhatHas("tensor 'a': no string \"dtype\""));
}

TEST_CASE("safetensors reader: shape and byte count disagree", "[io][safetensors]") {
  CHECK_THROWS_MATCHES(parse(raw_file(R"({"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}})", 8)),
                       sprig::FormatError,
                       WhatHas("tensor 'a': shape [3] of F32 needs 12 bytes but data_offsets give 8"));
  CHECK_THROWS_MATCHES(
      parse(raw_file(R"({"a": {"dtype": "F64", "shape": [4294967296, 4294967296, 2], "data_offsets": [0, 8]}})", 8)),
      sprig::FormatError, WhatHas("needs more than 2^63 bytes"));
  parse(raw_file(R"({"a": {"dtype": "F64", "shape": [4294967296, 0], "data_offsets": [0, 0]}})", 0));  // empty: fine
}

TEST_CASE("safetensors reader: a BF16 tensor of the wrong byte count", "[io][safetensors]") {
  CHECK_THROWS_MATCHES(parse(raw_file(R"({"a": {"dtype": "BF16", "shape": [3], "data_offsets": [0, 12]}})", 12)),
                       sprig::FormatError,
                       WhatHas("tensor 'a': shape [3] of BF16 needs 6 bytes but data_offsets give 12"));
  CHECK_THROWS_MATCHES(parse(raw_file(R"({"a": {"dtype": "BF16", "shape": [2, 2], "data_offsets": [0, 7]}})", 7)),
                       sprig::FormatError,
                       WhatHas("tensor 'a': shape [2,2] of BF16 needs 8 bytes but data_offsets give 7"));
  const auto f =
      sprig::parse_safetensors(raw_file(R"({"a": {"dtype": "BF16", "shape": [3], "data_offsets": [0, 6]}})", 6), "ok");
  CHECK(f.tensors.at("a").data.size() == 6);
}

TEST_CASE("safetensors reader: duplicate names", "[io][safetensors]") {
  CHECK_THROWS_MATCHES(parse(raw_file(R"({"a": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]},)"
                                      R"( "a": {"dtype": "U8", "shape": [1], "data_offsets": [1, 2]}})",
                                      2)),
                       sprig::FormatError, WhatHas("names 'a' twice"));
  CHECK_THROWS_MATCHES(parse(raw_file(R"({"a": {"dtype": "U8", "dtype": "U8", "shape": [1], "data_offsets": [0, 1]}})",
                                      1)),
                       sprig::FormatError, WhatHas("names 'dtype' twice"));
}

TEST_CASE("safetensors reader: non-string metadata", "[io][safetensors]") {
  CHECK_THROWS_MATCHES(parse(raw_file(R"({"__metadata__": {"format": "pt", "n": 3}})")), sprig::FormatError,
                       WhatHas("__metadata__ 'n' is not a string"));
  CHECK_THROWS_MATCHES(parse(raw_file(R"({"__metadata__": ["pt"]})")), sprig::FormatError,
                       WhatHas("__metadata__ is not a JSON object"));
  const auto f = sprig::parse_safetensors(raw_file(R"({"__metadata__": {"format": "pt"}})"
                                                   "      "),
                                          "ok");
  CHECK(f.metadata.at("format") == "pt");
  CHECK(f.tensors.empty());
}

TEST_CASE("safetensors import: inconsistent compressed forms", "[io][safetensors]") {
  Model a = small_model(1);
  const auto good = sprig::encode_safetensors(a, {.sparse_form = sprig::SparseForm::compressed});
  // Rewrite one tensor's bytes in place (same size) and expect the message.
  auto with = [&](const std::string& name, auto edit) {
    auto bytes = good;
    const auto f = sprig::parse_safetensors(good, "a");
    const auto& t = f.tensors.at(name);
    const std::size_t at = static_cast<std::size_t>(t.data.data() - good.data());
    edit(bytes.data() + at);
    Model b = small_model(2);
    const auto before = bits(b);
    try {
      sprig::decode_safetensors(bytes, "a", b);
      FAIL("no error");
    } catch (const sprig::FormatError& e) {
      CHECK(bits(b) == before);
      return std::string(e.what());
    }
    return std::string();
  };
  CHECK_THAT(with("layers.0.weight.row_offsets", [](std::byte* p) { p[8] = std::byte{9}; }),
             Catch::Contains("row_offsets' gives row 1 offset 9"));
  CHECK_THAT(with("layers.0.weight.bitmask", [](std::byte* p) { p[0] |= std::byte{0x80}; }),
             Catch::Contains("sets bit 7 of row 0, past the 6 columns"));
  CHECK_THAT(with("layers.0.weight.shape", [](std::byte* p) { p[0] = std::byte{11}; }),
             Catch::Contains("'layers.0.weight.shape' holds [11, 6]"));
}

// ---- fixtures written by Python's safetensors package (tests/data/make_safetensors_fixtures.py)

#  if defined(SPRIG_TEST_DATA_DIR)
TEST_CASE("safetensors: files written by Python's safetensors", "[io][safetensors]") {
  const std::filesystem::path dir = SPRIG_TEST_DATA_DIR;
  const auto bytes = sprig::detail::ckpt::read_file(dir / "tiny_mlp.safetensors");
  const auto f = sprig::parse_safetensors(bytes, "tiny_mlp");
  CHECK(f.metadata.at("format") == "pt");
  // layers.0: Linear 3 -> 2, weight[i][j] = i + j / 4, bias [-1, 1]; layers.2: Linear 2 -> 1.
  sprig::Sequential<float, std::int32_t> m;
  m.add(sprig::Linear<float>(3, 2, 0));
  m.add(sprig::ReLU<float>{});
  m.add(sprig::Linear<float>(2, 1, 0));
  sprig::decode_safetensors(bytes, "tiny_mlp", m);
  const auto& l0 = std::get<sprig::Linear<float>>(m.layer(0));
  for (std::int64_t i = 0; i < 2; ++i)
    for (std::int64_t j = 0; j < 3; ++j) CHECK(l0.weight.value[i * 3 + j] == static_cast<float>(i) + j / 4.0f);
  CHECK(l0.bias.value == sprig::AlignedVector<float>{-1.0f, 1.0f});
  const auto& l2 = std::get<sprig::Linear<float>>(m.layer(2));
  CHECK(l2.weight.value == sprig::AlignedVector<float>{0.5f, -0.25f});
  CHECK(l2.bias.value == sprig::AlignedVector<float>{3.0f});

  // A 4 x 10 weight with 5 non-zeros in compressed-tensors' sparse-bitmask form (numpy packbits,
  // bitorder little), into a SparseLinear.
  const auto cbytes = sprig::detail::ckpt::read_file(dir / "tiny_bitmask.safetensors");
  sprig::Sequential<float, std::int32_t> s;
  s.add(sprig::SparseLinear<float, std::int32_t>(10, 4, {.density = 0.5, .seed = 1}));
  sprig::decode_safetensors(cbytes, "tiny_bitmask", s);
  const auto d = std::get<sprig::SparseLinear<float, std::int32_t>>(s.layer(0)).weight.matrix.to_dense();
  for (std::int64_t i = 0; i < 4; ++i)
    for (std::int64_t j = 0; j < 10; ++j) {
      const float want = (i == 0 && j == 1)   ? 1.5f
                         : (i == 0 && j == 9) ? -2.0f
                         : (i == 2 && j == 0) ? 3.0f
                         : (i == 2 && j == 8) ? 0.25f
                         : (i == 3 && j == 5) ? -7.0f
                                              : 0.0f;
      CHECK(d(i, j) == want);
    }
  CHECK(std::get<sprig::SparseLinear<float, std::int32_t>>(s.layer(0)).weight.matrix.nnz() == 5);
  CHECK(std::get<sprig::SparseLinear<float, std::int32_t>>(s.layer(0)).bias.value ==
        sprig::AlignedVector<float>{0.5f, 0.0f, 0.0f, -0.5f});
  // And sprig writes the same bitmask bytes.
  // parse_safetensors's tensors view the bytes they were parsed from: keep them alive.
  const auto encoded = sprig::encode_safetensors(s, {.sparse_form = sprig::SparseForm::compressed});
  const auto back = sprig::parse_safetensors(encoded, "b");
  const auto fixture = sprig::parse_safetensors(cbytes, "c");
  const auto& m1 = back.tensors.at("layers.0.weight.bitmask").data;
  const auto& m2 = fixture.tensors.at("layers.0.weight.bitmask").data;
  CHECK(std::equal(m1.begin(), m1.end(), m2.begin(), m2.end()));

  // tiny_mlp's layout in BF16 (layers.2.weight F32), rounded by PyTorch: the bits below were
  // worked out by hand (to nearest, ties to even) and asserted by the script that wrote it.
  const auto bbytes = sprig::detail::ckpt::read_file(dir / "tiny_bf16.safetensors");
  const auto bf = sprig::parse_safetensors(bbytes, "tiny_bf16");
  CHECK(bf.tensors.at("layers.0.weight").dtype == "BF16");
  CHECK(bf.tensors.at("layers.2.weight").dtype == "F32");
  sprig::Sequential<float, std::int32_t> t;
  t.add(sprig::Linear<float>(3, 2, 0));
  t.add(sprig::ReLU<float>{});
  t.add(sprig::Linear<float>(2, 1, 0));
  sprig::decode_safetensors(bbytes, "tiny_bf16", t);
  auto widened = [](std::uint32_t top) { return std::bit_cast<float>(top << 16); };
  const auto& t0 = std::get<sprig::Linear<float>>(t.layer(0));
  // From 1 + 2^-8 (a tie: to 1), 1 + 3 * 2^-8 (a tie: up), -0.1, 3, 1e30, -2.5.
  const std::uint32_t w0[] = {0x3F80, 0x3F82, 0xBDCD, 0x4040, 0x714A, 0xC020};
  for (std::size_t k = 0; k < 6; ++k) CHECK(t0.weight.value[k] == widened(w0[k]));
  CHECK(t0.bias.value == sprig::AlignedVector<float>{widened(0x3DCD), widened(0xBEAB)});  // 0.1, -1/3
  const auto& t2 = std::get<sprig::Linear<float>>(t.layer(2));
  CHECK(t2.weight.value == sprig::AlignedVector<float>{0.5f, -0.25f});
  CHECK(t2.bias.value == sprig::AlignedVector<float>{3.0f});
  // sprig's BF16 export of the same values writes the same bits.
  const auto again = sprig::encode_safetensors(t, {.dtype = sprig::SafetensorsDtype::bf16});
  const auto af = sprig::parse_safetensors(again, "again");
  for (const char* name : {"layers.0.weight", "layers.0.bias", "layers.2.bias"}) {
    const auto& x = af.tensors.at(name).data;
    const auto& y = bf.tensors.at(name).data;
    CHECK(std::equal(x.begin(), x.end(), y.begin(), y.end()));
  }
}
#  endif

#else  // SPRIG_NO_NLOHMANN_JSON
TEST_CASE("safetensors: nlohmann-json not found, io/safetensors.hpp untested", "[io][safetensors]") {
  WARN("built without nlohmann-json (Debian nlohmann-json3-dev): io/safetensors.hpp is not tested");
}
#endif
