// ModelScratch (nn/model_scratch.hpp): one packing buffer shared by a model's sparse layers.
// A model sharing it gives bitwise the outputs, gradients and training run (AdamW with DST) of
// the same model with private workspaces (Sequential of sparse and block-sparse layers, GPT,
// block GPT), and holds one buffer sized by the largest layer's request, not the sum. The same
// for the W^T cache a GPT shares among its projections (share_transposes).
#include "sprig/nn/model_scratch.hpp"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <random>
#include <variant>
#include <vector>

#include <catch2/catch.hpp>

#include "sprig/dst/rigl.hpp"
#include "sprig/dst/set.hpp"
#include "sprig/models/gpt.hpp"
#include "sprig/nn/block_sparse_linear.hpp"
#include "sprig/nn/gpt.hpp"
#include "sprig/nn/sequential.hpp"
#include "sprig/nn/softmax_cross_entropy.hpp"
#include "sprig/optim/adamw.hpp"
#include "with_threads.hpp"

using namespace sprig;

namespace {

using T = float;
using Index = std::int32_t;
using Block44 = BlockSparseLinear<T, Index, 4, 4>;
using Net = Sequential<T, Index, Block44>;

// Every layer of `model` back to buffers of its own (what a model without sharing has).
void make_private(Net& model) {
  for (std::size_t k = 0; k < model.size(); ++k)
    std::visit(
        [](auto& layer) {
          if constexpr (requires { layer.share_scratch(nullptr); }) layer.share_scratch(nullptr);
        },
        model.layer(k));
}
template <class G>
void make_private_gpt(G& model) {
  for (std::size_t l = 0; l < static_cast<std::size_t>(model.layers()); ++l)
    for (std::size_t j = 0; j < 4; ++j)
      std::visit(
          [](auto& layer) {
            if constexpr (requires { layer.share_scratch(nullptr); }) layer.share_scratch(nullptr);
          },
          model.projection(l, static_cast<GPTProjection>(j)));
}

// The bits of a buffer of floats (compared with ==: bitwise, -0 != +0).
std::vector<std::uint32_t> bits_of(const T* p, std::size_t n) {
  std::vector<std::uint32_t> out(n);
  for (std::size_t i = 0; i < n; ++i) out[i] = std::bit_cast<std::uint32_t>(p[i]);
  return out;
}
std::vector<std::uint32_t> bits_of(ConstMatrixView<T> m) {
  std::vector<std::uint32_t> out;
  for (std::int64_t i = 0; i < m.rows(); ++i) {
    const auto row = bits_of(m.row(i), static_cast<std::size_t>(m.cols()));
    out.insert(out.end(), row.begin(), row.end());
  }
  return out;
}

// Every parameter's values, gradient and (sparse) column indices, in for_each_parameter order.
struct Snapshot {
  std::vector<std::vector<std::uint32_t>> values, grads;
  std::vector<std::vector<std::int64_t>> columns;
  bool operator==(const Snapshot&) const = default;
};
template <class M>
Snapshot snapshot(const M& model) {
  Snapshot s;
  model.for_each_parameter([&](const auto& p) {
    if constexpr (requires { p.matrix.values(); }) {
      s.values.push_back(bits_of(p.matrix.values().data(), p.matrix.values().size()));
      std::vector<std::int64_t> cols;
      if constexpr (requires { p.matrix.pattern(); })
        for (auto c : p.matrix.pattern().col_indices()) cols.push_back(c);
      else
        for (auto c : p.matrix.col_indices()) cols.push_back(c);
      s.columns.push_back(std::move(cols));
    } else {
      s.values.push_back(bits_of(p.value.data(), p.value.size()));
    }
    s.grads.push_back(bits_of(p.grad.data(), p.grad.size()));
  });
  return s;
}

// in -> 96 -> 64 -> 96 -> 48 -> out: SparseLinear and 4x4 BlockSparseLinear layers between
// ReLU and GELU (both fusions), widths that differ so each layer packs a different amount.
Net make_net(std::int64_t in, std::int64_t out) {
  Net net;
  net.add(SparseLinear<T, Index>(in, 96, {.density = 0.3, .seed = 7, .layer_key = 0, .growth_reserve = 0.5}));
  net.add(ReLU<T>());
  net.add(Block44(96, 64, {.density = 0.4, .seed = 7, .layer_key = 1, .growth_reserve = 0.5}));
  net.add(GELU<T>());
  net.add(SparseLinear<T, Index>(64, 96, {.density = 0.3, .seed = 7, .layer_key = 2, .growth_reserve = 0.5}));
  net.add(ReLU<T>());
  net.add(Block44(96, 48, {.density = 0.4, .seed = 7, .layer_key = 3, .growth_reserve = 0.5}));
  net.add(ReLU<T>());
  net.add(Linear<T>(48, out, 7, 4));
  return net;
}

// Inputs [features x batch] and labels of step t.
void batch_of(std::int64_t t, std::int64_t features, std::int64_t batch, std::int64_t classes, Matrix<T>& x,
              std::vector<int>& y) {
  std::mt19937 gen(static_cast<unsigned>(100 + t));
  std::normal_distribution<T> n(0, 1);
  x = Matrix<T>(features, batch);
  y.assign(static_cast<std::size_t>(batch), 0);
  for (std::int64_t b = 0; b < batch; ++b) {
    y[b] = static_cast<int>(gen() % classes);
    for (std::int64_t f = 0; f < features; ++f) x(f, b) = n(gen) + (f % classes == y[b] ? T(1) : T(0));
  }
}

}  // namespace

