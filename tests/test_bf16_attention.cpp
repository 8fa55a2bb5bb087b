// The bf16 attention core: kernels/bf16_attention.hpp's AVX512-BF16 products against double
// sums of the same bf16 operands, and CausalSelfAttention in Precision::bf16 (each path)
// against a double reference that rounds its operands, P and dS as the layer does.
// A path the CPU lacks is reported with WARN as NOT RUN, never passed.
#include "sprig/kernels/bf16_attention.hpp"
#include "sprig/nn/attention.hpp"

#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "test_nn_gradcheck.hpp"
#include "with_threads.hpp"

using namespace sprig;
using sprig_test::random_matrix;

namespace {

double bf(double x) { return double(float(bfloat16(float(x)))); }

// gamma_n = n u / (1 - n u), u = 2^-24: the bound of a float sum of n exact products.
[[maybe_unused]] double gamma(std::int64_t n) {
  const double u = std::ldexp(1.0, -24);
  return n * u / (1 - n * u);
}

std::vector<Bf16AttentionPath> paths() {
  std::vector<Bf16AttentionPath> out{Bf16AttentionPath::portable};
  if (bf16_attention_unavailable_reason(Bf16AttentionPath::avx512_bf16).empty())
    out.push_back(Bf16AttentionPath::avx512_bf16);
  else
    WARN("bf16 attention avx512_bf16 path NOT RUN here: "
         << bf16_attention_unavailable_reason(Bf16AttentionPath::avx512_bf16));
  return out;
}

// The layer's bf16 semantics in double: Q, K, V, dOut rounded to bf16; P (and s dS) computed
// exactly from them, then rounded to bf16 through float; every product summed exactly. Also
// sum |terms| of each output (for the tolerances).
struct Bf16Reference {
  Matrix<double> out, dq, dk, dv, out_abs, dq_abs, dk_abs, dv_abs;
};

Bf16Reference reference(const Matrix<float>& Q, const Matrix<float>& K, const Matrix<float>& V,
                        const Matrix<float>& dOut, std::int64_t heads, std::int64_t B, std::int64_t Tn) {
  const std::int64_t dm = Q.rows(), dh = dm / heads, n = B * Tn;
  const double scale = double(float(1.0 / std::sqrt(double(dh))));
  Bf16Reference r;
  for (Matrix<double>* m : {&r.out, &r.dq, &r.dk, &r.dv, &r.out_abs, &r.dq_abs, &r.dk_abs, &r.dv_abs})
    *m = Matrix<double>(dm, n, n, 0.0);
  std::vector<double> P(Tn * Tn), dS(Tn * Tn);
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t h = 0; h < heads; ++h) {
      auto at = [&](const Matrix<float>& X, std::int64_t d, std::int64_t t) { return bf(X(h * dh + d, b * Tn + t)); };
      for (std::int64_t q = 0; q < Tn; ++q) {
        std::vector<double> s(q + 1);
        double mx = -std::numeric_limits<double>::infinity(), z = 0;
        for (std::int64_t k = 0; k <= q; ++k) {
          for (std::int64_t d = 0; d < dh; ++d) s[k] += at(Q, d, q) * at(K, d, k);
          mx = std::max(mx, s[k]);
        }
        for (std::int64_t k = 0; k <= q; ++k) z += std::exp(scale * (s[k] - mx));
        for (std::int64_t k = 0; k < Tn; ++k) P[q * Tn + k] = k <= q ? bf(std::exp(scale * (s[k] - mx)) / z) : 0.0;
        double rq = 0;
        std::vector<double> dp(q + 1);
        for (std::int64_t k = 0; k <= q; ++k) {
          for (std::int64_t d = 0; d < dh; ++d) dp[k] += at(V, d, k) * at(dOut, d, q);
          rq += P[q * Tn + k] * dp[k];
        }
        for (std::int64_t k = 0; k < Tn; ++k) dS[q * Tn + k] = k <= q ? bf(scale * P[q * Tn + k] * (dp[k] - rq)) : 0.0;
      }
      for (std::int64_t d = 0; d < dh; ++d)
        for (std::int64_t q = 0; q < Tn; ++q) {
          const std::int64_t row = h * dh + d, col = b * Tn + q;
          for (std::int64_t k = 0; k < Tn; ++k) {
            r.out(row, col) += at(V, d, k) * P[q * Tn + k];
            r.out_abs(row, col) += std::abs(at(V, d, k) * P[q * Tn + k]);
            r.dq(row, col) += at(K, d, k) * dS[q * Tn + k];
            r.dq_abs(row, col) += std::abs(at(K, d, k) * dS[q * Tn + k]);
            r.dv(row, col) += P[k * Tn + q] * at(dOut, d, k);  // column q is the key here
            r.dv_abs(row, col) += std::abs(P[k * Tn + q] * at(dOut, d, k));
            r.dk(row, col) += dS[k * Tn + q] * at(Q, d, k);
            r.dk_abs(row, col) += std::abs(dS[k * Tn + q] * at(Q, d, k));
          }
        }
    }
  return r;
}

