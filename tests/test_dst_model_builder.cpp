#include <sprig/models/mlp.hpp>

#include <catch2/catch.hpp>
#include <sprig/dst/live_count.hpp>
#include <variant>

using namespace sprig;
using namespace sprig::models;
using sprig::dst::live_count;

TEST_CASE("build_mlp: uniform sparsity on the hidden layers, dense output", "[dst][builder]") {
  MLPSpec spec{.widths = {784, 300, 100, 10}, .sparsity = 0.9, .seed = 3};
  CHECK(mlp_sparsities(spec) == std::vector<double>{0.9, 0.9, 0.0});
  auto model = build_mlp<float, std::int32_t>(spec);
  REQUIRE(model.size() == 5);  // sparse, relu, sparse, relu, dense
  const auto sparse = model.sparse_layers();
  REQUIRE(sparse.size() == 2);
  CHECK(sparse[0].layer->weight.matrix.nnz() == live_count(784 * 300, 0.9));
  CHECK(sparse[1].layer->weight.matrix.nnz() == live_count(300 * 100, 0.9));
  CHECK(std::holds_alternative<Linear<float>>(model.layer(4)));
  CHECK(std::holds_alternative<ReLU<float>>(model.layer(1)));
}

TEST_CASE("build_mlp: ERK over every layer follows RigL's oracle", "[dst][builder][erk]") {
  MLPSpec spec{.widths = {784, 300, 100, 10},
               .sparsity = 0.9,
               .distribution = Distribution::erk,
               .dense_output = false,
               .activation = Activation::gelu,
               .seed = 1};
  const auto s = mlp_sparsities(spec);
  CHECK(s[0] == Approx(0.9204).margin(5e-5));
  CHECK(s[1] == Approx(0.7698).margin(5e-5));
  CHECK(s[2] == 0.0);
  auto model = build_mlp<double, std::int16_t>(spec);
  const auto sparse = model.sparse_layers();
  REQUIRE(sparse.size() == 2);  // the ERK-dense output layer is a dense Linear
  CHECK(std::holds_alternative<Linear<double>>(model.layer(4)));
  CHECK(std::holds_alternative<GELU<double>>(model.layer(1)));
  // the global live count: (1 - S) of all parameters, up to per-layer rounding
  const double live =
      static_cast<double>(sparse[0].layer->weight.matrix.nnz() + sparse[1].layer->weight.matrix.nnz() + 1000);
  CHECK(live == Approx(0.1 * (784 * 300 + 300 * 100 + 1000)).margin(2.0));
}

TEST_CASE("build_mlp: growth_reserve reserves room in every sparse layer, none by default", "[dst][builder]") {
  MLPSpec spec{.widths = {40, 30, 20, 5}, .sparsity = 0.8, .seed = 3};
  auto plain = build_mlp<float, std::int32_t>(spec);
  for (const auto& ref : plain.sparse_layers()) {
    const auto& p = ref.layer->weight;
    CHECK(p.matrix.storage_capacity() == p.matrix.storage_size());
  }
  spec.growth_reserve = 0.25;
  auto reserved = build_mlp<float, std::int32_t>(spec);
  const auto refs = reserved.sparse_layers();
  REQUIRE(refs.size() == 2);
  for (const auto& ref : refs) {
    const auto& p = ref.layer->weight;
    const std::int64_t n = p.matrix.storage_size();
    CHECK(p.matrix.storage_capacity() == n + n / 4);
    CHECK(std::int64_t(p.grad.capacity()) == n + n / 4);
    CHECK(std::ssize(p.grad) == n);
  }
}

TEST_CASE("build_mlp rejects bad specs", "[dst][builder]") {
  CHECK_THROWS_AS(mlp_sparsities({.widths = {5}}), ShapeError);
  CHECK_THROWS_AS(mlp_sparsities({.widths = {5, 4, 3}, .sparsity = 1.0}), ArgumentError);
}

TEST_CASE("build_mlp's errors name build_mlp, not an internal helper", "[dst][builder][errors]") {
  auto message_of = [](const MLPSpec& spec) -> std::string {
    try {
      (void)build_mlp<float, std::int32_t>(spec);
    } catch (const Error& e) {
      return e.what();
    }
    return "no error";
  };
  using Catch::Matchers::StartsWith;
  CHECK_THAT(message_of({.widths = {5, 4, 3}, .sparsity = 1.0}), StartsWith("models::build_mlp: sparsity 1"));
  CHECK_THAT(message_of({.widths = {5, 4, 3}, .sparsity = -0.5, .distribution = Distribution::erk}),
             StartsWith("models::build_mlp: sparsity -0.5"));
  CHECK_THAT(message_of({.widths = {5}}), StartsWith("models::build_mlp: need at least 2 widths"));
  CHECK_THAT(message_of({.widths = {5, 0, 3}}), StartsWith("models::build_mlp: widths[1] = 0"));
  CHECK_THAT(message_of({.widths = {5, 4, 0}}), StartsWith("models::build_mlp: widths[2] = 0"));
  CHECK_THAT(message_of({.widths = {5, 4, 3}, .growth_reserve = -1.0}),
             StartsWith("models::build_mlp: growth_reserve -1"));
  CHECK_THAT(message_of({.widths = {5, 4, 3}, .padding_ratio = -1.0}),
             StartsWith("models::build_mlp: padding_ratio -1"));
  CHECK_THROWS_AS((build_mlp<float, std::int32_t>({.widths = {5, 0, 3}})), ShapeError);
  CHECK_THROWS_WITH((build_mlp<float, std::int16_t>({.widths = {40000, 4, 3}})),
                    StartsWith("models::build_mlp: widths[0] = 40000 columns cannot be indexed by a 16-bit"));
  CHECK_THAT(message_of({.widths = {2, 2, 3}, .sparsity = 0.9}),
             StartsWith("models::build_mlp: layer 0 (2x2) at sparsity 0.9 keeps no weight"));
  // the public density helpers name themselves
  CHECK_THROWS_WITH(uniform_sparsities({{4, 5}}, 1.0), StartsWith("models::uniform_sparsities: sparsity 1"));
  CHECK_THROWS_WITH(erk_sparsities({{4, 0}}, 0.5), StartsWith("models::erk_sparsities: layer 0 has shape 4x0"));
  CHECK_THROWS_WITH(mlp_sparsities({.widths = {5}}), StartsWith("models::mlp_sparsities: need at least 2 widths"));
}

