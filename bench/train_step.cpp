// train_step — one training step of a sparse model (sprig) against the same model dense
// (sprig::Linear on OpenBLAS), end to end: forward, loss, backward, SGD with momentum, plus the
// amortised cost of SET topology updates every delta_t steps.
//
//   train_step                          # every configuration, table on stdout
//   train_step --csv > step.csv         # CSV on stdout, the table on stderr
//   train_step --md report.md           # also writes the table, bars and profile as markdown
//   train_step --single ffn,0.9,2       # one configuration in this process (memory probe)
//   train_step --precision fp32,bf16    # every unstructured row also with bf16 products
//
// Models (batch 128, fp32 unless --precision says bf16, feature-major activations [features x batch]):
//   mlp  784-1024-1024-10, ReLU; both hidden layers sparse, output layer dense; softmax CE.
//   ffn  1024 -> 4096 -> 1024 with GELU (tanh); both layers sparse; MSE against a random
//        target (mean over all 1024 x B elements, PyTorch's nn.MSELoss default).
// Sparsity 0 means every layer is sprig::Linear (OpenBLAS sgemm, OpenMP build). The input
// is synthetic (uniform [0,1) "pixels" / standard normal features, random labels/targets):
// a step's cost does not depend on the values, and a loaded data set would dominate the
// resident memory being compared. The input needs no gradient, so the first layer never
// computes dX (as in PyTorch when the input does not require grad).
//
// Timing: every configuration runs in its own process (this program re-executed with
// --single), as the Python scripts in bench/compare_python run theirs: it builds the model,
// takes --warmup untimed steps, times --steps-per-round steps back to back (as training runs
// them: a step finds the caches as the previous one left them), then times --set-updates SET
// updates. The driver starts --rounds rounds of these processes, rotating the order of the
// configurations each round, so machine drift hits all of them alike, and pools the steps.
// (Timed interleaved in one process, where a round's steps found the caches as another
// model had left them, the MLP's 90% step took 1.50-1.53 ms in a full run; alone 1.46-1.48.)
// ms/step = median step + amortised topology cost, where the amortised cost is
//   (median SET update + median extra time of the first step after an update) / delta_t;
// the first step after an update rebuilds the transpose caches and row partitions, which
// belongs to the update, not to the steady state. The update is SET (magnitude drop,
// uniform random grow) at drop fraction ~0.3 (cosine schedule, first updates of a run).
// The phase-by-phase profile (--profile) runs in the driver on a freshly warmed-up model
// (fp32 unstructured rows only: it calls the fp32 kernels itself).
//
// Memory: the same processes report their peak resident set (VmHWM) after the warm-up,
// timed steps and SET updates (median over the rounds). The process baseline (libraries,
// OpenMP/OpenBLAS runtime) is in that number, and so is what glibc's allocator keeps resident
// after blocks are freed; with --malloc-mmap-threshold 131072 large blocks go back to the OS
// when freed, which separates the two (the update's scratch is freed, its peak is not).
//
// OpenBLAS: the dense rows run the kernels OpenBLAS picks for this CPU unless
// OPENBLAS_CORETYPE says otherwise (--openblas-coretype sets it); a value inherited from the
// environment is named in the report's header, since it can make the dense baseline slower
// than OpenBLAS's own choice (Haswell instead of Cooperlake on a Zen 5: 11.4 vs 6.3 ms).
//
// Allocations: this binary replaces the global operator new; the table reports operator-new
// calls per timed step (mallocs made by OpenBLAS or libgomp themselves are not seen).
//
// Block-sparse rows (--block 4x4,8x1,8x8): the same models with every sparse layer a
// BlockSparseLinear of R x C blocks at block density 1 - sparsity, beside the unstructured
// rows. Their topology stays fixed (no SET updates yet: DST at block granularity is not
// built), so their amortised topology cost is 0 and the unstructured rows' is not.
//
// Precision (--precision fp32,bf16; a list, default fp32): the precisions every configuration
// runs in, each as its own row (and its own processes). bf16 is Precision::bf16
// (core/precision.hpp): the layers' products take bf16 weights and activations with fp32
// accumulation, the float weights stay the master copy the optimizer updates and SET scores.
// It applies to the layers the sparsity applies to: the MLP's two hidden layers (its 10-wide
// output layer stays fp32, as models::MLPSpec::precision has it) and both FFN layers, sparse
// (SparseLinear on the bf16 kernels) and dense (Linear on bf16_gemm, not OpenBLAS) alike.
// Its rows' impl ends in "/bf16" (sprig-sparse-i16/bf16; the dense ones are sprig-dense/bf16,
// since no BLAS runs their products). Block rows run in each precision too (BlockSparseLinear
// on the bf16 block kernels, kernels/bf16_block_kernels.hpp).
// "speedup vs dense" and "RSS vs dense" of every row, bf16 ones included, are against the
// fp32 dense row of its model and thread count (none without fp32 in --precision).
// --single takes one precision (--precision bf16 runs that configuration in bf16).
//
// CSV columns: model,sparsity,threads,impl,median_ms,spread,speedup_vs_dense,peak_rss_mb
// where spread is the interquartile range "p25-p75" in ms (amortised cost included).
//
// train_step_portable is this program without a BLAS (SPRIG_TRAIN_STEP_BLAS=0): its dense
// layers (the dense rows, and the MLP's 10-wide output layer in the sparse rows) run sprig's
// portable GEMM, and no OpenBLAS is mapped into its processes. Its sparse rows are what a
// program that trains only sparse models costs, in time and in resident memory.
#include <sprig/core/precision.hpp>
#include <sprig/dst/set.hpp>
#include <sprig/kernels/narrow_dense.hpp>
#include <sprig/kernels/sddmm.hpp>
#include <sprig/kernels/sddmm_dx.hpp>
#include <sprig/kernels/spmm.hpp>
#include <sprig/kernels/spmm_transposed.hpp>
#include <sprig/kernels/transpose.hpp>
#include <sprig/nn/block_sparse_linear.hpp>
#include <sprig/kernels/dense_gemm.hpp>
#include <sprig/nn/sequential.hpp>
#include <sprig/nn/softmax_cross_entropy.hpp>
#include <sprig/optim/sgd.hpp>

#include <CLI/CLI.hpp>

#include "block_shapes.hpp"

#ifndef SPRIG_TRAIN_STEP_BLAS
#  define SPRIG_TRAIN_STEP_BLAS 1
#endif
#if SPRIG_TRAIN_STEP_BLAS
#  include <cblas.h>
#endif
#ifdef __GLIBC__
#  include <malloc.h>
#endif
#include <omp.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <map>
#include <memory>
#include <new>
#include <numeric>
#include <sstream>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

// ---------------------------------------------------------------------------------------
// Counting global operator new (every form, the tests' replacement: malloc / aligned_alloc
// and free), so steady-state allocations are visible.
#include "../tests/observed_new.hpp"

// Set while timed steps run; a debugger can break on operator new conditioned on it.
std::atomic<bool> sprig_train_step_timing{false};
namespace {
std::atomic<std::int64_t> g_new_calls{0};
}  // namespace
void sprig_test_observe_new(std::size_t) noexcept { g_new_calls.fetch_add(1, std::memory_order_relaxed); }

