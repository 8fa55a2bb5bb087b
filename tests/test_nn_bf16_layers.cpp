// Layers with Precision::bf16. SparseLinear (nn/sparse_linear.hpp): forward, the weight gradient and
// dX against references summed in double from the bf16-rounded W, X and dY (rounded here
// with sprig::bfloat16, not by the layer), within the float accumulation bound
// gamma_{n} * sum |products|, n the number of terms plus one per float addition after the
// sum (bias, the activation's product); odd shapes with an empty and a full row; ReLU and
// GELU input activations; bitwise identical for 1 and 2 threads; the float masters untouched
// by forward; errors (double layer, backward before forward, overlap). A GPT with bf16 sparse
// projections, unstructured and in blocks (8x8, 4x4, 8x1): its loss next to the fp32 model's,
// AdamW learns with it, 1 and 2 threads give the same bits. Linear (nn/linear.hpp) the same way, wide and narrow (bf16_gemm),
// and a dense GPT in bf16.
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <type_traits>
#include <vector>

#include "sprig/core/rng.hpp"
#include "sprig/models/gpt.hpp"
#include "sprig/nn/gpt.hpp"
#include "sprig/nn/linear.hpp"
#include "sprig/nn/softmax_cross_entropy.hpp"
#include "sprig/nn/sparse_linear.hpp"
#include "sprig/optim/adamw.hpp"
#include "with_threads.hpp"

using namespace sprig;

namespace {

double rounded(float v) { return static_cast<double>(static_cast<float>(bfloat16(v))); }

// gamma_n = n u / (1 - n u), u = 2^-24: the float summation bound.
double gamma(std::int64_t n) {
  const double nu = static_cast<double>(n) * std::ldexp(1.0, -24);
  return nu / (1.0 - nu);
}

Matrix<float> random_matrix(std::int64_t rows, std::int64_t cols, std::uint64_t seed) {
  Matrix<float> m(rows, cols);
  CounterRng rng(seed, 3);
  for (std::int64_t i = 0; i < rows; ++i)
    for (std::int64_t j = 0; j < cols; ++j) m(i, j) = static_cast<float>(rng.uniform(-2.0, 2.0));
  return m;
}

// A 29 x 37 layer: row 3 empty, row 7 full, the rest at about 30% density.
SparseLinear<float, std::int32_t> odd_layer() {
  const std::int64_t out = 29, in = 37;
  Matrix<float> dense(out, in);
  CounterRng rng(11, 4);
  for (std::int64_t i = 0; i < out; ++i)
    for (std::int64_t j = 0; j < in; ++j) {
      const bool live = i == 7 || (i != 3 && rng.uniform(0.0, 1.0) < 0.3);
      dense(i, j) = live ? static_cast<float>(rng.uniform(-1.0, 1.0)) : 0.0f;
    }
  SparseLinear<float, std::int32_t> layer(PaddedCSR<float, std::int32_t>::from_dense(dense.view()));
  for (std::int64_t i = 0; i < out; ++i) layer.bias.value[static_cast<std::size_t>(i)] = 0.1f * float(i % 5) - 0.2f;
  return layer;
}

// (column, weight) of row i's live slots.
template <class L>
std::vector<std::pair<std::int64_t, float>> row_entries(const L& layer, std::int64_t i) {
  const auto& W = layer.weight.matrix;
  std::vector<std::pair<std::int64_t, float>> e;
  for (std::int64_t q = 0; q < W.row_nnz(i); ++q)
    e.emplace_back(W.col_indices()[std::size_t(W.row_start(i) + q)], W.values()[std::size_t(W.row_start(i) + q)]);
  return e;
}

}  // namespace

