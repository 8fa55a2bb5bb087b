// Layers and the GPT with their inputs kept in bf16 (nn/projection_input.hpp). SparseLinear,
// BlockSparseLinear (8x8, 4x4, 8x1) and Linear (wide and narrow) in Precision::bf16 given a
// bf16 X: forward, weight and bias gradients and dX bit for bit those of the same layer given
// the float X that rounds to it (the float form rounds X itself), with no, ReLU and GELU input
// activations and the two-argument backward; a bf16 X on an fp32 layer is an ArgumentError.
// ProjectionInput: the stored values are the producer's rounded element by element, float
// storage passes through, bad scratch / type errors. The GPT in bf16 with and without
// GPTOptions::bf16_inputs: three AdamW steps give the same logits and weights bit for bit
// (fixed topology), the inputs it shows DST are the float model's rounded, its activations
// take (3 d_model + d_ff) x N x 2 bytes less per block, and a RigL update runs on them (the
// dense gradient from the widened bf16 inputs).
// GPTOptions::bf16_activations (Q, K, V, gelu' and the sparse layers' dY in bf16): the
// sparse layers' bf16-dY backward and the attention core's bf16 Q, K, V bit for bit their
// float forms on the same values; GELU's bf16 forward and backward the float ones rounded; the
// GPT with Q, K, V alone in bf16 bit for bit without; qkv's dY for DST the float model's rounded
// (gelu' float); with everything, every sparse dY DST sees near the float model's (the last
// fc_proj's exactly rounded), (6 d_model + 2 d_ff) x N bytes less per block, and a RigL update
// on them. GPTOptions::keep_output_grads = false (fp32 and bf16, unstructured and 8x8): the
// same bits after three steps, qkv's and fc's dY the same, none for proj and fc_proj, less
// memory in fp32 (in bf16 the kept ones take x_out's memory: no more than without), and RigL
// refused.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "sprig/core/rng.hpp"
#include "sprig/dst/rigl.hpp"
#include "sprig/nn/attention.hpp"
#include "sprig/nn/block_sparse_linear.hpp"
#include "sprig/nn/gelu.hpp"
#include "sprig/nn/gpt.hpp"
#include "sprig/nn/linear.hpp"
#include "sprig/nn/projection_input.hpp"
#include "sprig/nn/softmax_cross_entropy.hpp"
#include "sprig/nn/sparse_linear.hpp"
#include "sprig/optim/adamw.hpp"

using namespace sprig;