// |got - want| <= rel * abs + 1e-6 everywhere.
void check_close(const char* what, const Matrix<float>& got, const Matrix<double>& want, const Matrix<double>& abs,
                 double rel) {
  std::int64_t bad = 0;
  double worst = 0;
  for (std::int64_t i = 0; i < got.rows(); ++i)
    for (std::int64_t j = 0; j < got.cols(); ++j) {
      const double err = std::abs(double(got(i, j)) - want(i, j)), tol = rel * abs(i, j) + 1e-6;
      if (!(err <= tol)) ++bad;
      worst = std::max(worst, err / tol);
    }
  CAPTURE(what, worst);
  CHECK(bad == 0);
}

}  // namespace

TEST_CASE("bf16 attention paths are named and the portable one always runs", "[bf16][attention]") {
  CHECK(std::string(path_name(Bf16AttentionPath::portable)) == "portable");
  CHECK(std::string(path_name(Bf16AttentionPath::avx512_bf16)) == "avx512_bf16");
  CHECK(bf16_attention_unavailable_reason(Bf16AttentionPath::portable).empty());
  WARN("the bf16 attention core takes the " << path_name(bf16_attention_path()) << " path on this machine");
}

TEST_CASE("to_bfloat16_pairs interleaves two rounded rows", "[bf16][attention]") {
  for (std::int64_t n : {1, 7, 16, 33}) {
    const auto lo = random_matrix<float>(1, n, 3 + n), hi = random_matrix<float>(1, n, 5 + n);
    std::vector<bfloat16> out(2 * n), zero_hi(2 * n);
    detail::to_bfloat16_pairs(lo.row(0), hi.row(0), n, out.data());
    detail::to_bfloat16_pairs(lo.row(0), nullptr, n, zero_hi.data());
    for (std::int64_t j = 0; j < n; ++j) {
      CHECK(out[2 * j] == bfloat16(lo(0, j)));
      CHECK(out[2 * j + 1] == bfloat16(hi(0, j)));
      CHECK(zero_hi[2 * j] == bfloat16(lo(0, j)));
      CHECK(zero_hi[2 * j + 1].bits == 0);
    }
    std::vector<float> r(lo.row(0), lo.row(0) + n);
    detail::round_to_bfloat16(r.data(), n);
    for (std::int64_t j = 0; j < n; ++j) CHECK(r[j] == float(bfloat16(lo(0, j))));
  }
}

