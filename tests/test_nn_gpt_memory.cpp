// GPT keeps no dY buffer per sparse layer: backward leaves qkv's and fc's dY in their block's
// dead qkv_out / fc_out (nn/gpt.hpp). These tests train a GPT side by side with OldStyleGPT,
// a copy of its layers driven the way GPT did before (a dY buffer of its own per sparse qkv
// and fc), and require the same bits: logits every step, the dY that DST reads, and every
// weight, gradient and topology after 20 steps of RigL, SET, Static, SNFS and GraNet, for
// unstructured and block-sparse projections. Also: a second backward throws, and dY views are
// empty until backward has run.
#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include <catch2/catch.hpp>

#include "sprig/dst/granet.hpp"
#include "sprig/dst/rigl.hpp"
#include "sprig/dst/set.hpp"
#include "sprig/dst/snfs.hpp"
#include "sprig/dst/static_topology.hpp"
#include "sprig/models/gpt.hpp"
#include "sprig/nn/softmax_cross_entropy.hpp"
#include "sprig/optim/adamw.hpp"
#include "sprig/optim/clip.hpp"

using namespace sprig;

namespace {

// GPT's forward and backward as they were before dY moved into dead activations, over the
// layers of a donor GPT (moved out of it; build the donor as the GPT it is compared with),
// each sparse qkv and fc with a dY buffer of its own. A TrainableModel, so dst::apply_step
// drives it as it drives a GPT.
template <class T, class Index, class SparseLayer>
class OldStyleGPT {
public:
  using value_type = T;
  using index_type = Index;
  using Projection = std::variant<Linear<T>, SparseLayer>;

  explicit OldStyleGPT(GPT<T, Index, SparseLayer>&& m)
      : d_(m.config().d_model),
        f_(m.config().d_ff),
        tok_(m.token_embedding()),
        pos_(m.positional_embedding()),
        ln_f_(m.final_norm()),
        head_(m.head()) {
    for (std::size_t l = 0; l < static_cast<std::size_t>(m.layers()); ++l) {
      blocks_.push_back(std::make_unique<Block>(
          m.attention_norm(l), m.ffn_norm(l), CausalSelfAttention<T>(d_, m.config().heads),
          std::move(m.projection(l, GPTProjection::qkv)), std::move(m.projection(l, GPTProjection::proj)),
          std::move(m.projection(l, GPTProjection::fc)), std::move(m.projection(l, GPTProjection::fc_proj))));
      for (Projection* p : projections(*blocks_.back()))
        std::visit([&](auto& layer) { scratch_.share_with(layer); }, *p);
    }
  }

  ConstMatrixView<T> forward(std::span<const std::int32_t> tokens, std::int64_t batch, std::int64_t seq_len) {
    tokens_ = tokens;
    seq_len_ = seq_len;
    const std::int64_t n = batch * seq_len;
    for (auto& b : blocks_) {
      for (Matrix<T>* x : {&b->ln1_out, &b->att_out, &b->x_mid, &b->ln2_out, &b->x_out, &b->g_mid, &b->g_out})
        shape(*x, d_, n);
      shape(b->qkv_out, 3 * d_, n);
      shape(b->d_qkv, 3 * d_, n);
      shape(b->fc_out, f_, n);
      shape(b->gelu_out, f_, n);
      shape(b->d_fc, f_, n);
    }
    for (Matrix<T>* x : {&x0_, &lnf_out_, &scratch_a_, &scratch_b_, &g_in_}) shape(*x, d_, n);
    shape(logits_, head_.out_features(), n);
    shape(dlogits_, head_.out_features(), n);
    tok_.forward(tokens, x0_.view());
    pos_.forward_add(seq_len, x0_.view());
    for (std::size_t l = 0; l < blocks_.size(); ++l) {
      Block& b = *blocks_[l];
      const ConstMatrixView<T> x = input_of(l);
      b.ln1.forward(x, b.ln1_out.view());
      run_forward(b.qkv, b.ln1_out.view(), b.qkv_out.view());
      const ConstMatrixView<T> qkv = b.qkv_out.view();
      b.attn.forward(qkv.block(0, 0, d_, n), qkv.block(d_, 0, d_, n), qkv.block(2 * d_, 0, d_, n), batch, seq_len,
                     b.att_out.view());
      run_forward(b.proj, b.att_out.view(), b.x_mid.view());
      add_into<T>(x, b.x_mid.view());
      b.ln2.forward(b.x_mid.view(), b.ln2_out.view());
      run_forward(b.fc, b.ln2_out.view(), b.fc_out.view());
      gelu_.forward_keep_derivative(b.fc_out.view(), b.gelu_out.view());
      run_forward(b.fc_proj, b.gelu_out.view(), b.x_out.view());
      add_into<T>(b.x_mid.view(), b.x_out.view());
    }
    ln_f_.forward(input_of(blocks_.size()), lnf_out_.view());
    head_.forward(lnf_out_.view(), logits_.view());
    return logits_.view();
  }

