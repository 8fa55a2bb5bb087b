// Weight initialisation (nn/init.hpp) and GPTInit (nn/gpt_config.hpp). WeightInit::normal:
// a dense Linear's weights have the asked std; a SparseLinear's and a BlockSparseLinear's
// live weights std * sqrt(in / effective fan-in) with the fan-in counted here from the drawn
// pattern, their padding and out-of-matrix entries stay 0; a sparse layer's outputs at init
// have the dense layer's variance (the point of the scaling). Bad stds throw. GPTInit::gpt2:
// qkv, fc and the head at 0.02, proj and fc_proj at 0.02 / sqrt(2 layers), sparse ones scaled,
// the embeddings and layer norms those of the default init; deterministic for a seed. The
// expected stds are the formulas of the contract; the sample stds are compared within 5 of
// their standard errors (sqrt(1 / (2 n)) relative for n draws).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "sprig/core/rng.hpp"
#include "sprig/models/gpt.hpp"
#include "sprig/nn/block_sparse_linear.hpp"
#include "sprig/nn/gpt.hpp"
#include "sprig/nn/linear.hpp"
#include "sprig/nn/sparse_linear.hpp"

using namespace sprig;

namespace {

struct Moments {
  double mean = 0, std = 0;
  std::int64_t n = 0;
};

Moments moments(const std::vector<double>& v) {
  Moments m;
  m.n = std::ssize(v);
  for (double x : v) m.mean += x;
  m.mean /= static_cast<double>(m.n);
  for (double x : v) m.std += (x - m.mean) * (x - m.mean);
  m.std = std::sqrt(m.std / static_cast<double>(m.n));
  return m;
}

// The sample's std is `expected` within 5 standard errors, and its mean 0 within 5.
void check_normal(const std::vector<double>& v, double expected) {
  const Moments m = moments(v);
  INFO("n " << m.n << ", mean " << m.mean << ", std " << m.std << ", expected std " << expected);
  REQUIRE(m.n > 1000);
  CHECK(std::abs(m.std / expected - 1.0) < 5.0 / std::sqrt(2.0 * static_cast<double>(m.n)));
  CHECK(std::abs(m.mean) < 5.0 * expected / std::sqrt(static_cast<double>(m.n)));
}

std::vector<double> values_of(const Linear<float>& l) {
  return {l.weight.value.begin(), l.weight.value.end()};
}

std::vector<double> live_values(const SparseLinear<float, std::int32_t>& l) {
  std::vector<double> v;
  l.weight.matrix.for_each_live([&](std::int64_t, std::int64_t, float x, std::int64_t) { v.push_back(x); });
  return v;
}

// The std a layer of dense fan-in `in` draws with when `live` of its in * out weights live.
double sparse_std(double std, std::int64_t in, std::int64_t out, std::int64_t live) {
  return std * std::sqrt(static_cast<double>(in) * static_cast<double>(out) / static_cast<double>(live));
}

// Var of all entries of W X for X with normal(0, 1) entries [in x B].
template <class Layer>
double output_variance(Layer& layer, std::int64_t in, std::int64_t out) {
  constexpr std::int64_t B = 64;
  Matrix<float> X(in, B), Y(out, B);
  CounterRng rng(9, 9, 9);
  for (std::int64_t i = 0; i < in; ++i)
    for (std::int64_t j = 0; j < B; ++j) X(i, j) = static_cast<float>(rng.normal());
  layer.forward(X.view(), Y.view());
  std::vector<double> y;
  for (std::int64_t i = 0; i < out; ++i)
    for (std::int64_t j = 0; j < B; ++j) y.push_back(Y(i, j));
  const Moments m = moments(y);
  return m.std * m.std;
}

}  // namespace

TEST_CASE("WeightInit::normal: a dense Linear draws N(0, std^2)", "[nn][init]") {
  const Linear<float> l(300, 200, 3, 1, WeightInit::normal(0.02));
  check_normal(values_of(l), 0.02);
  for (float b : l.bias.value) CHECK(b == 0.0f);
  // the same (seed, key, init) gives the same bits; another key other values
  const Linear<float> same(300, 200, 3, 1, WeightInit::normal(0.02)), other(300, 200, 3, 2, WeightInit::normal(0.02));
  CHECK(values_of(same) == values_of(l));
  CHECK(values_of(other) != values_of(l));
  // the default is Kaiming-uniform: every weight inside its bound
  const Linear<float> k(300, 200, 3, 1);
  double largest = 0;
  for (float w : k.weight.value) largest = std::max(largest, std::abs(static_cast<double>(w)));
  CHECK(largest <= std::sqrt(6.0 / 300.0));
  CHECK(largest > 0.9 * std::sqrt(6.0 / 300.0));
}

