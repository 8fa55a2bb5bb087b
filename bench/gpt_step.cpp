// gpt_step — one training step of a character-level GPT (nn/gpt.hpp), dense against FFN-sparse
// and all-sparse, end to end: forward, sequence cross-entropy over the vocabulary, backward,
// global-norm gradient clipping and AdamW, as examples/char_gpt.cpp runs it; plus a phase
// profile of the step (where the time goes).
//
//   gpt_step                                   # mini40m, 1 and 2 threads, table on stdout
//   gpt_step --csv gpt_step.csv                # also CSV rows (steps and phases)
//   gpt_step --threads 2 --variants all --steps 10 --index-bits 32
//   gpt_step --threads 1 --variants dense,all --weight-blocks 4x4,8x8   # all-sparse also in blocks
//   gpt_step --variants dense,all --precision fp32,bf16   # all-sparse also with bf16 products
//
// Config (default mini40m, the reference library's speed gate): 8 layers, 10 heads, d_model
// 640, d_ff 2560, block 128, batch 8, vocabulary 65; --layers, --heads, --d-model, --d-ff,
// --block, --batch, --vocab override it. Variants (--variants): dense (every projection a
// Linear on OpenBLAS), ffn (fc and fc_proj at --ffn-sparsity, default 0.9; attention dense)
// and all (attention at --attn-sparsity 0.7 and the FFN at --ffn-sparsity), uniform over the
// chosen layers (models::build_gpt); embeddings, layer norms and the head stay dense. Sparse
// projections store --index-bits 16 (default; d_ff 2560 fits) or 32-bit column indices.
// --weight-blocks S[,S...] (1x4, 4x1, 4x4, 8x1, 8x8, 16x1) runs every sparse variant in
// --variants once more per shape, its sparse projections BlockSparseLinear in dense RxC blocks
// (32-bit indices, the same sparsity over the block grid; models::build_block_gpt), named
// "<variant>/<shape>" (all/8x8) in the table, the CSV and --profile; --variants takes such
// names too. --precision fp32,bf16 runs the dense, ffn and all variants once more with bf16
// products in every projection (Precision::bf16: nn/sparse_linear.hpp, nn/linear.hpp,
// nn/block_sparse_linear.hpp; the head stays fp32), named "<variant>/bf16", and each sparse
// one in every --weight-blocks shape, "<variant>/<shape>/bf16"; --variants takes those too.
// The tokens and labels are synthetic (uniform ids; 16 batches used in turn, so the model
// never just memorises one): a step's cost does not depend on the values. Optimizer: AdamW betas (0.9, 0.99), lr 1e-3, weight decay 0.1 on
// the matrices; clip_grad_norm to 1.0 before every step.
//
// Timing: per variant, one model; per thread count (omp_set_num_threads and
// openblas_set_num_threads) --warmup untimed steps, then --steps steps timed back to back,
// each as one steady_clock interval around the whole step. Reported: median ms/step with min
// and max, tokens/s (batch x block / median), the weights and optimizer state
// (sprig::parameter_memory, after the steps, so AdamW's m and v exist) against the dense
// variant's (when it ran; else against 3 x the dense weight bytes, AdamW's m and v included),
// and the loss of the first warm-up step and of the last timed one (the model trains on
// from one thread count to the next); then the rest of the model's memory_bytes(): its
// activations, their gradients and layer caches, the kernels' shared packing scratch
// (GPT::scratch_bytes), and the process's peak RSS so far (getrusage).
//
// Profile (--profile: the variants named): the model's own step with a GPTPhaseClock attached
// (GPT::set_phase_clock, nn/phase_clock.hpp): forward and backward time each of their phases
// as they run (the phases of GPTPhase, summed over the blocks), and the loss, clipping and
// AdamW are timed around the model's calls. A layer norm's phase includes rounding its output
// to bf16 where the model keeps the next projection's input so; fc_proj's backward includes
// the GELU's backward (in its dX pass where fused), so "GELU" is the forward only; with bf16
// activations fc's forward and the GELU run in column chunks, each timed. The profile runs
// --steps steps after one warm-up step, each followed by one of the model's own steps without
// a clock (timed, so drift and other load hit both alike); each phase's median and the median
// per-step sum are printed beside the median of those model steps; a sum more than 5% away
// is flagged.
//
// CSV columns: kind,variant,threads,index_bits,phase,median_ms,min_ms,max_ms,tokens_per_s,
// weight_bytes,optimizer_state_bytes — kind "step" (phase empty) or "phase" (one row per
// phase, then "sum of phases" and "model step (interleaved)"; min/max, tokens/s and bytes
// empty).
//
// Threads: every sprig layer gives the same bits for any thread count; the dense projections
// and the head run OpenBLAS (OpenMP build), whose sums may depend on the thread count.
#include <sprig/models/gpt.hpp>
#include <sprig/nn/block_sparse_linear.hpp>
#include <sprig/nn/gpt.hpp>
#include <sprig/nn/model.hpp>
#include <sprig/nn/softmax_cross_entropy.hpp>
#include <sprig/optim/adamw.hpp>
#include <sprig/optim/clip.hpp>

