// bench_elementwise: the optimizers' element-wise updates (kernels/optimizer_update.hpp) and the
// dense layers' passes (kernels/elementwise.hpp: LayerNorm forward and backward, the residual
// add) against the plain loops they replaced, which GCC leaves scalar at -O2, and the GELU
// (already xsimd) for scale. One thread; the parameter is mini40m's largest (an FFN matrix,
// 640 x 2560), dense, and a 90%-sparse one's live slots (1/10 of it); the activations are
// mini40m's [d_model 640 x N 1024 tokens] (GELU: [d_ff 2560 x 1024]).
//   OMP_NUM_THREADS=1 bench_elementwise --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include <sprig/core/rng.hpp>
#include <sprig/kernels/optimizer_update.hpp>
#include <sprig/nn/parameter.hpp>
#include <sprig/optim/adamw.hpp>
#include <sprig/nn/gelu.hpp>
#include <sprig/nn/layer_norm.hpp>
#include <sprig/nn/residual.hpp>

namespace {

struct State {
  std::vector<float> w, g, m, v;
  explicit State(std::int64_t n) : w(n), g(n), m(n), v(n) {
    sprig::CounterRng rng(1);
    for (std::int64_t i = 0; i < n; ++i) {
      w[i] = static_cast<float>(rng.uniform(-1, 1));
      g[i] = static_cast<float>(rng.uniform(-0.1, 0.1));
      m[i] = static_cast<float>(rng.uniform(-0.01, 0.01));
      v[i] = static_cast<float>(rng.uniform(0, 0.001));
    }
  }
};

const sprig::detail::AdamWStep<float> kStep{1e-3f, 0.9f, 0.999f, 1e-8f, 1.0f - 1e-4f};
constexpr float kC1 = 1.5f, kC2 = 20.0f;

// The loop optim/adamw.hpp ran before the kernel (its update_global).
void adamw_plain_loop(State& s) {
  const auto& k = kStep;
  float* __restrict wp = s.w.data();
  const float* __restrict gp = s.g.data();
  float* __restrict mp = s.m.data();
  float* __restrict vp = s.v.data();
  for (std::size_t i = 0; i < s.w.size(); ++i) {
    const float g = gp[i];
    mp[i] = k.beta1 * mp[i] + (1.0f - k.beta1) * g;
    vp[i] = k.beta2 * vp[i] + (1.0f - k.beta2) * g * g;
    wp[i] = wp[i] * k.shrink - k.lr * (mp[i] * kC1) / (std::sqrt(vp[i] * kC2) + k.eps);
  }
}

void BM_adamw_plain_loop(benchmark::State& st) {
  State s(st.range(0));
  for (auto _ : st) {
    adamw_plain_loop(s);
    benchmark::DoNotOptimize(s.w.data());
  }
  st.SetItemsProcessed(st.iterations() * st.range(0));
}

void BM_adamw_kernel(benchmark::State& st) {
  State s(st.range(0));
  const auto kernel = sprig::detail::adamw_update_kernel<float>();
  for (auto _ : st) {
    kernel(kStep, kC1, kC2, s.w.data(), s.g.data(), s.m.data(), s.v.data(), st.range(0));
    benchmark::DoNotOptimize(s.w.data());
  }
  st.SetItemsProcessed(st.iterations() * st.range(0));
}

// The per-slot-count kernel alone on 640 x 256 slots: every count the same (slots born
// together: one table entry per register), or each slot's count drawn from [1, 1000] (a
// table read per lane).
void BM_adamw_counted_kernel(benchmark::State& st) {
  const std::int64_t n = 640 * 256, top = 1000;
  State s(n);
  std::vector<float> c1(top + 1), c2(top + 1), counts(static_cast<std::size_t>(n), 500.0f);
  for (std::int64_t j = 0; j <= top; ++j) {
    c1[j] = 1.0f / (1.0f - std::pow(0.9f, static_cast<float>(std::max<std::int64_t>(j, 1))));
    c2[j] = 1.0f / (1.0f - std::pow(0.999f, static_cast<float>(std::max<std::int64_t>(j, 1))));
  }
  sprig::CounterRng rng(4);
  if (st.range(0))
    for (auto& c : counts) c = static_cast<float>(1 + rng.uniform_below(top - 1));
  const auto kernel = sprig::detail::adamw_counted_update_kernel<float>();
  for (auto _ : st) {
    kernel(kStep, c1.data(), c2.data(), static_cast<float>(top), s.w.data(), s.g.data(), s.m.data(), s.v.data(),
           counts.data(), n);
    benchmark::DoNotOptimize(s.w.data());
    if (st.range(0)) {  // keep the counts spread (the kernel adds one to each)
      st.PauseTiming();
      for (auto& c : counts) c = c >= static_cast<float>(top - 1) ? 1.0f : c;
      st.ResumeTiming();
    }
  }
  st.SetLabel(st.range(0) ? "counts spread" : "counts equal");
  st.SetItemsProcessed(st.iterations() * n);
}

// AdamW::update of a 90%-sparse 640 x 2560 parameter with per-slot counts (a DST run after
// its first topology update): at betas (0.9, 0.999) in 16-bit step_counts, widened a chunk at
// a time; at beta2 0.99999 in state[2] (T), the kernel reading them in place.
void BM_adamw_per_slot(benchmark::State& st) {
  const double beta2 = st.range(0) ? 0.999 : 0.99999;
  sprig::AdamW<float> opt({.lr = 1e-3, .beta2 = beta2});
  using P = sprig::SparseParameter<float, std::int16_t>;
  P p(sprig::PaddedCSR<float, std::int16_t>::random_per_row(640, 2560, 256, 3));
  sprig::CounterRng rng(2);
  for (auto& g : p.grad) g = static_cast<float>(rng.uniform(-0.1, 0.1));
  for (int t = 0; t < 3; ++t) {
    opt.begin_step();
    opt.update(p);
  }
  sprig::SlotLog log;  // a newborn slot: per_slot creates its counts
  const std::int64_t col = p.matrix.col_indices()[static_cast<std::size_t>(p.matrix.row_start(0))];
  p.matrix.erase_slot(0, p.matrix.row_start(0), &log);
  p.matrix.insert_new(0, col, 0.0f, &log);
  p.apply(log);
  for (auto _ : st) {
    opt.begin_step();
    opt.update(p);
    benchmark::DoNotOptimize(p.matrix.values().data());
  }
  if (p.step_counts.empty() == opt.narrow_counts()) st.SkipWithError("the counts are not in the expected form");
  st.SetLabel(opt.narrow_counts() ? "16-bit counts" : "counts in T");
  st.SetItemsProcessed(st.iterations() * p.matrix.nnz());
}

// mini40m's activation: d_model x tokens.
constexpr std::int64_t kD = 640, kN = 1024;

sprig::Matrix<float> random_matrix(std::int64_t rows, std::int64_t cols, std::uint64_t seed, double lo, double hi) {
  sprig::Matrix<float> m(rows, cols);
  sprig::CounterRng rng(seed);
  for (std::int64_t i = 0; i < rows; ++i)
    for (std::int64_t j = 0; j < cols; ++j) m(i, j) = static_cast<float>(rng.uniform(lo, hi));
  return m;
}

// LayerNorm's forward and backward column passes as nn/layer_norm.hpp ran them before the
// kernels (one thread: the blocks in order), with the buffers the layer kept.
struct PlainLayerNorm {
  static constexpr std::int64_t kBlock = 128;
  std::int64_t d;
  std::vector<float> g, b, mean, rstd, c1, c2, gg, gb;
  std::vector<double> acc1, acc2;
  PlainLayerNorm(std::int64_t d_, std::int64_t n)
      : d(d_), g(d_, 1.1f), b(d_, 0.1f), mean(n), rstd(n), c1(n), c2(n), gg(d_), gb(d_), acc1(n), acc2(n) {}