namespace {

// Column index width of the sparse layers: 16 bits by default (every layer here is at most
// 4096 wide, and 2-byte indices cut the bytes each kernel streams); the train_step_i32 target
// builds the same program with 32-bit indices.
#ifndef SPRIG_TRAIN_STEP_INDEX_BITS
#  define SPRIG_TRAIN_STEP_INDEX_BITS 16
#endif
static_assert(SPRIG_TRAIN_STEP_INDEX_BITS == 16 || SPRIG_TRAIN_STEP_INDEX_BITS == 32);
using T = float;
using Index = std::conditional_t<SPRIG_TRAIN_STEP_INDEX_BITS == 16, std::int16_t, std::int32_t>;
using Clock = std::chrono::steady_clock;
template <int R, int C>
using Block = sprig::BlockSparseLinear<T, Index, R, C>;
// The block shapes train_step times (each one is a set of kernel instantiations in every
// variant of this program): the square ones and the tall one of compare_kernels.
template <int R, int C>
constexpr bool kTimedBlock = (R == 4 && C == 4) || (R == 8 && C == 1) || (R == 8 && C == 8);
using Model = sprig::Sequential<T, Index, Block<4, 4>, Block<8, 1>, Block<8, 8>>;

using sprig_bench::with_block_shape;

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// q-quantile with linear interpolation (q in [0, 1]); v need not be sorted.
double quantile(std::vector<double> v, double q) {
  if (v.empty()) return std::nan("");
  std::sort(v.begin(), v.end());
  const double pos = q * static_cast<double>(v.size() - 1);
  const auto lo = static_cast<std::size_t>(std::floor(pos));
  const std::size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (pos - static_cast<double>(lo)) * (v[hi] - v[lo]);
}
double median(const std::vector<double>& v) { return quantile(v, 0.5); }

// A field of /proc/self/status in KiB (VmHWM: peak resident set; VmRSS: current), or -1.
std::int64_t proc_status_kb(const std::string& field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(field + ":", 0) == 0) return std::strtoll(line.c_str() + field.size() + 1, nullptr, 10);
  return -1;
}
std::int64_t peak_rss_kb() {
  const std::int64_t hwm = proc_status_kb("VmHWM");
  if (hwm >= 0) return hwm;
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_maxrss;  // KiB on Linux
}

#if SPRIG_TRAIN_STEP_BLAS
// The shared object this process mapped for OpenBLAS (the proof that the OpenMP build runs).
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

std::string fmt(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof(b), f, v);
  return b;
}

// The 1, 5 and 15 minute load averages (other processes competing for the cores).
std::string load_average() {
  std::ifstream in("/proc/loadavg");
  std::string a, b, c;
  in >> a >> b >> c;
  return a + " " + b + " " + c;
}

void set_threads(int n) {
  omp_set_num_threads(n);
#if SPRIG_TRAIN_STEP_BLAS
  openblas_set_num_threads(n);
#endif
}

enum class Kind { mlp, ffn };
const char* kind_name(Kind k) { return k == Kind::mlp ? "mlp" : "ffn"; }
Kind parse_kind(const std::string& s) {
  if (s == "mlp") return Kind::mlp;
  if (s == "ffn") return Kind::ffn;
  throw std::invalid_argument("unknown model '" + s + "' (mlp or ffn)");
}

// loss = mean over all elements of (Z - Y)^2;  dZ = 2 (Z - Y) / (rows * B).
T mse_forward_backward(sprig::ConstMatrixView<T> Z, sprig::ConstMatrixView<T> target, sprig::MatrixView<T> dZ) {
  const double n = static_cast<double>(Z.rows() * Z.cols());
  const T scale = static_cast<T>(2.0 / n);
  double loss = 0.0;
  for (std::int64_t i = 0; i < Z.rows(); ++i) {
    const T* z = Z.row(i);
    const T* y = target.row(i);
    T* d = dZ.row(i);
    T acc = T(0);
    for (std::int64_t b = 0; b < Z.cols(); ++b) {
      const T e = z[b] - y[b];
      acc += e * e;
      d[b] = scale * e;
    }
    loss += acc;
  }
  return static_cast<T>(loss / n);
}

struct Options {
  std::vector<std::string> models = {"mlp", "ffn"};
  std::vector<double> sparsities = {0.0, 0.8, 0.9, 0.95, 0.98};
  std::vector<int> threads = {1, 2};
  std::vector<double> profile = {0.0, 0.9};
  std::int64_t batch = 128;
  int warmup = 5;
  int rounds = 5;
  int steps_per_round = 6;
  std::int64_t delta_t = 100;
  int set_updates = 3;
  int profile_steps = 15;
  double lr = 0.01;
  double momentum = 0.9;
  std::uint64_t seed = 1;
  bool csv = false;
  std::string md;
  std::string single;
  std::vector<std::string> blocks;                 // block shapes timed beside the unstructured rows
  std::vector<std::string> precisions = {"fp32"};  // each configuration runs in each of these
  std::string openblas_coretype;
  long mmap_threshold = 0;  // > 0: mallopt(M_MMAP_THRESHOLD) in this and the memory processes
};

// One model with its data, loss, optimizer and topology algorithm.
struct Run {
  Kind kind;
  double sparsity;
  Model model;
  sprig::SGD<T> opt;
  sprig::SoftmaxCrossEntropy<T> ce;
  sprig::Matrix<T> X, target;
  std::vector<int> labels;
  std::unique_ptr<sprig::dst::SET<T, Index>> set;
  std::int64_t set_step = 0;  // the schedule step of the next timed update
  T last_loss = T(0);
  T first_loss = T(0);           // of the first step this run took
  std::int64_t steps_taken = 0;  // by step()

  std::string block;           // "RxC" for block-sparse layers, empty for unstructured
  sprig::Precision precision;  // of the layers the sparsity applies to (see the top of this file)

  Run(Kind k, double s, const Options& o, std::string block_shape = "", sprig::Precision p = sprig::Precision::fp32)
      : kind(k),
        sparsity(s),
        opt(sprig::SGDOptions{o.lr, o.momentum, 0.0, false}),
        block(std::move(block_shape)),
        precision(p) {
    const double density = 1.0 - s;
    const bool dense = s <= 0.0;
    std::uint64_t key = 0;
    auto linear = [&](std::int64_t in, std::int64_t out, bool sparse) {
      if (sparse && !dense && !block.empty()) {
        if (!with_block_shape(block, [&]<int R, int C>() {
              if constexpr (kTimedBlock<R, C>) {
                Block<R, C> layer(in, out, {.density = density, .seed = o.seed, .layer_key = key++});
                layer.set_precision(precision);
                model.add(std::move(layer));
              } else
                throw std::invalid_argument("train_step is built for 4x4, 8x1 and 8x8 blocks, not " + block);
            }))
          throw std::invalid_argument("unknown block shape '" + block + "'");
      } else if (sparse && !dense) {
        // SET relocates rows: room for them, reserved as each layer is built (address space
        // until used); sprig::Sequential::reserve_growth would do it after the fact
        sprig::SparseLinear<T, Index> layer(in, out,
                                            {.density = density,
                                             .seed = o.seed,
                                             .layer_key = key++,
                                             .growth_reserve = sprig::SparseParameter<T, Index>::kGrowthReserve});
        layer.set_precision(precision);
        model.add(std::move(layer));
      } else {
        sprig::Linear<T> layer(in, out, o.seed, key++);
        if (sparse) layer.set_precision(precision);  // the MLP's output layer stays fp32
        model.add(std::move(layer));
      }
    };
    sprig::CounterRng rng(o.seed, 0xDA7A, static_cast<std::uint64_t>(k));
    const std::int64_t B = o.batch;
    if (k == Kind::mlp) {
      linear(784, 1024, true);
      model.add(sprig::ReLU<T>{});
      linear(1024, 1024, true);
      model.add(sprig::ReLU<T>{});
      linear(1024, 10, false);
      X.resize(784, B, Model::activation_stride(B));
      for (std::int64_t i = 0; i < X.rows(); ++i)
        for (std::int64_t b = 0; b < B; ++b) X(i, b) = static_cast<T>(rng.uniform01());
      labels.resize(static_cast<std::size_t>(B));
      for (auto& l : labels) l = static_cast<int>(rng.uniform_below(10));
    } else {
      linear(1024, 4096, true);
      model.add(sprig::GELU<T>{});
      linear(4096, 1024, true);
      X.resize(1024, B, Model::activation_stride(B));
      target.resize(1024, B, Model::activation_stride(B));
      for (std::int64_t i = 0; i < X.rows(); ++i)
        for (std::int64_t b = 0; b < B; ++b) {
          X(i, b) = static_cast<T>(rng.normal());
          target(i, b) = static_cast<T>(rng.normal());
        }
    }
    if (!dense && block.empty()) {
      // RigL's schedule for a 10-epoch Fashion-MNIST run (469 steps/epoch): updates every
      // delta_t steps until 75%; the timed updates are the first ones (drop fraction ~0.3).
      sprig::dst::UpdateSchedule sched = sprig::dst::UpdateSchedule::for_run(4690, o.delta_t);
      set = std::make_unique<sprig::dst::SET<T, Index>>(sched, o.seed);
    }
  }