TEST_CASE("SparseLinear bf16: forward, weight gradient and dX match the double reference of the rounded operands",
          "[nn][sparse_linear][bf16]") {
  auto layer = odd_layer();
  layer.set_precision(Precision::bf16);
  REQUIRE(layer.precision() == Precision::bf16);
  const std::int64_t in = 37, out = 29;
  for (const std::int64_t B : {1, 13, 40}) {
    for (const FusedActivation act : {FusedActivation::none, FusedActivation::relu}) {
      CAPTURE(B, int(act));
      const auto X = random_matrix(in, B, 20 + B);
      const auto masters = layer.weight.matrix.values();
      const std::vector<float> before(masters.begin(), masters.end());
      Matrix<float> Y(out, B);
      layer.forward(X.view(), Y.view(), act);
      CHECK(std::vector<float>(layer.weight.matrix.values().begin(), layer.weight.matrix.values().end()) == before);
      for (std::int64_t i = 0; i < out; ++i)
        for (std::int64_t b = 0; b < B; ++b) {
          double want = 0, S = 0;
          const auto e = row_entries(layer, i);
          for (const auto& [c, w] : e) {
            want += rounded(w) * rounded(X(c, b));
            S += std::abs(rounded(w) * rounded(X(c, b)));
          }
          const double bias = layer.bias.value[std::size_t(i)];
          want += bias;
          S += std::abs(bias);
          if (act == FusedActivation::relu) want = std::max(want, 0.0);
          const double tol = gamma(std::ssize(e) + 1) * S;
          if (std::abs(double(Y(i, b)) - want) > tol) FAIL_CHECK("Y(" << i << "," << b << ") " << Y(i, b) << " vs " << want);
        }
    }
    // backward: dW at live slots over the batch; dX = W^T dY over each column's live weights
    const auto X = random_matrix(in, B, 40 + B);
    const auto dY = random_matrix(out, B, 60 + B);
    Matrix<float> Y(out, B), dX(in, B);
    layer.forward(X.view(), Y.view());
    layer.backward(X.view(), dY.view(), dX.view());
    const auto& W = layer.weight.matrix;
    for (std::int64_t i = 0; i < out; ++i)
      for (std::int64_t q = 0; q < W.row_nnz(i); ++q) {
        const std::int64_t s = W.row_start(i) + q, c = W.col_indices()[std::size_t(s)];
        double want = 0, S = 0;
        for (std::int64_t b = 0; b < B; ++b) {
          want += rounded(dY(i, b)) * rounded(X(c, b));
          S += std::abs(rounded(dY(i, b)) * rounded(X(c, b)));
        }
        if (std::abs(double(layer.weight.grad[std::size_t(s)]) - want) > gamma(B) * S)
          FAIL_CHECK("grad at (" << i << "," << c << ") " << layer.weight.grad[std::size_t(s)] << " vs " << want);
      }
    for (std::int64_t c = 0; c < in; ++c)
      for (std::int64_t b = 0; b < B; ++b) {
        double want = 0, S = 0;
        std::int64_t n = 0;
        for (std::int64_t i = 0; i < out; ++i)
          for (const auto& [k, w] : row_entries(layer, i))
            if (k == c) {
              want += rounded(w) * rounded(dY(i, b));
              S += std::abs(rounded(w) * rounded(dY(i, b)));
              ++n;
            }
        if (std::abs(double(dX(c, b)) - want) > gamma(n) * S)
          FAIL_CHECK("dX(" << c << "," << b << ") " << dX(c, b) << " vs " << want);
      }
    for (std::int64_t i = 0; i < out; ++i) {
      double want = 0;
      for (std::int64_t b = 0; b < B; ++b) want += dY(i, b);
      CHECK(std::abs(double(layer.bias.grad[std::size_t(i)]) - want) <= 1e-4 * (1 + std::abs(want)));
    }
  }
}

TEST_CASE("SparseLinear bf16: ReLU and GELU input activations are applied to dX", "[nn][sparse_linear][bf16]") {
  auto bf = odd_layer();
  bf.set_precision(Precision::bf16);
  const std::int64_t in = 37, out = 29, B = 9;
  const auto X = random_matrix(in, B, 5);
  const auto dY = random_matrix(out, B, 6);
  const auto deriv = random_matrix(in, B, 7);
  Matrix<float> Y(out, B), plain(in, B), relu(in, B), gelu(in, B);
  bf.forward(X.view(), Y.view());
  bf.backward(X.view(), dY.view(), plain.view());
  bf.forward(X.view(), Y.view());
  bf.backward(X.view(), dY.view(), relu.view(), FusedActivation::relu);
  bf.forward(X.view(), Y.view());
  bf.backward(X.view(), dY.view(), gelu.view(), FusedActivation::gelu, deriv.view());
  for (std::int64_t c = 0; c < in; ++c)
    for (std::int64_t b = 0; b < B; ++b) {
      CHECK(relu(c, b) == (X(c, b) > 0 ? plain(c, b) : 0.0f));
      CHECK(gelu(c, b) == plain(c, b) * deriv(c, b));
    }
}

