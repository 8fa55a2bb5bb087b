#include "sprig/nn/gpt.hpp"

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>
#include <set>
#include <span>
#include <string>
#include <tuple>
#include <utility>
#include <variant>
#include <vector>

#include <catch2/catch.hpp>

#include "observed_new.hpp"
#include "sprig/core/rng.hpp"
#include "sprig/nn/model.hpp"
#include "sprig/nn/softmax_cross_entropy.hpp"
#include "sprig/optim/adamw.hpp"
#include "test_nn_gradcheck.hpp"
#include "with_threads.hpp"

// Counts heap allocations (every form of operator new) for the steady-state test.
static std::atomic<long> g_allocations{0};
void sprig_test_observe_new(std::size_t) noexcept { g_allocations.fetch_add(1, std::memory_order_relaxed); }

using namespace sprig;

static_assert(TrainableModel<GPT<float>>);
static_assert(TrainableModel<GPT<double, std::int64_t>>);

namespace {

constexpr GPTConfig kTiny{.layers = 2, .heads = 2, .d_model = 16, .d_ff = 32, .block_size = 8, .vocab = 11};

// Sparse projections at density 0.5 with one dense in each block.
const std::vector<GPTBlockDensity> kTinyDensities = {{.qkv = 0.5, .proj = 1.0, .fc = 0.5, .fc_proj = 0.5},
                                                     {.qkv = 0.5, .proj = 0.5, .fc = 1.0, .fc_proj = 0.5}};

std::vector<std::int32_t> random_ids(std::size_t n, std::int64_t vocab, std::uint64_t seed) {
  CounterRng rng(seed, 5);
  std::vector<std::int32_t> out(n);
  for (auto& t : out) t = static_cast<std::int32_t>(rng.uniform(0.0, static_cast<double>(vocab))) % vocab;
  return out;
}

std::vector<int> as_labels(const std::vector<std::int32_t>& ids) { return {ids.begin(), ids.end()}; }

// One training step's forward, loss and backward; returns the loss.
template <class T, class Index>
T step(GPT<T, Index>& model, SoftmaxCrossEntropy<T>& ce, const std::vector<std::int32_t>& tokens,
       const std::vector<int>& labels, std::int64_t batch, std::int64_t seq_len) {
  const auto Z = model.forward(tokens, batch, seq_len);
  const T loss = ce.forward_backward(Z, labels, model.output_grad());
  model.backward();
  return loss;
}

// Every parameter's values and gradient, flattened in for_each_parameter order.
template <class T, class Index>
std::vector<T> all_grads(GPT<T, Index>& model) {
  std::vector<T> out;
  model.for_each_parameter([&](auto& p) { out.insert(out.end(), p.grad.begin(), p.grad.end()); });
  return out;
}

std::string message_of(auto&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "no throw";
}

// Per-position cross-entropy of logits Z in double, by hand.
template <class T>
std::vector<double> position_losses(ConstMatrixView<T> Z, const std::vector<int>& labels) {
  std::vector<double> out(static_cast<std::size_t>(Z.cols()));
  for (std::int64_t n = 0; n < Z.cols(); ++n) {
    double mx = -std::numeric_limits<double>::infinity(), s = 0;
    for (std::int64_t i = 0; i < Z.rows(); ++i) mx = std::max(mx, double(Z(i, n)));
    for (std::int64_t i = 0; i < Z.rows(); ++i) s += std::exp(double(Z(i, n)) - mx);
    out[static_cast<std::size_t>(n)] = mx + std::log(s) - double(Z(labels[static_cast<std::size_t>(n)], n));
  }
  return out;
}

}  // namespace