  bool updates_topology() const noexcept { return set != nullptr; }

  T loss_into(sprig::ConstMatrixView<T> Z, sprig::MatrixView<T> dZ) {
    if (kind == Kind::mlp) return ce.forward_backward(Z, labels, dZ);
    return mse_forward_backward(Z, target, dZ);
  }

  void step() {
    const auto Z = model.forward(X);
    last_loss = loss_into(Z, model.output_grad());
    if (steps_taken++ == 0) first_loss = last_loss;
    model.backward();
    opt.step(model);
  }

  // One SET update on the current topology (call right after a step). Returns its ms.
  double topology_update() {
    const auto t0 = Clock::now();
    const auto layers = model.sparse_layers();
    set->update(layers, set_step);
    set_step += set->schedule().delta_t;
    return ms_between(t0, Clock::now());
  }

  std::int64_t live_weights() {
    std::int64_t n = 0;
    model.for_each_parameter([&](auto& p) {
      if constexpr (requires { p.live_count(); })
        n += p.live_count();
      else
        n += p.size();
    });
    return n;
  }
};

// ---------------------------------------------------------------------------------------
// Profile: the same step as Sequential runs it, phase by phase, calling the kernels the
// layers call (SparseLinear: spmm with the bias and a following ReLU in its store, sddmm +
// bias sum, spmm_transposed on the layer's transpose cache, or sddmm_dx where it takes its one
// pass; Linear: three gemms + one bias/ReLU pass, or with at most kNarrowMaxRows outputs the
// narrow kernels with the same fusions as sddmm_dx; a ReLU after a linear layer then only
// runs backward), with this
// profiler's own activation buffers and kernel workspaces. The phase sum is printed beside
// the Sequential step time.
enum Phase {
  fwd_spmm,
  fwd_gemm,
  wgrad_sddmm,
  wgrad_gemm,
  dx_spmm,
  dx_gemm,
  wgrad_dx_fused,
  fwd_narrow,
  wgrad_dx_narrow,
  bias_phase,
  act_phase,
  loss_phase,
  optimizer,
  kPhases
};
constexpr std::array<const char*, kPhases> kPhaseNames = {
    "forward spmm (sparse W X)",
    "forward gemm (dense W X)",
    "weight grad sddmm (sparse)",
    "weight grad gemm (dense)",
    "dX spmm_transposed (W^T dY, incl. W^T value refresh)",
    "dX gemm (dense W^T dY)",
    "weight grad + dX in one pass over W^T (sddmm_dx; + the backward of a ReLU or GELU below)",
    "forward narrow dense (bias and ReLU in its store)",
    "weight grad + dX in one pass, narrow dense (+ the backward of a ReLU below)",
    "bias grad (+ bias add pass if dense)",
    "activation passes (GELU fwd with its derivative; a backward where no kernel store takes it)",
    "loss",
    "optimizer (SGD momentum, all layers)"};
constexpr std::size_t kMaxLayers = 8;

struct ProfileResult {
  using PerLayer = std::array<double, kMaxLayers>;
  std::array<PerLayer, kPhases> ms{};        // median per phase and layer
  std::array<PerLayer, kPhases> flops{};     // 2 x multiply-adds per step
  std::array<std::string, kMaxLayers> what;  // the layer and its shapes
  double sum_ms = 0.0;                       // median of the per-step sums of all phases
  bool first_layer_skips_dx = false;
};