namespace {

Matrix<float> random_matrix(std::int64_t rows, std::int64_t cols, std::uint64_t seed) {
  Matrix<float> m(rows, cols);
  CounterRng rng(seed, 3);
  for (std::int64_t i = 0; i < rows; ++i)
    for (std::int64_t j = 0; j < cols; ++j) m(i, j) = static_cast<float>(rng.uniform(-2.0, 2.0));
  return m;
}

// X rounded to bf16, and that bf16 X widened back to float (exact).
struct RoundedX {
  Matrix<bfloat16> narrow;
  Matrix<float> wide;
};
RoundedX rounded(const Matrix<float>& X) {
  RoundedX r{Matrix<bfloat16>(X.rows(), X.cols()), Matrix<float>(X.rows(), X.cols())};
  for (std::int64_t i = 0; i < X.rows(); ++i)
    for (std::int64_t j = 0; j < X.cols(); ++j) {
      r.narrow(i, j) = bfloat16(X(i, j));
      r.wide(i, j) = static_cast<float>(r.narrow(i, j));
    }
  return r;
}

std::vector<std::uint32_t> bits(const float* p, std::int64_t n) {
  std::vector<std::uint32_t> out(static_cast<std::size_t>(n));
  std::memcpy(out.data(), p, static_cast<std::size_t>(n) * sizeof(float));
  return out;
}
std::vector<std::uint32_t> bits(const Matrix<float>& m) { return bits(m.data(), m.rows() * m.stride()); }

// Whether a holds exactly b's values rounded to bf16.
bool rounded_exactly(ConstMatrixView<bfloat16> a, ConstMatrixView<float> b) {
  bool exact = a.rows() == b.rows() && a.cols() == b.cols();
  for (std::int64_t i = 0; exact && i < b.rows(); ++i)
    for (std::int64_t c = 0; c < b.cols(); ++c) exact = exact && a(i, c).bits == bfloat16(b(i, c)).bits;
  return exact;
}

template <class L>
std::vector<std::uint32_t> grads(const L& layer) {
  auto g = bits(layer.weight.grad.data(), std::ssize(layer.weight.grad));
  const auto b = bits(layer.bias.grad.data(), std::ssize(layer.bias.grad));
  g.insert(g.end(), b.begin(), b.end());
  return g;
}

// Two layers made alike by `make`, both in Precision::bf16.
template <class Make>
auto bf16_twins(Make make) {
  auto a = make(), b = make();
  a.set_precision(Precision::bf16);
  b.set_precision(Precision::bf16);
  return std::pair{std::move(a), std::move(b)};
}

// Two bf16 layers made alike by `make`, one given the bf16 X and one the float X it came from:
// the same bits everywhere, for each input activation and the two-argument backward.
template <class Make>
void check_same_bits(Make make, std::int64_t in, std::int64_t out) {
  auto [a, b] = bf16_twins(make);
  const std::int64_t B = 19;
  const auto X = rounded(random_matrix(in, B, 5));
  const auto dY = random_matrix(out, B, 6);
  const auto deriv = random_matrix(in, B, 7);
  for (const auto act : {FusedActivation::none, FusedActivation::relu, FusedActivation::gelu}) {
    CAPTURE(static_cast<int>(act));
    Matrix<float> Ya(out, B), Yb(out, B), dXa(in, B), dXb(in, B);
    a.forward(X.narrow.view(), Ya.view());
    b.forward(X.wide.view(), Yb.view());
    CHECK(bits(Ya) == bits(Yb));
    const ConstMatrixView<float> d = act == FusedActivation::gelu ? deriv.view() : ConstMatrixView<float>{};
    a.backward(X.narrow.view(), dY.view(), dXa.view(), act, d);
    b.backward(X.wide.view(), dY.view(), dXb.view(), act, d);
    CHECK(bits(dXa) == bits(dXb));
    CHECK(grads(a) == grads(b));
  }
  Matrix<float> Ya(out, B), Yb(out, B);
  a.forward(X.narrow.view(), Ya.view(), FusedActivation::relu);
  b.forward(X.wide.view(), Yb.view(), FusedActivation::relu);
  CHECK(bits(Ya) == bits(Yb));
  a.backward(X.narrow.view(), dY.view());
  b.backward(X.wide.view(), dY.view());
  CHECK(grads(a) == grads(b));
  // shapes are checked as for a float X
  CHECK_THROWS_AS(a.forward(X.narrow.view().block(0, 0, in - 1, B), Ya.view()), ShapeError);

  // an fp32 layer refuses a bf16 X, naming the precision it needs
  auto f = make();
  Matrix<float> dX(in, B);
  CHECK_THROWS_WITH(f.forward(X.narrow.view(), Ya.view()), Catch::Contains("Precision::bf16"));
  CHECK_THROWS_AS(f.backward(X.narrow.view(), dY.view(), dX.view()), ArgumentError);
  CHECK_THROWS_AS(f.backward(X.narrow.view(), dY.view()), ArgumentError);
}

constexpr GPTConfig kConfig{.layers = 2, .heads = 2, .d_model = 16, .d_ff = 40, .block_size = 8, .vocab = 11};

struct Batch {
  std::vector<std::int32_t> tokens;
  std::vector<int> labels;
};
Batch batch() {
  Batch b{std::vector<std::int32_t>(3 * 8), std::vector<int>(3 * 8)};
  for (std::size_t n = 0; n < b.tokens.size(); ++n) {
    b.tokens[n] = static_cast<std::int32_t>((7 * n + 3) % 11);
    b.labels[n] = static_cast<int>((5 * n + 1) % 11);
  }
  return b;
}

// Logits after `steps` AdamW steps, then every parameter value, as bits.
template <class M>
std::vector<std::uint32_t> train(M& m, int steps) {
  const Batch data = batch();
  SoftmaxCrossEntropy<float> ce;
  AdamW<float> opt({.lr = 1e-2});
  for (int s = 0; s < steps; ++s) {
    const auto Z = m.forward(data.tokens, 3, 8);
    ce.forward_backward(Z, data.labels, m.output_grad());
    m.backward();
    opt.step(m);
  }
  const auto Z = m.forward(data.tokens, 3, 8);
  std::vector<std::uint32_t> out;
  for (std::int64_t i = 0; i < Z.rows(); ++i) {
    const auto r = bits(Z.row(i), Z.cols());
    out.insert(out.end(), r.begin(), r.end());
  }
  m.for_each_parameter([&](const auto& p) {
    if constexpr (requires { p.value; }) {
      const auto v = bits(p.value.data(), std::ssize(p.value));
      out.insert(out.end(), v.begin(), v.end());
    } else {
      const auto v = bits(p.matrix.values().data(), std::ssize(p.matrix.values()));
      out.insert(out.end(), v.begin(), v.end());
    }
  });
  return out;
}

// After a forward and backward: a RigL update of every sparse layer changes some topology, and
// the model runs on.
void check_rigl_update(GPT<float>& m) {
  AdamW<float> opt({.lr = 1e-2});
  dst::RigL<float, std::int32_t> rigl({.delta_t = 1, .t_begin = 0, .t_end = 10, .alpha = 0.3}, 1);
  std::vector<TopologyKey> before;
  for (const auto& r : m.sparse_layers()) before.push_back(r.layer->weight.matrix.topology_key());
  REQUIRE_NOTHROW(dst::apply_step(rigl, opt, m, 0));
  std::size_t changed = 0;
  const auto after = m.sparse_layers();
  for (std::size_t k = 0; k < after.size(); ++k) changed += after[k].layer->weight.matrix.topology_key() != before[k];
  CHECK(changed > 0);
  const Batch data = batch();
  const auto Z = m.forward(data.tokens, 3, 8);
  CHECK(std::isfinite(Z(0, 0)));
}

}  // namespace