  MatrixView<T> output_grad() { return dlogits_.view(); }

  void backward() {
    head_.backward(lnf_out_.view(), dlogits_.view(), scratch_a_.view());
    ln_f_.backward(input_of(blocks_.size()), scratch_a_.view(), blocks_.back()->g_out.view());
    for (std::size_t l = blocks_.size(); l-- > 0;) {
      Block& b = *blocks_[l];
      const std::int64_t n = b.qkv_out.cols();
      run_backward(b.fc_proj, b.gelu_out.view(), b.g_out.view(), b.d_fc.view(), FusedActivation::gelu, b.fc_out.view());
      run_backward(b.fc, b.ln2_out.view(), b.d_fc.view(), scratch_a_.view());
      b.ln2.backward(b.x_mid.view(), scratch_a_.view(), scratch_b_.view());
      residual_add<T>(b.g_out.view(), scratch_b_.view(), b.g_mid.view());
      run_backward(b.proj, b.att_out.view(), b.g_mid.view(), scratch_a_.view());
      const ConstMatrixView<T> qkv = b.qkv_out.view();
      const MatrixView<T> dq = b.d_qkv.view();
      b.attn.backward(qkv.block(0, 0, d_, n), qkv.block(d_, 0, d_, n), qkv.block(2 * d_, 0, d_, n), scratch_a_.view(),
                      dq.block(0, 0, d_, n), dq.block(d_, 0, d_, n), dq.block(2 * d_, 0, d_, n));
      run_backward(b.qkv, b.ln1_out.view(), b.d_qkv.view(), scratch_a_.view());
      b.ln1.backward(input_of(l), scratch_a_.view(), scratch_b_.view());
      residual_add<T>(b.g_mid.view(), scratch_b_.view(), l > 0 ? blocks_[l - 1]->g_out.view() : g_in_.view());
    }
    tok_.backward(tokens_, g_in_.view());
    pos_.backward(seq_len_, g_in_.view());
  }

  template <class Fn>
  void for_each_parameter(Fn&& fn) {
    visit(*this, fn);
  }
  template <class Fn>
  void for_each_parameter(Fn&& fn) const {
    visit(*this, fn);
  }