TEST_CASE("GPT: finite-difference gradient of every parameter of a tiny sparse GPT", "[nn][gpt][gradcheck]") {
  GPT<double, std::int32_t> model(kTiny, kTinyDensities, {.seed = 3});
  REQUIRE(model.sparse_layers().size() == 6);
  const auto [batch, seq_len] =
      GENERATE(std::pair<std::int64_t, std::int64_t>{2, 8}, std::pair<std::int64_t, std::int64_t>{3, 5});
  const auto n = static_cast<std::size_t>(batch * seq_len);
  const auto tokens = random_ids(n, kTiny.vocab, 11);
  const auto labels = as_labels(random_ids(n, kTiny.vocab, 12));
  SoftmaxCrossEntropy<double> ce;
  step(model, ce, tokens, labels, batch, seq_len);
  auto loss = [&] { return double(ce.forward(model.forward(tokens, batch, seq_len), labels)); };

  std::size_t visited = 0, sparse = 0;
  model.for_each_parameter([&](auto& p) {
    INFO("parameter " << visited);
    ++visited;
    std::vector<double> analytic(p.grad.begin(), p.grad.end());
    if constexpr (requires { p.matrix.values(); }) {
      ++sparse;
      std::vector<std::size_t> live;
      p.matrix.for_each_live(
          [&](std::int64_t, std::int64_t, double, std::int64_t s) { live.push_back(std::size_t(s)); });
      std::vector<std::size_t> which;
      for (std::size_t k : sprig_test::some_indices(live.size(), 10)) which.push_back(live[k]);
      sprig_test::check_gradient(loss, p.matrix.values(), analytic, which);
    } else {
      sprig_test::check_gradient(loss, std::span<double>(p.value), analytic,
                                 sprig_test::some_indices(p.value.size(), 10));
    }
  });
  CHECK(visited == 2 + 12 * 2 + 4);
  CHECK(sparse == 6);
}

TEMPLATE_TEST_CASE("GPT: a token changes no logit or loss at earlier positions", "[nn][gpt][causal]",
                   (std::tuple<float, std::int64_t>), (std::tuple<double, std::int32_t>)) {
  using T = std::tuple_element_t<0, TestType>;
  using Index = std::tuple_element_t<1, TestType>;
  GPT<T, Index> model(kTiny, kTinyDensities, {.seed = 5});
  const std::int64_t batch = 2, seq_len = 8, V = kTiny.vocab;
  auto tokens = random_ids(16, V, 21);
  const auto labels = as_labels(random_ids(16, V, 22));
  const Matrix<T> before = [&] {
    const auto Z = model.forward(tokens, batch, seq_len);
    Matrix<T> m(Z.rows(), Z.cols());
    for (std::int64_t i = 0; i < Z.rows(); ++i)
      for (std::int64_t j = 0; j < Z.cols(); ++j) m(i, j) = Z(i, j);
    return m;
  }();
  const auto loss_before = position_losses<T>(before.view(), labels);
  for (std::int64_t p : {0, 3, 7}) {
    INFO("changed position " << p << " of sequence 1");
    auto changed = tokens;
    const std::size_t at = static_cast<std::size_t>(seq_len + p);
    changed[at] = static_cast<std::int32_t>((changed[at] + 4) % V);
    const auto Z = model.forward(changed, batch, seq_len);
    const auto loss_after = position_losses<T>(Z, labels);
    for (std::int64_t n = 0; n < batch * seq_len; ++n) {
      const bool earlier = n < seq_len || n < seq_len + p;  // sequence 0, or sequence 1 before p
      bool same = true;
      for (std::int64_t i = 0; i < V; ++i) same = same && Z(i, n) == before(i, n);
      INFO("column " << n);
      if (earlier) {
        CHECK(same);
        CHECK(loss_after[std::size_t(n)] == loss_before[std::size_t(n)]);
      } else if (n == seq_len + p) {
        CHECK_FALSE(same);
        CHECK(loss_after[std::size_t(n)] != loss_before[std::size_t(n)]);
      }
    }
  }
}

