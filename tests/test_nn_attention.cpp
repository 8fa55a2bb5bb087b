#include "sprig/nn/attention.hpp"
#include "attention_reference.hpp"

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <span>
#include <vector>

#include <catch2/catch.hpp>

#include "observed_new.hpp"
#include "test_nn_gradcheck.hpp"
#include "with_threads.hpp"

// Counts heap allocations (every form of operator new) for the steady-state test.
static std::atomic<long> g_allocations{0};
void sprig_test_observe_new(std::size_t) noexcept { g_allocations.fetch_add(1, std::memory_order_relaxed); }

using namespace sprig;
using sprig_test::random_matrix;

namespace {

// Causal attention written out with full T x T score matrices and an explicit -inf mask, in
// double, from the layer's inputs (any T). Forward into Out; with dOut also the gradients.
struct Reference {
  Matrix<double> out, dq, dk, dv;
};

template <class T>
Reference reference(ConstMatrixView<T> Q, ConstMatrixView<T> K, ConstMatrixView<T> V, std::int64_t heads,
                    std::int64_t B, std::int64_t Tn, ConstMatrixView<T> dOut = {}) {
  const std::int64_t dm = Q.rows(), dh = dm / heads;
  const double scale = 1.0 / std::sqrt(double(dh));
  const bool grads = dOut.rows() == dm;
  Reference r{Matrix<double>(dm, B * Tn), Matrix<double>(dm, B * Tn), Matrix<double>(dm, B * Tn),
              Matrix<double>(dm, B * Tn)};
  const double neg_inf = -std::numeric_limits<double>::infinity();
  std::vector<double> S(Tn * Tn), P(Tn * Tn), dP(Tn * Tn), dS(Tn * Tn);
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t h = 0; h < heads; ++h) {
      auto q = [&](std::int64_t d, std::int64_t t) { return double(Q(h * dh + d, b * Tn + t)); };
      auto k = [&](std::int64_t d, std::int64_t t) { return double(K(h * dh + d, b * Tn + t)); };
      auto v = [&](std::int64_t d, std::int64_t t) { return double(V(h * dh + d, b * Tn + t)); };
      for (std::int64_t i = 0; i < Tn; ++i) {
        for (std::int64_t j = 0; j < Tn; ++j) {
          double dot = 0;
          for (std::int64_t d = 0; d < dh; ++d) dot += q(d, i) * k(d, j);
          S[i * Tn + j] = j > i ? neg_inf : dot * scale;
        }
        double mx = neg_inf;
        for (std::int64_t j = 0; j < Tn; ++j) mx = std::max(mx, S[i * Tn + j]);
        double z = 0;
        for (std::int64_t j = 0; j < Tn; ++j) z += P[i * Tn + j] = std::exp(S[i * Tn + j] - mx);
        for (std::int64_t j = 0; j < Tn; ++j) P[i * Tn + j] /= z;
        for (std::int64_t d = 0; d < dh; ++d) {
          double o = 0;
          for (std::int64_t j = 0; j < Tn; ++j) o += P[i * Tn + j] * v(d, j);
          r.out(h * dh + d, b * Tn + i) = o;
        }
      }
      if (!grads) continue;
      auto g = [&](std::int64_t d, std::int64_t t) { return double(dOut(h * dh + d, b * Tn + t)); };
      for (std::int64_t i = 0; i < Tn; ++i) {
        double row = 0;
        for (std::int64_t j = 0; j < Tn; ++j) {
          double dot = 0;
          for (std::int64_t d = 0; d < dh; ++d) dot += g(d, i) * v(d, j);
          dP[i * Tn + j] = dot;
          row += P[i * Tn + j] * dot;
        }
        for (std::int64_t j = 0; j < Tn; ++j) dS[i * Tn + j] = P[i * Tn + j] * (dP[i * Tn + j] - row);
      }
      for (std::int64_t d = 0; d < dh; ++d)
        for (std::int64_t t = 0; t < Tn; ++t) {
          double dq = 0, dk = 0, dv = 0;
          for (std::int64_t j = 0; j < Tn; ++j) {
            dq += dS[t * Tn + j] * k(d, j) * scale;
            dk += dS[j * Tn + t] * q(d, j) * scale;
            dv += P[j * Tn + t] * g(d, j);
          }
          r.dq(h * dh + d, b * Tn + t) = dq;
          r.dk(h * dh + d, b * Tn + t) = dk;
          r.dv(h * dh + d, b * Tn + t) = dv;
        }
    }
  return r;
}