#include <CLI/CLI.hpp>

#if defined(SPRIG_OPENBLAS)
#  include <cblas.h>
#endif
#include <omp.h>
#include <sys/resource.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <random>
#include <span>
#include <sstream>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "block_shapes.hpp"

namespace {

using T = float;
using Clock = std::chrono::steady_clock;

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// Peak resident set size of this process so far, in bytes (ru_maxrss is in KiB on Linux).
std::int64_t peak_rss_bytes() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<std::int64_t>(u.ru_maxrss) * 1024;
}

double median(std::vector<double> v) {
  if (v.empty()) return std::nan("");
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::string fmt(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof(b), f, v);
  return b;
}

// lscpu's "Model name", "CPU family" and "Model", from /proc/cpuinfo (the first processor).
std::string cpu_description() {
  std::ifstream in("/proc/cpuinfo");
  std::string line, name = "?", family = "?", model = "?";
  auto value = [](const std::string& l) {
    const auto p = l.find(':');
    if (p == std::string::npos) return std::string();
    const auto b = l.find_first_not_of(" \t", p + 1);
    return b == std::string::npos ? std::string() : l.substr(b);
  };
  while (std::getline(in, line)) {
    if (line.empty()) break;  // end of the first processor
    const std::string key = line.substr(0, line.find_first_of("\t:"));
    if (key == "model name")
      name = value(line);
    else if (key == "cpu family")
      family = value(line);
    else if (key == "model")
      model = value(line);
  }
  return name + " (family " + family + ", model " + model + ")";
}

std::string load_average() {
  std::ifstream in("/proc/loadavg");
  std::string a, b, c;
  in >> a >> b >> c;
  return a + " " + b + " " + c;
}

#if defined(SPRIG_OPENBLAS)
// The shared object this process mapped for OpenBLAS.
std::string loaded_openblas() {
  std::ifstream in("/proc/self/maps");
  std::string line;
  while (std::getline(in, line)) {
    const auto p = line.find('/');
    if (p != std::string::npos && line.find("openblas", p) != std::string::npos) return line.substr(p);
  }
  return "(not mapped)";
}
#endif

void set_threads(int n) {
  omp_set_num_threads(n);
#if defined(SPRIG_OPENBLAS)
  openblas_set_num_threads(n);
#endif
}

struct Options {
  std::int64_t layers = 8, heads = 10, d_model = 640, d_ff = 2560, block = 128, batch = 8, vocab = 65;
  double attn_sparsity = 0.7, ffn_sparsity = 0.9;
  std::vector<std::string> variants = {"dense", "ffn", "all"};
  std::vector<std::string> profile = {"ffn", "all"};
  std::vector<int> threads = {1, 2};
  int warmup = 3, steps = 10, index_bits = 16;
  double lr = 1e-3, weight_decay = 0.1, clip = 1.0;
  std::uint64_t seed = 1;
  std::string csv;
  std::vector<std::string> weight_blocks;          // block shapes the sparse variants run in too
  std::vector<std::string> precisions = {"fp32"};  // with bf16: the unstructured sparse variants in bf16 too
};

struct Variant {
  std::string name;
  double attn = 0, ffn = 0;
  std::string blocks;  // "RxC": sparse projections in dense R x C blocks; empty: unstructured
  sprig::Precision precision = sprig::Precision::fp32;  // of the sparse projections
  std::string label() const {
    if (attn == 0 && ffn == 0) return precision == sprig::Precision::bf16 ? "dense, bf16 products" : "dense";
    return "attn " + fmt("%.0f%%", 100 * attn) + " + FFN " + fmt("%.0f%%", 100 * ffn) + " sparse" +
           (blocks.empty() ? "" : ", " + blocks + " blocks") +
           (precision == sprig::Precision::bf16 ? ", bf16 products" : "");
  }
  std::string title() const { return name == "dense" ? name : name + " (" + label() + ")"; }
  int index_bits(const Options& o) const { return blocks.empty() ? o.index_bits : 32; }
};

constexpr const char* kShapes = "1x4, 4x1, 4x4, 8x1, 8x8 or 16x1";

bool is_block_shape(const std::string& shape) {
  return sprig_bench::with_block_shape(shape, []<int, int>() {});
}