TEST_CASE("SparseLinear bf16: bitwise the same for 1 and 2 threads", "[nn][sparse_linear][bf16][threads]") {
  const std::int64_t in = 300, out = 200, B = 64;
  const auto X = random_matrix(in, B, 8);
  const auto dY = random_matrix(out, B, 9);
  std::vector<float> y[2], dx[2], g[2];
  for (int t = 0; t < 2; ++t)
    sprig_test::with_threads(t + 1, [&] {
      SparseLinear<float, std::int32_t> layer(in, out, {.density = 0.2, .seed = 3});
      layer.set_precision(Precision::bf16);
      Matrix<float> Y(out, B), dX(in, B);
      layer.forward(X.view(), Y.view());
      layer.backward(X.view(), dY.view(), dX.view());
      y[t].assign(Y.data(), Y.data() + out * B);
      dx[t].assign(dX.data(), dX.data() + in * B);
      g[t] = std::vector<float>(layer.weight.grad.begin(), layer.weight.grad.end());
    });
  CHECK(y[0] == y[1]);
  CHECK(dx[0] == dx[1]);
  CHECK(g[0] == g[1]);
}

TEST_CASE("SparseLinear bf16: clear errors", "[nn][sparse_linear][bf16][errors]") {
  SparseLinear<double, std::int32_t> d(8, 8, {.density = 0.5, .seed = 1});
  CHECK_THROWS_AS(d.set_precision(Precision::bf16), ArgumentError);
  CHECK_NOTHROW(d.set_precision(Precision::fp32));
  auto layer = odd_layer();
  layer.set_precision(Precision::bf16);
  const auto X = random_matrix(37, 4, 1);
  const auto dY = random_matrix(29, 4, 2);
  Matrix<float> dX(37, 4), Y(29, 4);
  CHECK_THROWS_AS(layer.backward(X.view(), dY.view(), dX.view()), ArgumentError);  // no forward yet
  layer.forward(X.view(), Y.view());
  Matrix<float> both(66, 4);
  CHECK_THROWS_AS(layer.backward(both.view().block(0, 0, 37, 4), both.view().block(29, 0, 29, 4),
                                 both.view().block(8, 0, 37, 4)),
                  ArgumentError);  // dX overlaps X and dY
  CHECK_THROWS_AS(parse_precision("fp16"), ArgumentError);
  CHECK(parse_precision("bf16") == Precision::bf16);
  CHECK(std::string(precision_name(Precision::fp32)) == "fp32");
}

TEST_CASE("Bf16Scratch::parts: each part on its own 64-byte line, none overlapping, the last one exact",
          "[nn][bf16][memory]") {
  Bf16Scratch scratch;
  const auto line = [](const bfloat16* p) { return reinterpret_cast<std::uintptr_t>(p) % 64 == 0; };
  for (const std::array<std::int64_t, 4> sizes :
       {std::array<std::int64_t, 4>{1, 31, 33, 5}, {32, 0, 64, 0}, {0, 0, 0, 7}, {148, 29, 1, 1000}}) {
    const auto p = scratch.parts(sizes);
    std::int64_t end = 0;  // elements from p[0] to the last part's end
    for (std::size_t i = 0; i < 4; ++i) {
      INFO("part " << i << " of " << sizes[0] << ", " << sizes[1] << ", " << sizes[2] << ", " << sizes[3]);
      CHECK(line(p[i]));
      if (i > 0) CHECK(p[i] - p[i - 1] == (sizes[i - 1] + 31) / 32 * 32);  // the part before, whole and padded
      end = (p[i] - p[0]) + sizes[i];
    }
    CHECK(scratch.memory_bytes() >= end * static_cast<std::int64_t>(sizeof(bfloat16)));
    for (std::size_t i = 0; i < 4; ++i)  // every part writable to its end
      std::fill(p[i], p[i] + sizes[i], bfloat16(static_cast<float>(i)));
    for (std::size_t i = 0; i < 4; ++i)
      for (std::int64_t k = 0; k < sizes[i]; ++k) REQUIRE(static_cast<float>(p[i][k]) == static_cast<float>(i));
  }
  Bf16Scratch fresh;  // grows to the last part's end, not a line past it
  fresh.parts(std::array<std::int64_t, 2>{3, 5});
  CHECK(fresh.memory_bytes() == (32 + 5) * static_cast<std::int64_t>(sizeof(bfloat16)));
}