TEMPLATE_TEST_CASE("GPT: logits and every gradient are bitwise the same for 1, 2 and 3 threads", "[nn][gpt][threads]",
                   (std::tuple<float, std::int32_t>), (std::tuple<double, std::int64_t>)) {
  using T = std::tuple_element_t<0, TestType>;
  using Index = std::tuple_element_t<1, TestType>;
  // d_model x B*T = 64 x 1024 and d_ff x B*T reach kParallelMinWork: every layer threads
  const GPTConfig config{.layers = 2, .heads = 4, .d_model = 64, .d_ff = 256, .block_size = 64, .vocab = 40};
  const std::vector<GPTBlockDensity> densities = {{.qkv = 0.3, .proj = 0.3, .fc = 0.1, .fc_proj = 0.1},
                                                  {.qkv = 1.0, .proj = 0.3, .fc = 0.1, .fc_proj = 1.0}};
  GPT<T, Index> model(config, densities, {.seed = 9});
  const std::int64_t batch = 16, seq_len = 64;
  const auto tokens = random_ids(1024, config.vocab, 31);
  const auto labels = as_labels(random_ids(1024, config.vocab, 32));
  SoftmaxCrossEntropy<T> ce;
  std::vector<std::vector<T>> logits, grads;
  for (int threads : {1, 2, 3})
    sprig_test::with_threads(threads, [&] {
      step(model, ce, tokens, labels, batch, seq_len);
      const auto Z = model.forward(tokens, batch, seq_len);
      std::vector<T> z;
      for (std::int64_t i = 0; i < Z.rows(); ++i) z.insert(z.end(), Z.row(i), Z.row(i) + Z.cols());
      logits.push_back(z);
      ce.forward_backward(Z, labels, model.output_grad());
      model.backward();
      grads.push_back(all_grads(model));
    });
  for (std::size_t k = 1; k < logits.size(); ++k) {
    INFO("threads " << k + 1);
    CHECK(logits[k] == logits[0]);
    CHECK(grads[k] == grads[0]);
  }
}

TEMPLATE_TEST_CASE("GPT: a steady-state forward, loss and backward allocate nothing", "[nn][gpt][alloc]", float,
                   double) {
  using T = TestType;
  GPT<T> model(kTiny, kTinyDensities, {.seed = 1});
  const auto tokens = random_ids(16, kTiny.vocab, 41);
  const auto labels = as_labels(random_ids(16, kTiny.vocab, 42));
  SoftmaxCrossEntropy<T> ce;
  step(model, ce, tokens, labels, 2, 8);
  step(model, ce, tokens, labels, 2, 8);
  const long before = g_allocations.load();
  const T loss = step(model, ce, tokens, labels, 2, 8);
  CHECK(g_allocations.load() - before == 0);
  CHECK(std::isfinite(double(loss)));
  // another (batch, seq_len) with the same N reuses the buffers too
  step(model, ce, tokens, labels, 4, 4);
  const long again = g_allocations.load();
  step(model, ce, tokens, labels, 4, 4);
  CHECK(g_allocations.load() - again == 0);
  // and with the optimizer's step, once its state exists
  AdamW<T> opt({.lr = 1e-3});
  step(model, ce, tokens, labels, 4, 4);
  opt.step(model);
  const long with_opt = g_allocations.load();
  step(model, ce, tokens, labels, 4, 4);
  opt.step(model);
  CHECK(g_allocations.load() - with_opt == 0);
}

TEST_CASE("GPT: every phase has its own name", "[nn][gpt][clock]") {
  std::set<std::string> names;
  for (std::size_t p = 0; p < GPTPhaseClock::kPhases; ++p) {
    const std::string name = gpt_phase_name(static_cast<GPTPhase>(p));
    INFO("phase " << p << ": " << name);
    CHECK(name.size() > 5);
    CHECK(names.insert(name).second);
  }
  CHECK(gpt_phase_name(GPTPhase::qkv_forward) == std::string("qkv projection forward"));
  CHECK(gpt_phase_name(GPTPhase::embeddings_backward) == std::string("embeddings backward (scatter-add)"));
  CHECK(gpt_phase_name(GPTPhase::count) == std::string("?"));
}