  void forward(sprig::ConstMatrixView<float> X, sprig::MatrixView<float> Y) {
    const double inv_d = 1.0 / static_cast<double>(d), eps = 1e-5;
    for (std::int64_t c0 = 0; c0 < X.cols(); c0 += kBlock) {
      const std::int64_t len = std::min(kBlock, X.cols() - c0);
      double* __restrict s = acc1.data() + c0;
      double* __restrict q = acc2.data() + c0;
      float* __restrict mu = mean.data() + c0;
      float* __restrict rs = rstd.data() + c0;
      for (std::int64_t j = 0; j < len; ++j) s[j] = q[j] = 0.0;
      for (std::int64_t i = 0; i < d; ++i) {
        const float* __restrict x = X.row(i) + c0;
        for (std::int64_t j = 0; j < len; ++j) s[j] += static_cast<double>(x[j]);
      }
      for (std::int64_t j = 0; j < len; ++j) s[j] *= inv_d;
      for (std::int64_t i = 0; i < d; ++i) {
        const float* __restrict x = X.row(i) + c0;
        for (std::int64_t j = 0; j < len; ++j) {
          const double c = static_cast<double>(x[j]) - s[j];
          q[j] += c * c;
        }
      }
      for (std::int64_t j = 0; j < len; ++j) {
        mu[j] = static_cast<float>(s[j]);
        rs[j] = static_cast<float>(1.0 / std::sqrt(q[j] * inv_d + eps));
      }
      for (std::int64_t i = 0; i < d; ++i) {
        const float* __restrict x = X.row(i) + c0;
        float* __restrict y = Y.row(i) + c0;
        const float gi = g[i], bi = b[i];
        for (std::int64_t j = 0; j < len; ++j) y[j] = (x[j] - mu[j]) * rs[j] * gi + bi;
      }
    }
  }