template <class T>
double max_error(ConstMatrixView<T> got, ConstMatrixView<double> want) {
  double worst = 0;
  for (std::int64_t i = 0; i < want.rows(); ++i)
    for (std::int64_t j = 0; j < want.cols(); ++j) {
      const double e = std::abs(double(got(i, j)) - want(i, j)) / (1.0 + std::abs(want(i, j)));
      worst = std::isfinite(double(got(i, j))) ? std::max(worst, e) : std::numeric_limits<double>::infinity();
    }
  return worst;
}

template <class T>
bool same_bits(ConstMatrixView<T> a, ConstMatrixView<T> b) {
  for (std::int64_t i = 0; i < a.rows(); ++i)
    if (std::memcmp(a.row(i), b.row(i), sizeof(T) * std::size_t(a.cols())) != 0) return false;
  return true;
}

// Q, K, V as disjoint row blocks of one strided matrix (a fused QKV projection's output),
// dOut random, and the outputs as column blocks inside wider buffers (guard columns around).
template <class T>
struct Operands {
  std::int64_t dm, n;
  Matrix<T> qkv, dout, out_buf, dqkv_buf;
  Operands(std::int64_t d_model, std::int64_t cols, std::uint64_t seed, double lo = -1.0, double hi = 1.0)
      : dm(d_model),
        n(cols),
        qkv(random_matrix<T>(3 * d_model, cols, seed, lo, hi, cols + 5)),
        dout(random_matrix<T>(d_model, cols, seed + 1)),
        out_buf(d_model, cols + 7, T(-7)),
        dqkv_buf(3 * d_model, cols + 7, T(-7)) {}
  ConstMatrixView<T> q() const { return qkv.view().block(0, 0, dm, n); }
  ConstMatrixView<T> k() const { return qkv.view().block(dm, 0, dm, n); }
  ConstMatrixView<T> v() const { return qkv.view().block(2 * dm, 0, dm, n); }
  MatrixView<T> out() { return out_buf.view().block(0, 3, dm, n); }
  MatrixView<T> dq() { return dqkv_buf.view().block(0, 3, dm, n); }
  MatrixView<T> dk() { return dqkv_buf.view().block(dm, 3, dm, n); }
  MatrixView<T> dv() { return dqkv_buf.view().block(2 * dm, 3, dm, n); }
  bool guards_untouched() const {
    auto guard = [&](std::int64_t j) { return j < 3 || j >= n + 3; };
    for (std::int64_t j = 0; j < n + 7; ++j) {
      if (!guard(j)) continue;
      for (std::int64_t i = 0; i < dm; ++i)
        if (out_buf(i, j) != T(-7)) return false;
      for (std::int64_t i = 0; i < 3 * dm; ++i)
        if (dqkv_buf(i, j) != T(-7)) return false;
    }
    return true;
  }
};

template <class T>
void run(CausalSelfAttention<T>& attn, Operands<T>& o, std::int64_t B, std::int64_t Tn) {
  attn.forward(o.q(), o.k(), o.v(), B, Tn, o.out());
  attn.backward(o.q(), o.k(), o.v(), o.dout.view(), o.dq(), o.dk(), o.dv());
}

}  // namespace