TEST_CASE("GPT: a phase clock times every phase of the step it runs and changes no bit", "[nn][gpt][clock]") {
  using enum GPTPhase;
  // (all sparse, and kTiny's mix of dense and sparse) x (fp32, bf16: Q, K, V, the GELU in chunks)
  const std::vector<GPTBlockDensity> all_sparse(2, {.qkv = 0.5, .proj = 0.5, .fc = 0.5, .fc_proj = 0.5});
  for (const auto& densities : {all_sparse, kTinyDensities})
    for (const Precision precision : {Precision::fp32, Precision::bf16}) {
      INFO((precision == Precision::bf16 ? "bf16" : "fp32") << ", " << (&densities == &all_sparse ? "all" : "mixed"));
      GPT<float> timed(kTiny, densities, {.seed = 4, .precision = precision});
      GPT<float> plain(kTiny, densities, {.seed = 4, .precision = precision});
      GPTPhaseClock clock;
      timed.set_phase_clock(&clock);
      SoftmaxCrossEntropy<float> ce;
      const auto tokens = random_ids(16, kTiny.vocab, 51);
      const auto labels = as_labels(random_ids(16, kTiny.vocab, 52));
      step(timed, ce, tokens, labels, 2, 8);  // shapes the buffers: the second step allocates nothing
      clock.reset();
      const long before = g_allocations.load();
      const auto t0 = std::chrono::steady_clock::now();
      step(timed, ce, tokens, labels, 2, 8);
      const double outside = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      CHECK(g_allocations.load() - before == 0);
      step(plain, ce, tokens, labels, 2, 8);
      const long unclocked = g_allocations.load();  // (dense bf16 layers packed in fresh memory per call before)
      step(plain, ce, tokens, labels, 2, 8);
      CHECK(g_allocations.load() - unclocked == 0);
      CHECK(all_grads(timed) == all_grads(plain));
      // every phase ran, as often as the blocks call it; the phases' intervals lie within the step's
      const std::int64_t layers = kTiny.layers;
      for (std::size_t p = 0; p < GPTPhaseClock::kPhases; ++p) {
        INFO("phase " << p);
        CHECK(clock.calls(static_cast<GPTPhase>(p)) >= 1);
        CHECK(clock.seconds(static_cast<GPTPhase>(p)) >= 0.0);
      }
      for (const GPTPhase p : {qkv_forward, attention_forward, proj_forward, fc_proj_forward, fc_proj_backward,
                               fc_backward, proj_backward, attention_backward, qkv_backward})
        CHECK(clock.calls(p) == layers);
      CHECK(clock.calls(layer_norms_forward) == 2 * layers + 1);
      CHECK(clock.calls(layer_norms_backward) == 2 * layers + 1);
      CHECK(clock.calls(residual_forward) == 2 * layers);
      CHECK(clock.calls(residual_backward) == 2 * layers);
      CHECK(clock.calls(fc_forward) >= layers);  // per column chunk with bf16 activations
      CHECK(clock.calls(gelu_forward) == clock.calls(fc_forward));
      for (const GPTPhase p : {embeddings_forward, head_forward, head_backward, embeddings_backward})
        CHECK(clock.calls(p) == 1);
      CHECK(clock.total_seconds() > 0.0);
      CHECK(clock.total_seconds() <= outside);
      // detached: the next step adds nothing
      timed.set_phase_clock(nullptr);
      const double total = clock.total_seconds();
      step(timed, ce, tokens, labels, 2, 8);
      CHECK(clock.total_seconds() == total);
    }
}

TEMPLATE_TEST_CASE("GPT: AdamW learns a repeating sequence with sparse projections", "[nn][gpt][train]", float,
                   double) {
  using T = TestType;
  GPT<T> model(kTiny, kTinyDensities, {.seed = 6});
  // sequences of the period-5 pattern 0 3 1 4 2 ..., each starting at another phase; the
  // label of token t is token t + 1, which a causal model can learn from the token itself
  const int pattern[] = {0, 3, 1, 4, 2};
  std::vector<std::int32_t> tokens;
  std::vector<int> labels;
  for (int b = 0; b < 4; ++b)
    for (int t = 0; t < 8; ++t) {
      tokens.push_back(pattern[(b + t) % 5]);
      labels.push_back(pattern[(b + t + 1) % 5]);
    }
  SoftmaxCrossEntropy<T> ce;
  AdamW<T> opt({.lr = 1e-2, .weight_decay = 0.0});
  const T first = step(model, ce, tokens, labels, 4, 8);
  T last = first;
  for (int s = 0; s < 100; ++s) {
    opt.step(model);
    last = step(model, ce, tokens, labels, 4, 8);
  }
  CHECK(first > T(2));  // about log(11) at the start
  CHECK(last < T(0.05));
  const ParameterMemory mem = parameter_memory(model);
  CHECK(mem.weights == model.weight_bytes());
  CHECK(mem.optimizer_state > 0);
}