TEST_CASE("ModelScratch hands one buffer to the layers that pack and counts it", "[nn][model_scratch]") {
  ModelScratch<T> scratch;
  CHECK(scratch.memory_bytes() == 0);
  SparseLinear<T, Index> a(40, 30, {.density = 0.5, .seed = 1});
  SparseLinear<T, Index> b(30, 20, {.density = 0.5, .seed = 1, .layer_key = 1});
  ReLU<T> relu;
  scratch.share_with(a);
  scratch.share_with(b);
  scratch.share_with(relu);                  // no scratch to share: nothing happens
  CHECK(scratch.buffer().use_count() == 5);  // scratch + two workspaces of each layer
  Matrix<T> x(40, 70), h(30, 70), z(20, 70);
  for (std::int64_t i = 0; i < 40; ++i)
    for (std::int64_t j = 0; j < 70; ++j) x(i, j) = static_cast<T>((i * 7 + j) % 11) - 5;
  a.forward(x.view(), h.view());
  b.forward(h.view(), z.view());
  // a 70-wide batch is packed (not a whole number of SIMD registers), into the shared buffer
  CHECK(a.scratch_bytes() == 0);
  CHECK(b.scratch_bytes() == 0);
  CHECK(scratch.memory_bytes() == static_cast<std::int64_t>(scratch.buffer()->capacity() * sizeof(T)));
  b.share_scratch(nullptr);  // back to its own buffers
  b.forward(h.view(), z.view());
  CHECK(scratch.buffer().use_count() == 3);
  ModelScratch<T> moved = std::move(scratch);
  CHECK(scratch.memory_bytes() == 0);  // NOLINT(bugprone-use-after-move): moved-from reports 0
}

// At 2 threads too: the kernels' threads pack disjoint parts of the one buffer within a call.
TEST_CASE("Sequential with shared scratch: bitwise the outputs, gradients and DST run of private workspaces",
          "[nn][model_scratch][sequential]") {
  constexpr std::int64_t features = 24, classes = 5, batch = 70;
  for (int threads : {1, 2})
    for (bool rigl : {true, false}) {
      INFO((rigl ? "RigL" : "SET") << ", " << threads << " thread(s)");
      sprig_test::with_threads(threads, [&] {
        Net shared = make_net(features, classes), alone = make_net(features, classes);
        make_private(alone);
        const dst::UpdateSchedule schedule{.delta_t = 2, .t_begin = 0, .t_end = 20, .alpha = 0.3};
        AdamW<T> opt_shared({.lr = 1e-2}), opt_alone({.lr = 1e-2});
        dst::RigL<T, Index> rigl_shared(schedule, 3), rigl_alone(schedule, 3);
        dst::SET<T, Index> set_shared(schedule, 3), set_alone(schedule, 3);
        SoftmaxCrossEntropy<T> ce;
        Matrix<T> x;
        std::vector<int> y;
        for (std::int64_t t = 0; t < 6; ++t) {
          INFO("step " << t);
          batch_of(t, features, batch, classes, x, y);
          const auto z_shared = bits_of(shared.forward(x.view()));
          const auto z_alone = bits_of(alone.forward(x.view()));
          REQUIRE(z_shared == z_alone);
          // forward before output_grad (which it shapes): separate statements
          const T loss_shared = ce.forward_backward(shared.act(shared.size() - 1), y, shared.output_grad());
          const T loss_alone = ce.forward_backward(alone.act(alone.size() - 1), y, alone.output_grad());
          REQUIRE(std::bit_cast<std::uint32_t>(loss_shared) == std::bit_cast<std::uint32_t>(loss_alone));
          shared.backward();
          alone.backward();
          REQUIRE(snapshot(shared) == snapshot(alone));  // gradients (and weights) bitwise
          if (rigl) {
            dst::apply_step(rigl_shared, opt_shared, shared, t);
            dst::apply_step(rigl_alone, opt_alone, alone, t);
          } else {
            dst::apply_step(set_shared, opt_shared, shared, t);
            dst::apply_step(set_alone, opt_alone, alone, t);
          }
          REQUIRE(snapshot(shared) == snapshot(alone));  // weights and topology after the step
        }
        CHECK(shared.scratch_bytes() > 0);
        CHECK(shared.scratch_bytes() < alone.scratch_bytes());
      });
    }
}

