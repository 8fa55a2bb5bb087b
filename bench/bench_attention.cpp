// bench_attention: the causal attention core, new (nn/attention.hpp) against the previous
// implementation (tests/attention_reference.hpp), forward and backward at one shape, and the
// new one in bf16 (CausalSelfAttention::set_precision) on each path: `bf16-portable`
// (float kernels on rounded operands) and `bf16-avx512` (reported as an error where the CPU
// lacks AVX512-BF16); `bf16-avx512-io` is that path with Q, K, V and dQ, dK, dV in bf16, as the
// bf16 GPT calls it.
//
//   OMP_NUM_THREADS=1 bench_attention --benchmark_repetitions=7 --benchmark_report_aggregates_only=true
//
// Arguments: B, heads, T, d_head (default: mini40m, B 8, 10 heads, T 128, d_head 64). The
// counter GFLOP/s counts 2 flops per multiply-add over the causal half including the diagonal:
// forward 2 products x 2 x B heads d_head T(T+1)/2, backward 4 products (dV, dP, dQ, dK); the
// exps and the softmax's element-wise work are not counted.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <span>
#include <string>

#include "sprig/core/matrix.hpp"
#include "sprig/core/rng.hpp"
#include "sprig/kernels/bfloat16_convert.hpp"
#include "sprig/nn/attention.hpp"
#include "attention_reference.hpp"  // tests/: the test oracle

namespace {

struct Operands {
  std::int64_t B, heads, T, dh, dm, n;
  sprig::Matrix<float> q, k, v, dout, out, dq, dk, dv;
  Operands(std::int64_t B_, std::int64_t heads_, std::int64_t T_, std::int64_t dh_)
      : B(B_),
        heads(heads_),
        T(T_),
        dh(dh_),
        dm(heads_ * dh_),
        n(B_ * T_),
        q(dm, n),
        k(dm, n),
        v(dm, n),
        dout(dm, n),
        out(dm, n),
        dq(dm, n),
        dk(dm, n),
        dv(dm, n) {
    std::uint64_t state = 12345;
    auto next = [&] {
      state = state * 6364136223846793005ULL + 1442695040888963407ULL;
      return float(double(state >> 11) / double(1ULL << 53) * 2.0 - 1.0);
    };
    for (auto* m : {&q, &k, &v, &dout})
      for (std::int64_t r = 0; r < dm; ++r)
        for (std::int64_t c = 0; c < n; ++c) (*m)(r, c) = next();
  }
  double forward_flops() const { return 2.0 * 2.0 * double(B * heads * dh) * double(T * (T + 1) / 2); }
};

enum class Mode { fp32, bf16_portable, bf16_avx512, bf16_avx512_io };

template <class Layer, bool Backward, Mode M = Mode::fp32>
void BM_attention(benchmark::State& state) {
  Operands o(state.range(0), state.range(1), state.range(2), state.range(3));
  Layer layer(o.dm, o.heads);
  if constexpr (M != Mode::fp32) {
    const auto path =
        M == Mode::bf16_portable ? sprig::Bf16AttentionPath::portable : sprig::Bf16AttentionPath::avx512_bf16;
    if (const std::string why = sprig::bf16_attention_unavailable_reason(path); !why.empty()) {
      state.SkipWithError(("NOT RUN: " + why).c_str());
      return;
    }
    layer.set_precision(sprig::Precision::bf16, path);
  }
  // the timed loop over operands q, k, v (float or bf16) and outputs dq, dk, dv
  auto run = [&](const auto& q, const auto& k, const auto& v, auto& dq, auto& dk, auto& dv) {
    layer.forward(q.view(), k.view(), v.view(), o.B, o.T, o.out.view());
    for (auto _ : state) {
      if constexpr (Backward)
        layer.backward(q.view(), k.view(), v.view(), o.dout.view(), dq.view(), dk.view(), dv.view());
      else
        layer.forward(q.view(), k.view(), v.view(), o.B, o.T, o.out.view());
      benchmark::ClobberMemory();
    }
  };
  if constexpr (M == Mode::bf16_avx512_io) {
    auto narrow = [](const sprig::Matrix<float>& m) {  // m is contiguous (stride == cols)
      sprig::Matrix<sprig::bfloat16> r(m.rows(), m.cols());
      sprig::to_bfloat16(std::span<const float>(m.data(), static_cast<std::size_t>(m.size())),
                         std::span<sprig::bfloat16>(r.data(), static_cast<std::size_t>(r.size())));
      return r;
    };
    const auto q = narrow(o.q), k = narrow(o.k), v = narrow(o.v);
    sprig::Matrix<sprig::bfloat16> dq(o.dm, o.n), dk(o.dm, o.n), dv(o.dm, o.n);
    run(q, k, v, dq, dk, dv);
  } else {
    run(o.q, o.k, o.v, o.dq, o.dk, o.dv);
  }
  const double flops = (Backward ? 2.0 : 1.0) * o.forward_flops();
  state.counters["GFLOP/s"] = benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

void shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"B", "heads", "T", "dh"});
  b->Args({8, 10, 128, 64});
  b->Unit(benchmark::kMillisecond);
}

using New = sprig::CausalSelfAttention<float>;
using Old = sprig::CausalSelfAttentionReference<float>;
BENCHMARK_TEMPLATE(BM_attention, Old, false)->Name("forward/old")->Apply(shapes);
BENCHMARK_TEMPLATE(BM_attention, New, false)->Name("forward/new")->Apply(shapes);
BENCHMARK_TEMPLATE(BM_attention, Old, true)->Name("backward/old")->Apply(shapes);
BENCHMARK_TEMPLATE(BM_attention, New, true)->Name("backward/new")->Apply(shapes);
BENCHMARK_TEMPLATE(BM_attention, New, false, Mode::bf16_portable)->Name("forward/bf16-portable")->Apply(shapes);
BENCHMARK_TEMPLATE(BM_attention, New, false, Mode::bf16_avx512)->Name("forward/bf16-avx512")->Apply(shapes);
BENCHMARK_TEMPLATE(BM_attention, New, true, Mode::bf16_portable)->Name("backward/bf16-portable")->Apply(shapes);
BENCHMARK_TEMPLATE(BM_attention, New, true, Mode::bf16_avx512)->Name("backward/bf16-avx512")->Apply(shapes);
BENCHMARK_TEMPLATE(BM_attention, New, false, Mode::bf16_avx512_io)->Name("forward/bf16-avx512-io")->Apply(shapes);
BENCHMARK_TEMPLATE(BM_attention, New, true, Mode::bf16_avx512_io)->Name("backward/bf16-avx512-io")->Apply(shapes);

}  // namespace

BENCHMARK_MAIN();