TEST_CASE("GPT: sparse_layers lists the sparse projections with the X and dY their gradients came from",
          "[nn][gpt][sparse_layers]") {
  using T = double;
  GPT<T, std::int32_t> model(kTiny, kTinyDensities, {.seed = 2});
  CHECK(model.sparse_layers().front().input.rows() == 0);  // empty views before a forward
  SoftmaxCrossEntropy<T> ce;
  const auto tokens = random_ids(16, kTiny.vocab, 51);
  step(model, ce, tokens, as_labels(random_ids(16, kTiny.vocab, 52)), 2, 8);
  const auto refs = model.sparse_layers();
  const std::vector<std::size_t> positions = {0, 2, 3, 4, 5, 7};  // 4 * block + {qkv, proj, fc, fc_proj}
  REQUIRE(refs.size() == positions.size());
  for (std::size_t k = 0; k < refs.size(); ++k) {
    const auto& r = refs[k];
    INFO("sparse layer " << k << " at position " << r.position);
    CHECK(r.position == positions[k]);
    CHECK(r.sparse_index == k);
    const auto* expected = std::get_if<SparseLinear<T, std::int32_t>>(
        &model.projection(r.position / 4, static_cast<GPTProjection>(r.position % 4)));
    CHECK(r.layer == expected);
    REQUIRE(r.input.rows() == r.layer->in_features());
    REQUIRE(r.output_grad.rows() == r.layer->out_features());
    REQUIRE(r.input.cols() == 16);
    REQUIRE(r.output_grad.cols() == 16);
    // after backward, the views still hold what the layer's gradients were made of:
    // dW[i, c] = sum_n dY[i, n] X[c, n], db[i] = sum_n dY[i, n]
    double worst = 0;
    r.layer->weight.matrix.for_each_live([&](std::int64_t i, std::int64_t c, T, std::int64_t s) {
      double g = 0;
      for (std::int64_t n = 0; n < 16; ++n) g += r.output_grad(i, n) * r.input(c, n);
      worst = std::max(worst, std::abs(g - r.layer->weight.grad[std::size_t(s)]));
    });
    for (std::int64_t i = 0; i < r.layer->out_features(); ++i) {
      double g = 0;
      for (std::int64_t n = 0; n < 16; ++n) g += r.output_grad(i, n);
      worst = std::max(worst, std::abs(g - r.layer->bias.grad[std::size_t(i)]));
    }
    CHECK(worst < 1e-12);
    double norm = 0;
    for (std::int64_t i = 0; i < r.output_grad.rows(); ++i)
      for (std::int64_t n = 0; n < 16; ++n) norm += std::abs(r.output_grad(i, n));
    CHECK(norm > 0);
  }
}

TEMPLATE_TEST_CASE("GPT: construction is deterministic and the parameters come in one fixed order", "[nn][gpt]",
                   (std::tuple<float, std::int32_t>), (std::tuple<double, std::int64_t>)) {
  using T = std::tuple_element_t<0, TestType>;
  using Index = std::tuple_element_t<1, TestType>;
  GPT<T, Index> a(kTiny, kTinyDensities, {.seed = 7}), b(kTiny, kTinyDensities, {.seed = 7}),
      c(kTiny, kTinyDensities, {.seed = 8});
  auto values = [](const GPT<T, Index>& m) {
    std::vector<T> out;
    m.for_each_parameter([&](const auto& p) {
      if constexpr (requires { p.matrix.values(); })
        out.insert(out.end(), p.matrix.values().begin(), p.matrix.values().end());
      else
        out.insert(out.end(), p.value.begin(), p.value.end());
    });
    return out;
  };
  CHECK(values(a) == values(b));
  CHECK(values(a) != values(c));
  // the const and mutable walks visit the same objects in the same order
  std::vector<const void*> mut, con;
  a.for_each_parameter([&](auto& p) { mut.push_back(&p); });
  std::as_const(a).for_each_parameter([&](const auto& p) { con.push_back(&p); });
  CHECK(mut == con);
  CHECK(mut.size() == 30);
  // no two matrices of one model start alike (each has its own layer key)
  std::vector<T> firsts;
  a.for_each_parameter([&](auto& p) {
    if constexpr (requires { p.matrix.values(); })
      firsts.push_back(p.matrix.values()[0]);
    else if (p.decay)
      firsts.push_back(p.value[0]);
  });
  for (std::size_t i = 0; i < firsts.size(); ++i)
    for (std::size_t j = i + 1; j < firsts.size(); ++j) CHECK(firsts[i] != firsts[j]);
  // decay: projection and head weights only
  std::size_t decayed = 0;
  a.for_each_parameter([&](auto& p) { decayed += p.decay; });
  CHECK(decayed == 4 * 2 + 1);
}