  void backward(sprig::ConstMatrixView<float> X, sprig::ConstMatrixView<float> dY, sprig::MatrixView<float> dX) {
    const std::int64_t N = X.cols();
    for (std::int64_t i = 0; i < d; ++i) {
      const float* __restrict x = X.row(i);
      const float* __restrict dy = dY.row(i);
      float* __restrict dx = dX.row(i);
      for (std::int64_t n = 0; n < N; ++n) dx[n] = dy[n] * ((x[n] - mean[n]) * rstd[n]);
    }
    sprig::detail::sum_rows<float>(dX, gg);
    sprig::detail::sum_rows<float>(dY, gb);
    const double inv_d = 1.0 / static_cast<double>(d);
    for (std::int64_t c0 = 0; c0 < N; c0 += kBlock) {
      const std::int64_t len = std::min(kBlock, N - c0);
      double* __restrict s1 = acc1.data() + c0;
      double* __restrict s2 = acc2.data() + c0;
      float* __restrict m1 = c1.data() + c0;
      float* __restrict m2 = c2.data() + c0;
      const float* __restrict mu = mean.data() + c0;
      const float* __restrict rs = rstd.data() + c0;
      for (std::int64_t j = 0; j < len; ++j) s1[j] = s2[j] = 0.0;
      for (std::int64_t i = 0; i < d; ++i) {
        const float* __restrict x = X.row(i) + c0;
        const float* __restrict dy = dY.row(i) + c0;
        const float gi = g[i];
        for (std::int64_t j = 0; j < len; ++j) {
          const float gd = gi * dy[j];
          const float xh = (x[j] - mu[j]) * rs[j];
          s1[j] += static_cast<double>(gd);
          s2[j] += static_cast<double>(gd) * static_cast<double>(xh);
        }
      }
      for (std::int64_t j = 0; j < len; ++j) {
        m1[j] = static_cast<float>(s1[j] * inv_d);
        m2[j] = static_cast<float>(s2[j] * inv_d);
      }
      for (std::int64_t i = 0; i < d; ++i) {
        const float* __restrict x = X.row(i) + c0;
        const float* __restrict dy = dY.row(i) + c0;
        float* __restrict dx = dX.row(i) + c0;
        const float gi = g[i];
        for (std::int64_t j = 0; j < len; ++j) {
          const float xh = (x[j] - mu[j]) * rs[j];
          dx[j] = rs[j] * (gi * dy[j] - m1[j] - xh * m2[j]);
        }
      }
    }
  }
};

struct Activations {
  sprig::Matrix<float> X = random_matrix(kD, kN, 2, -2, 3), R = random_matrix(kD, kN, 3, -1, 1),
                       dY = random_matrix(kD, kN, 4, -1, 1), Y{kD, kN}, dX{kD, kN};
};

void set_items(benchmark::State& st) { st.SetItemsProcessed(st.iterations() * kD * kN); }

void BM_layer_norm_forward_plain_loop(benchmark::State& st) {
  Activations a;
  PlainLayerNorm ln(kD, kN);
  for (auto _ : st) {
    ln.forward(a.X.view(), a.Y.view());
    benchmark::DoNotOptimize(a.Y.data());
  }
  set_items(st);
}

void BM_layer_norm_forward_kernel(benchmark::State& st) {
  Activations a;
  sprig::LayerNorm<float> ln(kD);
  for (auto _ : st) {
    ln.forward(a.X.view(), a.Y.view());
    benchmark::DoNotOptimize(a.Y.data());
  }
  set_items(st);
}

void BM_layer_norm_backward_plain_loop(benchmark::State& st) {
  Activations a;
  PlainLayerNorm ln(kD, kN);
  ln.forward(a.X.view(), a.Y.view());
  for (auto _ : st) {
    ln.backward(a.X.view(), a.dY.view(), a.dX.view());
    benchmark::DoNotOptimize(a.dX.data());
  }
  set_items(st);
}

void BM_layer_norm_backward_kernel(benchmark::State& st) {
  Activations a;
  sprig::LayerNorm<float> ln(kD);
  ln.forward(a.X.view(), a.Y.view());
  for (auto _ : st) {
    ln.backward(a.X.view(), a.dY.view(), a.dX.view());
    benchmark::DoNotOptimize(a.dX.data());
  }
  set_items(st);
}

// residual_add's loop before the kernel.
void BM_residual_add_plain_loop(benchmark::State& st) {
  Activations a;
  for (auto _ : st) {
    for (std::int64_t i = 0; i < kD; ++i) {
      const float* x = a.X.row(i);
      const float* r = a.R.row(i);
      float* y = a.Y.row(i);
      for (std::int64_t j = 0; j < kN; ++j) y[j] = x[j] + r[j];
    }
    benchmark::DoNotOptimize(a.Y.data());
  }
  set_items(st);
}

void BM_residual_add_kernel(benchmark::State& st) {
  Activations a;
  for (auto _ : st) {
    sprig::residual_add<float>(a.X.view(), a.R.view(), a.Y.view());
    benchmark::DoNotOptimize(a.Y.data());
  }
  set_items(st);
}

// The GELU as the GPT runs it (already xsimd: no plain loop to compare), on [d_ff x N].
void BM_gelu_forward_keep_derivative(benchmark::State& st) {
  const sprig::Matrix<float> Z0 = random_matrix(4 * kD, kN, 5, -3, 3);
  sprig::Matrix<float> Z = Z0, Y(4 * kD, kN);
  const sprig::GELU<float> gelu;
  for (auto _ : st) {
    st.PauseTiming();
    Z = Z0;
    st.ResumeTiming();
    gelu.forward_keep_derivative(Z.view(), Y.view());
    benchmark::DoNotOptimize(Y.data());
  }
  st.SetItemsProcessed(st.iterations() * 4 * kD * kN);
}

// The bf16 form as a bf16 GPT runs it: fc's output in chunks of range(0) columns of [d_ff x w]
// float, the GELU and gelu' rounded into their columns of [d_ff x N] bf16.
void BM_gelu_forward_keep_derivative_bf16(benchmark::State& st) {
  const std::int64_t w = st.range(0);
  const sprig::Matrix<float> Z = random_matrix(4 * kD, w, 5, -3, 3);
  sprig::Matrix<sprig::bfloat16> Y(4 * kD, kN), D(4 * kD, kN);
  const sprig::GELU<float> gelu;
  for (auto _ : st) {
    for (std::int64_t c = 0; c < kN; c += w)
      gelu.forward_keep_derivative(Z.view(), Y.view().block(0, c, 4 * kD, w), D.view().block(0, c, 4 * kD, w));
    benchmark::DoNotOptimize(Y.data());
    benchmark::DoNotOptimize(D.data());
  }
  st.SetItemsProcessed(st.iterations() * 4 * kD * kN);
}

}  // namespace

BENCHMARK(BM_layer_norm_forward_plain_loop);
BENCHMARK(BM_layer_norm_forward_kernel);
BENCHMARK(BM_layer_norm_backward_plain_loop);
BENCHMARK(BM_layer_norm_backward_kernel);
BENCHMARK(BM_residual_add_plain_loop);
BENCHMARK(BM_residual_add_kernel);
BENCHMARK(BM_gelu_forward_keep_derivative);
BENCHMARK(BM_gelu_forward_keep_derivative_bf16)->Arg(256)->Arg(1024);
BENCHMARK(BM_adamw_plain_loop)->Arg(640 * 2560)->Arg(640 * 256);
BENCHMARK(BM_adamw_kernel)->Arg(640 * 2560)->Arg(640 * 256);
BENCHMARK(BM_adamw_per_slot)->Arg(1)->Arg(0);
BENCHMARK(BM_adamw_counted_kernel)->Arg(0)->Arg(1);
BENCHMARK_MAIN();