TEST_CASE("bf16 layers given a bf16 X: the same bits as given the float X it rounds from", "[nn][bf16][bf16_inputs]") {
  SECTION("SparseLinear") {
    check_same_bits([] { return SparseLinear<float, std::int32_t>(37, 29, {.density = 0.3, .seed = 3}); }, 37, 29);
  }
  SECTION("BlockSparseLinear 8x8") {
    check_same_bits([] { return BlockSparseLinear<float, std::int32_t, 8, 8>(40, 24, {.density = 0.4, .seed = 3}); },
                    40, 24);
  }
  SECTION("BlockSparseLinear 4x4") {
    check_same_bits([] { return BlockSparseLinear<float, std::int32_t, 4, 4>(37, 29, {.density = 0.4, .seed = 3}); },
                    37, 29);
  }
  SECTION("BlockSparseLinear 8x1") {
    check_same_bits([] { return BlockSparseLinear<float, std::int16_t, 8, 1>(37, 29, {.density = 0.4, .seed = 3}); },
                    37, 29);
  }
  SECTION("Linear, wide and narrow") {
    check_same_bits([] { return Linear<float>(37, 29, 5); }, 37, 29);
    check_same_bits([] { return Linear<float>(37, 5, 5); }, 37, 5);
  }
}

TEST_CASE("bf16 sparse layers into a bf16 Y: the float Y rounded, bit for bit", "[nn][bf16][bf16_activations]") {
  const auto check = [](auto layer) {
    const std::int64_t in = layer.in_features(), out = layer.out_features(), B = 21;
    layer.set_precision(Precision::bf16);
    for (auto& b : layer.bias.value) b = 0.25f;  // the bias goes into the store too
    const auto X = rounded(random_matrix(in, B, 51));
    Matrix<float> wide(out, B);
    Matrix<bfloat16> narrow(out, B);
    layer.forward(X.narrow.view(), wide.view(), FusedActivation::relu);
    layer.forward(X.narrow.view(), narrow.view(), FusedActivation::relu);
    CHECK(rounded_exactly(narrow.view(), wide.view()));
  };
  check(SparseLinear<float, std::int32_t>(37, 29, {.density = 0.3, .seed = 3}));
  check(BlockSparseLinear<float, std::int32_t, 8, 8>(40, 24, {.density = 0.4, .seed = 3}));
  check(BlockSparseLinear<float, std::int32_t, 4, 4>(37, 29, {.density = 0.4, .seed = 3}));
  SparseLinear<float, std::int32_t> fp32(37, 29, {.density = 0.3, .seed = 3});  // fp32: refused
  Matrix<bfloat16> X(29, 4), Y(37, 4);
  CHECK_THROWS_AS(fp32.forward(X.view(), Y.view()), ArgumentError);
}

TEST_CASE("Sparse layers' backward through a bf16 gelu': GELU::backward after the float dX, bit for bit",
          "[nn][bf16][bf16_activations][gelu]") {
  const auto check = [](auto a, auto b) {
    const std::int64_t in = a.in_features(), out = a.out_features(), B = 21;
    a.set_precision(Precision::bf16);
    b.set_precision(Precision::bf16);
    const auto X = rounded(random_matrix(in, B, 61)), dY = rounded(random_matrix(out, B, 62)),
               D = rounded(random_matrix(in, B, 63));
    Matrix<float> Y(out, B);
    a.forward(X.narrow.view(), Y.view());
    b.forward(X.narrow.view(), Y.view());
    Matrix<float> dx(in, B);
    Matrix<bfloat16> want(in, B), got = D.narrow;
    a.backward(X.narrow.view(), dY.narrow.view(), dx.view());
    GELU<float>::backward(D.narrow.view(), dx.view(), want.view());
    b.backward(X.narrow.view(), dY.narrow.view(), got.view(), got.view());  // over the derivative
    bool same = true;
    for (std::int64_t i = 0; i < in; ++i)
      for (std::int64_t j = 0; j < B; ++j) same = same && got(i, j).bits == want(i, j).bits;
    CHECK(same);
    CHECK(bits(a.weight.grad.data(), std::ssize(a.weight.grad)) ==
          bits(b.weight.grad.data(), std::ssize(b.weight.grad)));
    CHECK(bits(a.bias.grad.data(), std::ssize(a.bias.grad)) == bits(b.bias.grad.data(), std::ssize(b.bias.grad)));
  };
  using B88 = BlockSparseLinear<float, std::int32_t, 8, 8>;
  using B44 = BlockSparseLinear<float, std::int32_t, 4, 4>;
  check(B88(40, 24, {.density = 0.4, .seed = 3}), B88(40, 24, {.density = 0.4, .seed = 3}));
  check(B44(37, 29, {.density = 0.4, .seed = 3}), B44(37, 29, {.density = 0.4, .seed = 3}));
  using S32 = SparseLinear<float, std::int32_t>;
  using S16 = SparseLinear<float, std::int16_t>;
  check(S32(37, 29, {.density = 0.3, .seed = 3}), S32(37, 29, {.density = 0.3, .seed = 3}));
  check(S16(40, 24, {.density = 0.5, .seed = 4}), S16(40, 24, {.density = 0.5, .seed = 4}));
}