TEST_CASE("GPT: an empty density list builds a dense model; memory accounting", "[nn][gpt][memory]") {
  using T = float;
  GPT<T> dense(kTiny, {}, {.seed = 1});
  CHECK(dense.sparse_layers().empty());
  for (std::size_t l = 0; l < 2; ++l)
    for (std::size_t j = 0; j < 4; ++j)
      CHECK(std::holds_alternative<Linear<T>>(dense.projection(l, static_cast<GPTProjection>(j))));
  CHECK(std::holds_alternative<Linear<T>>(std::as_const(dense).projection(1, GPTProjection::fc_proj)));
  CHECK_THROWS_WITH(std::as_const(dense).projection(2, GPTProjection::qkv),
                    Catch::Contains("block 2 of a model with 2"));
  // dense weights by hand: embeddings, per block 2 LNs and 4 projections with biases, LN_f, head
  const std::int64_t d = 16, f = 32, V = 11, P = 8;
  const std::int64_t per_block = 2 * 2 * d + (3 * d * d + 3 * d) + (d * d + d) + (f * d + f) + (d * f + d);
  const std::int64_t values = V * d + P * d + 2 * per_block + 2 * d + V * d + V;
  CHECK(dense.dense_weight_bytes() == values * std::int64_t(sizeof(T)));
  CHECK(dense.weight_bytes() == dense.dense_weight_bytes());
  // at density 0.1 the PaddedCSR arrays (values, indices, padding, row arrays) beat dense ones
  GPT<T> sparse(kTiny, std::vector<GPTBlockDensity>(2, {0.1, 0.1, 0.1, 0.1}), {.seed = 1});
  CHECK(sparse.sparse_layers().size() == 8);
  CHECK(sparse.dense_weight_bytes() == dense.dense_weight_bytes());
  CHECK(sparse.weight_bytes() < dense.weight_bytes());
  const std::int64_t idle = sparse.memory_bytes();
  SoftmaxCrossEntropy<T> ce;
  step(sparse, ce, random_ids(16, V, 1), as_labels(random_ids(16, V, 2)), 2, 8);
  // at least the 2 x 10 [d x N] residual activations and gradients of the blocks
  CHECK(sparse.memory_bytes() >= idle + 20 * d * 16 * std::int64_t(sizeof(T)));
  const std::int64_t before = sparse.weight_bytes();
  sparse.reserve_growth(0.5);
  CHECK(sparse.weight_bytes() > before);
  CHECK_THROWS_AS(sparse.reserve_growth(-1), ArgumentError);
}