ProfileResult profile_run(Run& run, int steps) {
  Model& m = run.model;
  const std::size_t n = m.size();
  if (n > kMaxLayers) throw std::invalid_argument("profile: too many layers");
  const std::int64_t B = run.X.cols();
  std::vector<sprig::Matrix<T>> acts(n), grads(n);
  std::vector<sprig::MatrixView<T>> outs(n);  // a fused ReLU's output is its linear layer's buffer
  std::vector<sprig::KernelWorkspace<T>> ws(n), wst(n);
  std::array<std::array<std::vector<double>, kMaxLayers>, kPhases> samples;
  std::vector<double> sums;
  ProfileResult r;
  for (int it = 0; it < steps + 1; ++it) {  // the first step is a warm-up
    std::array<ProfileResult::PerLayer, kPhases> ph{};
    auto timed = [&](Phase p, std::size_t k, auto&& fn) {
      const auto t0 = Clock::now();
      fn();
      ph[p][k] += ms_between(t0, Clock::now());
    };
    sprig::ConstMatrixView<T> in = run.X;
    for (std::size_t k = 0; k < n; ++k) {
      std::visit(
          [&](auto& l) {
            using L = std::decay_t<decltype(l)>;
            std::int64_t out = in.rows();
            if constexpr (requires { l.out_features(); }) out = l.out_features();
            const bool fused_here = k > 0 && m.fuses_next_relu(k - 1);
            if (!fused_here && (acts[k].rows() != out || acts[k].cols() != B))
              acts[k].resize(out, B, Model::activation_stride(B));
            const sprig::MatrixView<T> y = fused_here ? outs[k - 1] : acts[k].view();
            outs[k] = y;
            const auto act = m.fuses_next_relu(k) ? sprig::FusedActivation::relu : sprig::FusedActivation::none;
            if constexpr (std::is_same_v<L, sprig::SparseLinear<T, Index>>) {
              timed(fwd_spmm, k, [&] {
                sprig::spmm(l.weight.matrix, in, y, ws[k], sprig::RowEpilogue<T>{l.bias.value, act});
              });
              if (it == 0) {
                const double f = 2.0 * static_cast<double>(l.weight.matrix.nnz() * B);
                r.flops[fwd_spmm][k] = r.flops[wgrad_sddmm][k] = r.flops[dx_spmm][k] = f;
                r.flops[wgrad_dx_fused][k] = 2 * f;
                r.what[k] = "sparse " + std::to_string(out) + "x" + std::to_string(in.rows()) +
                            " d=" + fmt("%.2f", l.density());
              }
            } else if constexpr (std::is_same_v<L, sprig::Linear<T>>) {
              if (l.narrow()) {  // as Linear::forward
                timed(fwd_narrow, k,
                      [&] { sprig::narrow_forward<T>(l.weight.view(), in, y, std::span<const T>(l.bias.value), act); });
                if (it == 0) {
                  const double f = 2.0 * static_cast<double>(l.weight.size() * B);
                  r.flops[fwd_narrow][k] = f;
                  r.flops[wgrad_dx_narrow][k] = k > 0 ? 2 * f : f;
                  r.what[k] = "dense " + std::to_string(out) + "x" + std::to_string(in.rows());
                }
                return;
              }
              timed(fwd_gemm, k,
                    [&] { sprig::gemm<T>(sprig::Trans::no, sprig::Trans::no, T(1), l.weight.view(), in, T(0), y); });
              timed(bias_phase, k, [&] { sprig::detail::add_bias<T>(l.bias.value, y, act); });
              if (it == 0) {
                const double f = 2.0 * static_cast<double>(l.weight.size() * B);
                r.flops[fwd_gemm][k] = r.flops[wgrad_gemm][k] = r.flops[dx_gemm][k] = f;
                r.what[k] = "dense " + std::to_string(out) + "x" + std::to_string(in.rows());
              }
            } else {
              if (it == 0)
                r.what[k] = std::string(std::is_same_v<L, sprig::GELU<T>> ? "GELU " : "ReLU ") + std::to_string(out) +
                            "x" + std::to_string(B);
              if constexpr (std::is_same_v<L, sprig::GELU<T>>) {
                if (m.keeps_gelu_derivative(k)) {
                  timed(act_phase, k, [&] { l.forward_keep_derivative(outs[k - 1], y); });
                  return;
                }
              }
              if (!fused_here) timed(act_phase, k, [&] { l.forward(in, y); });
            }
          },
          m.layer(k));
      in = outs[k];
    }
    if (grads[n - 1].rows() != outs[n - 1].rows() || grads[n - 1].cols() != B)
      grads[n - 1].resize(outs[n - 1].rows(), B, Model::activation_stride(B));
    timed(loss_phase, n - 1, [&] { run.last_loss = run.loss_into(outs[n - 1], grads[n - 1].view()); });
    bool relu_done = false;  // as Sequential: the layer above applied this activation's backward
    for (std::size_t k = n; k-- > 0;) {
      if (relu_done) {
        relu_done = false;
        continue;
      }
      const sprig::ConstMatrixView<T> x =
          k == 0 ? sprig::ConstMatrixView<T>(run.X) : sprig::ConstMatrixView<T>(outs[k - 1]);
      const sprig::ConstMatrixView<T> dy = grads[k].view();
      // Where layer k's dX goes; for a linear layer also the activation below it whose backward
      // it applies (as Sequential asks for it) and that activation's derivative buffer for
      // gelu: then dX goes to the activation's input gradient, where Sequential's shared
      // buffer has it.
      const sprig::FusedActivation below = m.fused_input_activation(k);
      const bool fused_below = below != sprig::FusedActivation::none;
      const sprig::ConstMatrixView<T> derivative =
          below == sprig::FusedActivation::gelu ? sprig::ConstMatrixView<T>(outs[k - 2]) : sprig::ConstMatrixView<T>();
      sprig::Matrix<T>* dx = k == 0 ? nullptr : &grads[fused_below ? k - 2 : k - 1];
      if (dx && (dx->rows() != x.rows() || dx->cols() != B)) dx->resize(x.rows(), B, Model::activation_stride(B));
      const sprig::MatrixView<T> dx_view = dx ? dx->view() : sprig::MatrixView<T>();
      relu_done = fused_below;
      // where no kernel store applies it: the pass after the kernels, timed as the activation's
      auto pass_below = [&] {
        if (fused_below)
          timed(act_phase, k - 1, [&] { sprig::detail::input_activation_rows<T>(below, x, derivative, dx_view); });
      };
      std::visit(
          [&](auto& l) {
            using L = std::decay_t<decltype(l)>;
            if constexpr (std::is_same_v<L, sprig::SparseLinear<T, Index>>) {
              auto& W = l.weight.matrix;
              if (k > 0 && sprig::detail::sddmm_dx_one_pass(W, B, ws[k], wst[k])) {  // as SparseLinear::backward
                timed(wgrad_dx_fused, k, [&] {
                  sprig::sddmm_dx(W, l.transpose_cache(), dy, x, std::span<T>(l.weight.grad), dx_view, ws[k], wst[k],
                                  below, derivative);
                });
                timed(bias_phase, k, [&] { sprig::detail::sum_rows<T>(dy, l.bias.grad); });
                return;
              }
              timed(wgrad_sddmm, k,
                    [&] { sprig::sddmm(W, dy, x, std::span<T>(l.weight.grad), ws[k], sprig::Update::overwrite); });
              timed(bias_phase, k, [&] { sprig::detail::sum_rows<T>(dy, l.bias.grad); });
              if (dx) {  // as SparseLinear::backward: W^T dY on the layer's transpose cache
                timed(dx_spmm, k, [&] {
                  sprig::spmm_transposed(W, l.transpose_cache(), dy, dx_view, wst[k], sprig::Update::overwrite);
                });
                pass_below();
              }
            } else if constexpr (std::is_same_v<L, sprig::Linear<T>>) {  // as Linear::backward
              if (l.narrow()) {
                timed(wgrad_dx_narrow, k, [&] {
                  sprig::narrow_backward<T>(l.weight.view(), x, dy, l.weight.grad_view(), dx_view, below, derivative);
                });
                timed(bias_phase, k, [&] { sprig::detail::sum_rows<T>(dy, l.bias.grad); });
                return;
              }
              timed(wgrad_gemm, k, [&] {
                sprig::gemm<T>(sprig::Trans::no, sprig::Trans::yes, T(1), dy, x, T(0), l.weight.grad_view());
              });
              timed(bias_phase, k, [&] { sprig::detail::sum_rows<T>(dy, l.bias.grad); });
              if (dx) {
                timed(dx_gemm, k, [&] {
                  sprig::gemm<T>(sprig::Trans::yes, sprig::Trans::no, T(1), l.weight.view(), dy, T(0), dx_view);
                });
                pass_below();
              }
            } else {
              timed(act_phase, k, [&] { l.backward(x, dy, dx_view); });
            }
          },
          m.layer(k));
    }
    timed(optimizer, 0, [&] { run.opt.step(m); });
    if (it == 0) continue;
    double s = 0.0;
    for (int p = 0; p < kPhases; ++p)
      for (std::size_t k = 0; k < n; ++k) {
        samples[p][k].push_back(ph[p][k]);
        s += ph[p][k];
      }
    sums.push_back(s);
  }
  for (int p = 0; p < kPhases; ++p)
    for (std::size_t k = 0; k < n; ++k) r.ms[p][k] = median(samples[p][k]);
  r.sum_ms = median(sums);
  // Sequential never asks the first layer for dX: its transpose cache must be untouched
  // (neither built nor refreshed) after all the steps run so far.
  if (auto* l0 = std::get_if<sprig::SparseLinear<T, Index>>(&m.layer(0)))
    r.first_layer_skips_dx = l0->transpose_cache().rebuilds() == 0 && l0->transpose_cache().refreshes() == 0;
  return r;
}

// ---------------------------------------------------------------------------------------
struct Result {
  Kind kind;
  double sparsity;
  std::string block;  // "RxC" for a block-sparse row
  sprig::Precision precision = sprig::Precision::fp32;
  int threads;
  std::vector<double> step_ms;  // timed steady-state steps
  double update_ms = 0.0;       // median SET update
  double rebuild_ms = 0.0;      // median extra time of the first step after an update
  double amortised_ms = 0.0;    // (update + rebuild) / delta_t
  double allocs_per_step = 0.0;
  std::int64_t live_weights = 0;
  std::int64_t model_bytes = 0;  // Sequential::memory_bytes() (weights, grads, state, caches, buffers)
  double peak_rss_mb = std::nan("");
  double steady_rss_mb = std::nan("");  // peak before the first topology update
  double baseline_rss_mb = std::nan("");
  // Peak RSS less the RSS the process had before it built the model: what the run itself
  // added (model, activations, allocator, pages of code and libraries it touched), without
  // the ~7 MB of shared-library pages that every process of this binary maps at start-up.
  double growth_rss_mb = std::nan("");
  double first_loss = 0.0;  // after the first warm-up step
  double final_loss = 0.0;  // after the timed steps (the step is training, not spinning)
  bool has_profile = false;
  ProfileResult profile;

  double median_ms() const { return median(step_ms) + amortised_ms; }
  double p25() const { return quantile(step_ms, 0.25) + amortised_ms; }
  double p75() const { return quantile(step_ms, 0.75) + amortised_ms; }
  double min() const { return *std::min_element(step_ms.begin(), step_ms.end()) + amortised_ms; }
  double max() const { return *std::max_element(step_ms.begin(), step_ms.end()) + amortised_ms; }
};