TEST_CASE("ProjectionInput: bf16 storage holds the producer's values rounded, float storage passes through",
          "[nn][bf16][bf16_inputs]") {
  const auto source = random_matrix(5, 13, 9);
  Matrix<float> scratch(5, 13);
  ProjectionInput<float> in;
  in.reshape(5, 13, 16, true);
  REQUIRE(in.bf16());
  in.write(
      [&](MatrixView<float> y) {
        for (std::int64_t i = 0; i < 5; ++i)
          for (std::int64_t j = 0; j < 13; ++j) y(i, j) = source(i, j);
      },
      scratch.view());
  const auto narrow = in.narrow();
  REQUIRE(narrow.rows() == 5);
  CHECK(in.wide().data() == nullptr);
  for (std::int64_t i = 0; i < 5; ++i)
    for (std::int64_t j = 0; j < 13; ++j) CHECK(narrow(i, j).bits == bfloat16(source(i, j)).bits);
  CHECK(in.memory_bytes() == 5 * 16 * 2);
  Matrix<float> small(4, 13);
  CHECK_THROWS_AS(in.write([](MatrixView<float>) {}, small.view()), ShapeError);

  in.reshape(5, 13, 16, false);  // float: the producer writes the buffer itself, the scratch is not used
  in.write([&](MatrixView<float> y) { y(2, 3) = 7.5f; }, MatrixView<float>{});
  CHECK(in.wide()(2, 3) == 7.5f);
  CHECK(in.narrow().data() == nullptr);
  CHECK(in.visit([](auto v) { return v.cols(); }) == 13);

  ProjectionInput<double> d;
  CHECK_THROWS_AS(d.reshape(2, 2, 2, true), ArgumentError);
}

TEST_CASE("GPT in bf16 keeps its projections' inputs in bf16: the same bits, less memory, DST on them",
          "[nn][gpt][bf16][bf16_inputs]") {
  const std::vector<GPTBlockDensity> dens(2, {.qkv = 0.5, .proj = 1.0, .fc = 0.3, .fc_proj = 0.4});
  const auto make = [&](bool bf16_inputs) {
    return GPT<float>(kConfig, dens,
                      {.seed = 4,
                       .growth_reserve = 0.5,
                       .precision = Precision::bf16,
                       .bf16_inputs = bf16_inputs,
                       .bf16_activations = false});
  };
  auto narrow = make(true), wide = make(false);
  CHECK(train(narrow, 3) == train(wide, 3));

  // DST sees the float model's inputs rounded; a bf16 input leaves `input` empty
  const Batch data = batch();
  SoftmaxCrossEntropy<float> ce;
  for (auto* m : {&narrow, &wide}) {
    const auto Z = m->forward(data.tokens, 3, 8);
    ce.forward_backward(Z, data.labels, m->output_grad());
    m->backward();
  }
  const auto a = narrow.sparse_layers(), b = wide.sparse_layers();
  REQUIRE(a.size() == 6);  // proj is dense
  REQUIRE(a.size() == b.size());
  for (std::size_t k = 0; k < a.size(); ++k) {
    CAPTURE(k);
    CHECK(a[k].input.data() == nullptr);
    CHECK(b[k].input_bf16.data() == nullptr);
    REQUIRE(a[k].input_rows() == b[k].input_rows());
    REQUIRE(a[k].input_cols() == 24);
    for (std::int64_t i = 0; i < b[k].input.rows(); ++i)
      for (std::int64_t j = 0; j < 24; ++j) CHECK(a[k].input_bf16(i, j).bits == bfloat16(b[k].input(i, j)).bits);
  }

  // per block: LN1, attention and LN2 outputs (d_model) and the GELU output (d_ff), 2 bytes
  // less per value (Sequential's activation stride for N = 24 is 24 here)
  const std::int64_t per_block = (3 * kConfig.d_model + kConfig.d_ff) * 24 * 2;
  CHECK(wide.memory_bytes() - narrow.memory_bytes() >= kConfig.layers * per_block);

  // a RigL update reads the bf16 inputs (widened) and changes the topology
  check_rigl_update(narrow);
}