TEST_CASE("GPT: bad configurations and inputs throw with the values", "[nn][gpt][errors]") {
  using M = GPT<float>;
  auto with = [](auto change) {
    GPTConfig c = kTiny;
    change(c);
    return c;
  };
  CHECK_THROWS_AS(M(with([](GPTConfig& c) { c.layers = 0; }), {}), ArgumentError);
  CHECK(message_of([&] { M(with([](GPTConfig& c) { c.layers = 0; }), {}); }) == "GPT: layers must be >= 1, got 0");
  CHECK(message_of([&] { M(with([](GPTConfig& c) { c.heads = -2; }), {}); }) == "GPT: heads must be >= 1, got -2");
  CHECK(message_of([&] { M(with([](GPTConfig& c) { c.d_model = 0; }), {}); }) == "GPT: d_model must be >= 1, got 0");
  CHECK(message_of([&] { M(with([](GPTConfig& c) { c.d_ff = 0; }), {}); }) == "GPT: d_ff must be >= 1, got 0");
  CHECK(message_of([&] { M(with([](GPTConfig& c) { c.block_size = 0; }), {}); }) ==
        "GPT: block_size must be >= 1, got 0");
  CHECK(message_of([&] { M(with([](GPTConfig& c) { c.vocab = 0; }), {}); }) == "GPT: vocab must be >= 1, got 0");
  CHECK_THROWS_AS(M(with([](GPTConfig& c) { c.d_model = 10, c.heads = 3; }), {}), ArgumentError);
  CHECK(message_of([&] { M(with([](GPTConfig& c) { c.d_model = 10, c.heads = 3; }), {}); }) ==
        "GPT: d_model 10 is not divisible by heads 3");
  CHECK_THROWS_AS(M(kTiny, std::vector<GPTBlockDensity>(3)), ArgumentError);
  CHECK_THROWS_WITH(M(kTiny, std::vector<GPTBlockDensity>(1)), Catch::Contains("1 densities for 2 layers"));
  for (double bad : {0.0, -0.5, 1.5, std::numeric_limits<double>::quiet_NaN()}) {
    auto dens = kTinyDensities;
    dens[1].fc = bad;
    INFO("density " << bad);
    CHECK_THROWS_AS(M(kTiny, dens), ArgumentError);
    CHECK_THROWS_WITH(M(kTiny, dens), Catch::Contains("block 1's fc outside (0, 1]"));
  }
  auto dens = kTinyDensities;
  dens[0].qkv = 1.5;
  CHECK(message_of([&] { M(kTiny, dens); }) == "GPT: density 1.5 of block 0's qkv outside (0, 1]");
  CHECK_THROWS_WITH(M(kTiny, kTinyDensities, {.padding_ratio = -1}), Catch::Contains("padding_ratio -1"));
  CHECK_THROWS_WITH(M(kTiny, kTinyDensities, {.growth_reserve = 65}), Catch::Contains("growth_reserve 65"));

  M model(kTiny, kTinyDensities);
  CHECK_THROWS_AS(model.output_grad(), ArgumentError);
  CHECK_THROWS_WITH(model.backward(), Catch::Contains("call forward first"));
  std::vector<std::int32_t> tokens(16, 1);
  tokens[13] = 11;
  CHECK_THROWS_AS(model.forward(tokens, 2, 8), ArgumentError);
  CHECK(message_of([&] { model.forward(tokens, 2, 8); }) ==
        "GPT::forward: token id 11 at position 13 (sequence 1, token 5) outside [0, vocab 11)");
  tokens[13] = -1;
  CHECK_THROWS_WITH(model.forward(tokens, 2, 8), Catch::Contains("token id -1 at position 13"));
  tokens[13] = 1;
  CHECK_THROWS_AS(model.forward(tokens, 1, 16), ArgumentError);
  CHECK(message_of([&] { model.forward(tokens, 1, 16); }) == "GPT::forward: sequence length 16 > block size 8");
  CHECK(message_of([&] { model.forward(std::span(tokens).first(0), 1, 0); }) ==
        "GPT::forward: sequence length 0 must be >= 1");
  CHECK(message_of([&] { model.forward(std::span(tokens).first(0), 0, 8); }) == "GPT::forward: batch 0 must be >= 1");
  CHECK_THROWS_AS(model.forward(std::span(tokens).first(15), 2, 8), ShapeError);
  CHECK(message_of([&] { model.forward(std::span(tokens).first(15), 2, 8); }) ==
        "GPT::forward: 15 tokens for batch 2 x sequence length 8 = 16");
  CHECK_THROWS_AS(model.projection(2, GPTProjection::qkv), ArgumentError);
  // a good forward enables backward; a failed one disables it again
  model.forward(tokens, 2, 8);
  CHECK_NOTHROW(model.output_grad());
  CHECK_THROWS(model.forward(tokens, 1, 16));
  CHECK_THROWS_AS(model.backward(), ArgumentError);
}