// What one configuration's own process measured (see run_single): its timed steps, its SET
// updates with the extra time of the first step after each, and its memory.
struct ProcessResult {
  std::vector<double> step_ms;
  std::vector<double> update_ms, rebuild_ms;
  std::int64_t peak_kb = -1, steady_kb = -1, baseline_kb = -1, model_bytes = 0, live = 0, allocs = 0;
  double first_loss = 0.0, final_loss = 0.0;
};

// --single model,sparsity,threads: the configuration alone in this process, in the one
// precision of --precision, as the Python scripts run theirs: warm-up, steps back to back,
// then the SET updates. Prints machine-readable lines (STEPS, UPDATE, SINGLE) on stdout for
// the driver.
int run_single(const Options& o) {
  std::stringstream ss(o.single);
  std::string model, sp, th, block;
  if (!std::getline(ss, model, ',') || !std::getline(ss, sp, ',') || !std::getline(ss, th, ','))
    throw std::invalid_argument("--single expects model,sparsity,threads[,RxC], got '" + o.single + "'");
  std::getline(ss, block, ',');
  if (o.precisions.size() != 1)
    throw std::invalid_argument("--single runs one precision: give --precision fp32 or --precision bf16");
  const sprig::Precision precision = sprig::parse_precision(o.precisions.front());
  const int threads = std::stoi(th);
  set_threads(threads);
  const std::int64_t baseline_kb = proc_status_kb("VmRSS");
  Run run(parse_kind(model), std::stod(sp), o, block, precision);
  for (int i = 0; i < o.warmup; ++i) run.step();
  std::vector<double> ms;
  ms.reserve(static_cast<std::size_t>(o.steps_per_round));
  const std::int64_t a0 = g_new_calls.load();
  sprig_train_step_timing = true;
  for (int i = 0; i < o.steps_per_round; ++i) {
    const auto t0 = Clock::now();
    run.step();
    ms.push_back(ms_between(t0, Clock::now()));
  }
  sprig_train_step_timing = false;
  const std::int64_t allocs = g_new_calls.load() - a0;
  const double final_loss = run.last_loss;
  const std::int64_t steady_kb = peak_rss_kb();  // before any topology update
  std::vector<std::pair<double, double>> updates;
  if (run.updates_topology())
    for (int u = 0; u < o.set_updates; ++u) {
      const double upd = run.topology_update();
      auto t0 = Clock::now();
      run.step();  // rebuilds the transposes and partitions for the new topology
      const double first = ms_between(t0, Clock::now());
      std::vector<double> regular;
      for (int s = 0; s < 3; ++s) {
        t0 = Clock::now();
        run.step();
        regular.push_back(ms_between(t0, Clock::now()));
      }
      updates.emplace_back(upd, std::max(0.0, first - median(regular)));
    }
  // Where the model's bytes are (stderr, for the report): per layer its precision, weights /
  // grad+state / transpose cache / kernel workspaces; the rest of memory_bytes() is
  // activations+gradients.
  std::int64_t layer_total = 0;
  for (std::size_t k = 0; k < run.model.size(); ++k)
    std::visit(
        [&](auto& l) {
          using L = std::decay_t<decltype(l)>;
          if constexpr (std::is_same_v<L, sprig::SparseLinear<T, Index>>) {
            const auto& W = l.weight.matrix;
            std::fprintf(stderr,
                         "layer %zu sparse %lldx%lld %s nnz %lld storage %lld: weight %.2f MB, grad+state %.2f MB, "
                         "transpose %.2f MB, workspaces %.2f MB\n",
                         k, static_cast<long long>(W.rows()), static_cast<long long>(W.cols()),
                         sprig::precision_name(l.precision()), static_cast<long long>(W.nnz()),
                         static_cast<long long>(W.storage_size()), l.weight_bytes() / 1048576.0,
                         (l.weight.state_bytes() + l.bias.state_bytes()) / 1048576.0,
                         l.transpose_cache().memory_bytes() / 1048576.0,
                         (l.memory_bytes() - l.weight_bytes() - l.weight.state_bytes() - l.bias.state_bytes() -
                          l.transpose_cache().memory_bytes()) /
                             1048576.0);
            layer_total += l.memory_bytes();
          } else if constexpr (requires { l.weight.entry_count(); }) {  // block-sparse
            const auto& W = l.weight.matrix;
            std::fprintf(stderr, "layer %zu block %dx%d %lldx%lld %s blocks %lld: weight %.2f MB, grad+state %.2f MB\n",
                         k, L::kBlockRows, L::kBlockCols, static_cast<long long>(W.rows()),
                         static_cast<long long>(W.cols()), sprig::precision_name(l.precision()),
                         static_cast<long long>(W.nnz_blocks()), l.weight_bytes() / 1048576.0,
                         (l.weight.state_bytes() + l.bias.state_bytes()) / 1048576.0);
            layer_total += l.memory_bytes();
          } else if constexpr (std::is_same_v<L, sprig::Linear<T>>) {
            std::fprintf(stderr, "layer %zu dense %lldx%lld %s: weight %.2f MB, grad+state %.2f MB\n", k,
                         static_cast<long long>(l.out_features()), static_cast<long long>(l.in_features()),
                         sprig::precision_name(l.precision()), l.weight_bytes() / 1048576.0,
                         (l.weight.state_bytes() + l.bias.state_bytes()) / 1048576.0);
            layer_total += l.memory_bytes();
          }
        },
        run.model.layer(k));
  std::fprintf(stderr, "activations + their gradients: %.2f MB; input batch %.2f MB\n",
               (run.model.memory_bytes() - layer_total) / 1048576.0,
               (run.X.memory_bytes() + run.target.memory_bytes()) / 1048576.0);
  std::printf("STEPS");
  for (double m : ms) std::printf(" %.6f", m);
  std::printf("\n");
  for (const auto& [upd, extra] : updates) std::printf("UPDATE %.6f %.6f\n", upd, extra);
  std::printf(
      "SINGLE peak_rss_kb=%lld steady_kb=%lld baseline_kb=%lld model_bytes=%lld live=%lld allocs=%lld "
      "first_loss=%.9g final_loss=%.9g\n",
      static_cast<long long>(peak_rss_kb()), static_cast<long long>(steady_kb), static_cast<long long>(baseline_kb),
      static_cast<long long>(run.model.memory_bytes()), static_cast<long long>(run.live_weights()),
      static_cast<long long>(allocs), static_cast<double>(run.first_loss), final_loss);
  return 0;
}

// Runs this program with --single for one configuration and parses what it printed; throws
// if the process fails or prints no SINGLE line (its stderr then says why).
ProcessResult run_process(const Options& o, Kind kind, double sparsity, int threads, const std::string& block,
                          sprig::Precision precision) {
  char exe[4096];
  const ssize_t len = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (len <= 0) throw std::runtime_error("cannot read /proc/self/exe");
  exe[len] = '\0';
  std::ostringstream cmd;
  cmd << std::setprecision(17);  // doubles (sparsity, lr, momentum) reach the child exactly
  cmd << '"' << exe << "\" --single " << kind_name(kind) << ',' << sparsity << ',' << threads
      << (block.empty() ? "" : "," + block) << " --precision " << sprig::precision_name(precision) << " --batch "
      << o.batch << " --warmup " << o.warmup << " --steps-per-round " << o.steps_per_round << " --delta-t " << o.delta_t
      << " --set-updates " << o.set_updates << " --lr " << o.lr << " --momentum " << o.momentum << " --seed " << o.seed
      << " --malloc-mmap-threshold " << o.mmap_threshold << " 2>/dev/null";  // env (OPENBLAS_CORETYPE) is inherited
  FILE* p = popen(cmd.str().c_str(), "r");
  if (!p) throw std::runtime_error("cannot start " + cmd.str());
  ProcessResult r;
  bool done = false;
  char line[1 << 16];
  while (std::fgets(line, sizeof(line), p)) {
    std::istringstream in(line);
    std::string tag;
    in >> tag;
    if (tag == "STEPS") {
      for (double v; in >> v;) r.step_ms.push_back(v);
    } else if (tag == "UPDATE") {
      double u = 0, e = 0;
      in >> u >> e;
      r.update_ms.push_back(u);
      r.rebuild_ms.push_back(e);
    } else if (tag == "SINGLE") {
      long long peak = 0, steady = 0, base = 0, bytes = 0, live = 0, allocs = 0;
      done = std::sscanf(line,
                         "SINGLE peak_rss_kb=%lld steady_kb=%lld baseline_kb=%lld model_bytes=%lld live=%lld "
                         "allocs=%lld first_loss=%lf final_loss=%lf",
                         &peak, &steady, &base, &bytes, &live, &allocs, &r.first_loss, &r.final_loss) == 8;
      r.peak_kb = peak;
      r.steady_kb = steady;
      r.baseline_kb = base;
      r.model_bytes = bytes;
      r.live = live;
      r.allocs = allocs;
    }
  }
  const int status = pclose(p);
  if (status != 0 || !done || r.step_ms.size() != static_cast<std::size_t>(o.steps_per_round))
    throw std::runtime_error("configuration process failed (exit status " + std::to_string(status) + "): " + cmd.str());
  return r;
}