// "dense", "ffn", "all", or "ffn/RxC", "all/RxC" for a block shape.
Variant variant_of(const std::string& name, const Options& o) {
  const auto slash = name.find('/');
  const std::string base = name.substr(0, slash);
  Variant v;
  if (base == "dense")
    v = {name, 0.0, 0.0, ""};
  else if (base == "ffn")
    v = {name, 0.0, o.ffn_sparsity, ""};
  else if (base == "all")
    v = {name, o.attn_sparsity, o.ffn_sparsity, ""};
  else
    throw std::invalid_argument("unknown variant '" + name +
                                "' (dense, ffn or all, the sparse ones optionally /RxC, /bf16 or /RxC/bf16)");
  std::string rest = slash == std::string::npos ? "" : name.substr(slash + 1);
  if (rest == "bf16" || rest.ends_with("/bf16")) {
    v.precision = sprig::Precision::bf16;
    rest.resize(rest == "bf16" ? 0 : rest.size() - 5);  // drop "bf16" or "/bf16"
  }
  if (!rest.empty()) {
    v.blocks = rest;
    if (base == "dense") throw std::invalid_argument("variant '" + name + "': the dense variant has no blocks");
    if (!is_block_shape(v.blocks))
      throw std::invalid_argument("variant '" + name + "': '" + v.blocks + "' is not a block shape (" + kShapes + ")");
  }
  return v;
}

// ---------------------------------------------------------------------------------------
// Rows of the profile: the model's own phases (GPTPhase, timed by its clock; rows 0 .. 18) and
// the three the bench times around the model's step.
using G = sprig::GPTPhase;
constexpr std::size_t kModelPhases = sprig::GPTPhaseClock::kPhases;
constexpr std::size_t loss_phase = kModelPhases, clip_phase = kModelPhases + 1, opt_phase = kModelPhases + 2,
                      kPhases = kModelPhases + 3;
constexpr std::size_t row(G p) { return static_cast<std::size_t>(p); }
const char* phase_name(std::size_t r) {
  constexpr const char* bench_names[] = {"loss (softmax cross-entropy + dlogits)", "gradient clipping (global norm)",
                                         "optimizer (AdamW, all parameters)"};
  return r < kModelPhases ? sprig::gpt_phase_name(static_cast<G>(r)) : bench_names[r - kModelPhases];
}
// The rows in the order the step runs them: the loss between the head's forward and backward.
constexpr std::array<std::size_t, kPhases> kStepOrder = [] {
  std::array<std::size_t, kPhases> order{};
  std::size_t k = 0;
  for (std::size_t r = 0; r < kModelPhases; ++r) {
    if (r == row(G::head_backward)) order[k++] = loss_phase;
    order[k++] = r;
  }
  order[k++] = clip_phase;
  order[k++] = opt_phase;
  return order;
}();

// Groups of phases for the summary ("where the time goes").
struct Group {
  const char* name;
  std::vector<std::size_t> phases;  // rows
};
const std::vector<Group>& groups() {
  static const std::vector<Group> g = {
      {"projections forward", {row(G::qkv_forward), row(G::proj_forward), row(G::fc_forward), row(G::fc_proj_forward)}},
      {"projections backward",
       {row(G::qkv_backward), row(G::proj_backward), row(G::fc_backward), row(G::fc_proj_backward)}},
      {"attention core forward", {row(G::attention_forward)}},
      {"attention core backward", {row(G::attention_backward)}},
      {"layer norms (forward + backward)", {row(G::layer_norms_forward), row(G::layer_norms_backward)}},
      {"GELU forward", {row(G::gelu_forward)}},
      {"embeddings (forward + backward)", {row(G::embeddings_forward), row(G::embeddings_backward)}},
      {"head + loss (forward + backward)", {row(G::head_forward), loss_phase, row(G::head_backward)}},
      {"residual adds (forward + backward)", {row(G::residual_forward), row(G::residual_backward)}},
      {"optimizer", {opt_phase}},
      {"clipping", {clip_phase}}};
  return g;
}

struct ProfileResult {
  std::array<double, kPhases> ms{};     // median per phase
  std::array<double, kPhases> flops{};  // 2 x multiply-adds per step (0: not counted)
  double sum_ms = 0.0;                  // median of the per-step sums
  double model_ms = 0.0;                // median of the model's own steps, interleaved
};