  std::vector<SparseLayerRef<T, Index>> sparse_layers() {
    std::vector<SparseLayerRef<T, Index>> out;
    for (std::size_t l = 0; l < blocks_.size(); ++l) {
      Block& b = *blocks_[l];
      const Matrix<T>* in[] = {&b.ln1_out, &b.att_out, &b.ln2_out, &b.gelu_out};
      const Matrix<T>* dy[] = {&b.d_qkv, &b.g_mid, &b.d_fc, &b.g_out};
      const auto ps = projections(b);
      for (std::size_t j = 0; j < 4; ++j)
        if (auto* s = std::get_if<SparseLayer>(ps[j])) {
          if constexpr (requires { s->topology_stand_in(); })
            out.push_back({4 * l + j, out.size(), &s->topology_stand_in(), in[j]->view(), dy[j]->view(), s});
          else
            out.push_back({4 * l + j, out.size(), s, in[j]->view(), dy[j]->view()});
        }
    }
    return out;
  }

private:
  struct Block {
    Block(LayerNorm<T> a, LayerNorm<T> b, CausalSelfAttention<T> c, Projection q, Projection p, Projection f,
          Projection fp)
        : ln1(std::move(a)),
          ln2(std::move(b)),
          attn(std::move(c)),
          qkv(std::move(q)),
          proj(std::move(p)),
          fc(std::move(f)),
          fc_proj(std::move(fp)) {}
    LayerNorm<T> ln1, ln2;
    CausalSelfAttention<T> attn;
    Projection qkv, proj, fc, fc_proj;
    Matrix<T> ln1_out, qkv_out, att_out, x_mid, ln2_out, fc_out, gelu_out, x_out, g_mid, g_out, d_qkv, d_fc;
  };
  // fn over every parameter in GPT's order (nn/gpt.hpp)
  template <class Self, class Fn>
  static void visit(Self& self, Fn& fn) {
    fn(self.tok_.table);
    fn(self.pos_.table);
    auto proj = [&](auto& p) { std::visit([&](auto& layer) { layer.for_each_parameter(fn); }, p); };
    for (const auto& ptr : self.blocks_) {
      // unique_ptr does not pass on constness: a const model's blocks are visited as const
      auto& b = [&]() -> auto& {
        if constexpr (std::is_const_v<Self>)
          return std::as_const(*ptr);
        else
          return *ptr;
      }
      ();
      fn(b.ln1.gain);
      fn(b.ln1.bias);
      proj(b.qkv);
      proj(b.proj);
      fn(b.ln2.gain);
      fn(b.ln2.bias);
      proj(b.fc);
      proj(b.fc_proj);
    }
    fn(self.ln_f_.gain);
    fn(self.ln_f_.bias);
    fn(self.head_.weight);
    fn(self.head_.bias);
  }
  static std::array<Projection*, 4> projections(Block& b) { return {&b.qkv, &b.proj, &b.fc, &b.fc_proj}; }
  static void shape(Matrix<T>& m, std::int64_t rows, std::int64_t cols) {
    if (m.rows() != rows || m.cols() != cols) m.resize(rows, cols, Sequential<T, Index>::activation_stride(cols));
  }
  ConstMatrixView<T> input_of(std::size_t l) const { return l == 0 ? x0_.view() : blocks_[l - 1]->x_out.view(); }
  static void run_forward(Projection& p, ConstMatrixView<T> X, MatrixView<T> Y) {
    std::visit([&](auto& layer) { layer.forward(X, Y); }, p);
  }
  static void run_backward(Projection& p, ConstMatrixView<T> X, ConstMatrixView<T> dY, MatrixView<T> dX,
                           FusedActivation a = FusedActivation::none, ConstMatrixView<T> derivative = {}) {
    std::visit([&](auto& layer) { layer.backward(X, dY, dX, a, derivative); }, p);
  }