namespace {

// A bf16 layer given a bf16 dY against the same layer given the float dY that holds its values.
template <class Make>
void check_bf16_dy(Make make, std::int64_t in, std::int64_t out) {
  auto [a, b] = bf16_twins(make);
  const std::int64_t B = 21;
  const auto X = rounded(random_matrix(in, B, 15));
  const auto dY = rounded(random_matrix(out, B, 16));
  Matrix<float> Ya(out, B), Yb(out, B), dXa(in, B), dXb(in, B);
  a.forward(X.narrow.view(), Ya.view());
  b.forward(X.narrow.view(), Yb.view());
  a.backward(X.narrow.view(), dY.narrow.view(), dXa.view());
  b.backward(X.narrow.view(), dY.wide.view(), dXb.view());
  CHECK(bits(dXa) == bits(dXb));
  CHECK(grads(a) == grads(b));
  CHECK_THROWS_AS(a.backward(X.narrow.view(), dY.narrow.view().block(0, 0, out - 1, B), dXa.view()), ShapeError);
  auto f = make();  // fp32: refused
  CHECK_THROWS_WITH(f.backward(X.narrow.view(), dY.narrow.view(), dXa.view()), Catch::Contains("Precision::bf16"));
}

}  // namespace

TEST_CASE("bf16 sparse layers given a bf16 dY: the same bits as given the float dY of its values",
          "[nn][bf16][bf16_activations]") {
  SECTION("SparseLinear") {
    check_bf16_dy([] { return SparseLinear<float, std::int32_t>(37, 29, {.density = 0.3, .seed = 3}); }, 37, 29);
  }
  SECTION("BlockSparseLinear 8x8") {
    check_bf16_dy([] { return BlockSparseLinear<float, std::int32_t, 8, 8>(40, 24, {.density = 0.4, .seed = 3}); }, 40,
                  24);
  }
  SECTION("BlockSparseLinear 4x4") {
    check_bf16_dy([] { return BlockSparseLinear<float, std::int32_t, 4, 4>(37, 29, {.density = 0.4, .seed = 3}); }, 37,
                  29);
  }
}

// RigL as it ran before streams_gradients(): X and dY widened whole before its grow rule.
struct WideningRigL final : dst::SparsityAlgorithm<float, std::int32_t> {
  using SparsityAlgorithm::SparsityAlgorithm;
  std::string_view name() const override { return "rigl-widened"; }
  bool needs_gradients() const override { return true; }
  bool supports_blocks() const override { return true; }

protected:
  std::vector<std::int64_t> grow_linear_positions(const LayerRef& layer, const dst::DropSet& dropped, std::int64_t k,
                                                  CounterRng&) override {
    return top_dense_gradient(layer, dropped, k);
  }
};

// {r} with X and dY in the form they come in (bf16: input_bf16 and output_grad_bf16).
template <class V>
std::vector<SparseLayerRef<float, std::int32_t>> refs_with(SparseLayerRef<float, std::int32_t> r, V x, V dy) {
  if constexpr (std::is_same_v<V, ConstMatrixView<bfloat16>>) {
    r.input_bf16 = x;
    r.output_grad_bf16 = dy;
  } else {
    r.input = x;
    r.output_grad = dy;
  }
  return {r};
}

TEST_CASE("RigL streams bf16 X and dY in chunks of the batch: the growth of their widened values",
          "[nn][bf16][bf16_activations][dst]") {
  // 300 batch columns: chunks of 128, 128 and 44; the layers' X and dY given in bf16 to one
  // algorithm and widened to float to the other, which computes dY X^T in one product
  const std::int64_t B = 300;
  const dst::UpdateSchedule schedule{.delta_t = 1, .t_begin = 0, .t_end = 10, .alpha = 0.3};
  const auto run = [&](auto& streamed_layer, auto& widened_layer, auto refs_of) {
    const std::int64_t in = streamed_layer.in_features(), out = streamed_layer.out_features();
    const auto X = rounded(random_matrix(in, B, 41)), dY = rounded(random_matrix(out, B, 42));
    const auto streamed = refs_of(streamed_layer, X.narrow.view(), dY.narrow.view());
    const auto widened = refs_of(widened_layer, X.wide.view(), dY.wide.view());
    dst::RigL<float, std::int32_t> rigl(schedule, 1);
    WideningRigL reference(schedule, 1);
    CHECK(rigl.streams_gradients());
    CHECK_FALSE(reference.streams_gradients());
    const auto a = rigl.update(streamed, 0), b = reference.update(widened, 0);
    REQUIRE(a.layers[0].stats.grown > 0);
    CHECK(a.layers[0].stats.grown == b.layers[0].stats.grown);
    const auto live = [](const PaddedCSR<float, std::int32_t>& W) {
      std::vector<std::int64_t> at;
      W.for_each_live([&](std::int64_t i, std::int64_t c, float, std::int64_t) { at.push_back(i * W.cols() + c); });
      std::sort(at.begin(), at.end());
      return at;
    };
    CHECK(live(streamed[0].layer->weight.matrix) == live(widened[0].layer->weight.matrix));
  };
  SECTION("unstructured") {
    SparseLinear<float, std::int32_t> s(37, 29, {.density = 0.3, .seed = 3}), w(37, 29, {.density = 0.3, .seed = 3});
    run(s, w, [](auto& layer, auto x, auto dy) {
      return refs_with(SparseLayerRef<float, std::int32_t>{0, 0, &layer, {}, {}}, x, dy);
    });
  }
  SECTION("4x4 blocks") {
    BlockSparseLinear<float, std::int32_t, 4, 4> s(37, 29, {.density = 0.4, .seed = 3}),
        w(37, 29, {.density = 0.4, .seed = 3});
    run(s, w, [](auto& layer, auto x, auto dy) {
      return refs_with(SparseLayerRef<float, std::int32_t>{0, 0, &layer.topology_stand_in(), {}, {}, &layer}, x, dy);
    });
  }
}