TEMPLATE_TEST_CASE("CausalSelfAttention matches a full-matrix masked reference on odd shapes", "[nn][attention]", float,
                   double) {
  using T = TestType;
  const double tol = std::is_same_v<T, float> ? 1e-6 : 1e-13;
  struct Shape {
    std::int64_t dm, heads, Tn, B;
  };
  // d_model 12 with 3 heads at T 1, 5, 17 and B 1..3; then T at and around the SIMD widths
  // (8 and 16: whole, shifted and masked registers, rows shorter than one), heads of 5 and
  // 12 rows (the 4-row tiles' remainders), and T 40 and 67 (four-register tiles, and the size
  // at which the (sequence, head) pairs run on threads)
  const Shape shapes[] = {{12, 3, 1, 1}, {12, 3, 1, 3}, {12, 3, 5, 1},  {12, 3, 5, 2},  {12, 3, 17, 3}, {12, 3, 17, 1},
                          {12, 1, 5, 2}, {12, 3, 8, 2}, {10, 2, 16, 1}, {10, 2, 33, 2}, {32, 4, 40, 2}, {24, 2, 67, 3}};
  std::uint64_t seed = 11;
  for (const Shape& s : shapes) {
    INFO("d_model " << s.dm << " heads " << s.heads << " T " << s.Tn << " B " << s.B);
    Operands<T> o(s.dm, s.B * s.Tn, seed += 3);
    CausalSelfAttention<T> attn(s.dm, s.heads);
    CHECK(attn.head_dim() == s.dm / s.heads);
    run(attn, o, s.B, s.Tn);
    const Reference r = reference<T>(o.q(), o.k(), o.v(), s.heads, s.B, s.Tn, o.dout.view());
    CHECK(max_error<T>(o.out(), r.out.view()) <= tol);
    CHECK(max_error<T>(o.dq(), r.dq.view()) <= tol);
    CHECK(max_error<T>(o.dk(), r.dk.view()) <= tol);
    CHECK(max_error<T>(o.dv(), r.dv.view()) <= tol);
    CHECK(o.guards_untouched());
  }
}

// The register tiles of kernels/attention.hpp: heads of 3, 17 and 33 rows (4-row tiles'
// remainders, partial w-element tiles of the transposed products) and of 64, T from 1 to past
// the block size 128 (partial key tiles, padded query registers), against the double loops
// and against the previous implementation (tests/attention_reference.hpp).
TEMPLATE_TEST_CASE("CausalSelfAttention's tiles match the references at head sizes off the SIMD width",
                   "[nn][attention][tiles]", float, double) {
  using T = TestType;
  const double tol = std::is_same_v<T, float> ? 2e-6 : 1e-13;
  struct Shape {
    std::int64_t heads, dh, Tn, B;
  };
  const Shape shapes[] = {{1, 3, 1, 1},    {2, 3, 7, 2},    {2, 17, 1, 2},   {2, 17, 31, 2}, {1, 33, 45, 1},
                          {3, 17, 128, 1}, {1, 33, 128, 2}, {2, 64, 128, 1}, {1, 3, 129, 1}, {1, 5, 15, 3}};
  std::uint64_t seed = 101;
  for (const Shape& s : shapes) {
    const std::int64_t dm = s.heads * s.dh;
    INFO("heads " << s.heads << " d_head " << s.dh << " T " << s.Tn << " B " << s.B);
    Operands<T> o(dm, s.B * s.Tn, seed += 3), old(dm, s.B * s.Tn, seed);
    CausalSelfAttention<T> attn(dm, s.heads);
    run(attn, o, s.B, s.Tn);
    CausalSelfAttentionReference<T> previous(dm, s.heads);
    previous.forward(old.q(), old.k(), old.v(), s.B, s.Tn, old.out());
    previous.backward(old.q(), old.k(), old.v(), old.dout.view(), old.dq(), old.dk(), old.dv());
    const Reference r = reference<T>(o.q(), o.k(), o.v(), s.heads, s.B, s.Tn, o.dout.view());
    CHECK(max_error<T>(o.out(), r.out.view()) <= tol);
    CHECK(max_error<T>(o.dq(), r.dq.view()) <= tol);
    CHECK(max_error<T>(o.dk(), r.dk.view()) <= tol);
    CHECK(max_error<T>(o.dv(), r.dv.view()) <= tol);
    CHECK(max_error<T>(old.out(), r.out.view()) <= tol);
    CHECK(max_error<T>(old.dq(), r.dq.view()) <= tol);
    CHECK(o.guards_untouched());
  }
}