  std::int64_t d_, f_;
  TokenEmbedding<T> tok_;
  PositionalEmbedding<T> pos_;
  std::vector<std::unique_ptr<Block>> blocks_;
  LayerNorm<T> ln_f_;
  Linear<T> head_;
  GELU<T> gelu_;
  ModelScratch<T> scratch_;
  Matrix<T> x0_, lnf_out_, logits_, dlogits_, scratch_a_, scratch_b_, g_in_;
  std::span<const std::int32_t> tokens_;
  std::int64_t seq_len_ = 0;
};

std::vector<std::int32_t> ids(std::size_t n, std::int64_t vocab, std::uint64_t seed) {
  CounterRng rng(seed, 9);
  std::vector<std::int32_t> out(n);
  for (auto& t : out) t = static_cast<std::int32_t>(rng.uniform(0.0, static_cast<double>(vocab))) % vocab;
  return out;
}

template <class T>
std::vector<T> flat(ConstMatrixView<T> v) {
  std::vector<T> out;
  for (std::int64_t i = 0; i < v.rows(); ++i) out.insert(out.end(), v.row(i), v.row(i) + v.cols());
  return out;
}

// Every parameter's values, gradient and optimizer state, and each sparse one's column indices.
template <class T, class M>
std::vector<double> image(M& model) {
  std::vector<double> out;
  model.for_each_parameter([&](auto& p) {
    if constexpr (requires { p.matrix.values(); }) {
      for (auto v : p.matrix.values()) out.push_back(double(v));
      if constexpr (requires { p.matrix.col_indices(); })
        for (auto c : p.matrix.col_indices()) out.push_back(double(c));
      else
        for (auto c : p.matrix.pattern().col_indices()) out.push_back(double(c));
    } else {
      out.insert(out.end(), p.value.begin(), p.value.end());
    }
    out.insert(out.end(), p.grad.begin(), p.grad.end());
    for (const auto& s : p.state) out.insert(out.end(), s.begin(), s.end());
  });
  return out;
}

enum class Algo { rigl, set, fixed, snfs, granet };

template <class T, class Index>
std::unique_ptr<dst::SparsityAlgorithm<T, Index>> make(Algo a, std::size_t sparse_layers) {
  const dst::UpdateSchedule s{.delta_t = 4, .t_begin = 0, .t_end = 16, .alpha = 0.3};
  switch (a) {
    case Algo::rigl: return std::make_unique<dst::RigL<T, Index>>(s, 3);
    case Algo::set: return std::make_unique<dst::SET<T, Index>>(s, 3);
    case Algo::fixed: return std::make_unique<dst::Static<T, Index>>(s, 3);
    case Algo::snfs: return std::make_unique<dst::SNFS<T, Index>>(s, 3);
    default:
      return std::make_unique<dst::GraNet<T, Index>>(
          s, 3,
          dst::GraNetOptions{.initial_sparsity = std::vector<double>(sparse_layers, 0.5),
                             .final_sparsity = std::vector<double>(sparse_layers, 0.7)});
  }
}

// Trains `model` and an OldStyleGPT over `donor` (built as `model` was, so the same
// parameters) side by side for 20 steps (AdamW, clipping, dst::apply_step with `algo`) and
// requires the same bits throughout.
template <class T, class Index, class SparseLayer>
void check_same_training(GPT<T, Index, SparseLayer>& model, GPT<T, Index, SparseLayer> donor, Algo algo) {
  OldStyleGPT<T, Index, SparseLayer> old(std::move(donor));
  REQUIRE(image<T>(model) == image<T>(old));
  const std::size_t n_sparse = model.sparse_layers().size();
  REQUIRE(n_sparse > 0);
  auto alg_new = make<T, Index>(algo, n_sparse), alg_old = make<T, Index>(algo, n_sparse);
  AdamW<T> opt_new({.lr = 1e-2}), opt_old({.lr = 1e-2});
  SoftmaxCrossEntropy<T> ce;
  const std::int64_t vocab = model.vocab_size(), batch = 3, seq_len = model.block_size();
  std::int64_t updates = 0;
  for (std::int64_t t = 0; t < 20; ++t) {
    INFO("step " << t);
    const auto tokens = ids(static_cast<std::size_t>(batch * seq_len), vocab, 200 + static_cast<std::uint64_t>(t));
    const auto y = ids(tokens.size(), vocab, 300 + static_cast<std::uint64_t>(t));
    const std::vector<int> labels(y.begin(), y.end());
    const ConstMatrixView<T> z_new = model.forward(tokens, batch, seq_len);
    const ConstMatrixView<T> z_old = old.forward(tokens, batch, seq_len);
    REQUIRE(flat<T>(z_new) == flat<T>(z_old));
    ce.forward_backward(z_new, labels, model.output_grad());
    ce.forward_backward(z_old, labels, old.output_grad());
    model.backward();
    old.backward();
    if (alg_new->is_update_step(t)) {
      const auto a = model.sparse_layers(), b = old.sparse_layers();
      REQUIRE(a.size() == b.size());
      for (std::size_t k = 0; k < a.size(); ++k) {
        INFO("sparse layer " << k);
        REQUIRE(flat<T>(a[k].input) == flat<T>(b[k].input));
        REQUIRE(flat<T>(a[k].output_grad) == flat<T>(b[k].output_grad));
      }
    }
    clip_grad_norm(model, 1.0);
    clip_grad_norm(old, 1.0);
    dst::apply_step(*alg_new, opt_new, model, t);
    dst::apply_step(*alg_old, opt_old, old, t);
    updates = alg_new->updates();
    REQUIRE(image<T>(model) == image<T>(old));
  }
  CHECK(updates == (algo == Algo::fixed ? 0 : 5));
}

constexpr GPTConfig kConfig{.layers = 2, .heads = 2, .d_model = 16, .d_ff = 40, .block_size = 8, .vocab = 13};

}  // namespace