TEST_CASE("GELU's bf16 forms: the float forms' results rounded", "[nn][bf16][bf16_activations][gelu]") {
  // 600 columns: whole registers and a tail that is not a whole register
  const std::int64_t R = 3, C = 600;
  const auto Z = random_matrix(R, C, 21);
  Matrix<float> z1 = Z, z2 = Z, y(R, C);
  Matrix<bfloat16> y16(R, C), d16(R, C);
  GELU<float> gelu;
  gelu.forward_keep_derivative(z1.view(), y.view());
  gelu.forward_keep_derivative(z2.view(), y16.view(), d16.view());
  CHECK(bits(z2) == bits(Z));  // the bf16 form leaves Z alone
  bool same = true;
  for (std::int64_t i = 0; i < R; ++i)
    for (std::int64_t j = 0; j < C; ++j)
      same = same && y16(i, j).bits == bfloat16(y(i, j)).bits && d16(i, j).bits == bfloat16(z1(i, j)).bits;
  CHECK(same);

  const auto dX = random_matrix(R, C, 22);
  Matrix<bfloat16> dy16 = d16;
  GELU<float>::backward(dy16.view(), dX.view(), dy16.view());  // in place of the derivative
  Matrix<float> dx = dX;
  GELU<float>::backward(d16.view(), dx.view());
  for (std::int64_t i = 0; i < R; ++i)
    for (std::int64_t j = 0; j < C; ++j) {
      const float expect = dX(i, j) * static_cast<float>(d16(i, j));
      same = same && dx(i, j) == expect && dy16(i, j).bits == bfloat16(expect).bits;
    }
  CHECK(same);
  Matrix<bfloat16> small(R, C - 1);
  CHECK_THROWS_AS(gelu.forward_keep_derivative(z2.view(), small.view(), d16.view()), ShapeError);
  CHECK_THROWS_AS(GELU<float>::backward(d16.view(), dX.view(), small.view()), ShapeError);
}

TEST_CASE("The bf16 attention core given bf16 Q, K, V: the same bits as given their float values",
          "[nn][bf16][bf16_activations][attention]") {
  std::vector<Bf16AttentionPath> paths{Bf16AttentionPath::portable};
  if (bf16_attention_unavailable_reason(Bf16AttentionPath::avx512_bf16).empty())
    paths.push_back(Bf16AttentionPath::avx512_bf16);
  else
    WARN("NOT RUN: the avx512_bf16 attention path with bf16 Q, K, V ("
         << bf16_attention_unavailable_reason(Bf16AttentionPath::avx512_bf16) << ")");
  const std::int64_t d = 24, heads = 3, B = 2, T = 13;  // d_head 8, odd T
  const auto Q = rounded(random_matrix(d, B * T, 31)), K = rounded(random_matrix(d, B * T, 32)),
             V = rounded(random_matrix(d, B * T, 33));
  const auto dOut = random_matrix(d, B * T, 34);
  for (const auto path : paths) {
    CAPTURE(path_name(path));
    CausalSelfAttention<float> a(d, heads), b(d, heads);
    a.set_precision(Precision::bf16, path);
    b.set_precision(Precision::bf16, path);
    Matrix<float> Oa(d, B * T), Ob(d, B * T);
    a.forward(Q.narrow.view(), K.narrow.view(), V.narrow.view(), B, T, Oa.view());
    b.forward(Q.wide.view(), K.wide.view(), V.wide.view(), B, T, Ob.view());
    CHECK(bits(Oa) == bits(Ob));
    Matrix<float> ga(3 * d, B * T), gb(3 * d, B * T);
    const auto part = [&](Matrix<float>& g, std::int64_t k) { return g.view().block(k * d, 0, d, B * T); };
    a.backward(Q.narrow.view(), K.narrow.view(), V.narrow.view(), dOut.view(), part(ga, 0), part(ga, 1), part(ga, 2));
    b.backward(Q.wide.view(), K.wide.view(), V.wide.view(), dOut.view(), part(gb, 0), part(gb, 1), part(gb, 2));
    CHECK(bits(ga) == bits(gb));
  }
  CausalSelfAttention<float> f(d, heads);  // fp32: refused
  Matrix<float> O(d, B * T);
  CHECK_THROWS_WITH(f.forward(Q.narrow.view(), K.narrow.view(), V.narrow.view(), B, T, O.view()),
                    Catch::Contains("Precision::bf16"));
}