TEST_CASE("CausalSelfAttention gradients match central differences at d_head 17 and odd T",
          "[nn][attention][gradcheck][tiles]") {
  for (const std::int64_t Tn : {1, 9, 19}) {
    INFO("T " << Tn);
    const std::int64_t heads = 2, dh = 17, dm = heads * dh, B = 1, n = B * Tn;
    auto Q = random_matrix<double>(dm, n, 13), K = random_matrix<double>(dm, n, 14),
         V = random_matrix<double>(dm, n, 15);
    const auto R = random_matrix<double>(dm, n, 16);
    Matrix<double> Out(dm, n), dQ(dm, n), dK(dm, n), dV(dm, n);
    CausalSelfAttention<double> attn(dm, heads);
    attn.forward(Q.view(), K.view(), V.view(), B, Tn, Out.view());
    attn.backward(Q.view(), K.view(), V.view(), R.view(), dQ.view(), dK.view(), dV.view());
    auto loss = [&] {
      attn.forward(Q.view(), K.view(), V.view(), B, Tn, Out.view());
      return sprig_test::dot<double>(Out.view(), R.view());
    };
    const auto some = sprig_test::some_indices(std::size_t(dm * n), std::size_t(std::min<std::int64_t>(dm * n, 120)));
    for (auto [X, G] : {std::pair{&Q, &dQ}, std::pair{&K, &dK}, std::pair{&V, &dV}}) {
      const std::vector<double> g(G->data(), G->data() + dm * n);
      sprig_test::check_gradient(loss, std::span<double>(X->data(), std::size_t(dm * n)), g, some);
    }
  }
}

#if SPRIG_HAS_OPENMP
TEMPLATE_TEST_CASE("CausalSelfAttention's tiles give the same bits with 1 and 2 threads at T 128, d_head 17",
                   "[nn][attention][threads][tiles]", float, double) {
  using T = TestType;
  const std::int64_t heads = 3, dh = 17, dm = heads * dh, Tn = 128, B = 2, n = B * Tn;
  auto once = [&](int threads) {
    auto o = std::make_unique<Operands<T>>(dm, n, 77);
    CausalSelfAttention<T> attn(dm, heads);
    sprig_test::with_threads(threads, [&] { run(attn, *o, B, Tn); });
    return o;
  };
  const auto one = once(1), two = once(2);
  CHECK(same_bits<T>(one->out(), two->out()));
  CHECK(same_bits<T>(one->dq(), two->dq()));
  CHECK(same_bits<T>(one->dk(), two->dk()));
  CHECK(same_bits<T>(one->dv(), two->dv()));
}
#endif

TEST_CASE("CausalSelfAttention's reference is the softmax it should be", "[nn][attention]") {
  // One head, d_head 1, T 2: S = [[q0 k0, -inf], [q1 k0, q1 k1]], hand-computed.
  Matrix<double> Q(1, 2), K(1, 2), V(1, 2), Out(1, 2);
  Q(0, 0) = 1, Q(0, 1) = 2, K(0, 0) = 0.5, K(0, 1) = -1, V(0, 0) = 3, V(0, 1) = 5;
  CausalSelfAttention<double> attn(1, 1);
  attn.forward(Q.view(), K.view(), V.view(), 1, 2, Out.view());
  const double p0 = std::exp(1.0) / (std::exp(1.0) + std::exp(-2.0));  // softmax(2 * 0.5, 2 * -1)
  CHECK(Out(0, 0) == Approx(3.0).epsilon(1e-15));
  CHECK(Out(0, 1) == Approx(3.0 * p0 + 5.0 * (1 - p0)).epsilon(1e-14));
  const Reference r = reference<double>(Q.view(), K.view(), V.view(), 1, 1, 2);
  CHECK(r.out(0, 1) == Approx(3.0 * p0 + 5.0 * (1 - p0)).epsilon(1e-14));
}