TEST_CASE("WeightInit::normal: a SparseLinear scales the std by sqrt(in / fan-in), padding stays 0",
          "[nn][init][sparse]") {
  constexpr std::int64_t in = 301, out = 257;
  for (const double density : {0.05, 0.3, 1.0}) {
    INFO("density " << density);
    const SparseLinear<float, std::int32_t> l(
        in, out, {.density = density, .seed = 5, .layer_key = 2, .init = WeightInit::normal(0.02)});
    const std::vector<double> live = live_values(l);
    check_normal(live, sparse_std(0.02, in, out, std::ssize(live)));
    double all = 0, on_live = 0;
    for (float v : l.weight.matrix.values()) all += static_cast<double>(v) * v;
    for (double v : live) on_live += v * v;
    CHECK(all == on_live);  // nothing but the live slots is nonzero
  }
}

TEST_CASE("WeightInit::normal: a BlockSparseLinear draws its in-matrix block entries, the rest stays 0",
          "[nn][init][blocks]") {
  constexpr std::int64_t in = 203, out = 141;  // edge blocks reach outside the matrix
  const BlockSparseLinear<float, std::int32_t, 8, 8> l(
      in, out, {.density = 0.2, .seed = 6, .layer_key = 3, .init = WeightInit::normal(0.05)});
  std::vector<double> inside;
  const auto values = l.weight.matrix.values();
  l.weight.matrix.for_each_block([&](std::int64_t i, std::int64_t j, std::int64_t s, const float*) {
    for (std::int64_t r = 0; r < 8; ++r)
      for (std::int64_t c = 0; c < 8; ++c) {
        const float v = values[static_cast<std::size_t>((s * 8 + r) * 8 + c)];
        if (i * 8 + r < out && j * 8 + c < in)
          inside.push_back(v);
        else
          CHECK(v == 0.0f);
      }
  });
  check_normal(inside, sparse_std(0.05, in, out, std::ssize(inside)));
  double all = 0, on_inside = 0;
  for (float v : values) all += static_cast<double>(v) * v;
  for (double v : inside) on_inside += v * v;
  CHECK(all == on_inside);
}

TEST_CASE("WeightInit::normal: a sparse layer's outputs have the dense layer's variance at init", "[nn][init]") {
  constexpr std::int64_t in = 512, out = 384;
  Linear<float> dense(in, out, 7, 0, WeightInit::normal(0.02));
  SparseLinear<float, std::int32_t> sparse(in, out, {.density = 0.1, .seed = 7, .init = WeightInit::normal(0.02)});
  BlockSparseLinear<float, std::int32_t, 8, 8> blocks(in, out,
                                                      {.density = 0.1, .seed = 7, .init = WeightInit::normal(0.02)});
  const double expected = static_cast<double>(in) * 0.02 * 0.02;  // in * std^2 * E[x^2]
  const double vd = output_variance(dense, in, out), vs = output_variance(sparse, in, out),
               vb = output_variance(blocks, in, out);
  INFO("dense " << vd << ", sparse " << vs << ", 8x8 blocks " << vb << ", in std^2 " << expected);
  CHECK(std::abs(vd / expected - 1.0) < 0.05);
  CHECK(std::abs(vs / vd - 1.0) < 0.10);
  CHECK(std::abs(vb / vd - 1.0) < 0.10);
  // unscaled, the sparse layer's variance would be density x the dense one's
  CHECK(vs > 0.5 * vd);
}

TEST_CASE("WeightInit::normal: a std that is not finite and > 0 throws ArgumentError", "[nn][init][errors]") {
  for (const double bad : {0.0, -0.02, std::numeric_limits<double>::quiet_NaN(),
                           std::numeric_limits<double>::infinity()}) {
    INFO("std " << bad);
    CHECK_THROWS_AS(Linear<float>(4, 3, 1, 0, WeightInit::normal(bad)), ArgumentError);
    CHECK_THROWS_AS((SparseLinear<float, std::int32_t>(4, 3, {.density = 0.5, .init = WeightInit::normal(bad)})),
                    ArgumentError);
    CHECK_THROWS_AS((BlockSparseLinear<float, std::int32_t, 2, 2>(8, 6, {.density = 0.5, .init = WeightInit::normal(bad)})),
                    ArgumentError);
  }
}