// kBatches synthetic batches of uniform token ids and labels, used in turn (step i takes batch
// i mod kBatches): a step sees data it did not just fit, as in training, so the loss and the
// gradients stay at a training run's scale.
struct Batches {
  static constexpr std::size_t kBatches = 16;
  std::vector<std::vector<std::int32_t>> x;
  std::vector<std::vector<int>> y;
  std::size_t next = 0;
  Batches(std::int64_t tokens, std::int64_t vocab, std::uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::uniform_int_distribution<int> id(0, static_cast<int>(vocab) - 1);
    for (std::size_t b = 0; b < kBatches; ++b) {
      x.emplace_back(static_cast<std::size_t>(tokens));
      y.emplace_back(static_cast<std::size_t>(tokens));
      for (auto& t : x.back()) t = id(rng);
      for (auto& l : y.back()) l = id(rng);
    }
  }
  // The batch of the next step (and advances).
  std::pair<std::span<const std::int32_t>, std::span<const int>> take() {
    const std::size_t b = next++ % kBatches;
    return {x[b], y[b]};
  }
};

// The model's step with a GPTPhaseClock attached (GPT::set_phase_clock): the model times its
// own phases as they run; the loss, clipping and AdamW are timed here around the model's calls.
template <class Model>
class Profiler {
public:
  explicit Profiler(Model& model) : m_(model) {}

  // steps profiled steps after one warm-up, each followed by one timed model_step() (the
  // model's own step without a clock, so the comparison sees the same machine state).
  template <class ModelStep>
  ProfileResult run(Batches& data, std::int64_t batch, std::int64_t seq_len, sprig::AdamW<T>& opt, double clip,
                    int steps, ModelStep&& model_step) {
    std::array<std::vector<double>, kPhases> samples;
    std::vector<double> sums, model_ms;
    for (int it = 0; it < steps + 1; ++it) {  // the first is a warm-up
      const auto [tokens, labels] = data.take();
      const std::array<double, kPhases> ph = step(tokens, labels, batch, seq_len, opt, clip);
      const auto t0 = Clock::now();
      model_step();
      if (it == 0) continue;
      model_ms.push_back(ms_between(t0, Clock::now()));
      double s = 0.0;
      for (std::size_t p = 0; p < kPhases; ++p) {
        samples[p].push_back(ph[p]);
        s += ph[p];
      }
      sums.push_back(s);
    }
    ProfileResult r;
    for (std::size_t p = 0; p < kPhases; ++p) r.ms[p] = median(samples[p]);
    r.sum_ms = median(sums);
    r.model_ms = median(model_ms);
    flops(r, batch, seq_len);
    return r;
  }

private:
  // The clock attached for one scope (detached however the scope ends).
  struct Attached {
    Model& m;
    Attached(Model& model, sprig::GPTPhaseClock& clock) : m(model) { m.set_phase_clock(&clock); }
    ~Attached() { m.set_phase_clock(nullptr); }
    Attached(const Attached&) = delete;
    Attached& operator=(const Attached&) = delete;
  };

  template <class Fn>
  static double time_ms(Fn&& fn) {
    const auto t0 = Clock::now();
    fn();
    return ms_between(t0, Clock::now());
  }

  // One step of the model (forward, the loss, backward, clipping, AdamW), ms per phase.
  std::array<double, kPhases> step(std::span<const std::int32_t> tokens, std::span<const int> labels,
                                   std::int64_t batch, std::int64_t seq_len, sprig::AdamW<T>& opt, double clip) {
    std::array<double, kPhases> ph{};
    sprig::GPTPhaseClock clock;
    {
      const Attached on(m_, clock);
      const auto z = m_.forward(tokens, batch, seq_len);
      ph[loss_phase] = time_ms([&] { ce_.forward_backward(z, labels, m_.output_grad()); });
      m_.backward();
    }
    ph[clip_phase] = time_ms([&] { sprig::clip_grad_norm(m_, clip); });
    ph[opt_phase] = time_ms([&] { opt.step(m_); });
    for (std::size_t g = 0; g < kModelPhases; ++g) ph[g] = 1e3 * clock.seconds(static_cast<G>(g));
    return ph;
  }