TEST_CASE("Sequential's scratch is the largest layer's need, not the sum, and counted once",
          "[nn][model_scratch][sequential]") {
  // Packing a K-row operand at batch width B takes K x (B rounded up to a panel) values; a
  // panel is at most 8 registers (kMaxPanelRegs) of at most 16 floats, so each layer needs at
  // most (in + out) x (B + 128) values at once (W's passes pack X [in x B], W^T's pack dY
  // [out x B], the block weight gradient packs both). All widths are multiples of 4, so no
  // block layer pads its shape.
  constexpr std::int64_t B = 256;
  const std::vector<std::int64_t> widths = {96, 384, 384, 384, 384, 96};
  auto build = [&] {
    Net net;
    for (std::size_t k = 0; k + 1 < widths.size(); ++k) {
      if (k % 2 == 0)
        net.add(SparseLinear<T, Index>(widths[k], widths[k + 1], {.density = 0.2, .seed = 2, .layer_key = k}));
      else
        net.add(Block44(widths[k], widths[k + 1], {.density = 0.2, .seed = 2, .layer_key = k}));
      if (k + 2 < widths.size()) net.add(ReLU<T>());
    }
    return net;
  };
  std::int64_t largest_need = 0, largest_operand = 0, sum_of_needs = 0;
  for (std::size_t k = 0; k + 1 < widths.size(); ++k) {
    const std::int64_t need = (widths[k] + widths[k + 1]) * (B + 128) * static_cast<std::int64_t>(sizeof(T));
    largest_need = std::max(largest_need, need);
    largest_operand =
        std::max(largest_operand, std::max(widths[k], widths[k + 1]) * B * static_cast<std::int64_t>(sizeof(T)));
    sum_of_needs += need;
  }
  Net shared = build(), alone = build();
  make_private(alone);
  Matrix<T> x;
  std::vector<int> y;
  batch_of(0, widths.front(), B, widths.back(), x, y);
  SoftmaxCrossEntropy<T> ce;
  for (Net* net : {&shared, &alone}) {
    const auto z = net->forward(x.view());  // before output_grad, which it shapes
    ce.forward_backward(z, y, net->output_grad());
    net->backward();
  }
  REQUIRE(snapshot(shared) == snapshot(alone));
  INFO("shared " << shared.scratch_bytes() << ", private " << alone.scratch_bytes() << ", largest need " << largest_need
                 << ", sum " << sum_of_needs);
  CHECK(shared.scratch_bytes() <= largest_need);
  CHECK(largest_need < alone.scratch_bytes());  // the private buffers add up past any one layer's
  if (alone.scratch_bytes() > 0) CHECK(shared.scratch_bytes() >= largest_operand);  // the kernels pack
  // memory_bytes counts the shared buffer once: the difference is exactly the packing buffers
  CHECK(alone.memory_bytes() - shared.memory_bytes() == alone.scratch_bytes() - shared.scratch_bytes());
  // the model moves with its sharing
  Net moved = std::move(shared);
  const auto z = moved.forward(x.view());
  ce.forward_backward(z, y, moved.output_grad());
  moved.backward();
  CHECK(snapshot(moved) == snapshot(alone));
  CHECK(moved.scratch_bytes() <= largest_need);
}

