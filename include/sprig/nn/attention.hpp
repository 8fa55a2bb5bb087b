// sprig/nn/attention.hpp — CausalSelfAttention<T>: the core of causal multi-head
// self-attention, between the projections (a model computes Q, K and V with Linear or
// SparseLinear layers and applies its output projection to Out).
//
// Shapes (feature-major): Q, K, V, Out, dOut, dQ, dK, dV are all [d_model x (B*T)]; column
// b*T + t is token t of sequence b. Head h of sequence b is the [d_head x T] block at rows
// [h*d_head, (h+1)*d_head), columns [b*T, (b+1)*T) (d_head = d_model / heads), read and written
// in place through the views' row stride, no copy. For each (b, h), with s = 1/sqrt(d_head):
//   S[q, k]    = s * sum_d Q_h[d, q] K_h[d, k]                 for k <= q only
//   P[q, :]    = softmax over k <= q of S[q, :]                (shifted by the row maximum)
//   Out_h[:, q] = sum_{k<=q} P[q, k] V_h[:, k]
// and backward, from dOut:
//   dV_h[:, k] = sum_{q>=k} P[q, k] dOut_h[:, q]
//   dP[q, k]   = dOut_h[:, q] . V_h[:, k]
//   dS[q, k]   = P[q, k] (dP[q, k] - sum_{k'<=q} P[q, k'] dP[q, k'])
//   dQ_h[:, q] = s * sum_{k<=q} dS[q, k] K_h[:, k],  dK_h[:, k] = s * sum_{q>=k} dS[q, k] Q_h[:, q]
// The masked half (k > q) is never computed: the scores are a packed triangle.
//
// Layout of the scores: key-major. For each (b, h) the triangle holds row k = the keys' row,
// entries q in [k, T), so every pass walks contiguous memory along q: the scores and dP are
// axpys of Q_h's and dOut_h's rows (d_head of them per key row), the softmax runs column-wise
// (element-wise over q, one running max and sum per query), Out_h and dQ_h are axpys of the
// triangle's rows, and dV_h and dK_h are dot products of a triangle row with a Q_h or dOut_h
// row (SIMD lanes, then a fixed horizontal sum). Every entry's terms are added in one fixed
// order, whatever the thread count.
//
// The probabilities P are cached by forward (B x heads x T(T+1)/2 values, sized on the first
// call per shape) rather than recomputed in backward: recomputing costs the score pass again
// (a third of backward's multiply-adds plus all the exps), caching costs 4 bytes per
// (sequence, head, query, key<=query) in float: 2.6 MB at B 8, 10 heads, T 128. backward
// needs one more triangle and a few T-vectors per thread (scratch, kept between calls).
//
// Preconditions: Q, K, V are the forward's inputs when backward runs (only their shapes are
// checked); outputs share no memory with the inputs or each other (checked, ArgumentError;
// disjoint row blocks of one matrix, as a fused QKV projection gives, are fine).
// Complexity: forward d_model*B*T(T+1)/2 multiply-adds twice plus heads*B*T(T+1)/2 exps;
// backward four such products. Steady state allocates nothing (the cache and the per-thread
// scratch grow only for a larger shape or more OpenMP threads).
// Threads: OpenMP over the B*heads (sequence, head) pairs once the work reaches
// kParallelMinWork multiply-adds; each pair writes only its own block of Out (dQ, dK, dV) and
// its own triangle, so the results are bitwise identical for any thread count. The exps of a
// SIMD body and of a row's scalar tail may differ in the last ulp (xsimd::exp, std::exp); that
// depends on the shape only. One object serves one call at a time.
// Throws: ArgumentError for d_model or heads < 1, d_model % heads != 0, B or T < 1, backward
// before any forward; ShapeError for an operand that is not d_model x (B*T) (naming it and
// the values). The block size limit on T is the model's to check.
#pragma once

#include <type_traits>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "../core/aligned_allocator.hpp"
#include "../core/concepts.hpp"
#include "../core/config.hpp"
#include "../core/error.hpp"
#include "../core/matrix.hpp"
#include "../kernels/simd.hpp"