// Times every configuration of one thread count, each in its own process (run_process), in
// o.rounds rounds that rotate the order of the configurations, so machine drift hits all of
// them alike. Memory and loss come from the same processes (median peak over the rounds).
std::vector<Result> time_configs(const Options& o, int threads) {
  std::vector<Result> res;
  for (const auto& name : o.models)
    for (double s : o.sparsities) {
      Result r;
      r.kind = parse_kind(name);
      r.sparsity = s;
      r.threads = threads;
      for (const auto& p : o.precisions) {  // fp32 first (main sorts them), then bf16 beside it
        r.precision = sprig::parse_precision(p);
        r.block.clear();
        res.push_back(r);
        if (s > 0.0)
          for (const auto& b : o.blocks) {
            r.block = b;
            res.push_back(r);
          }
      }
    }
  std::vector<std::vector<double>> peak(res.size()), steady(res.size()), growth(res.size()), upd(res.size()),
      extra(res.size());
  std::vector<std::int64_t> allocs(res.size(), 0);
  for (int round = 0; round < o.rounds; ++round)
    for (std::size_t q = 0; q < res.size(); ++q) {
      const std::size_t k = (q + static_cast<std::size_t>(round)) % res.size();  // rotate the order
      Result& r = res[k];
      const ProcessResult pr = run_process(o, r.kind, r.sparsity, threads, r.block, r.precision);
      r.step_ms.insert(r.step_ms.end(), pr.step_ms.begin(), pr.step_ms.end());
      upd[k].insert(upd[k].end(), pr.update_ms.begin(), pr.update_ms.end());
      extra[k].insert(extra[k].end(), pr.rebuild_ms.begin(), pr.rebuild_ms.end());
      peak[k].push_back(static_cast<double>(pr.peak_kb) / 1024.0);
      steady[k].push_back(static_cast<double>(pr.steady_kb) / 1024.0);
      growth[k].push_back(static_cast<double>(pr.peak_kb - pr.baseline_kb) / 1024.0);
      allocs[k] += pr.allocs;
      r.baseline_rss_mb = static_cast<double>(pr.baseline_kb) / 1024.0;
      r.model_bytes = pr.model_bytes;
      r.live_weights = pr.live;
      r.first_loss = pr.first_loss;  // every process trains the same steps from the same seed
      r.final_loss = pr.final_loss;
    }
  for (std::size_t k = 0; k < res.size(); ++k) {
    Result& r = res[k];
    r.allocs_per_step = static_cast<double>(allocs[k]) / static_cast<double>(r.step_ms.size());
    r.peak_rss_mb = median(peak[k]);
    r.steady_rss_mb = median(steady[k]);
    r.growth_rss_mb = median(growth[k]);
    if (!upd[k].empty()) {
      r.update_ms = median(upd[k]);
      r.rebuild_ms = median(extra[k]);
      r.amortised_ms = (r.update_ms + r.rebuild_ms) / static_cast<double>(o.delta_t);
    }
    const bool profile =
        std::any_of(o.profile.begin(), o.profile.end(), [&](double s) { return std::abs(s - r.sparsity) < 1e-9; });
    // in this process, on a model trained through the same warm-up steps; profile_run calls the
    // fp32 kernels, so the bf16 rows are not profiled
    if (profile && r.block.empty() && r.precision == sprig::Precision::fp32) {
      set_threads(threads);
      Run run(r.kind, r.sparsity, o);
      for (int i = 0; i < o.warmup; ++i) run.step();
      r.profile = profile_run(run, o.profile_steps);
      r.has_profile = true;
    }
    if (!std::isfinite(r.final_loss))
      std::fprintf(stderr, "warning: %s sparsity %.2f %s: loss is %g after the run\n", kind_name(r.kind), r.sparsity,
                   sprig::precision_name(r.precision), r.final_loss);
  }
  return res;
}

// The fp32 dense row of r's model and thread count (the baseline of every row, bf16 ones too).
const Result* dense_of(const std::vector<Result>& all, const Result& r) {
  for (const auto& d : all)
    if (d.kind == r.kind && d.threads == r.threads && d.sparsity <= 0.0 && d.precision == sprig::Precision::fp32)
      return &d;
  return nullptr;
}

std::string impl_of(const Result& r) {
  const std::string blas = SPRIG_TRAIN_STEP_BLAS ? "openblas" : "portable";
  if (!r.block.empty())
    return "sprig-block" + r.block + "-i" + std::to_string(SPRIG_TRAIN_STEP_INDEX_BITS) +
           (r.precision == sprig::Precision::bf16 ? "/bf16" : "");
  if (r.precision == sprig::Precision::bf16)  // products on the bf16 kernels and bf16_gemm, no BLAS
    return r.sparsity <= 0.0 ? "sprig-dense/bf16"
                             : "sprig-sparse-i" + std::to_string(SPRIG_TRAIN_STEP_INDEX_BITS) +
                                   (SPRIG_TRAIN_STEP_BLAS ? "" : "-noblas") + "/bf16";
  return r.sparsity <= 0.0 ? "sprig-dense-" + blas
                           : "sprig-sparse-i" + std::to_string(SPRIG_TRAIN_STEP_INDEX_BITS) +
                                 (SPRIG_TRAIN_STEP_BLAS ? "" : "-noblas");
}

void write_csv(std::ostream& os, const std::vector<Result>& all) {
  os << "model,sparsity,threads,impl,median_ms,spread,speedup_vs_dense,peak_rss_mb\n";
  for (const auto& r : all) {
    const Result* d = dense_of(all, r);
    os << kind_name(r.kind) << ',' << r.sparsity << ',' << r.threads << ',' << impl_of(r) << ','
       << fmt("%.3f", r.median_ms()) << ',' << fmt("%.3f", r.p25()) << '-' << fmt("%.3f", r.p75()) << ','
       << (d ? fmt("%.2f", d->median_ms() / r.median_ms()) : "") << ',' << fmt("%.1f", r.peak_rss_mb) << '\n';
  }
}