namespace {

// Five GPT training steps (AdamW and RigL) on two models, compared bitwise: logits, every
// gradient, then weights and topology after each step.
template <class G>
void train_side_by_side(G& shared, G& alone) {
  constexpr std::int64_t batch = 7, seq = 10;  // 70 columns: every projection packs
  const std::int64_t vocab = shared.vocab_size();
  std::vector<std::int32_t> tokens(batch * seq);
  std::vector<int> labels(batch * seq);
  SoftmaxCrossEntropy<T> ce;
  AdamW<T> opt_shared({.lr = 1e-2}), opt_alone({.lr = 1e-2});
  const dst::UpdateSchedule schedule{.delta_t = 2, .t_begin = 0, .t_end = 20, .alpha = 0.3};
  dst::RigL<T, Index> rigl_shared(schedule, 5), rigl_alone(schedule, 5);
  for (std::int64_t t = 0; t < 5; ++t) {
    INFO("step " << t);
    for (std::size_t n = 0; n < tokens.size(); ++n) {
      tokens[n] = static_cast<std::int32_t>((n * 7 + 3 * t + 1) % vocab);
      labels[n] = static_cast<int>((n * 5 + t) % vocab);
    }
    const auto z_shared = shared.forward(tokens, batch, seq);
    const auto z_alone = alone.forward(tokens, batch, seq);
    REQUIRE(bits_of(z_shared) == bits_of(z_alone));
    ce.forward_backward(z_shared, labels, shared.output_grad());
    ce.forward_backward(z_alone, labels, alone.output_grad());
    shared.backward();
    alone.backward();
    REQUIRE(snapshot(shared) == snapshot(alone));
    dst::apply_step(rigl_shared, opt_shared, shared, t);
    dst::apply_step(rigl_alone, opt_alone, alone, t);
    REQUIRE(snapshot(shared) == snapshot(alone));
  }
}

// A shared-scratch model against a private one: the same bits, and the buffers counted once.
template <class G>
void check_gpt_bitwise(G shared, G alone) {
  make_private_gpt(alone);
  train_side_by_side(shared, alone);
  CHECK(shared.scratch_bytes() > 0);
  CHECK(shared.scratch_bytes() < alone.scratch_bytes());
  CHECK(alone.memory_bytes() - shared.memory_bytes() == alone.scratch_bytes() - shared.scratch_bytes());
}

// A model with one W^T cache (GPTOptions::share_transposes) against one whose projections
// each keep their own: the same bits; the cache is rebuilt for every projection's backward
// and counted once, so the model is lighter by the caches' sum less the shared one.
template <class G>
void check_gpt_transposes(G on, G off) {
  train_side_by_side(on, off);
  std::int64_t own = 0;
  std::vector<const void*> on_caches, off_caches;
  for (std::size_t l = 0; l < static_cast<std::size_t>(on.layers()); ++l)
    for (std::size_t j = 0; j < 4; ++j) {
      const auto p = static_cast<GPTProjection>(j);  // all sparse: the variant's second type
      on_caches.push_back(&std::get<1>(on.projection(l, p)).transpose_cache());
      auto& cache = std::get<1>(off.projection(l, p)).transpose_cache();
      off_caches.push_back(&cache);
      own += cache.memory_bytes();
    }
  REQUIRE(on_caches.size() == 8);
  CHECK(std::count(on_caches.begin(), on_caches.end(), on_caches[0]) == 8);  // one cache
  std::sort(off_caches.begin(), off_caches.end());
  CHECK(std::unique(off_caches.begin(), off_caches.end()) == off_caches.end());  // eight
  const auto& shared = std::get<1>(on.projection(0, GPTProjection::qkv)).transpose_cache();
  CHECK(shared.rebuilds() == 5 * 8);  // five backwards, each of eight projections: a rebuild
  CHECK(shared.memory_bytes() > 0);
  CHECK(shared.memory_bytes() < own);
  // less what empty caches still count (their objects): the eight layers' own, now unused, and
  // the shared caches of the two other index types
  const std::int64_t empty = TransposeCache<T, Index>{}.memory_bytes();
  CHECK(off.memory_bytes() - on.memory_bytes() == own - shared.memory_bytes() - 10 * empty);
}

models::GPTSpec small_gpt_spec() {
  return {.config = {.layers = 2, .heads = 2, .d_model = 32, .d_ff = 96, .block_size = 10, .vocab = 13},
          .attn_sparsity = 0.5,
          .ffn_sparsity = 0.75,
          .seed = 4,
          .growth_reserve = SparseParameter<T, Index>::kGrowthReserve};
}

}  // namespace

TEST_CASE("GPT with shared scratch: bitwise the run of private workspaces", "[nn][model_scratch][gpt]") {
  const auto spec = small_gpt_spec();
  check_gpt_bitwise(models::build_gpt<T, Index>(spec), models::build_gpt<T, Index>(spec));
}

TEST_CASE("block GPT with shared scratch: bitwise the run of private workspaces", "[nn][model_scratch][gpt]") {
  const auto spec = small_gpt_spec();
  check_gpt_bitwise(models::build_block_gpt<T, Index, 4, 4>(spec), models::build_block_gpt<T, Index, 4, 4>(spec));
}

TEST_CASE("GPT with one W^T cache: bitwise the run of a cache per projection, lighter",
          "[nn][model_scratch][gpt][share_transposes]") {
  auto spec = small_gpt_spec();
  for (const Precision p : {Precision::fp32, Precision::bf16}) {
    CAPTURE(precision_name(p));
    spec.precision = p;
    auto on = spec;
    on.share_transposes = true;
    SECTION("unstructured") {
      check_gpt_transposes(models::build_gpt<T, Index>(on), models::build_gpt<T, Index>(spec));
    }
    SECTION("4x4 blocks") {
      check_gpt_transposes(models::build_block_gpt<T, Index, 4, 4>(on), models::build_block_gpt<T, Index, 4, 4>(spec));
    }
  }
}