#if SPRIG_BF16_GEMM_X86
TEST_CASE("bf16 attention AVX512-BF16 products match exact sums of their bf16 operands", "[bf16][attention]") {
  if (!bf16_attention_unavailable_reason(Bf16AttentionPath::avx512_bf16).empty()) {
    WARN("bf16 attention avx512_bf16 kernels NOT RUN here: "
         << bf16_attention_unavailable_reason(Bf16AttentionPath::avx512_bf16));
    return;
  }
  for (std::int64_t t : {1, 2, 5, 31, 32, 33, 64, 77, 128})
    for (std::int64_t dh : {1, 3, 8, 16}) {
      CAPTURE(t, dh);
      const std::int64_t tp = (t + 31) / 32 * 32, hs = tp, xs = 2 * tp, pairs = (dh + 1) / 2;
      const auto A = random_matrix<float>(dh, t, 11 + t * 7 + dh), X = random_matrix<float>(dh, t, 13 + t + dh);
      auto a = [&](std::int64_t d, std::int64_t j) { return bf(A(d, j)); };
      auto x = [&](std::int64_t d, std::int64_t j) { return bf(X(d, j)); };
      // the layouts, filled element by element
      std::vector<bfloat16> a_pairs(pairs * xs), x_pairs(pairs * xs), a_nat(dh * hs), x_nat(dh * hs);
      for (std::int64_t d = 0; d < dh; ++d)
        for (std::int64_t j = 0; j < t; ++j) {
          a_pairs[d / 2 * xs + 2 * j + d % 2] = bfloat16(A(d, j));
          x_pairs[d / 2 * xs + 2 * j + d % 2] = bfloat16(X(d, j));
          a_nat[d * hs + j] = bfloat16(A(d, j));
          x_nat[d * hs + j] = bfloat16(X(d, j));
        }
      // scores
      const auto layout = detail::bf16_attention_triangle<float>(nullptr, t);
      std::vector<float> S(layout.size());
      const auto St = detail::bf16_attention_triangle(S.data(), t);
      detail::bf16_attention_scores_avx512(a_pairs.data(), x_pairs.data(), xs, dh, St);
      std::int64_t bad = 0;
      for (std::int64_t k = 0; k < t; ++k)
        for (std::int64_t q = St.start(k); q < t; ++q) {
          double want = 0, abs = 0;
          for (std::int64_t d = 0; d < dh; ++d) want += a(d, k) * x(d, q), abs += std::abs(a(d, k) * x(d, q));
          if (!(std::abs(St.row(k)[q] - want) <= gamma(dh) * abs)) ++bad;
        }
      CHECK(bad == 0);
      // a triangle P of bf16 values, 0 below each key, in rows and in key pairs
      std::vector<bfloat16> rows(layout.size()), key_pairs(detail::Bf16PairTriangle{nullptr, t}.size());
      const auto Pr = detail::bf16_attention_triangle(rows.data(), t);
      const detail::Bf16PairTriangle Pp{key_pairs.data(), t};
      std::vector<float> Pf(layout.size());
      const auto Pft = detail::bf16_attention_triangle(Pf.data(), t);
      CounterRng rng(t, dh);
      for (std::int64_t k = 0; k < t; ++k)
        for (std::int64_t q = Pft.start(k); q < Pft.padded(); ++q)
          Pft.row(k)[q] = q < k ? 0.0f : float(bfloat16(float(rng.uniform(-1.0, 1.0))));
      to_bfloat16(std::span<const float>(Pf), std::span<bfloat16>(rows));
      detail::to_bfloat16_key_pairs_avx512(Pft, Pp);
      auto p = [&](std::int64_t k, std::int64_t q) { return double(Pft.row(k)[q]); };
      for (std::int64_t k = 0; k < t; ++k)
        for (std::int64_t q = Pft.start(k); q < Pft.padded(); ++q) {
          REQUIRE(float(Pp.pair(k & ~std::int64_t(1))[2 * q + (k & 1)]) == Pft.row(k)[q]);
        }
      // y(d, q) = sum_k a(d, k) P(k, q)
      std::vector<float> y(dh * t, -1.0f);
      detail::bf16_attention_pair_sum_avx512(a_nat.data(), hs, Pp, dh, y.data(), t);
      bad = 0;
      for (std::int64_t d = 0; d < dh; ++d)
        for (std::int64_t q = 0; q < t; ++q) {
          double want = 0, abs = 0;
          for (std::int64_t k = 0; k <= q; ++k) want += a(d, k) * p(k, q), abs += std::abs(a(d, k) * p(k, q));
          if (!(std::abs(y[d * t + q] - want) <= gamma(t) * abs)) ++bad;
        }
      CHECK(bad == 0);
      // P's rows in query pairs: every entry where it belongs, zeros elsewhere (NaN before)
      std::vector<bfloat16> query_pairs(detail::Bf16QueryPairs{nullptr, t}.size(),
                                        bfloat16(std::numeric_limits<float>::quiet_NaN()));
      const detail::Bf16QueryPairs Pq{query_pairs.data(), t};
      detail::to_query_pairs_avx512(Pr, Pq);
      const std::int64_t te = t + (t & 1);
      bad = 0;
      for (std::int64_t q = 0; q < te; q += 2)
        for (std::int64_t k = 0; k < Pq.keys(); ++k)
          for (std::int64_t j = 0; j < 2; ++j) {
            const float want = k < t && q + j < t && q + j >= k ? Pft.row(k)[q + j] : 0.0f;
            const bfloat16 got = Pq.pair(q)[2 * k + j];
            // a tile reads the pairs from its first key (a multiple of 64) on
            if (q >= k / 64 * 64 && !(float(got) == want && (want != 0.0f || got.bits == 0))) ++bad;
          }
      CHECK(bad == 0);
      // y(d, k) = sum_q P(k, q) x(d, q)
      std::fill(y.begin(), y.end(), -1.0f);
      detail::bf16_attention_query_pair_sum_avx512(x_nat.data(), hs, Pq, dh, y.data(), t);
      bad = 0;
      for (std::int64_t d = 0; d < dh; ++d)
        for (std::int64_t k = 0; k < t; ++k) {
          double want = 0, abs = 0;
          for (std::int64_t q = k; q < t; ++q) want += p(k, q) * x(d, q), abs += std::abs(p(k, q) * x(d, q));
          if (!(std::abs(y[d * t + k] - want) <= gamma(t) * abs)) ++bad;
        }
      CHECK(bad == 0);
    }
}
#endif