TEST_CASE("CausalSelfAttention gradients match central differences", "[nn][attention][gradcheck]") {
  const std::int64_t dm = 8, heads = 2, Tn = 6, B = 2, n = B * Tn;
  auto Q = random_matrix<double>(dm, n, 3), K = random_matrix<double>(dm, n, 4), V = random_matrix<double>(dm, n, 5);
  const auto R = random_matrix<double>(dm, n, 6);
  Matrix<double> Out(dm, n), dQ(dm, n), dK(dm, n), dV(dm, n);
  CausalSelfAttention<double> attn(dm, heads);
  attn.forward(Q.view(), K.view(), V.view(), B, Tn, Out.view());
  attn.backward(Q.view(), K.view(), V.view(), R.view(), dQ.view(), dK.view(), dV.view());
  auto loss = [&] {
    attn.forward(Q.view(), K.view(), V.view(), B, Tn, Out.view());
    return sprig_test::dot<double>(Out.view(), R.view());
  };
  const auto all = sprig_test::some_indices(std::size_t(dm * n), std::size_t(dm * n));
  for (auto [X, G] : {std::pair{&Q, &dQ}, std::pair{&K, &dK}, std::pair{&V, &dV}}) {
    const std::vector<double> g(G->data(), G->data() + dm * n);
    double largest = 0;
    for (double v : g) largest = std::max(largest, std::abs(v));
    CHECK(largest > 1e-2);  // the gradients are not trivially zero
    sprig_test::check_gradient(loss, std::span<double>(X->data(), std::size_t(dm * n)), g, all);
  }
}

TEST_CASE("CausalSelfAttention is causal and keeps sequences apart", "[nn][attention]") {
  const std::int64_t dm = 12, heads = 3, Tn = 9, B = 3, n = B * Tn;
  Operands<double> base(dm, n, 21);
  CausalSelfAttention<double> attn(dm, heads);
  attn.forward(base.q(), base.k(), base.v(), B, Tn, base.out());
  const Matrix<double> want = [&] {
    Matrix<double> m(dm, n);
    for (std::int64_t i = 0; i < dm; ++i)
      for (std::int64_t j = 0; j < n; ++j) m(i, j) = base.out()(i, j);
    return m;
  }();
  for (int which = 0; which < 3; ++which)
    for (std::int64_t t : {0, 4, 8}) {
      INFO("input "
           << "QKV"[which] << " position " << t);
      Operands<double> o(dm, n, 21);        // the same values as base
      const std::int64_t col = 1 * Tn + t;  // token t of sequence 1
      for (std::int64_t i = 0; i < dm; ++i) o.qkv(which * dm + i, col) += 0.5 + 0.1 * double(i);
      attn.forward(o.q(), o.k(), o.v(), B, Tn, o.out());
      std::int64_t changed = 0;
      for (std::int64_t j = 0; j < n; ++j) {
        const bool may_change = j >= col && j < 2 * Tn;
        bool equal = true;
        for (std::int64_t i = 0; i < dm; ++i) equal = equal && o.out()(i, j) == want(i, j);
        if (!may_change) REQUIRE(equal);
        changed += !equal;
        // the perturbed position itself changes, except through Q or K at t = 0: the first
        // query has one key, of weight 1, so Out there is V alone
        if (j == col && !(which < 2 && t == 0)) REQUIRE(!equal);
      }
      // Q at t is read by query t alone; K and V at t by every query from t on (K at 0: not
      // by query 0, as above)
      const std::int64_t expected = which == 0 ? (t == 0 ? 0 : 1) : which == 1 && t == 0 ? Tn - 1 : Tn - t;
      CHECK(changed == expected);
    }
}