TEST_CASE("GPTInit::gpt2: GPT-2's stds, residual projections by 1/sqrt(2 layers), sparse ones scaled",
          "[nn][gpt][init]") {
  constexpr GPTConfig cfg{.layers = 3, .heads = 4, .d_model = 96, .d_ff = 384, .block_size = 16, .vocab = 300};
  const std::vector<GPTBlockDensity> dens(3, {.qkv = 1, .proj = 1, .fc = 0.25, .fc_proj = 0.25});
  const GPT<float> gpt2(cfg, dens, {.seed = 2});  // gpt2 is the default
  const GPT<float> kaiming(cfg, dens, {.seed = 2, .init = GPTInit::kaiming_uniform});
  const double residual = 0.02 / std::sqrt(6.0);
  std::vector<double> qkv, proj, fc, fc_proj;
  std::int64_t fc_live = 0, fc_proj_live = 0;
  for (std::size_t l = 0; l < 3; ++l) {
    const auto& q = std::get<Linear<float>>(gpt2.projection(l, GPTProjection::qkv));
    const auto& p = std::get<Linear<float>>(gpt2.projection(l, GPTProjection::proj));
    const auto& f = std::get<SparseLinear<float, std::int32_t>>(gpt2.projection(l, GPTProjection::fc));
    const auto& fp = std::get<SparseLinear<float, std::int32_t>>(gpt2.projection(l, GPTProjection::fc_proj));
    for (double v : values_of(q)) qkv.push_back(v);
    for (double v : values_of(p)) proj.push_back(v);
    // each layer's own scale: normalise by it so the blocks pool
    const std::vector<double> fl = live_values(f), fpl = live_values(fp);
    const double sf = sparse_std(1.0, 96, 384, std::ssize(fl)), sfp = sparse_std(1.0, 384, 96, std::ssize(fpl));
    for (double v : fl) fc.push_back(v / sf);
    for (double v : fpl) fc_proj.push_back(v / sfp);
    fc_live += std::ssize(fl);
    fc_proj_live += std::ssize(fpl);
  }
  check_normal(qkv, 0.02);
  check_normal(proj, residual);
  check_normal(fc, 0.02);
  check_normal(fc_proj, residual);
  CHECK(fc_live > 0);
  CHECK(fc_proj_live > 0);
  check_normal(values_of(gpt2.head()), 0.02);
  // embeddings, layer norms and the topology are the default init's
  CHECK(std::vector<double>(gpt2.token_embedding().table.value.begin(), gpt2.token_embedding().table.value.end()) ==
        std::vector<double>(kaiming.token_embedding().table.value.begin(),
                            kaiming.token_embedding().table.value.end()));
  CHECK(gpt2.final_norm().gain.value[0] == 1.0f);
  const auto& f2 = std::get<SparseLinear<float, std::int32_t>>(gpt2.projection(1, GPTProjection::fc));
  const auto& fk = std::get<SparseLinear<float, std::int32_t>>(kaiming.projection(1, GPTProjection::fc));
  CHECK(f2.weight.matrix.nnz() == fk.weight.matrix.nnz());
  // deterministic for a seed
  const GPT<float> again(cfg, dens, {.seed = 2, .init = GPTInit::gpt2});
  CHECK(values_of(again.head()) == values_of(gpt2.head()));
  CHECK(live_values(std::get<SparseLinear<float, std::int32_t>>(again.projection(2, GPTProjection::fc_proj))) ==
        live_values(std::get<SparseLinear<float, std::int32_t>>(gpt2.projection(2, GPTProjection::fc_proj))));
}

TEST_CASE("GPTInit::gpt2 through models::build_block_gpt: 8x8 block projections at the scaled std",
          "[nn][gpt][init][blocks]") {
  models::GPTSpec spec;
  spec.config = {.layers = 2, .heads = 2, .d_model = 64, .d_ff = 256, .block_size = 8, .vocab = 50};
  spec.attn_sparsity = 0.5;
  spec.ffn_sparsity = 0.8;
  spec.seed = 3;
  spec.init = GPTInit::gpt2;
  const auto gpt = models::build_block_gpt<float, std::int32_t, 8, 8>(spec);
  std::vector<double> fc;
  for (std::size_t l = 0; l < 2; ++l) {
    const auto& f = std::get<BlockSparseLinear<float, std::int32_t, 8, 8>>(gpt.projection(l, GPTProjection::fc));
    std::vector<double> v;
    for (float x : f.weight.matrix.values())
      if (x != 0.0f) v.push_back(x);
    const double s = sparse_std(1.0, 64, 256, std::ssize(v));
    for (double x : v) fc.push_back(x / s);
  }
  check_normal(fc, 0.02);
}