  // 2 x multiply-adds of the phases with a GEMM-like core (projections: live weights; the
  // attention core: the causal half of the scores and of the weighted sum).
  void flops(ProfileResult& r, std::int64_t batch, std::int64_t seq_len) {
    const double n = static_cast<double>(batch * seq_len);
    const std::size_t fwd[] = {row(G::qkv_forward), row(G::proj_forward), row(G::fc_forward), row(G::fc_proj_forward)},
                      bwd[] = {row(G::qkv_backward), row(G::proj_backward), row(G::fc_backward),
                               row(G::fc_proj_backward)};
    const auto layers = static_cast<std::size_t>(m_.layers());
    for (std::size_t l = 0; l < layers; ++l)
      for (std::size_t j = 0; j < 4; ++j) {
        const double live = std::visit(
            [](const auto& layer) -> double {
              using L = std::decay_t<decltype(layer)>;
              if constexpr (std::is_same_v<L, sprig::Linear<T>>)
                return static_cast<double>(layer.in_features() * layer.out_features());
              else if constexpr (requires { layer.weight.matrix.nnz_blocks(); })  // entries of live blocks
                return static_cast<double>(layer.weight.matrix.nnz_blocks()) * L::kBlockRows * L::kBlockCols;
              else
                return static_cast<double>(layer.weight.matrix.nnz());
            },
            m_.projection(l, static_cast<sprig::GPTProjection>(j)));
        r.flops[fwd[j]] += 2 * live * n;
        r.flops[bwd[j]] += 4 * live * n;  // weight gradient and dX
      }
    const double t = static_cast<double>(seq_len), d = static_cast<double>(m_.config().d_model);
    // pairs x head dims, all heads of every block (the phase times all blocks)
    const double causal = static_cast<double>(layers) * static_cast<double>(batch) * t * (t + 1) / 2 * d;
    r.flops[row(G::attention_forward)] = 2 * 2 * causal;   // Q K^T and P V
    r.flops[row(G::attention_backward)] = 2 * 4 * causal;  // dP, dV, dQ, dK
    const double head = static_cast<double>(m_.config().vocab) * d * n;
    r.flops[row(G::head_forward)] = 2 * head;
    r.flops[row(G::head_backward)] = 4 * head;
  }

  Model& m_;
  sprig::SoftmaxCrossEntropy<T> ce_;
};

// ---------------------------------------------------------------------------------------
struct Result {
  Variant variant;
  int threads = 1;
  std::vector<double> step_ms;
  double first_loss = 0, last_loss = 0;
  sprig::ParameterMemory pm;
  std::int64_t activation_bytes = 0;  // activations, their gradients and layer caches
  std::int64_t scratch_bytes = 0;     // the kernels' packing buffers (GPT::scratch_bytes)
  std::int64_t peak_rss_bytes = 0;    // of the process so far (getrusage: all variants before too)
  bool has_profile = false;
  ProfileResult profile;
  double med() const { return median(step_ms); }
  double min() const { return *std::min_element(step_ms.begin(), step_ms.end()); }
  double max() const { return *std::max_element(step_ms.begin(), step_ms.end()); }
};

// SparseLayer: SparseLinear<T, Index> (unstructured) or a BlockSparseLinear<T, Index, R, C>.
template <class Index, class SparseLayer>
std::vector<Result> run_variant(const Variant& v, const Options& o, Batches& data) {
  sprig::models::GPTSpec spec;
  spec.config = {.layers = o.layers,
                 .heads = o.heads,
                 .d_model = o.d_model,
                 .d_ff = o.d_ff,
                 .block_size = o.block,
                 .vocab = o.vocab};
  spec.attn_sparsity = v.attn;
  spec.ffn_sparsity = v.ffn;
  spec.seed = o.seed;
  spec.precision = v.precision;
  spec.keep_output_grads = false;  // the topology is fixed here: no DST rule reads the dY
  sprig::GPT<T, Index, SparseLayer> model = [&] {
    if constexpr (std::is_same_v<SparseLayer, sprig::SparseLinear<T, Index>>)
      return sprig::models::build_gpt<T, Index>(spec);
    else
      return sprig::models::build_block_gpt<T, Index, SparseLayer::kBlockRows, SparseLayer::kBlockCols>(spec);
  }();
  sprig::AdamW<T> opt({.lr = o.lr, .beta1 = 0.9, .beta2 = 0.99, .weight_decay = o.weight_decay});
  sprig::SoftmaxCrossEntropy<T> ce;
  T loss = 0;
  auto step = [&] {
    const auto [tokens, labels] = data.take();  // (not timed: no copy, two spans)
    const auto z = model.forward(tokens, o.batch, o.block);
    loss = ce.forward_backward(z, labels, model.output_grad());
    model.backward();
    sprig::clip_grad_norm(model, o.clip);
    opt.step(model);
  };
  const bool profile = std::find(o.profile.begin(), o.profile.end(), v.name) != o.profile.end();
  std::vector<Result> out;
  for (int th : o.threads) {
    std::cerr << "gpt_step: " << v.title() << ", " << th << " thread(s): " << o.warmup << " warm-up + " << o.steps
              << " timed steps" << (profile ? " + profile" : "") << "...\n";
    set_threads(th);
    Result r;
    r.variant = v;
    r.threads = th;
    for (int i = 0; i < o.warmup; ++i) {
      step();
      if (i == 0) r.first_loss = loss;
    }
    for (int i = 0; i < o.steps; ++i) {
      const auto t0 = Clock::now();
      step();
      r.step_ms.push_back(ms_between(t0, Clock::now()));
    }
    r.last_loss = loss;
    r.pm = sprig::parameter_memory(model);
    r.scratch_bytes = model.scratch_bytes();
    r.activation_bytes = model.memory_bytes() - r.pm.weights - r.pm.optimizer_state - r.pm.gradients - r.scratch_bytes;
    r.peak_rss_bytes = peak_rss_bytes();
    if (profile) {
      Profiler<decltype(model)> p(model);
      r.profile = p.run(data, o.batch, o.block, opt, o.clip, o.steps, step);
      r.has_profile = true;
    }
    out.push_back(std::move(r));
  }
  return out;
}