TEST_CASE("bf16 layers: memory_bytes counts the shadow and an owned scratch once, a shared one never",
          "[nn][bf16][memory]") {
  const auto X = random_matrix(37, 4, 1);
  const auto bytes = [](std::int64_t n) { return n * static_cast<std::int64_t>(sizeof(bfloat16)); };
  // The layer's shadow is storage_size() values (SparseLinear) or in x out (Linear); its own
  // scratch holds the rounded X (37 x 4) after a forward, and Linear's also the GEMM's packing
  // memory after it (on a 64-byte line: 160 values for the X).
  // Copies (Linear; SparseLinear is move-only): a copy shares a shared scratch, not an owned one.
  const auto check = [&](auto& layer, std::int64_t shadow_values, std::int64_t out, std::int64_t scratch_values) {
    layer.set_precision(Precision::bf16);
    Matrix<float> Y(out, 4);
    layer.forward(X.view(), Y.view());
    const std::int64_t own = layer.memory_bytes();
    if constexpr (std::is_copy_constructible_v<std::remove_cvref_t<decltype(layer)>>) {
      auto copy = layer;  // shares nothing it owned: its scratch is new and empty
      CHECK(copy.memory_bytes() == own - bytes(scratch_values));
      copy.forward(X.view(), Y.view());
      CHECK(copy.memory_bytes() == own);
    }
    const auto shared = std::make_shared<Bf16Scratch>();
    layer.share_bf16_scratch(shared);  // counted by its owner (a ModelScratch), not the layer
    layer.forward(X.view(), Y.view());
    CHECK(shared->memory_bytes() == bytes(scratch_values));
    const std::int64_t with_shared = layer.memory_bytes();
    CHECK(with_shared == own - bytes(scratch_values));
    if constexpr (std::is_copy_constructible_v<std::remove_cvref_t<decltype(layer)>>) {
      auto shared_copy = layer;  // a copy keeps sharing
      shared_copy.forward(X.view(), Y.view());
      CHECK(shared_copy.memory_bytes() == with_shared);
    }
    layer.set_precision(Precision::fp32);  // frees the shadow
    CHECK(layer.memory_bytes() == with_shared - bytes(shadow_values));
  };
  auto sparse = odd_layer();
  check(sparse, sparse.weight.matrix.storage_size(), 29, 37 * 4);
  Linear<float> dense(37, 29, 3);
  check(dense, 37 * 29, 29, 160 + bf16_gemm_workspace_size(29, 37, 4, bf16_gemm_path()));
}

namespace {

constexpr GPTConfig kLearnConfig{.layers = 2, .heads = 2, .d_model = 32, .d_ff = 64, .block_size = 8, .vocab = 11};

// A 2-block GPT make(precision) in fp32 and in bf16: their first logits differ (the bf16
// products are not the fp32 ones) by under 5% of the largest, their losses by under 2%, and
// AdamW teaches the bf16 one a period-5 sequence.
template <class Make>
void check_bf16_gpt_learns(Make make) {
  auto fp = make(Precision::fp32);
  auto bf = make(Precision::bf16);
  using Model = decltype(fp);
  const int pattern[] = {0, 3, 1, 4, 2};
  std::vector<std::int32_t> tokens;
  std::vector<int> labels;
  for (int b = 0; b < 4; ++b)
    for (int t = 0; t < 8; ++t) {
      tokens.push_back(pattern[(b + t) % 5]);
      labels.push_back(pattern[(b + t + 1) % 5]);
    }
  SoftmaxCrossEntropy<float> ce_fp, ce_bf;
  const auto step = [&](Model& m, SoftmaxCrossEntropy<float>& ce) {
    const auto Z = m.forward(tokens, 4, 8);
    const float loss = ce.forward_backward(Z, labels, m.output_grad());
    m.backward();
    return loss;
  };
  // the logits differ (the products are bf16's; with GPT-2's small initial weights the
  // losses may round to the same float), by little
  {
    const auto Zf = fp.forward(tokens, 4, 8), Zb = bf.forward(tokens, 4, 8);
    double largest = 0, diff = 0;
    for (std::int64_t i = 0; i < Zf.rows(); ++i)
      for (std::int64_t j = 0; j < Zf.cols(); ++j) {
        largest = std::max(largest, std::abs(static_cast<double>(Zf(i, j))));
        diff = std::max(diff, std::abs(static_cast<double>(Zf(i, j)) - Zb(i, j)));
      }
    CHECK(diff > 0.0);
    CHECK(diff < 0.05 * largest);
  }
  const float l_fp = step(fp, ce_fp), l_bf = step(bf, ce_bf);
  CHECK(std::abs(l_fp - l_bf) < 0.02f * l_fp);
  AdamW<float> opt({.lr = 1e-2, .weight_decay = 0.0});
  float last = l_bf;
  for (int s = 0; s < 100; ++s) {
    opt.step(bf);
    last = step(bf, ce_bf);
  }
  CHECK(l_bf > 2.0f);  // about log(11) at the start
  CHECK(last < 0.05f);
}

}  // namespace