#if SPRIG_HAS_OPENMP
#  include <omp.h>
#endif

namespace sprig {

namespace detail {

// y[i] += a * x[i], i < n (contiguous, vectorised by the compiler).
template <class T>
SPRIG_ALWAYS_INLINE void attention_axpy(T a, const T* __restrict x, T* __restrict y, std::int64_t n) noexcept {
  for (std::int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

// sum_i a[i] b[i], i < n: lane l of a SIMD accumulator sums the terms i = l mod width, then a
// horizontal sum, then the scalar tail in order. Depends on n and the data only.
template <class T>
SPRIG_ALWAYS_INLINE T attention_dot(const T* __restrict a, const T* __restrict b, std::int64_t n) noexcept {
  T sum = T(0);
  std::int64_t i = 0;
#if SPRIG_KERNEL_SIMD
  if constexpr (kSimdFor<T>) {
    using V = Batch<T>;
    constexpr auto w = static_cast<std::int64_t>(V::size);
    if (n >= w) {
      V acc0(T(0)), acc1(T(0));
      for (; i + 2 * w <= n; i += 2 * w) {
        acc0 = xsimd::fma(V::load_unaligned(a + i), V::load_unaligned(b + i), acc0);
        acc1 = xsimd::fma(V::load_unaligned(a + i + w), V::load_unaligned(b + i + w), acc1);
      }
      for (; i + w <= n; i += w) acc0 = xsimd::fma(V::load_unaligned(a + i), V::load_unaligned(b + i), acc0);
      sum = reduce_add(acc0 + acc1);
    }
  }
#endif
  for (; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

// p[i] = exp(scale * (p[i] - m[i])) and s[i] += p[i], i < n.
template <class T>
SPRIG_ALWAYS_INLINE void attention_exp_sum(T* __restrict p, const T* __restrict m, T* __restrict s, T scale,
                                           std::int64_t n) noexcept {
  std::int64_t i = 0;
#if SPRIG_KERNEL_SIMD
  if constexpr (kSimdFor<T>) {
    using V = Batch<T>;
    constexpr auto w = static_cast<std::int64_t>(V::size);
    const V sc(scale);
    for (; i + w <= n; i += w) {
      const V e = xsimd::exp(sc * (V::load_unaligned(p + i) - V::load_unaligned(m + i)));
      e.store_unaligned(p + i);
      (V::load_unaligned(s + i) + e).store_unaligned(s + i);
    }
  }
#endif
  for (; i < n; ++i) {
    p[i] = std::exp(scale * (p[i] - m[i]));
    s[i] += p[i];
  }
}

}  // namespace detail

template <Value T>
class CausalSelfAttention {
public:
  using value_type = T;

  // Throws ArgumentError for d_model or heads < 1 or d_model not divisible by heads. O(1).
  CausalSelfAttention(std::int64_t d_model, std::int64_t heads) : d_model_(d_model), heads_(heads) {
    if (d_model < 1 || heads < 1)
      throw ArgumentError(detail::message("CausalSelfAttention: d_model and heads must be >= 1, got d_model ", d_model,
                                          " and heads ", heads));
    if (d_model % heads != 0)
      throw ArgumentError(detail::message("CausalSelfAttention: d_model ", d_model, " is not divisible by heads ",
                                          heads));
    d_head_ = d_model / heads;
    scale_ = static_cast<T>(1.0 / std::sqrt(static_cast<double>(d_head_)));
  }

  std::int64_t d_model() const noexcept { return d_model_; }
  std::int64_t heads() const noexcept { return heads_; }
  std::int64_t head_dim() const noexcept { return d_head_; }

  // Out = the causal attention of Q, K, V over B sequences of T tokens (header comment), and
  // the probabilities cached for backward. Throws ArgumentError for B or T < 1, ShapeError
  // unless Q, K, V and Out are all d_model x (B*T), ArgumentError if Out overlaps an input.
  void forward(std::type_identity_t<ConstMatrixView<T>> Q, std::type_identity_t<ConstMatrixView<T>> K,
               std::type_identity_t<ConstMatrixView<T>> V, std::int64_t B, std::int64_t T_len,
               std::type_identity_t<MatrixView<T>> Out) {
    constexpr const char* fn = "CausalSelfAttention::forward";
    if (B < 1 || T_len < 1)
      throw ArgumentError(detail::message(fn, ": batch B and sequence length T must be >= 1, got B ", B, " and T ",
                                          T_len));
    check_shape(fn, "Q", Q, B, T_len);
    check_shape(fn, "K", K, B, T_len);
    check_shape(fn, "V", V, B, T_len);
    check_shape(fn, "Out", Out, B, T_len);
    detail::check_no_overlap(fn, "Out", Out, "Q", Q);
    detail::check_no_overlap(fn, "Out", Out, "K", K);
    detail::check_no_overlap(fn, "Out", Out, "V", V);
    cached_b_ = cached_t_ = 0;  // no valid cache until this forward has run
    prepare(B, T_len);
    run_pairs([&](std::int64_t pair, T* scratch) { forward_pair(pair, Q, K, V, Out, scratch); });
    cached_b_ = B;
    cached_t_ = T_len;
  }

  // dQ, dK, dV (overwritten) from dOut, through the probabilities the last forward cached;
  // Q, K, V must be that forward's inputs. Throws ArgumentError before any forward,
  // ShapeError unless every operand is d_model x (B*T) of that forward, ArgumentError if an
  // output overlaps an input or another output.
  void backward(std::type_identity_t<ConstMatrixView<T>> Q, std::type_identity_t<ConstMatrixView<T>> K,
                std::type_identity_t<ConstMatrixView<T>> V, std::type_identity_t<ConstMatrixView<T>> dOut,
                std::type_identity_t<MatrixView<T>> dQ, std::type_identity_t<MatrixView<T>> dK,
                std::type_identity_t<MatrixView<T>> dV) {
    constexpr const char* fn = "CausalSelfAttention::backward";
    if (cached_b_ == 0) throw ArgumentError(detail::message(fn, ": called before any forward"));
    const std::int64_t B = cached_b_, T_len = cached_t_;
    check_shape(fn, "Q", Q, B, T_len);
    check_shape(fn, "K", K, B, T_len);
    check_shape(fn, "V", V, B, T_len);
    check_shape(fn, "dOut", dOut, B, T_len);
    check_shape(fn, "dQ", dQ, B, T_len);
    check_shape(fn, "dK", dK, B, T_len);
    check_shape(fn, "dV", dV, B, T_len);
    const ConstMatrixView<T> inputs[] = {Q, K, V, dOut};
    const char* input_names[] = {"Q", "K", "V", "dOut"};
    const MatrixView<T> outputs[] = {dQ, dK, dV};
    const char* output_names[] = {"dQ", "dK", "dV"};
    for (int o = 0; o < 3; ++o) {
      for (int i = 0; i < 4; ++i) detail::check_no_overlap(fn, output_names[o], outputs[o], input_names[i], inputs[i]);
      for (int p = o + 1; p < 3; ++p) detail::check_no_overlap(fn, output_names[o], outputs[o], output_names[p], outputs[p]);
    }
    run_pairs([&](std::int64_t pair, T* scratch) { backward_pair(pair, Q, K, V, dOut, dQ, dK, dV, scratch); });
  }

  // Bytes of the probability cache and the scratch (allocation capacity).
  std::int64_t memory_bytes() const noexcept {
    return static_cast<std::int64_t>((probs_.capacity() + scratch_.capacity()) * sizeof(T));
  }

private:
  template <class View>
  void check_shape(const char* fn, const char* name, const View& X, std::int64_t B, std::int64_t T_len) const {
    if (X.rows() != d_model_ || X.cols() != B * T_len)
      throw ShapeError(detail::message(fn, ": ", name, " is ", X.rows(), "x", X.cols(), ", expected d_model x (B*T) = ",
                                       d_model_, "x", B * T_len, " (B ", B, ", T ", T_len, ")"));
  }

  // Entries of one packed triangle of T keys.
  static std::int64_t triangle(std::int64_t t) noexcept { return t * (t + 1) / 2; }
  // Row k of a triangle at `base`, indexed by the query q in [k, t): element (k, q) is
  // row(base, k, t)[q]. Rows are stored one after another, row k holding t - k entries.
  static T* row(T* base, std::int64_t k, std::int64_t t) noexcept { return base + k * (t - 1) - k * (k - 1) / 2; }

  static int max_threads() noexcept {
#if SPRIG_HAS_OPENMP
    return omp_in_parallel() ? 1 : omp_get_max_threads();
#else
    return 1;
#endif
  }

  // Sizes the cache for B sequences of T_len tokens (allocating only when it grows) and sets
  // the scratch's per-thread stride.
  void prepare(std::int64_t B, std::int64_t T_len) {
    t_ = T_len;
    pairs_ = B * heads_;
    const auto probs = static_cast<std::size_t>(pairs_ * triangle(T_len));
    if (probs_.size() < probs) probs_.resize(probs);
    // one triangle (dS) and two T-vectors per thread, padded to 64 bytes against false sharing
    constexpr std::int64_t line = 64 / static_cast<std::int64_t>(sizeof(T));
    scratch_stride_ = (triangle(T_len) + 2 * T_len + line - 1) / line * line;
  }

  // Calls fn(pair, scratch of the running thread) for every (sequence, head) pair, the
  // scratch grown first if the thread count has.
  template <class Fn>
  void run_pairs(Fn&& fn) {
    const int threads = max_threads();
    const std::int64_t stride = scratch_stride_;
    const auto needed = static_cast<std::size_t>(stride * threads);
    if (scratch_.size() < needed) scratch_.resize(needed);
    T* scratch = scratch_.data();
#if SPRIG_HAS_OPENMP
    const std::int64_t work = pairs_ * d_head_ * triangle(t_);
    if (work >= detail::kParallelMinWork && pairs_ > 1 && threads > 1) {
#  pragma omp parallel for schedule(static)
      for (std::int64_t pair = 0; pair < pairs_; ++pair) fn(pair, scratch + stride * omp_get_thread_num());
      return;
    }
#endif
    for (std::int64_t pair = 0; pair < pairs_; ++pair) fn(pair, scratch);
  }

  void forward_pair(std::int64_t pair, ConstMatrixView<T> Q, ConstMatrixView<T> K, ConstMatrixView<T> V,
                    MatrixView<T> Out, T* scratch) {
    const std::int64_t t = t_, dh = d_head_, b = pair / heads_, r0 = (pair % heads_) * dh, c0 = b * t;
    T* P = probs_.data() + pair * triangle(t);
    T* m = scratch;      // running max of each query's scores
    T* s = scratch + t;  // running sum of each query's exps
    // raw scores, key row by key row: row k += K_h[d, k] * Q_h[d, k..t) over d
    for (std::int64_t k = 0; k < t; ++k) {
      T* p = row(P, k, t);
      std::fill(p + k, p + t, T(0));
      for (std::int64_t d = 0; d < dh; ++d) detail::attention_axpy(K(r0 + d, c0 + k), Q.row(r0 + d) + c0 + k, p + k, t - k);
    }
    // softmax over the keys k <= q of every query q: max, exp and sum, normalise
    std::copy(P, P + t, m);
    for (std::int64_t k = 1; k < t; ++k) {
      const T* p = row(P, k, t);
      for (std::int64_t q = k; q < t; ++q) m[q] = std::max(m[q], p[q]);
    }
    std::fill(s, s + t, T(0));
    for (std::int64_t k = 0; k < t; ++k) detail::attention_exp_sum(row(P, k, t) + k, m + k, s + k, scale_, t - k);
    for (std::int64_t q = 0; q < t; ++q) s[q] = T(1) / s[q];
    for (std::int64_t k = 0; k < t; ++k) {
      T* p = row(P, k, t);
      for (std::int64_t q = k; q < t; ++q) p[q] *= s[q];
    }
    // Out_h[d, k..t) += V_h[d, k] * P[k, k..t)
    for (std::int64_t d = 0; d < dh; ++d) {
      T* o = Out.row(r0 + d) + c0;
      const T* v = V.row(r0 + d) + c0;
      std::fill(o, o + t, T(0));
      for (std::int64_t k = 0; k < t; ++k) detail::attention_axpy(v[k], row(P, k, t) + k, o + k, t - k);
    }
  }

  void backward_pair(std::int64_t pair, ConstMatrixView<T> Q, ConstMatrixView<T> K, ConstMatrixView<T> V,
                     ConstMatrixView<T> dOut, MatrixView<T> dQ, MatrixView<T> dK, MatrixView<T> dV, T* scratch) {
    const std::int64_t t = t_, dh = d_head_, b = pair / heads_, r0 = (pair % heads_) * dh, c0 = b * t;
    T* P = probs_.data() + pair * triangle(t);
    T* G = scratch;                   // dP, then dS (scaled by s), key-major like P
    T* rs = scratch + triangle(t);    // sum_k P[q, k] dP[q, k] of every query q
    // dV_h[d, k] = P[k, k..t) . dOut_h[d, k..t)
    for (std::int64_t d = 0; d < dh; ++d) {
      const T* g = dOut.row(r0 + d) + c0;
      T* dv = dV.row(r0 + d) + c0;
      for (std::int64_t k = 0; k < t; ++k) dv[k] = detail::attention_dot(row(P, k, t) + k, g + k, t - k);
    }
    // dP row k += V_h[d, k] * dOut_h[d, k..t) over d
    for (std::int64_t k = 0; k < t; ++k) {
      T* g = row(G, k, t);
      std::fill(g + k, g + t, T(0));
      for (std::int64_t d = 0; d < dh; ++d)
        detail::attention_axpy(V(r0 + d, c0 + k), dOut.row(r0 + d) + c0 + k, g + k, t - k);
    }
    std::fill(rs, rs + t, T(0));
    for (std::int64_t k = 0; k < t; ++k) {
      const T* p = row(P, k, t);
      const T* g = row(G, k, t);
      for (std::int64_t q = k; q < t; ++q) rs[q] += p[q] * g[q];
    }
    for (std::int64_t k = 0; k < t; ++k) {
      const T* p = row(P, k, t);
      T* g = row(G, k, t);
      for (std::int64_t q = k; q < t; ++q) g[q] = scale_ * p[q] * (g[q] - rs[q]);
    }
    // dQ_h[d, k..t) += K_h[d, k] * dS[k, k..t);  dK_h[d, k] = dS[k, k..t) . Q_h[d, k..t)
    for (std::int64_t d = 0; d < dh; ++d) {
      const T* kk = K.row(r0 + d) + c0;
      const T* qq = Q.row(r0 + d) + c0;
      T* dq = dQ.row(r0 + d) + c0;
      T* dk = dK.row(r0 + d) + c0;
      std::fill(dq, dq + t, T(0));
      for (std::int64_t k = 0; k < t; ++k) {
        const T* g = row(G, k, t) + k;
        detail::attention_axpy(kk[k], g, dq + k, t - k);
        dk[k] = detail::attention_dot(g, qq + k, t - k);
      }
    }
  }

  std::int64_t d_model_ = 0, heads_ = 0, d_head_ = 0;
  T scale_ = T(1);
  std::int64_t t_ = 0, pairs_ = 0, scratch_stride_ = 0;
  std::int64_t cached_b_ = 0, cached_t_ = 0;  // the shape of the last forward (0: none yet)
  AlignedVector<T> probs_, scratch_;
};

}  // namespace sprig