TEST_CASE("CausalSelfAttention in bf16 matches the bf16 reference on every path", "[bf16][attention]") {
  // (d_model, heads, B, T): odd head widths, T below, at and past the 32-wide groups
  const std::int64_t shapes[][4] = {{8, 2, 2, 1}, {6, 2, 1, 7}, {20, 4, 2, 33}, {16, 1, 1, 64}, {64, 4, 2, 77}};
  for (const Bf16AttentionPath path : paths())
    for (const auto& s : shapes) {
      const std::int64_t dm = s[0], heads = s[1], B = s[2], Tn = s[3], n = B * Tn;
      CAPTURE(path_name(path), dm, heads, B, Tn);
      const auto Q = random_matrix<float>(dm, n, 1 + Tn, -2, 2), K = random_matrix<float>(dm, n, 2 + Tn, -2, 2),
                 V = random_matrix<float>(dm, n, 3 + Tn), dOut = random_matrix<float>(dm, n, 4 + Tn);
      CausalSelfAttention<float> attn(dm, heads);
      attn.set_precision(Precision::bf16, path);
      CHECK(attn.precision() == Precision::bf16);
      CHECK(attn.bf16_path() == path);
      Matrix<float> out(dm, n), dq(dm, n), dk(dm, n), dv(dm, n);
      attn.forward(Q.view(), K.view(), V.view(), B, Tn, out.view());
      attn.backward(Q.view(), K.view(), V.view(), dOut.view(), dq.view(), dk.view(), dv.view());
      const Bf16Reference r = reference(Q, K, V, dOut, heads, B, Tn);
      // The layer's float scores may round P (and dS) to the bf16 next to the exact value's:
      // one bf16 ulp (2^-8 relative) on each term bounds that; the float sums add far less.
      check_close("Out", out, r.out, r.out_abs, std::ldexp(1.0, -7));
      check_close("dV", dv, r.dv, r.dv_abs, std::ldexp(1.0, -7));
      // dS carries P's rounding and its own through dP - r: two ulps
      check_close("dQ", dq, r.dq, r.dq_abs, std::ldexp(1.0, -5));
      check_close("dK", dk, r.dk, r.dk_abs, std::ldexp(1.0, -5));
    }
}

TEST_CASE("CausalSelfAttention in bf16 is bitwise the same on 1 and 2 threads", "[bf16][attention]") {
  const std::int64_t dm = 32, heads = 4, B = 3, Tn = 40, n = B * Tn;
  const auto Q = random_matrix<float>(dm, n, 21), K = random_matrix<float>(dm, n, 22),
             V = random_matrix<float>(dm, n, 23), dOut = random_matrix<float>(dm, n, 24);
  for (const Bf16AttentionPath path : paths()) {
    CAPTURE(path_name(path));
    Matrix<float> got[2][4];
    for (int c = 0; c < 2; ++c)
      sprig_test::with_threads(c + 1, [&] {
        CausalSelfAttention<float> attn(dm, heads);
        attn.set_precision(Precision::bf16, path);
        for (auto& m : got[c]) m = Matrix<float>(dm, n);
        attn.forward(Q.view(), K.view(), V.view(), B, Tn, got[c][0].view());
        attn.backward(Q.view(), K.view(), V.view(), dOut.view(), got[c][1].view(), got[c][2].view(), got[c][3].view());
      });
    for (int m = 0; m < 4; ++m) CHECK(std::memcmp(got[0][m].data(), got[1][m].data(), sizeof(float) * dm * n) == 0);
  }
}