TEMPLATE_TEST_CASE("CausalSelfAttention is stable with scores around 1e4", "[nn][attention]", float, double) {
  using T = TestType;
  const std::int64_t dm = 8, heads = 2, dh = 4, Tn = 17, B = 2, n = B * Tn;
  for (bool spread : {false, true}) {
    INFO((spread ? "scores spread over +-1e4" : "every score 1e4 + O(1)"));
    Operands<T> o(dm, n, 31);
    for (std::int64_t h = 0; h < heads; ++h)
      for (std::int64_t j = 0; j < n; ++j)
        if (spread) {
          // Q and K in [-100, 100]: a softmax close to one-hot, the largest gaps of order 1e4
          for (std::int64_t d = 0; d < dh; ++d) {
            o.qkv(h * dh + d, j) *= T(100);
            o.qkv(dm + h * dh + d, j) *= T(100);
          }
        } else {
          // q0 k0 / sqrt(4) = 100 * 200 / 2 = 1e4 for every pair, the other 3 dims in [-1, 1]
          o.qkv(h * dh, j) = T(100);
          o.qkv(dm + h * dh, j) = T(200);
        }
    double lo = std::numeric_limits<double>::infinity(), hi = -lo;
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t h = 0; h < heads; ++h)
        for (std::int64_t q = 0; q < Tn; ++q)
          for (std::int64_t k = 0; k <= q; ++k) {
            double dot = 0;
            for (std::int64_t d = 0; d < dh; ++d)
              dot += double(o.q()(h * dh + d, b * Tn + q)) * double(o.k()(h * dh + d, b * Tn + k));
            lo = std::min(lo, dot / 2.0);
            hi = std::max(hi, dot / 2.0);
          }
    CHECK(hi > 5e3);
    CHECK(std::isinf(std::exp(T(hi))));  // an unshifted softmax would overflow
    if (!spread) CHECK(hi - lo < 4.0);   // a softmax far from one-hot
    CausalSelfAttention<T> attn(dm, heads);
    run(attn, o, B, Tn);
    const Reference r = reference<T>(o.q(), o.k(), o.v(), heads, B, Tn, o.dout.view());
    // a score of 1e4 carries a rounding error of 1e4 ulp: about 1e-3 in float, so P does too
    // (relative to 1 + |value|; max_error is inf for a non-finite value)
    const double tol = std::is_same_v<T, float> ? 1e-2 : 1e-11;
    CHECK(max_error<T>(o.out(), r.out.view()) <= tol);
    CHECK(max_error<T>(o.dv(), r.dv.view()) <= tol);
    CHECK(max_error<T>(o.dq(), r.dq.view()) <= tol);
    CHECK(max_error<T>(o.dk(), r.dk.view()) <= tol);
  }
}

#if SPRIG_HAS_OPENMP
TEMPLATE_TEST_CASE("CausalSelfAttention gives the same bits with 1, 2 and 3 threads", "[nn][attention][threads]", float,
                   double) {
  using T = TestType;
  // 3 sequences x 4 heads of d_head 8 at T 67: 218k multiply-adds a pass, above the threshold
  const std::int64_t dm = 32, heads = 4, Tn = 67, B = 3, n = B * Tn;
  CausalSelfAttention<T> reused(dm, heads);  // its scratch grows as the thread count does
  auto once = [&](int threads, bool fresh) {
    auto o = std::make_unique<Operands<T>>(dm, n, 41);
    CausalSelfAttention<T> own(dm, heads);
    sprig_test::with_threads(threads, [&] { run(fresh ? own : reused, *o, B, Tn); });
    return o;
  };
  const auto one = once(1, true);
  for (int threads : {1, 2, 3})
    for (bool fresh : {true, false}) {
      INFO(threads << " threads, " << (fresh ? "a fresh layer" : "a reused layer"));
      const auto other = once(threads, fresh);
      CHECK(same_bits<T>(one->out(), other->out()));
      CHECK(same_bits<T>(one->dq(), other->dq()));
      CHECK(same_bits<T>(one->dk(), other->dk()));
      CHECK(same_bits<T>(one->dv(), other->dv()));
    }
}
#endif

TEST_CASE("CausalSelfAttention allocates nothing in the steady state", "[nn][attention]") {
  const std::int64_t dm = 32, heads = 4, Tn = 67, B = 3;
  Operands<float> big(dm, B * Tn, 51), small(dm, 2 * 20, 52);
  CausalSelfAttention<float> attn(dm, heads);
  long before = g_allocations.load();
  run(attn, big, B, Tn);
  const long first = g_allocations.load() - before;
  before = g_allocations.load();
  for (int step = 0; step < 3; ++step) run(attn, big, B, Tn);
  const long steady = g_allocations.load() - before;
  before = g_allocations.load();
  run(attn, small, 2, 20);  // a smaller shape fits the buffers already there
  run(attn, big, B, Tn);
  const long smaller = g_allocations.load() - before;
  CHECK(first > 0);  // the counter sees the cache and scratch the first call creates
  CHECK(steady == 0);
  CHECK(smaller == 0);
  CHECK(attn.memory_bytes() >= std::int64_t(B * heads * Tn * (Tn + 1) / 2 * sizeof(float)));
}