// Weights + optimizer state of the dense model: the dense variant's own, else 3 x its
// weight bytes (AdamW keeps m and v per weight).
std::pair<double, bool> dense_memory(const std::vector<Result>& all, const Result& r) {
  for (const auto& d : all)
    if (d.variant.name == "dense") return {static_cast<double>(d.pm.weights + d.pm.optimizer_state), true};
  return {3.0 * static_cast<double>(r.pm.dense_weights), false};
}

const Result* dense_of(const std::vector<Result>& all, const Result& r) {
  for (const auto& d : all)
    if (d.variant.name == "dense" && d.threads == r.threads) return &d;
  return nullptr;
}

void write_report(std::ostream& os, const std::vector<Result>& all, const Options& o) {
  const double tokens = static_cast<double>(o.batch * o.block);
  os << "| variant | threads | ms/step (median) | min-max ms | tokens/s | vs dense | weights MB | optimizer state MB"
        " | weights + state vs dense | live / dense parameters | loss first -> last | activations + caches MB"
        " | kernel scratch MB | peak RSS MB (process so far) |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (const auto& r : all) {
    const Result* d = dense_of(all, r);
    const auto [dense_bytes, measured] = dense_memory(all, r);
    os << "| " << r.variant.title() << " | " << r.threads << " | " << fmt("%.2f", r.med()) << " | "
       << fmt("%.2f", r.min()) << "-" << fmt("%.2f", r.max()) << " | " << fmt("%.0f", tokens / (r.med() / 1e3)) << " | "
       << (d ? fmt("%.2fx", d->med() / r.med()) : std::string("-")) << " | "
       << fmt("%.2f", static_cast<double>(r.pm.weights) / (1 << 20)) << " | "
       << fmt("%.2f", static_cast<double>(r.pm.optimizer_state) / (1 << 20)) << " | "
       << fmt("%.1f%%", 100.0 * static_cast<double>(r.pm.weights + r.pm.optimizer_state) / dense_bytes)
       << (measured ? "" : " (of 3 x dense weights)") << " | " << r.pm.parameters << " / " << r.pm.dense_parameters
       << " | " << fmt("%.3f", r.first_loss) << " -> " << fmt("%.3f", r.last_loss) << " | "
       << fmt("%.1f", static_cast<double>(r.activation_bytes) / (1 << 20)) << " | "
       << fmt("%.1f", static_cast<double>(r.scratch_bytes) / (1 << 20)) << " | "
       << fmt("%.1f", static_cast<double>(r.peak_rss_bytes) / (1 << 20)) << " |\n";
  }
  os << "\nPeak RSS is the process's (getrusage ru_maxrss) after that row's steps, so it includes every variant "
        "run before it; run one --variants at a time for a variant's own.\n";
  for (const auto& r : all) {
    if (!r.has_profile) continue;
    const ProfileResult& p = r.profile;
    const double ratio = p.sum_ms / p.model_ms;
    os << "\n## Profile: " << r.variant.title() << ", " << r.threads << " thread(s)\n\n"
       << "sum of phases " << fmt("%.2f", p.sum_ms) << " ms; the model's own step, interleaved with the profiled ones "
       << fmt("%.2f", p.model_ms) << " ms (median; " << fmt("%.2f", r.med())
       << " ms in the timed run); sum / step = " << fmt("%.3f", ratio)
       << (std::abs(ratio - 1.0) > 0.05 ? "  ** more than 5% apart: the profile does not account for the step **" : "")
       << "\n\n| where the time goes | ms | share |\n|---|---|---|\n";
    for (const Group& g : groups()) {
      double ms = 0;
      for (const std::size_t ph : g.phases) ms += p.ms[ph];
      os << "| " << g.name << " | " << fmt("%.3f", ms) << " | " << fmt("%.1f%%", 100.0 * ms / p.sum_ms) << " |\n";
    }
    os << "\n| phase (in step order) | ms | share | GFLOP/s |\n|---|---|---|---|\n";
    for (const std::size_t ph : kStepOrder)
      os << "| " << phase_name(ph) << " | " << fmt("%.3f", p.ms[ph]) << " | "
         << fmt("%.1f%%", 100.0 * p.ms[ph] / p.sum_ms) << " | "
         << (p.flops[ph] > 0 && p.ms[ph] > 0 ? fmt("%.1f", p.flops[ph] / (p.ms[ph] * 1e6)) : std::string("")) << " |\n";
  }
  os << "\nGFLOP/s = 2 x multiply-adds / time: projections over their live weights (backward: weight gradient + dX);"
        " attention over the causal half of the scores and weighted sums.\n";
}