void write_table(std::ostream& os, const std::vector<Result>& all, const Options& o) {
  os << "| model | sparsity | threads | impl | ms/step (median) | IQR ms | min-max ms | steady step ms | SET update ms"
        " | post-update rebuild ms | amortised ms/step | speedup vs dense | peak RSS MB | RSS vs dense"
        " | RSS above start-up MB | vs dense | peak RSS before 1st update MB | model MB | new/step | loss first -> last |\n";
  os << "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (const auto& r : all) {
    const Result* d = dense_of(all, r);
    os << "| " << kind_name(r.kind) << " | " << r.sparsity << " | " << r.threads << " | " << impl_of(r) << " | "
       << fmt("%.3f", r.median_ms()) << " | " << fmt("%.3f", r.p25()) << "-" << fmt("%.3f", r.p75()) << " | "
       << fmt("%.3f", r.min()) << "-" << fmt("%.3f", r.max()) << " | " << fmt("%.3f", median(r.step_ms)) << " | "
       << (r.sparsity > 0 ? fmt("%.2f", r.update_ms) : "-") << " | "
       << (r.sparsity > 0 ? fmt("%.2f", r.rebuild_ms) : "-") << " | "
       << (r.sparsity > 0 ? fmt("%.4f", r.amortised_ms) : "-") << " | "
       << (d ? fmt("%.2fx", d->median_ms() / r.median_ms()) : "-") << " | " << fmt("%.1f", r.peak_rss_mb) << " | "
       << (d ? fmt("%.0f%%", 100.0 * r.peak_rss_mb / d->peak_rss_mb) : "-") << " | " << fmt("%.1f", r.growth_rss_mb)
       << " | " << (d ? fmt("%.0f%%", 100.0 * r.growth_rss_mb / d->growth_rss_mb) : "-") << " | "
       << fmt("%.1f", r.steady_rss_mb) << " | " << fmt("%.1f", static_cast<double>(r.model_bytes) / (1 << 20)) << " | "
       << fmt("%.1f", r.allocs_per_step) << " | " << fmt("%.3f", r.first_loss) << " -> " << fmt("%.3f", r.final_loss)
       << " |\n";
  }
  os << "\nsteps timed per configuration: " << o.rounds * o.steps_per_round << " (" << o.rounds
     << " rounds of one process per configuration, order rotated, each timing " << o.steps_per_round
     << " steps back to back after " << o.warmup << " warm-up steps); batch " << o.batch << "; SET every " << o.delta_t
     << " steps, " << o.set_updates
     << " updates timed per process; RSS at start-up, before building the model (mostly pages of the shared libraries; \"RSS above start-up\" is the peak less this, per process): "
     << (all.empty() ? std::string("-") : fmt("%.1f MB", all.front().baseline_rss_mb)) << "\n";
  const bool bf16 = std::find(o.precisions.begin(), o.precisions.end(), "bf16") != o.precisions.end();
  if (bf16)
    os << "\n/bf16 rows: bf16 products with fp32 accumulation (Precision::bf16) in the MLP's hidden layers and both "
          "FFN layers (the MLP's output layer fp32); speedup and RSS vs dense are against the fp32 dense row"
       << (o.profile.empty() ? "" : "; not profiled") << "\n";
}

void write_bars(std::ostream& os, const std::vector<Result>& all) {
  os << "\n## Performance bars\n\n| bar | model | threads | measured | held |\n|---|---|---|---|---|\n";
  auto find = [&](Kind k, int th, double s) -> const Result* {
    for (const auto& r : all)
      if (r.kind == k && r.threads == th && std::abs(r.sparsity - s) < 1e-9 && r.block.empty() &&
          r.precision == sprig::Precision::fp32)
        return &r;
    return nullptr;
  };
  for (Kind k : {Kind::mlp, Kind::ffn})
    for (int th : {1, 2}) {
      const Result* d = find(k, th, 0.0);
      if (!d) continue;
      for (auto [s, bar] : {std::pair{0.9, 3.0}, std::pair{0.98, 6.0}}) {
        const Result* r = find(k, th, s);
        if (!r) continue;
        const double sp = d->median_ms() / r->median_ms();
        os << "| " << s << " sparse >= " << bar << "x faster than dense | " << kind_name(k) << " | " << th << " | "
           << fmt("%.2fx", sp) << " | " << (sp >= bar ? "yes" : "NO") << " |\n";
      }
      for (const auto& r : all)  // issue 24: the FFN at 90% in 4x4 blocks >= 7.5x its dense step
        if (r.kind == Kind::ffn && k == Kind::ffn && r.threads == th && r.block == "4x4" &&
            std::abs(r.sparsity - 0.9) < 1e-9) {
          const double sp = d->median_ms() / r.median_ms();
          os << "| 0.9 sparse in 4x4 blocks >= 7.5x faster than dense | ffn | " << th << " | " << fmt("%.2fx", sp)
             << " | " << (sp >= 7.5 ? "yes" : "NO") << " |\n";
        }
      if (const Result* r = find(k, th, 0.9); r && std::isfinite(r->peak_rss_mb) && std::isfinite(d->peak_rss_mb)) {
        // the 35% bar on one memory measure, sparse over dense
        auto memory_bar = [&](const char* bar, double sparse_mb, double dense_mb) {
          const double ratio = sparse_mb / dense_mb;
          os << "| 0.9 " << bar << " <= 35% of dense | " << kind_name(k) << " | " << th << " | "
             << fmt("%.0f%%", 100 * ratio) << " (" << fmt("%.1f", sparse_mb) << " / " << fmt("%.1f MB", dense_mb)
             << ") | " << (ratio <= 0.35 ? "yes" : "NO") << " |\n";
        };
        memory_bar("peak RSS", r->peak_rss_mb, d->peak_rss_mb);
        memory_bar("peak RSS above start-up", r->growth_rss_mb, d->growth_rss_mb);
      }
    }
}