TEST_CASE("GPT with bf16 sparse projections: loss next to fp32's, and AdamW learns", "[nn][gpt][bf16]") {
  const std::vector<GPTBlockDensity> dens(2, {.qkv = 0.5, .proj = 0.5, .fc = 0.3, .fc_proj = 0.3});
  check_bf16_gpt_learns([&](Precision p) { return GPT<float>(kLearnConfig, dens, {.seed = 4, .precision = p}); });
  const std::vector<GPTBlockDensity> one(1, {.qkv = 0.5, .proj = 0.5, .fc = 0.5, .fc_proj = 0.5});
  constexpr GPTConfig small{.layers = 1, .heads = 2, .d_model = 16, .d_ff = 32, .block_size = 8, .vocab = 11};
  CHECK_THROWS_AS((GPT<double>(small, one, {.seed = 1, .precision = Precision::bf16})), ArgumentError);
}

// Block shapes with an even and an odd pair dimension (the avx512_bf16 path pairs C in
// forward and R in dX; 8x1 takes the portable forward where the machine has that path).
TEMPLATE_TEST_CASE_SIG("GPT with bf16 block-sparse projections: loss next to fp32's, AdamW learns, and 1 and 2 "
                       "threads give the same bits",
                       "[nn][gpt][bf16][blocks]", ((int R, int C), R, C), (8, 8), (4, 4), (8, 1)) {
  const auto make = [](Precision p) {
    return models::build_block_gpt<float, std::int32_t, R, C>(
        {.config = kLearnConfig, .attn_sparsity = 0.5, .ffn_sparsity = 0.7, .seed = 4, .precision = p});
  };
  check_bf16_gpt_learns(make);
  auto bf = make(Precision::bf16);
  REQUIRE(bf.sparse_layers().size() == 8);
  // three AdamW steps on 1 and on 2 threads: the same logits and weights, bit for bit
  const auto train = [&](int threads) {
    auto m = make(Precision::bf16);
    std::vector<float> out;
    sprig_test::with_threads(threads, [&] {
      std::vector<std::int32_t> tokens(3 * 8);
      std::vector<int> labels(tokens.size());
      for (std::size_t n = 0; n < tokens.size(); ++n) {
        tokens[n] = static_cast<std::int32_t>((7 * n + 3) % 11);
        labels[n] = static_cast<int>((5 * n + 1) % 11);
      }
      SoftmaxCrossEntropy<float> ce;
      AdamW<float> opt({.lr = 1e-2});
      for (int s = 0; s < 3; ++s) {
        const auto Z = m.forward(tokens, 3, 8);
        ce.forward_backward(Z, labels, m.output_grad());
        m.backward();
        opt.step(m);
      }
      const auto Z = m.forward(tokens, 3, 8);
      for (std::int64_t i = 0; i < Z.rows(); ++i)
        for (std::int64_t j = 0; j < Z.cols(); ++j) out.push_back(Z(i, j));
      m.for_each_parameter([&](const auto& p) {
        if constexpr (requires { p.value; })
          out.insert(out.end(), p.value.begin(), p.value.end());
        else
          out.insert(out.end(), p.matrix.values().begin(), p.matrix.values().end());
      });
    });
    return out;
  };
  CHECK(train(1) == train(2));
}

