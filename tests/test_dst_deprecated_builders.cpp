// The builders' old names (sprig::dst::build_mlp, ..., from the forwarding headers
// dst/model_builder.hpp, dst/gpt_builder.hpp and dst/density.hpp) still compile for one
// release and build exactly the model of their sprig::models replacements.
#include "sprig/dst/gpt_builder.hpp"
#include "sprig/dst/model_builder.hpp"
#include "sprig/dst/density.hpp"

#include <cstdint>
#include <span>
#include <vector>

#include <catch2/catch.hpp>

// The point of this test is to use the deprecated names.
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

using namespace sprig;

namespace {

// Every parameter's stored values and (sparse) columns, in for_each_parameter order.
template <class Model>
std::vector<std::vector<double>> parameters_of(const Model& model) {
  std::vector<std::vector<double>> out;
  model.for_each_parameter([&](const auto& p) {
    std::vector<double> v;
    if constexpr (requires { p.value; }) {
      v.assign(p.value.begin(), p.value.end());
    } else {
      const auto values = p.matrix.values();
      v.assign(values.begin(), values.end());
      if constexpr (requires { p.matrix.col_indices(); }) {
        for (auto c : p.matrix.col_indices()) v.push_back(static_cast<double>(c));
      } else {
        for (auto c : p.matrix.pattern().col_indices()) v.push_back(static_cast<double>(c));
      }
    }
    out.push_back(std::move(v));
  });
  return out;
}

constexpr GPTConfig kConfig{.layers = 2, .heads = 2, .d_model = 16, .d_ff = 32, .block_size = 8, .vocab = 11};

}  // namespace

TEST_CASE("dst:: builder aliases build the models:: model", "[dst][builder][deprecated]") {
  dst::MLPSpec old_spec{.widths = {20, 16, 12, 4},
                        .sparsity = 0.8,
                        .distribution = dst::Distribution::erk,
                        .activation = dst::Activation::gelu,
                        .seed = 7};
  const models::MLPSpec spec = old_spec;  // the same type
  CHECK(dst::mlp_sparsities(old_spec) == models::mlp_sparsities(spec));
  CHECK(parameters_of(dst::build_mlp<float, std::int32_t>(old_spec)) ==
        parameters_of(models::build_mlp<float, std::int32_t>(spec)));
  CHECK(parameters_of(dst::build_block_mlp<float, std::int32_t, 4, 4>(old_spec)) ==
        parameters_of(models::build_block_mlp<float, std::int32_t, 4, 4>(spec)));

  dst::GPTSpec old_gpt{.config = kConfig, .attn_sparsity = 0.5, .ffn_sparsity = 0.75, .seed = 3};
  const models::GPTSpec gpt = old_gpt;
  const auto old_densities = dst::gpt_densities(old_gpt), densities = models::gpt_densities(gpt);
  REQUIRE(old_densities.size() == densities.size());
  for (std::size_t l = 0; l < densities.size(); ++l) {
    CHECK(old_densities[l].qkv == densities[l].qkv);
    CHECK(old_densities[l].fc_proj == densities[l].fc_proj);
  }
  CHECK(parameters_of(dst::build_gpt<double>(old_gpt)) == parameters_of(models::build_gpt<double>(gpt)));
  CHECK(parameters_of(dst::build_block_gpt<float, std::int32_t, 4, 4>(old_gpt)) ==
        parameters_of(models::build_block_gpt<float, std::int32_t, 4, 4>(gpt)));

  const std::vector<dst::LayerShape> shapes{{30, 20}, {10, 30}};
  CHECK(dst::erk_sparsities(shapes, 0.9) == models::erk_sparsities(shapes, 0.9));
  CHECK(dst::uniform_sparsities(shapes, 0.9) == models::uniform_sparsities(shapes, 0.9));
  CHECK(dst::live_count(100, 0.9) == 10);  // not deprecated: live_count stays in dst
}