TEST_CASE("build_mlp: explicit per-layer sparsities, 0 for a dense layer, ERK over a chosen subset", "[dst][builder]") {
  // layers 784->300 and 300->100 sparse by ERK over those two only; 300->300 dense; output dense
  const std::vector<models::LayerShape> chosen = {{300, 784}, {100, 300}};
  const std::vector<double> erk = models::erk_sparsities(chosen, 0.9);
  REQUIRE(erk[0] > 0.0);
  REQUIRE(erk[1] > 0.0);
  auto m = models::build_mlp<float, std::int32_t>(
      {.widths = {784, 300, 300, 100, 10}, .seed = 1, .layer_sparsities = {erk[0], 0.0, erk[1]}});
  const auto layers = m.sparse_layers();
  REQUIRE(layers.size() == 2);
  CHECK(layers[0].layer->weight.matrix.nnz() == dst::live_count(784 * 300, erk[0]));
  CHECK(layers[1].layer->weight.matrix.nnz() == dst::live_count(300 * 100, erk[1]));
  CHECK(layers[1].position == 4);  // sparse, relu, linear (dense), relu, sparse
  CHECK(std::holds_alternative<Linear<float>>(m.layer(2)));
  const MLPSpec two{.widths = {784, 300, 100, 10}, .layer_sparsities = {0.5, 0.8}};
  CHECK(models::mlp_sparsities(two) == std::vector<double>{0.5, 0.8, 0.0});
  CHECK_THROWS_WITH((models::build_mlp<float, std::int32_t>({.widths = {8, 8, 8}, .layer_sparsities = {0.5, 0.5}})),
                    Catch::Contains("2 layer_sparsities for 1 layers that may be sparse"));
  CHECK_THROWS_WITH((models::build_mlp<float, std::int32_t>({.widths = {8, 8, 8}, .layer_sparsities = {1.0}})),
                    Catch::Contains("layer_sparsities[0] = 1 outside [0, 1)"));
}

TEST_CASE("build_block_mlp: block layers at the block densities, ERK over the block grids", "[dst][builder][block]") {
  MLPSpec spec{.widths = {784, 300, 100, 10}, .sparsity = 0.9, .seed = 3};
  auto model = build_block_mlp<float, std::int32_t, 4, 4>(spec);
  using B = BlockSparseLinear<float, std::int32_t, 4, 4>;
  REQUIRE(model.size() == 5);
  const auto* l0 = std::get_if<B>(&model.layer(0));
  const auto* l2 = std::get_if<B>(&model.layer(2));
  REQUIRE(l0);
  REQUIRE(l2);
  CHECK(std::holds_alternative<Linear<float>>(model.layer(4)));
  // round((1 - 0.9) * block grid): 75 x 196 and 25 x 75 blocks (1 - 0.9 is just below 0.1)
  CHECK(l0->weight.matrix.nnz_blocks() == 1470);
  CHECK(l2->weight.matrix.nnz_blocks() == std::llround((1.0 - 0.9) * 1875.0));
  CHECK(l2->weight.matrix.nnz_blocks() == 187);
  const auto refs = model.sparse_layers();  // the block layers, through their grid stand-ins
  REQUIRE(refs.size() == 2);
  CHECK(refs[0].blocks == l0);
  CHECK(refs[1].blocks == l2);
  CHECK(refs[1].layer->weight.matrix.nnz() == 187);
  // ERK over the grids: erk_sparsities of the grid shapes (out / R, in / C)
  MLPSpec erk = spec;
  erk.distribution = Distribution::erk;
  erk.dense_output = false;
  auto blocks = build_block_mlp<double, std::int32_t, 8, 1>(erk);
  const auto want = erk_sparsities({{38, 784}, {13, 300}, {2, 100}}, 0.9);
  int k = 0;
  for (std::size_t l = 0; l < blocks.size(); ++l)
    std::visit(
        [&](const auto& layer) {
          if constexpr (requires { layer.weight.entry_count(); }) {
            const auto& W = layer.weight.matrix;
            CHECK(W.nnz_blocks() == std::llround((1.0 - want[k]) * double(W.block_rows() * W.block_cols())));
            ++k;
          }
        },
        blocks.layer(l));
  // a layer ERK makes dense is a Linear
  CHECK(k + std::count(want.begin(), want.end(), 0.0) == 3);
  // mlp_sparsities with the block shape gives them (GraNet's targets for such a model)
  CHECK(mlp_sparsities(erk, 8, 1) == want);
  CHECK(mlp_sparsities(erk) != want);  // the unstructured ERK of the same widths differs
  CHECK_THROWS_WITH(mlp_sparsities(erk, 0, 1), Catch::Contains("block shape 0x1"));
  MLPSpec bad = spec;
  bad.sparsity = 0.9999;
  CHECK_THROWS_AS((build_block_mlp<float, std::int32_t, 4, 4>(bad)), ArgumentError);
}