TEST_CASE("Linear bf16: forward, weight gradient and dX match the double reference of the rounded operands",
          "[nn][linear][bf16]") {
  for (const std::int64_t out : {5, 29}) {  // narrow (<= kNarrowMaxRows) and gemm-sized
    const std::int64_t in = 37, B = 19;
    CAPTURE(out);
    Linear<float> layer(in, out, 3, 1);
    for (std::int64_t i = 0; i < out; ++i) layer.bias.value[std::size_t(i)] = 0.05f * float(i % 7) - 0.1f;
    layer.set_precision(Precision::bf16);
    REQUIRE(layer.precision() == Precision::bf16);
    const auto X = random_matrix(in, B, 70 + out);
    const auto dY = random_matrix(out, B, 80 + out);
    const auto deriv = random_matrix(in, B, 90 + out);
    Matrix<float> Y(out, B), dX(in, B);
    layer.forward(X.view(), Y.view(), FusedActivation::relu);
    layer.backward(X.view(), dY.view(), dX.view(), FusedActivation::gelu, deriv.view());
    const auto w = [&](std::int64_t i, std::int64_t k) { return rounded(layer.weight.value[std::size_t(i * in + k)]); };
    for (std::int64_t i = 0; i < out; ++i)
      for (std::int64_t b = 0; b < B; ++b) {
        double want = layer.bias.value[std::size_t(i)], S = std::abs(want);
        for (std::int64_t k = 0; k < in; ++k) {
          want += w(i, k) * rounded(X(k, b));
          S += std::abs(w(i, k) * rounded(X(k, b)));
        }
        if (std::abs(double(Y(i, b)) - std::max(want, 0.0)) > gamma(in + 2) * S)
          FAIL_CHECK("Y(" << i << "," << b << ") " << Y(i, b) << " vs " << want);
      }
    for (std::int64_t i = 0; i < out; ++i)
      for (std::int64_t k = 0; k < in; ++k) {
        double want = 0, S = 0;
        for (std::int64_t b = 0; b < B; ++b) {
          want += rounded(dY(i, b)) * rounded(X(k, b));
          S += std::abs(rounded(dY(i, b)) * rounded(X(k, b)));
        }
        if (std::abs(double(layer.weight.grad[std::size_t(i * in + k)]) - want) > gamma(B + 1) * S)
          FAIL_CHECK("dW(" << i << "," << k << ")");
      }
    for (std::int64_t k = 0; k < in; ++k)
      for (std::int64_t b = 0; b < B; ++b) {
        double want = 0, S = 0;
        for (std::int64_t i = 0; i < out; ++i) {
          want += w(i, k) * rounded(dY(i, b));
          S += std::abs(w(i, k) * rounded(dY(i, b)));
        }
        // then times gelu' in float: one more rounding
        const double d = deriv(k, b);
        if (std::abs(double(dX(k, b)) - want * d) > gamma(out + 2) * S * std::abs(d))
          FAIL_CHECK("dX(" << k << "," << b << ") " << dX(k, b) << " vs " << want * d);
      }
  }
  Linear<double> d(4, 4, 1);
  CHECK_THROWS_AS(d.set_precision(Precision::bf16), ArgumentError);
  Linear<float> fresh(4, 20, 1);
  fresh.set_precision(Precision::bf16);
  const auto X = random_matrix(4, 3, 1);
  const auto dY = random_matrix(20, 3, 2);
  Matrix<float> dX(4, 3);
  CHECK_THROWS_AS(fresh.backward(X.view(), dY.view(), dX.view()), ArgumentError);  // no forward yet
}

TEST_CASE("Linear bf16: bitwise the same for 1 and 2 threads", "[nn][linear][bf16][threads]") {
  const std::int64_t in = 200, out = 150, B = 96;
  const auto X = random_matrix(in, B, 8);
  const auto dY = random_matrix(out, B, 9);
  std::vector<float> y[2], dx[2], g[2];
  for (int t = 0; t < 2; ++t)
    sprig_test::with_threads(t + 1, [&] {
      Linear<float> layer(in, out, 5);
      layer.set_precision(Precision::bf16);
      Matrix<float> Y(out, B), dX(in, B);
      layer.forward(X.view(), Y.view());
      layer.backward(X.view(), dY.view(), dX.view());
      y[t].assign(Y.data(), Y.data() + out * B);
      dx[t].assign(dX.data(), dX.data() + in * B);
      g[t].assign(layer.weight.grad.begin(), layer.weight.grad.end());
    });
  CHECK(y[0] == y[1]);
  CHECK(dx[0] == dx[1]);
  CHECK(g[0] == g[1]);
}

TEST_CASE("GPT dense in bf16: loss next to fp32's, and AdamW learns", "[nn][gpt][bf16]") {
  check_bf16_gpt_learns([](Precision p) { return GPT<float>(kLearnConfig, {}, {.seed = 4, .precision = p}); });
}