TEST_CASE("CausalSelfAttention rejects bad arguments with the values in the message", "[nn][attention]") {
  using Catch::Contains;
  CHECK_THROWS_AS(CausalSelfAttention<float>(12, 5), ArgumentError);
  CHECK_THROWS_WITH(CausalSelfAttention<float>(12, 5), Contains("d_model 12") && Contains("heads 5"));
  CHECK_THROWS_AS(CausalSelfAttention<float>(0, 1), ArgumentError);
  CHECK_THROWS_AS(CausalSelfAttention<float>(12, 0), ArgumentError);
  CHECK_THROWS_WITH(CausalSelfAttention<float>(-4, 2), Contains("-4"));

  const std::int64_t dm = 12, Tn = 5, B = 2, n = B * Tn;
  Operands<float> o(dm, n, 61);
  CausalSelfAttention<float> attn(dm, 3);
  Matrix<float> dQ(dm, n), dK(dm, n), dV(dm, n);
  // backward before any forward
  CHECK_THROWS_AS(attn.backward(o.q(), o.k(), o.v(), o.dout.view(), dQ.view(), dK.view(), dV.view()), ArgumentError);
  CHECK_THROWS_WITH(attn.backward(o.q(), o.k(), o.v(), o.dout.view(), dQ.view(), dK.view(), dV.view()),
                    Contains("CausalSelfAttention::backward") && Contains("before any forward"));
  // B or T < 1
  CHECK_THROWS_AS(attn.forward(o.q(), o.k(), o.v(), B, 0, o.out()), ArgumentError);
  CHECK_THROWS_WITH(attn.forward(o.q(), o.k(), o.v(), 0, Tn, o.out()), Contains("B 0"));
  // B * T != cols, and rows != d_model, naming the operand
  CHECK_THROWS_AS(attn.forward(o.q(), o.k(), o.v(), B, Tn + 1, o.out()), ShapeError);
  CHECK_THROWS_WITH(attn.forward(o.q(), o.k(), o.v(), 3, Tn, o.out()),
                    Contains("CausalSelfAttention::forward") && Contains("Q is 12x10") && Contains("12x15"));
  Matrix<float> wrong_rows(dm - 1, n);
  CHECK_THROWS_WITH(attn.forward(o.q(), o.k(), wrong_rows.view(), B, Tn, o.out()), Contains("V is 11x10"));
  CHECK_THROWS_WITH(attn.forward(o.q(), o.k(), o.v(), B, Tn, wrong_rows.view()), Contains("Out is 11x10"));
  // Out overlapping an input
  Matrix<float> Qm = random_matrix<float>(dm, n, 62);
  CHECK_THROWS_WITH(attn.forward(Qm.view(), o.k(), o.v(), B, Tn, Qm.view()), Contains("Out overlaps Q"));
  CHECK_THROWS_AS(attn.forward(Qm.view(), o.k(), o.v(), B, Tn, Qm.view()), ArgumentError);

  attn.forward(o.q(), o.k(), o.v(), B, Tn, o.out());
  // backward operands must have the last forward's shape
  Matrix<float> short_cols(dm, n - Tn);
  CHECK_THROWS_WITH(attn.backward(o.q(), o.k(), o.v(), short_cols.view(), dQ.view(), dK.view(), dV.view()),
                    Contains("dOut is 12x5") && Contains("12x10"));
  CHECK_THROWS_AS(attn.backward(o.q(), o.k(), o.v(), o.dout.view(), dQ.view(), short_cols.view(), dV.view()),
                  ShapeError);
  // outputs overlapping an input or each other
  CHECK_THROWS_WITH(attn.backward(o.q(), o.k(), o.v(), o.dout.view(), dQ.view(), dQ.view(), dV.view()),
                    Contains("dQ overlaps dK"));
  CHECK_THROWS_WITH(attn.backward(o.q(), o.k(), o.v(), o.dout.view(), dQ.view(), dK.view(), o.dout.view()),
                    Contains("dV overlaps dOut"));
  // a failed forward leaves no cache behind that backward could misread
  CHECK_THROWS_AS(attn.forward(o.q(), o.k(), o.v(), B, 0, o.out()), ArgumentError);
  attn.backward(o.q(), o.k(), o.v(), o.dout.view(), dQ.view(), dK.view(), dV.view());  // the earlier cache stands
}