TEST_CASE("GPT with bf16 activations: Q, K, V alone the same bits, dY for DST rounded, less memory",
          "[nn][gpt][bf16][bf16_activations]") {
  SECTION("a dense qkv with float inputs keeps only Q, K, V in bf16: the same bits as without") {
    const std::vector<GPTBlockDensity> dens(2, {.qkv = 1.0, .proj = 0.5, .fc = 0.3, .fc_proj = 0.4});
    const auto make = [&](bool act) {
      return GPT<float>(kConfig, dens,
                        {.seed = 4, .precision = Precision::bf16, .bf16_inputs = false, .bf16_activations = act});
    };
    auto on = make(true), off = make(false);
    CHECK(train(on, 3) == train(off, 3));
    CHECK(off.memory_bytes() - on.memory_bytes() >= kConfig.layers * 3 * kConfig.d_model * 24 * 2);
  }
  const std::vector<GPTBlockDensity> dens(2, {.qkv = 0.5, .proj = 0.6, .fc = 0.3, .fc_proj = 0.4});
  const auto make = [&](bool act) {
    return GPT<float>(kConfig, dens,
                      {.seed = 4, .growth_reserve = 0.5, .precision = Precision::bf16, .bf16_activations = act});
  };
  const Batch data = batch();
  SoftmaxCrossEntropy<float> ce;
  // One forward and backward of each model, then their sparse layers (8: every projection but
  // the dense ones; none is dense here).
  const auto stepped_layers = [&](auto& on, auto& off) {
    for (auto* m : {&on, &off}) {
      const auto Z = m->forward(data.tokens, 3, 8);
      ce.forward_backward(Z, data.labels, m->output_grad());
      m->backward();
    }
    auto layers = std::pair{on.sparse_layers(), off.sparse_layers()};
    REQUIRE(layers.first.size() == 8);
    return layers;
  };
  SECTION("with fc_proj in fp32 (gelu' float): a sparse qkv's dY for DST is the float model's rounded") {
    auto on = make(true), off = make(false);
    for (auto* m : {&on, &off})
      for (std::size_t l = 0; l < 2; ++l)
        std::visit([](auto& layer) { layer.set_precision(Precision::fp32); }, m->projection(l, GPTProjection::fc_proj));
    const auto [a, b] = stepped_layers(on, off);
    for (std::size_t k = 0; k < a.size(); ++k) {
      CAPTURE(k);
      REQUIRE(a[k].output_grad_cols() == 24);
      if (a[k].position % 4 != 0) {  // proj, fc and fc_proj: float in both, the same bits
        CHECK(bits(a[k].output_grad.data(), a[k].output_grad.rows() * a[k].output_grad.stride()) ==
              bits(b[k].output_grad.data(), b[k].output_grad.rows() * b[k].output_grad.stride()));
        continue;
      }
      CHECK(a[k].output_grad.data() == nullptr);
      CHECK(rounded_exactly(a[k].output_grad_bf16, b[k].output_grad));
    }
  }
  SECTION("everything in bf16: the sparse layers' dY for DST near the float model's, less memory, RigL on them") {
    auto on = make(true), off = make(false);
    const auto [a, b] = stepped_layers(on, off);
    for (std::size_t k = 0; k < a.size(); ++k) {
      CAPTURE(k);
      CHECK(a[k].output_grad.data() == nullptr);
      REQUIRE(a[k].output_grad_rows() == b[k].output_grad_rows());
      REQUIRE(a[k].output_grad_cols() == 24);
      Matrix<float> buffer;
      const auto wide = a[k].float_output_grad(buffer);
      double worst = 0.0, scale = 0.0;
      for (std::int64_t i = 0; i < wide.rows(); ++i)
        for (std::int64_t c = 0; c < 24; ++c) {
          const double want = b[k].output_grad(i, c);
          worst = std::max(worst, std::abs(static_cast<double>(wide(i, c)) - want));
          scale = std::max(scale, std::abs(want));
        }
      // qkv's, fc's and fc_proj's dY rounded (2^-9 relative), fc's after gelu' was rounded, and
      // what those changed upstream
      CHECK(scale > 0.0);
      CHECK(worst <= 0.02 * scale);
      // the last fc_proj's dY comes before any rounding: rounded once
      if (a[k].position == 7) CHECK(rounded_exactly(a[k].output_grad_bf16, b[k].output_grad));
    }
    // Q, K, V (3 d_model) and gelu' (d_ff) at 2 bytes instead of 4, per block
    const std::int64_t per_block = (3 * kConfig.d_model + kConfig.d_ff) * 24 * 2;
    CHECK(off.memory_bytes() - on.memory_bytes() >= kConfig.layers * per_block);

    check_rigl_update(on);  // a RigL update on the bf16 dY (widened)
    train(on, 3);           // and it trains on
    const auto Z = on.forward(data.tokens, 3, 8);
    CHECK(std::isfinite(Z(0, 0)));
  }
}