void write_csv(std::ostream& os, const std::vector<Result>& all, const Options& o) {
  const double tokens = static_cast<double>(o.batch * o.block);
  os << "kind,variant,threads,index_bits,phase,median_ms,min_ms,max_ms,tokens_per_s,weight_bytes,optimizer_state_bytes\n";
  for (const auto& r : all) {
    const int bits = r.variant.index_bits(o);
    os << "step," << r.variant.name << ',' << r.threads << ',' << bits << ",," << fmt("%.3f", r.med()) << ','
       << fmt("%.3f", r.min()) << ',' << fmt("%.3f", r.max()) << ',' << fmt("%.0f", tokens / (r.med() / 1e3)) << ','
       << r.pm.weights << ',' << r.pm.optimizer_state << '\n';
    if (!r.has_profile) continue;
    for (const std::size_t ph : kStepOrder)
      os << "phase," << r.variant.name << ',' << r.threads << ',' << bits << ",\"" << phase_name(ph) << "\","
         << fmt("%.3f", r.profile.ms[ph]) << ",,,,,\n";
    os << "phase," << r.variant.name << ',' << r.threads << ',' << bits << ",sum of phases,"
       << fmt("%.3f", r.profile.sum_ms) << ",,,,,\n";
    os << "phase," << r.variant.name << ',' << r.threads << ',' << bits << ",model step (interleaved),"
       << fmt("%.3f", r.profile.model_ms) << ",,,,,\n";
  }
}

// A variant in blocks: 32-bit indices, whatever --index-bits says (one instantiation per shape).
std::vector<Result> run_block_variant(const Variant& v, const Options& o, Batches& data) {
  std::vector<Result> res;
  sprig_bench::with_block_shape(v.blocks, [&]<int R, int C>() {
    res = run_variant<std::int32_t, sprig::BlockSparseLinear<T, std::int32_t, R, C>>(v, o, data);
  });
  return res;
}

// The variants to run: --variants, then each sparse one in every --weight-blocks shape, then
// (--precision with bf16) each one in bf16, and each sparse one in every shape in bf16.
std::vector<std::string> variant_names(const Options& o) {
  // the variants as given, then the sparse ones in each block shape ("/RxC"); with bf16 asked
  // for, the same list again with "/bf16" appended (the unknown names left to variant_of)
  const bool bf16 = std::find(o.precisions.begin(), o.precisions.end(), "bf16") != o.precisions.end();
  std::vector<std::string> names;
  for (const std::string precision : {"", "/bf16"}) {
    if (!precision.empty() && !bf16) break;
    for (const std::string& name : o.variants)
      if (precision.empty() || name == "dense" || name == "ffn" || name == "all") names.push_back(name + precision);
    for (const std::string& shape : o.weight_blocks)
      for (const std::string& name : o.variants)
        if (name == "ffn" || name == "all") names.push_back(name + "/" + shape + precision);
  }
  return names;
}