TEST_CASE("CausalSelfAttention's precision switch rejects what it cannot run", "[bf16][attention]") {
  CausalSelfAttention<double> wide(8, 2);
  CHECK_THROWS_AS(wide.set_precision(Precision::bf16), ArgumentError);
  CHECK_NOTHROW(wide.set_precision(Precision::fp32));
  CausalSelfAttention<float> attn(8, 2);
  if (!bf16_attention_unavailable_reason(Bf16AttentionPath::avx512_bf16).empty())
    CHECK_THROWS_AS(attn.set_precision(Precision::bf16, Bf16AttentionPath::avx512_bf16), ArgumentError);
  // switching precision drops the cache: backward needs a new forward
  const auto Q = random_matrix<float>(8, 4, 1);
  Matrix<float> out(8, 4), g(8, 4), d1(8, 4), d2(8, 4), d3(8, 4);
  attn.forward(Q.view(), Q.view(), Q.view(), 1, 4, out.view());
  attn.set_precision(Precision::bf16, Bf16AttentionPath::portable);
  CHECK_THROWS_AS(attn.backward(Q.view(), Q.view(), Q.view(), g.view(), d1.view(), d2.view(), d3.view()),
                  ArgumentError);
}

TEST_CASE("CausalSelfAttention's bf16 dQ, dK, dV: the float ones rounded, also over Q, K, V", "[bf16][attention]") {
  // (d_model, heads, B, T) as above; Q, K, V are row blocks of one bf16 [3 d_model x N], as a
  // fused qkv projection gives
  const std::int64_t shapes[][4] = {{8, 2, 2, 1}, {6, 2, 1, 7}, {20, 4, 2, 33}, {64, 4, 3, 77}};
  const auto rounded = [](const Matrix<float>& m) {
    Matrix<bfloat16> out(m.rows(), m.cols());
    for (std::int64_t i = 0; i < m.rows(); ++i)
      for (std::int64_t j = 0; j < m.cols(); ++j) out(i, j) = bfloat16(m(i, j));
    return out;
  };
  const auto same = [](const Matrix<bfloat16>& a, const Matrix<bfloat16>& b) {
    std::int64_t bad = 0;
    for (std::int64_t i = 0; i < a.rows(); ++i)
      bad += std::memcmp(a.row(i), b.row(i), sizeof(bfloat16) * static_cast<std::size_t>(a.cols())) != 0;
    return bad == 0;
  };
  for (const Bf16AttentionPath path : paths())
    for (const auto& s : shapes) {
      const std::int64_t dm = s[0], heads = s[1], B = s[2], Tn = s[3], n = B * Tn;
      CAPTURE(path_name(path), dm, heads, B, Tn);
      const Matrix<bfloat16> qkv = rounded(random_matrix<float>(3 * dm, n, 31 + Tn, -2, 2));
      const auto dOut = random_matrix<float>(dm, n, 32 + Tn);
      const auto q = qkv.view().block(0, 0, dm, n), k = qkv.view().block(dm, 0, dm, n),
                 v = qkv.view().block(2 * dm, 0, dm, n);
      CausalSelfAttention<float> attn(dm, heads);
      attn.set_precision(Precision::bf16, path);
      Matrix<float> out(dm, n), wide(3 * dm, n);
      attn.forward(q, k, v, B, Tn, out.view());
      const auto blocks = [&](auto m) {
        return std::array{m.block(0, 0, dm, n), m.block(dm, 0, dm, n), m.block(2 * dm, 0, dm, n)};
      };
      const auto w = blocks(wide.view());
      attn.backward(q, k, v, dOut.view(), w[0], w[1], w[2]);
      const Matrix<bfloat16> want = rounded(wide);
      Matrix<bfloat16> apart(3 * dm, n), over = qkv;
      const auto a = blocks(apart.view());
      attn.backward(q, k, v, dOut.view(), a[0], a[1], a[2]);
      CHECK(same(apart, want));
      sprig_test::with_threads(2, [&] {  // in place, pairs on two threads
        const auto o = blocks(over.view());
        attn.backward(o[0], o[1], o[2], dOut.view(), o[0], o[1], o[2]);
      });
      CHECK(same(over, want));
      // only exactly in place: dQ over K, or over Q shifted by a column, is refused
      if (n > 1) {
        const auto o = blocks(over.view());
        CHECK_THROWS_AS(attn.backward(o[0], o[1], o[2], dOut.view(), o[1], a[1], a[2]), ArgumentError);
        CHECK_THROWS_AS(attn.backward(o[0], o[1], o[2], dOut.view(), a[0], o[0], a[2]), ArgumentError);
        Matrix<bfloat16> shifted(dm, n + 1);
        const auto s0 = shifted.view().block(0, 0, dm, n), s1 = shifted.view().block(0, 1, dm, n);
        CHECK_THROWS_AS(attn.backward(s0, k, v, dOut.view(), s1, a[1], a[2]), ArgumentError);
      }
    }
}