void write_profiles(std::ostream& os, const std::vector<Result>& all) {
  bool header = false;
  // the dense step's phase in the same role, on the same layer
  auto dense_role = [](int ph) -> int {
    switch (ph) {
      case fwd_spmm: return fwd_gemm;
      case wgrad_sddmm: return wgrad_gemm;
      case dx_spmm: return dx_gemm;
      default: return ph;
    }
  };
  for (const auto& r : all) {
    if (!r.has_profile) continue;
    if (!header) {
      os << "\n## Profile (median ms per phase and layer over the profiled steps; GFLOP/s = 2 x multiply-adds / time)\n";
      header = true;
    }
    const Result* d = dense_of(all, r);
    const ProfileResult& p = r.profile;
    const bool cmp = r.sparsity > 0 && d && d->has_profile;
    os << "\n### " << kind_name(r.kind) << ", sparsity " << r.sparsity << ", " << r.threads << " thread(s)\n\n"
       << "sum of phases " << fmt("%.3f", p.sum_ms) << " ms (Sequential step median " << fmt("%.3f", median(r.step_ms))
       << " ms)";
    if (r.sparsity > 0) os << "; first layer skips dX: " << (p.first_layer_skips_dx ? "yes" : "NO");
    os << "\n\n| phase | layer | ms | share | GFLOP/s |" << (cmp ? " dense ms (same role) | speedup |" : "")
       << "\n|---|---|---|---|---|" << (cmp ? "---|---|" : "") << "\n";
    for (int ph = 0; ph < kPhases; ++ph)
      for (std::size_t k = 0; k < kMaxLayers; ++k) {
        const double ms = p.ms[ph][k];
        if (!(ms > 0.0)) continue;
        const std::string layer = ph == optimizer    ? "all"
                                  : ph == loss_phase ? "-"
                                                     : std::to_string(k) + ": " + p.what[k];
        os << "| " << kPhaseNames[ph] << " | " << layer << " | " << fmt("%.3f", ms) << " | "
           << fmt("%.0f%%", 100.0 * ms / p.sum_ms) << " | "
           << (p.flops[ph][k] > 0 ? fmt("%.1f", p.flops[ph][k] / (ms * 1e6)) : "") << " |";
        if (cmp) {
          // the one pass against the dense weight-gradient and dX gemms together
          const double dms = ph == wgrad_dx_fused ? d->profile.ms[wgrad_gemm][k] + d->profile.ms[dx_gemm][k]
                                                  : d->profile.ms[dense_role(ph)][k];
          if (dms > 0.0)
            os << ' ' << fmt("%.3f", dms) << " | " << fmt("%.2fx", dms / ms) << " |";
          else
            os << " - | - |";
        }
        os << "\n";
      }
  }
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"train_step: one sparse training step (sprig) against dense (OpenBLAS), end to end"};
  app.add_option("--models", o.models, "models: mlp (784-1024-1024-10) and/or ffn (1024-4096-1024)")->delimiter(',');
  app.add_option("--sparsities", o.sparsities, "sparsities; 0 = dense layers (OpenBLAS)")->delimiter(',');
  app.add_option("--threads", o.threads, "thread counts")->delimiter(',');
  app.add_option("--profile", o.profile, "sparsities to profile phase by phase (empty: none)")->delimiter(',');
  app.add_option("--batch", o.batch, "batch size");
  app.add_option("--warmup", o.warmup, "untimed steps per configuration");
  app.add_option("--rounds", o.rounds, "rounds of processes (one per configuration, order rotated each round)");
  app.add_option("--steps-per-round", o.steps_per_round, "timed steps per configuration process");
  app.add_option("--delta-t", o.delta_t, "steps between topology updates (amortisation)");
  app.add_option("--set-updates", o.set_updates, "SET updates timed per sparse configuration");
  app.add_option("--profile-steps", o.profile_steps, "steps per profiled configuration");
  app.add_option("--lr", o.lr, "SGD learning rate");
  app.add_option("--momentum", o.momentum, "SGD momentum");
  app.add_option("--seed", o.seed, "seed of weights, data and topology");
  app.add_flag("--csv", o.csv, "CSV on stdout (the table goes to stderr)");
  app.add_option("--md", o.md, "also write the table, bars and profile to this markdown file");
  app.add_option("--single", o.single,
                 "run model,sparsity,threads[,RxC] alone in this process and print its measurements");
  app.add_option("--block", o.blocks, "also time the sparse rows with block-sparse layers of these RxC blocks")
      ->delimiter(',')
      ->check(CLI::IsMember({"4x4", "8x1", "8x8"}));
  app.add_option("--precision", o.precisions,
                 "fp32 and/or bf16: every configuration runs in each, as its own row; bf16 = bf16 products with "
                 "fp32 accumulation in the MLP's hidden layers and both FFN layers, dense ones too (impl named "
                 ".../bf16; block rows too)")
      ->delimiter(',')
      ->check(CLI::IsMember({"fp32", "bf16"}))
      ->capture_default_str();
  app.add_option("--openblas-coretype", o.openblas_coretype,
                 "OpenBLAS kernel family (OPENBLAS_CORETYPE, e.g. SkylakeX); the program re-executes itself with it");
  app.add_option("--malloc-mmap-threshold", o.mmap_threshold,
                 "bytes; > 0 fixes glibc's mmap threshold (mallopt M_MMAP_THRESHOLD), so large blocks are "
                 "mapped and go back to the OS when freed (0: glibc's default, a threshold that rises to the "
                 "largest block freed, up to 32 MiB, after which freed blocks stay resident)");
  CLI11_PARSE(app, argc, argv);
#ifdef __GLIBC__
  if (o.mmap_threshold > 0 && mallopt(M_MMAP_THRESHOLD, static_cast<int>(o.mmap_threshold)) != 1) {
    std::fprintf(stderr, "train_step: mallopt(M_MMAP_THRESHOLD, %ld) failed\n", o.mmap_threshold);
    return 1;
  }
#endif

#if SPRIG_TRAIN_STEP_BLAS
  // OpenBLAS reads OPENBLAS_CORETYPE when it is loaded, before main: set it and start again.
  // (0.3.21 picks its AVX-512 Cooperlake kernels on a Zen 5 by itself; an OPENBLAS_CORETYPE
  // set machine-wide for older builds, such as Haswell, takes precedence.)
  if (!o.openblas_coretype.empty()) {
    const char* cur = std::getenv("OPENBLAS_CORETYPE");
    if (!cur || o.openblas_coretype != cur) {
      setenv("OPENBLAS_CORETYPE", o.openblas_coretype.c_str(), 1);
      execv("/proc/self/exe", argv);
      std::perror("train_step: execv /proc/self/exe");
      return 1;
    }
  }
#else
  if (!o.openblas_coretype.empty()) {
    std::fprintf(stderr, "train_step: --openblas-coretype needs the OpenBLAS build (this one has no BLAS)\n");
    return 1;
  }
#endif

  try {
    if (o.batch < 1 || o.rounds < 1 || o.steps_per_round < 1 || o.warmup < 0 || o.delta_t < 1)
      throw std::invalid_argument("batch, rounds, steps-per-round, delta-t must be >= 1 and warmup >= 0");
    for (double s : o.sparsities)
      if (!(s >= 0.0 && s < 1.0)) throw std::invalid_argument("sparsity " + std::to_string(s) + " outside [0, 1)");
    for (int t : o.threads)
      if (t < 1) throw std::invalid_argument("thread count must be >= 1");
    // fp32 before bf16, each once (a row per precision)
    const bool fp32 = std::find(o.precisions.begin(), o.precisions.end(), "fp32") != o.precisions.end();
    const bool bf16 = std::find(o.precisions.begin(), o.precisions.end(), "bf16") != o.precisions.end();
    o.precisions.clear();
    if (fp32) o.precisions.emplace_back("fp32");
    if (bf16) o.precisions.emplace_back("bf16");
    if (o.precisions.empty()) throw std::invalid_argument("--precision is empty (fp32 and/or bf16)");
    if (!o.single.empty()) return run_single(o);

    const std::string load_at_start = load_average();
    std::ostream& table = o.csv ? std::cerr : std::cout;
    std::vector<Result> all;
    for (int th : o.threads) {
      std::cerr << "timing " << o.models.size() * o.sparsities.size() * o.precisions.size()
                << " configurations (and any block rows) at " << th << " thread(s)...\n";
      auto res = time_configs(o, th);
      all.insert(all.end(), res.begin(), res.end());
    }
    std::ostringstream head;
    head << "# train_step\n\ncommand:";
    for (int i = 0; i < argc; ++i) head << ' ' << argv[i];
    if (const char* ct = std::getenv("OPENBLAS_CORETYPE"))
      head << " (OPENBLAS_CORETYPE=" << ct
           << (o.openblas_coretype.empty() ? " from the environment: OpenBLAS's own kernel choice overridden" : "")
           << ")";
#if SPRIG_TRAIN_STEP_BLAS
    head << "\n\nOpenBLAS: " << loaded_openblas() << " (" << openblas_get_config() << "; parallel mode "
         << openblas_get_parallel() << " = "
         << (openblas_get_parallel() == 2   ? "OpenMP"
             : openblas_get_parallel() == 1 ? "pthreads"
                                            : "sequential")
         << ")";
#else
    head << "\n\nNo BLAS: dense layers on sprig's portable GEMM (kernels/dense_gemm.hpp)";
#endif
    head << "; cores (omp_get_num_procs) " << omp_get_num_procs() << "; kernels " << sprig::kernel_arch()
         << "; sparse layers float with " << SPRIG_TRAIN_STEP_INDEX_BITS << "-bit column indices"
         << (bf16 ? " (/bf16 rows: bf16 products, fp32 accumulation)" : "") << "; malloc mmap threshold "
         << (o.mmap_threshold > 0 ? std::to_string(o.mmap_threshold) + " B (fixed)"
                                  : std::string("glibc default (dynamic)"))
         << "; load average at start " << load_at_start << ", at end " << load_average() << "\n\n";
    std::ostringstream body;
    write_table(body, all, o);
    write_bars(body, all);
    write_profiles(body, all);
    table << head.str() << body.str();
    if (o.csv) write_csv(std::cout, all);
    if (!o.md.empty()) {
      std::ofstream md(o.md);
      md << head.str() << body.str() << "\n## CSV\n\n```\n";
      write_csv(md, all);
      md << "```\n";
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train_step: %s\n", e.what());
    return 1;
  }
  return 0;
}