template <class Index>
int run(const Options& o, int argc, char** argv) {
  Batches data(o.batch * o.block, o.vocab, o.seed);
  const std::string load_at_start = load_average();
  std::vector<Result> all;
  for (const std::string& name : variant_names(o)) {
    data.next = 0;  // every variant sees the same batches in the same order
    const Variant v = variant_of(name, o);
    auto res = v.blocks.empty() ? run_variant<Index, sprig::SparseLinear<T, Index>>(v, o, data)
                                : run_block_variant(v, o, data);
    all.insert(all.end(), res.begin(), res.end());
  }
  std::stable_sort(all.begin(), all.end(), [](const Result& a, const Result& b) { return a.threads < b.threads; });
  std::ostringstream head;
  head << "# gpt_step\n\ncommand:";
  for (int i = 0; i < argc; ++i) head << ' ' << argv[i];
  head << "\n\nCPU: " << cpu_description() << "; cores (omp_get_num_procs) " << omp_get_num_procs();
#if defined(SPRIG_OPENBLAS)
  head << "; OpenBLAS: " << loaded_openblas() << " (" << openblas_get_config() << ")";
#endif
  head << "; kernels " << sprig::kernel_arch() << "; load average at start " << load_at_start << ", at end "
       << load_average() << "\n\nGPT: " << o.layers << " layers, " << o.heads << " heads, d_model " << o.d_model
       << ", d_ff " << o.d_ff << ", block " << o.block << ", batch " << o.batch << ", vocabulary " << o.vocab
       << "; fp32 (/bf16 variants: bf16 products), sparse projections with " << o.index_bits
       << "-bit column indices (uniform sparsity; in blocks: 32-bit); AdamW (0.9, 0.99)"
       << " lr " << o.lr << " weight decay " << o.weight_decay << ", clip " << o.clip << "; " << o.warmup
       << " warm-up + " << o.steps << " timed steps per variant and thread count\n\n";
  std::cout << head.str();
  write_report(std::cout, all, o);
  if (!o.csv.empty()) {
    std::ofstream f(o.csv);
    if (!f) throw std::invalid_argument("cannot write the CSV file '" + o.csv + "'");
    write_csv(f, all, o);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"gpt_step: one GPT training step, dense against sparse, with a phase profile"};
  app.add_option("--variants", o.variants,
                 "dense, ffn (FFN sparse) and/or all (attention + FFN sparse); ffn/RxC, all/RxC: in RxC blocks")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--profile", o.profile, "variants to profile phase by phase (empty: none)")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--threads", o.threads, "thread counts")->delimiter(',')->capture_default_str();
  app.add_option("--warmup", o.warmup, "untimed steps per variant and thread count")->capture_default_str();
  app.add_option("--steps", o.steps, "timed steps per variant and thread count (and profiled steps)")
      ->capture_default_str();
  app.add_option("--index-bits", o.index_bits, "column index width of the sparse projections")
      ->check(CLI::IsMember({16, 32}))
      ->capture_default_str();
  app.add_option("--attn-sparsity", o.attn_sparsity, "sparsity of qkv and proj in the all variant")
      ->capture_default_str();
  app.add_option("--ffn-sparsity", o.ffn_sparsity, "sparsity of fc and fc_proj in the ffn and all variants")
      ->capture_default_str();
  app.add_option("--layers", o.layers, "blocks")->capture_default_str();
  app.add_option("--heads", o.heads, "attention heads")->capture_default_str();
  app.add_option("--d-model", o.d_model, "width")->capture_default_str();
  app.add_option("--d-ff", o.d_ff, "FFN width")->capture_default_str();
  app.add_option("--block", o.block, "tokens per sequence")->capture_default_str();
  app.add_option("--batch", o.batch, "sequences per step")->capture_default_str();
  app.add_option("--vocab", o.vocab, "vocabulary size")->capture_default_str();
  app.add_option("--lr", o.lr, "AdamW learning rate")->capture_default_str();
  app.add_option("--weight-decay", o.weight_decay, "AdamW weight decay (matrices)")->capture_default_str();
  app.add_option("--clip", o.clip, "global gradient-norm clipping threshold")->capture_default_str();
  app.add_option("--seed", o.seed, "seed of weights, topology and tokens")->capture_default_str();
  app.add_option("--csv", o.csv, "also write CSV rows (steps and phases) to this file");
  app.add_option("--weight-blocks", o.weight_blocks,
                 std::string("block shapes the ffn and all variants also run in (32-bit indices): ") + kShapes)
      ->delimiter(',');
  app.add_option("--precision", o.precisions,
                 "fp32 and/or bf16: with bf16 the dense, ffn and all variants also run with bf16 products (named "
                 "dense/bf16, ffn/bf16, all/bf16; unstructured only)")
      ->delimiter(',')
      ->check(CLI::IsMember({"fp32", "bf16"}))
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    if (o.warmup < 1 || o.steps < 1) throw std::invalid_argument("--warmup and --steps must be >= 1");
    for (int t : o.threads)
      if (t < 1) throw std::invalid_argument("thread count " + std::to_string(t) + " must be >= 1");
    if (o.variants.empty()) throw std::invalid_argument("--variants is empty");
    for (const auto& b : o.weight_blocks)
      if (!is_block_shape(b))
        throw std::invalid_argument("--weight-blocks " + b + ": not a block shape (" + kShapes + ")");
    for (const auto& v : o.variants) (void)variant_of(v, o);
    std::erase(o.profile, std::string());  // `--profile ""`: profile nothing
    for (const auto& v : o.profile) (void)variant_of(v, o);
    if (app.count("--profile") > 0) {  // (the default names what the default --variants run)
      const std::vector<std::string> names = variant_names(o);
      for (const auto& v : o.profile)
        if (std::find(names.begin(), names.end(), v) == names.end())
          throw std::invalid_argument("--profile " + v +
                                      ": no such variant runs (--variants, --weight-blocks and "
                                      "--precision give the names; bf16 ones end in /bf16)");
    }
    return o.index_bits == 16 ? run<std::int16_t>(o, argc, argv) : run<std::int32_t>(o, argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpt_step: %s\n", e.what());
    return 1;
  }
}