TEST_CASE("GPT without keep_output_grads: the same bits, no dY for proj and fc_proj; keeping them costs no memory",
          "[nn][gpt][bf16][keep_output_grads]") {
  const std::vector<GPTBlockDensity> dens(2, {.qkv = 0.5, .proj = 0.6, .fc = 0.3, .fc_proj = 0.4});
  const std::int64_t n = 24;
  const Batch data = batch();
  SoftmaxCrossEntropy<float> ce;
  const auto run = [&](auto make) {
    for (const Precision p : {Precision::fp32, Precision::bf16}) {
      CAPTURE(precision_name(p));
      auto kept = make(p, true), shared = make(p, false);
      CHECK(train(kept, 3) == train(shared, 3));
      for (auto* m : {&kept, &shared}) {
        ce.forward_backward(m->forward(data.tokens, 3, 8), data.labels, m->output_grad());
        m->backward();
      }
      const auto a = kept.sparse_layers(), b = shared.sparse_layers();
      REQUIRE(a.size() == 8);
      REQUIRE(b.size() == 8);
      for (std::size_t k = 0; k < a.size(); ++k) {
        CAPTURE(k);
        REQUIRE(a[k].output_grad_cols() == n);
        const std::size_t j = a[k].position % 4;
        if (j == 1 || j == 3) {  // proj, fc_proj: none kept
          CHECK(b[k].output_grad_rows() * b[k].output_grad_cols() == 0);
          continue;
        }
        Matrix<float> wa, wb;  // qkv, fc: their dY where they are anyway, the same bits
        const auto ya = a[k].float_output_grad(wa), yb = b[k].float_output_grad(wb);
        REQUIRE(yb.cols() == n);
        for (std::int64_t i = 0; i < ya.rows(); ++i) CHECK(bits(ya.row(i), n) == bits(yb.row(i), n));
      }
      // the dY kept for DST take the memory of activations dead by then, x_mid and x_out in
      // float (GPTBlock::kept_grad; the last block's fc_proj's a buffer of its own, where the
      // other run has its one shared buffer), x_out in bf16 (GPTBlock::kept_dy16): nothing more
      CHECK(kept.memory_bytes() <= shared.memory_bytes());
      // a rule that reads gradients is refused, naming what is missing
      AdamW<float> opt({.lr = 1e-2});
      dst::RigL<float, std::int32_t> rigl({.delta_t = 1, .t_begin = 0, .t_end = 10, .alpha = 0.3}, 1);
      CHECK_THROWS_AS(dst::apply_step(rigl, opt, shared, 0), ArgumentError);
      CHECK_THROWS_WITH(dst::apply_step(rigl, opt, shared, 0), Catch::Contains("output gradient"));
    }
  };
  SECTION("unstructured") {
    run([&](Precision p, bool keep) {
      return GPT<float>(kConfig, dens, {.seed = 4, .precision = p, .keep_output_grads = keep});
    });
  }
  SECTION("8x8 blocks") {
    run([&](Precision p, bool keep) {
      return GPT<float, std::int32_t, BlockSparseLinear<float, std::int32_t, 8, 8>>(
          kConfig, dens, {.seed = 4, .precision = p, .keep_output_grads = keep});
    });
  }
}

TEST_CASE("GPT in bf16: fc's output in column chunks gives the same logits", "[nn][gpt][bf16][bf16_activations]") {
  // 320 tokens: with bf16 activations fc's float output goes through a 256-column spare twice
  // (256 + 64 columns); without, whole into fc_out. The forwards' logits are the same bits.
  const auto check = [](auto make) {
    auto chunked = make(true), whole = make(false);
    std::vector<std::int32_t> tokens(40 * 8);
    for (std::size_t n = 0; n < tokens.size(); ++n) tokens[n] = static_cast<std::int32_t>((7 * n + 3) % 11);
    const auto a = chunked.forward(tokens, 40, 8), b = whole.forward(tokens, 40, 8);
    REQUIRE(a.cols() == 320);
    for (std::int64_t i = 0; i < a.rows(); ++i) CHECK(bits(a.row(i), a.cols()) == bits(b.row(i), b.cols()));
    // the spare holds 256 columns, not 320 (whole keeps its float fc_out and a full spare)
    CHECK(whole.memory_bytes() - chunked.memory_bytes() >= kConfig.d_ff * 64 * 4);
  };
  const std::vector<GPTBlockDensity> dens(2, {.qkv = 0.5, .proj = 0.6, .fc = 0.3, .fc_proj = 0.4});
  SECTION("8x8 blocks") {
    check([&](bool act) {
      return GPT<float, std::int32_t, BlockSparseLinear<float, std::int32_t, 8, 8>>(
          kConfig, dens, {.seed = 4, .precision = Precision::bf16, .bf16_activations = act});
    });
  }
  SECTION("unstructured") {
    check([&](bool act) {
      return GPT<float>(kConfig, dens, {.seed = 4, .precision = Precision::bf16, .bf16_activations = act});
    });
  }
}