TEST_CASE("GPT memory: training is bitwise what per-layer dY buffers gave, for every DST algorithm",
          "[nn][gpt][memory][dst]") {
  const auto algo = GENERATE(Algo::rigl, Algo::set, Algo::fixed, Algo::snfs, Algo::granet);
  INFO("algorithm " << static_cast<int>(algo));
  // sparse qkv and fc (their dY moved), one dense projection of each kind in block 1
  const std::vector<GPTBlockDensity> densities = {{.qkv = 0.5, .proj = 0.4, .fc = 0.3, .fc_proj = 0.3},
                                                  {.qkv = 1.0, .proj = 0.5, .fc = 0.3, .fc_proj = 1.0}};
  SECTION("float, 32-bit indices") {
    const GPTOptions options{.seed = 4, .growth_reserve = 0.125};
    GPT<float, std::int32_t> model(kConfig, densities, options);
    check_same_training(model, GPT<float, std::int32_t>(kConfig, densities, options), algo);
  }
  SECTION("double, 64-bit indices") {
    const GPTOptions options{.seed = 5, .growth_reserve = 0.125};
    GPT<double, std::int64_t> model(kConfig, densities, options);
    check_same_training(model, GPT<double, std::int64_t>(kConfig, densities, options), algo);
  }
}

TEST_CASE("GPT memory: block-sparse projections train bitwise as with per-layer dY buffers",
          "[nn][gpt][memory][dst][blocks]") {
  const auto algo = GENERATE(Algo::rigl, Algo::set, Algo::fixed);
  INFO("algorithm " << static_cast<int>(algo));
  models::GPTSpec spec{.config = kConfig, .attn_sparsity = 0.5, .ffn_sparsity = 0.6, .seed = 6, .growth_reserve = 0.25};
  auto model = models::build_block_gpt<float, std::int32_t, 4, 4>(spec);
  check_same_training(model, models::build_block_gpt<float, std::int32_t, 4, 4>(spec), algo);
}

TEST_CASE("GPT memory: dY views appear after backward, and backward runs once per forward", "[nn][gpt][memory]") {
  using T = float;
  GPT<T> model(kConfig, std::vector<GPTBlockDensity>(2, {.qkv = 0.5, .proj = 0.5, .fc = 0.5, .fc_proj = 0.5}),
               {.seed = 1});
  const auto tokens = ids(16, kConfig.vocab, 1);
  const auto y = ids(16, kConfig.vocab, 2);
  const std::vector<int> labels(y.begin(), y.end());
  SoftmaxCrossEntropy<T> ce;
  const auto Z = model.forward(tokens, 2, 8);
  for (const auto& r : model.sparse_layers()) {
    CHECK(r.input.cols() == 16);
    CHECK(r.output_grad.rows() * r.output_grad.cols() == 0);  // no backward yet: no dY (not stale Q, K, V)
  }
  // an update that needs gradients says so instead of reading activations as dY
  dst::RigL<T, std::int32_t> rigl({.delta_t = 1, .t_begin = 0, .t_end = 10, .alpha = 0.3}, 1);
  AdamW<T> opt({.lr = 1e-3});
  CHECK_THROWS_WITH(dst::apply_step(rigl, opt, model, 0), Catch::Contains("output gradient"));
  ce.forward_backward(Z, labels, model.output_grad());
  model.backward();
  for (const auto& r : model.sparse_layers()) CHECK(r.output_grad.cols() == 16);
  CHECK_THROWS_WITH(model.backward(), Catch::Contains("backward already ran after the last forward"));
  // the dY views survive the failed call, and a new forward lets backward run again
  for (const auto& r : model.sparse_layers()) CHECK(r.output_grad.cols() == 16);
  const auto Z2 = model.forward(tokens, 2, 8);
  ce.forward_backward(Z2, labels, model.output_grad());
  CHECK_NOTHROW(model.backward());
}
