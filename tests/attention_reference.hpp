// tests/attention_reference.hpp — CausalSelfAttentionReference<T>: the previous
// implementation of CausalSelfAttention (nn/attention.hpp), kept unchanged beside it as the
// side-by-side baseline of bench/bench_attention and a second oracle for the tests. Same
// interface, contracts and results up to rounding. What follows is its original description.
//
// The core of causal multi-head self-attention, between the projections (a model computes Q, K and V with Linear or
// SparseLinear layers and applies its output projection to Out).
//
// Shapes (feature-major): Q, K, V, Out, dOut, dQ, dK, dV are all [d_model x (B*T)]; column
// b*T + t is token t of sequence b. Head h of sequence b is the [d_head x T] block at rows
// [h*d_head, (h+1)*d_head), columns [b*T, (b+1)*T) (d_head = d_model / heads); any row stride.
// For each (b, h), with s = 1/sqrt(d_head):
//   S[q, k]    = s * sum_d Q_h[d, q] K_h[d, k]                 for k <= q only
//   P[q, :]    = softmax over k <= q of S[q, :]                (shifted by the row maximum)
//   Out_h[:, q] = sum_{k<=q} P[q, k] V_h[:, k]
// and backward, from dOut:
//   dV_h[:, k] = sum_{q>=k} P[q, k] dOut_h[:, q]
//   dP[q, k]   = dOut_h[:, q] . V_h[:, k]
//   dS[q, k]   = P[q, k] (dP[q, k] - sum_{k'<=q} P[q, k'] dP[q, k'])
//   dQ_h[:, q] = s * sum_{k<=q} dS[q, k] K_h[:, k],  dK_h[:, k] = s * sum_{q>=k} dS[q, k] Q_h[:, q]
// The masked half (k > q) is never computed: the scores are a packed triangle (a register on
// the diagonal computes up to width - 1 masked products per row and discards them).
//
// Layout of the scores: key-major. For each (b, h) the triangle holds row k = the keys' row,
// entries q in [k, T), so every pass walks contiguous memory along q: a score row (and a dP
// row) is d_head multiply-adds per entry kept in SIMD registers over d, the softmax runs
// column-wise (element-wise over q, one running max and sum per query), Out_h and dQ_h are
// register tiles of 4 head rows summed over the keys k <= q, and dV_h and dK_h are dot products
// of a triangle row with 4 head rows (SIMD lanes, then a horizontal sum). The head's inputs
// are first copied into per-thread scratch rows of about T (d_head x T per operand, small
// beside the d_head x T^2 products): the tiles read d_head rows at once, and at the model's
// row stride (B*T, often a power of two) those rows share a few L1 sets. Every entry's terms
// are added in one fixed order that depends on the shape only.
//
// The probabilities P are cached by forward (B x heads x T(T+1)/2 values, sized on the first
// call per shape) rather than recomputed in backward: recomputing costs the score pass again
// (a third of backward's multiply-adds plus all the exps), caching costs 4 bytes per
// (sequence, head, query, key<=query) in float: 2.6 MB at B 8, 10 heads, T 128. The scratch
// per thread is 4 head copies, one triangle (dS) and two T-vectors, kept between calls.
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
// SIMD register and of a row's scalar tail may differ in the last ulp (xsimd::exp, std::exp);
// which one an entry gets depends on the shape only. One object serves one call at a time.
// Throws: ArgumentError for d_model or heads < 1, d_model % heads != 0, B or T < 1, backward
// before any forward; ShapeError for an operand that is not d_model x (B*T) (naming it and
// the values). The block size limit on T is the model's to check.
#pragma once

#include <type_traits>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "sprig/core/aligned_allocator.hpp"
#include "sprig/core/concepts.hpp"
#include "sprig/core/config.hpp"
#include "sprig/core/error.hpp"
#include "sprig/core/matrix.hpp"
#include "sprig/kernels/simd.hpp"

#if SPRIG_HAS_OPENMP
#  include <omp.h>
#endif

namespace sprig {

namespace detail {

// The three products of attention on one (sequence, head), over a packed key-major triangle
// P (row k holds the queries q in [k, t): P.row(k)[q] is element (k, q)) and [d_head x t] head
// operands given as a first row and a row stride. Each runs SIMD register tiles with no scalar
// tails: a row's last partial register is shifted back to end at t (it recomputes entries
// with the same operations, or masks lanes already summed), and a register on the diagonal
// masks the lanes q < k. Rows shorter than a register, and the scalar build, take plain
// loops. Which path an entry takes depends on the shape only, never on the thread count.
// Row k of a triangle of t keys starts at entry k t - k (k - 1) / 2; row(k) is offset back by
// k so that it is indexed by q.
template <class T>
struct ReferenceAttentionTriangle {
  T* base;
  std::int64_t t;
  T* row(std::int64_t k) const noexcept { return base + k * (t - 1) - k * (k - 1) / 2; }
};

// out[q] = sum_{d < dh} a[d * as] x[d * xs + q] for q in [qb, t): one triangle row of scores
// (a = K_h's column k, x = Q_h) or of dP (a = V_h's column k, x = dOut_h). d ascending.
template <class T, class Arch = KernelArch>
SPRIG_ALWAYS_INLINE void reference_attention_row_axpy(const T* a, std::int64_t as, const T* x, std::int64_t xs,
                                                      std::int64_t dh, std::int64_t qb, std::int64_t t,
                                                      T* out) noexcept {
#if SPRIG_KERNEL_SIMD
  if constexpr (kSimdFor<T, Arch>) {
    using V = Batch<T, Arch>;
    constexpr auto w = static_cast<std::int64_t>(V::size);
    if (t - qb >= w) {
      auto tile = [&]<int R>(std::int64_t q) {
        V acc[R];
        for (int v = 0; v < R; ++v) acc[v] = V(T(0));
        for (std::int64_t d = 0; d < dh; ++d) {
          const V av(a[d * as]);
          const T* xr = x + d * xs + q;
          for (int v = 0; v < R; ++v) acc[v] = xsimd::fma(av, V::load_unaligned(xr + v * w), acc[v]);
        }
        for (int v = 0; v < R; ++v) acc[v].store_unaligned(out + q + v * w);
      };
      std::int64_t q = qb;
      for (; q + 4 * w <= t; q += 4 * w) tile.template operator()<4>(q);
      for (; q + w <= t; q += w) tile.template operator()<1>(q);
      if (q < t) tile.template operator()<1>(t - w);
      return;
    }
  }
#endif
  for (std::int64_t q = qb; q < t; ++q) {
    T s = T(0);
    for (std::int64_t d = 0; d < dh; ++d) s += a[d * as] * x[d * xs + q];
    out[q] = s;
  }
}

// y[d * ys + q] = sum_{k <= q} a[d * as + k] P(k, q) for d < dh, q < t: Out_h = V_h P
// (a = V_h) and dQ_h = K_h dS (a = K_h). k ascending.
template <class T, class Arch = KernelArch>
void reference_attention_triangle_axpy(const T* a, std::int64_t as, ReferenceAttentionTriangle<T> P, std::int64_t dh,
                                       T* y, std::int64_t ys) noexcept {
  const std::int64_t t = P.t;
#if SPRIG_KERNEL_SIMD
  if constexpr (kSimdFor<T, Arch>) {
    using V = Batch<T, Arch>;
    constexpr auto w = static_cast<std::int64_t>(V::size);
    if (t >= w) {
      alignas(64) static constexpr T lane_index[] = {0,  1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11, 12, 13, 14, 15,
                                                     16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31};
      static_assert(w <= 32);
      const V lanes = V::load_unaligned(lane_index);
      // rows d0 .. d0 + R of Y over the queries [q0, q0 + w): P(k, q0..) is whole for
      // k <= q0; for k in (q0, q0 + w) its lanes q < k are masked (they hold the previous
      // row's end: read, never used)
      auto tile = [&]<int R>(std::int64_t d0, std::int64_t q0) {
        V acc[R];
        for (int r = 0; r < R; ++r) acc[r] = V(T(0));
        for (std::int64_t k = 0; k <= q0; ++k) {
          const V p = V::load_unaligned(P.row(k) + q0);
          for (int r = 0; r < R; ++r) acc[r] = xsimd::fma(V(a[(d0 + r) * as + k]), p, acc[r]);
        }
        for (std::int64_t k = q0 + 1; k < q0 + w; ++k) {
          const V p = xsimd::select(lanes >= V(T(k - q0)), V::load_unaligned(P.row(k) + q0), V(T(0)));
          for (int r = 0; r < R; ++r) acc[r] = xsimd::fma(V(a[(d0 + r) * as + k]), p, acc[r]);
        }
        for (int r = 0; r < R; ++r) acc[r].store_unaligned(y + (d0 + r) * ys + q0);
      };
      for (std::int64_t q0 = 0;; q0 += w) {
        const std::int64_t q = std::min(q0, t - w);
        std::int64_t d = 0;
        for (; d + 4 <= dh; d += 4) tile.template operator()<4>(d, q);
        for (; d < dh; ++d) tile.template operator()<1>(d, q);
        if (q0 + w >= t) break;
      }
      return;
    }
  }
#endif
  for (std::int64_t d = 0; d < dh; ++d) {
    T* yr = y + d * ys;
    const T* ar = a + d * as;
    std::fill(yr, yr + t, T(0));
    for (std::int64_t k = 0; k < t; ++k) {
      const T* p = P.row(k);
      const T ak = ar[k];
      for (std::int64_t q = k; q < t; ++q) yr[q] += ak * p[q];
    }
  }
}

// y[d * ys + k] = sum_{q in [k, t)} P(k, q) x[d * xs + q] for d < dh, k < t: dV_h = dOut_h P^T
// (x = dOut_h) and dK_h = Q_h dS^T (x = Q_h). SIMD lanes sum q = k + l mod width, then one
// horizontal sum.
template <class T, class Arch = KernelArch>
void reference_attention_triangle_dot(ReferenceAttentionTriangle<T> P, const T* x, std::int64_t xs, std::int64_t dh,
                                      T* y, std::int64_t ys) noexcept {
  const std::int64_t t = P.t;
  std::int64_t k_simd = 0;  // rows [0, k_simd) run on SIMD tiles
#if SPRIG_KERNEL_SIMD
  if constexpr (kSimdFor<T, Arch>) {
    using V = Batch<T, Arch>;
    constexpr auto w = static_cast<std::int64_t>(V::size);
    alignas(64) static constexpr T lane_index[] = {0,  1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11, 12, 13, 14, 15,
                                                   16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31};
    static_assert(w <= 32);
    const V lanes = V::load_unaligned(lane_index);
    k_simd = std::max<std::int64_t>(0, t - w + 1);
    // rows d0 .. d0 + R of Y at key k: whole registers from q = k, then the last one shifted
    // back to end at t with the lanes already summed masked
    auto tile = [&]<int R>(std::int64_t d0, std::int64_t k) {
      const T* p = P.row(k);
      V acc[R];
      for (int r = 0; r < R; ++r) acc[r] = V(T(0));
      std::int64_t q = k;
      for (; q + w <= t; q += w) {
        const V pv = V::load_unaligned(p + q);
        for (int r = 0; r < R; ++r) acc[r] = xsimd::fma(pv, V::load_unaligned(x + (d0 + r) * xs + q), acc[r]);
      }
      if (q < t) {
        const auto fresh = lanes >= V(T(q - (t - w)));
        const V pv = V::load_unaligned(p + t - w);
        for (int r = 0; r < R; ++r)
          acc[r] += xsimd::select(fresh, pv * V::load_unaligned(x + (d0 + r) * xs + t - w), V(T(0)));
      }
      for (int r = 0; r < R; ++r) y[(d0 + r) * ys + k] = reduce_add(acc[r]);
    };
    for (std::int64_t k = 0; k < k_simd; ++k) {
      std::int64_t d = 0;
      for (; d + 4 <= dh; d += 4) tile.template operator()<4>(d, k);
      for (; d < dh; ++d) tile.template operator()<1>(d, k);
    }
  }
#endif
  for (std::int64_t d = 0; d < dh; ++d) {
    const T* xr = x + d * xs;
    for (std::int64_t k = k_simd; k < t; ++k) {
      const T* p = P.row(k);
      T s = T(0);
      for (std::int64_t q = k; q < t; ++q) s += p[q] * xr[q];
      y[d * ys + k] = s;
    }
  }
}

// p[i] = exp(scale * (p[i] - m[i])) and s[i] += p[i], i < n.
template <class T, class Arch = KernelArch>
SPRIG_ALWAYS_INLINE void reference_attention_exp_sum(T* __restrict p, const T* __restrict m, T* __restrict s, T scale,
                                                     std::int64_t n) noexcept {
  std::int64_t i = 0;
#if SPRIG_KERNEL_SIMD
  if constexpr (kSimdFor<T, Arch>) {
    using V = Batch<T, Arch>;
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
class CausalSelfAttentionReference {
public:
  using value_type = T;

  // Throws ArgumentError for d_model or heads < 1 or d_model not divisible by heads. O(1).
  CausalSelfAttentionReference(std::int64_t d_model, std::int64_t heads) : d_model_(d_model), heads_(heads) {
    if (d_model < 1 || heads < 1)
      throw ArgumentError(detail::message("CausalSelfAttentionReference: d_model and heads must be >= 1, got d_model ",
                                          d_model, " and heads ", heads));
    if (d_model % heads != 0)
      throw ArgumentError(
          detail::message("CausalSelfAttentionReference: d_model ", d_model, " is not divisible by heads ", heads));
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
    constexpr const char* fn = "CausalSelfAttentionReference::forward";
    if (B < 1 || T_len < 1)
      throw ArgumentError(
          detail::message(fn, ": batch B and sequence length T must be >= 1, got B ", B, " and T ", T_len));
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
    constexpr const char* fn = "CausalSelfAttentionReference::backward";
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
      for (int p = o + 1; p < 3; ++p)
        detail::check_no_overlap(fn, output_names[o], outputs[o], output_names[p], outputs[p]);
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
    // Per thread: the head copies (below), one triangle (dS) and two T-vectors, in whole
    // 64-byte lines (no false sharing). A copy's rows are T rounded up to a line, plus a line
    // when that is a multiple of 512 bytes: d_head rows at a stride of a large power of two
    // share a few L1 sets (as at the model's 4 KB stride of B*T = 1024 floats, read in place;
    // docs/design.md, "Measurements behind the code").
    constexpr std::int64_t line = 64 / static_cast<std::int64_t>(sizeof(T));
    head_stride_ = (T_len + line - 1) / line * line;
    if (head_stride_ * static_cast<std::int64_t>(sizeof(T)) % 512 == 0) head_stride_ += line;
    const std::int64_t tri = (triangle(T_len) + line - 1) / line * line;
    const std::int64_t vec = (T_len + line - 1) / line * line;
    scratch_stride_ = 4 * d_head_ * head_stride_ + tri + 2 * vec;
    triangle_at_ = 4 * d_head_ * head_stride_;
    vector_at_ = triangle_at_ + tri;
    sums_at_ = vector_at_ + vec;
  }

  // dst[d * head_stride_ + j] = X(r0 + d, c0 + j) for d < d_head, j < t_.
  void copy_head(ConstMatrixView<T> X, std::int64_t r0, std::int64_t c0, T* dst) const noexcept {
    for (std::int64_t d = 0; d < d_head_; ++d) std::copy_n(X.row(r0 + d) + c0, t_, dst + d * head_stride_);
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

  // The scratch of a thread: copies of the head's Q_h, K_h, V_h (and dOut_h), one after
  // another at head_stride_, then a triangle, then two T-vectors.
  void forward_pair(std::int64_t pair, ConstMatrixView<T> Q, ConstMatrixView<T> K, ConstMatrixView<T> V,
                    MatrixView<T> Out, T* scratch) {
    const std::int64_t t = t_, dh = d_head_, hs = head_stride_, b = pair / heads_, r0 = (pair % heads_) * dh,
                       c0 = b * t;
    const detail::ReferenceAttentionTriangle<T> P{probs_.data() + pair * triangle(t), t};
    T* q_h = scratch;
    T* k_h = q_h + dh * hs;
    T* v_h = k_h + dh * hs;
    T* m = scratch + vector_at_;  // running max of each query's scores
    T* s = scratch + sums_at_;    // running sum of each query's exps
    copy_head(Q, r0, c0, q_h);
    copy_head(K, r0, c0, k_h);
    copy_head(V, r0, c0, v_h);
    // raw scores, key row by key row: P(k, q) = K_h[:, k] . Q_h[:, q] for q >= k
    for (std::int64_t k = 0; k < t; ++k) detail::reference_attention_row_axpy(k_h + k, hs, q_h, hs, dh, k, t, P.row(k));
    // softmax over the keys k <= q of every query q: max, exp and sum, normalise
    std::copy(P.base, P.base + t, m);
    for (std::int64_t k = 1; k < t; ++k) {
      const T* p = P.row(k);
      for (std::int64_t q = k; q < t; ++q) m[q] = std::max(m[q], p[q]);
    }
    std::fill(s, s + t, T(0));
    for (std::int64_t k = 0; k < t; ++k) detail::reference_attention_exp_sum(P.row(k) + k, m + k, s + k, scale_, t - k);
    for (std::int64_t q = 0; q < t; ++q) s[q] = T(1) / s[q];
    for (std::int64_t k = 0; k < t; ++k) {
      T* p = P.row(k);
      for (std::int64_t q = k; q < t; ++q) p[q] *= s[q];
    }
    // Out_h[d, q] = sum_{k <= q} V_h[d, k] P(k, q)
    detail::reference_attention_triangle_axpy(v_h, hs, P, dh, Out.row(r0) + c0, Out.stride());
  }

  void backward_pair(std::int64_t pair, ConstMatrixView<T> Q, ConstMatrixView<T> K, ConstMatrixView<T> V,
                     ConstMatrixView<T> dOut, MatrixView<T> dQ, MatrixView<T> dK, MatrixView<T> dV, T* scratch) {
    const std::int64_t t = t_, dh = d_head_, hs = head_stride_, b = pair / heads_, r0 = (pair % heads_) * dh,
                       c0 = b * t;
    const detail::ReferenceAttentionTriangle<T> P{probs_.data() + pair * triangle(t), t};
    const detail::ReferenceAttentionTriangle<T> G{scratch + triangle_at_, t};  // dP, then s * dS, key-major like P
    T* q_h = scratch;
    T* k_h = q_h + dh * hs;
    T* v_h = k_h + dh * hs;
    T* g_h = v_h + dh * hs;
    T* rs = scratch + vector_at_;  // sum_k P(k, q) dP(k, q) of every query q
    copy_head(Q, r0, c0, q_h);
    copy_head(K, r0, c0, k_h);
    copy_head(V, r0, c0, v_h);
    copy_head(dOut, r0, c0, g_h);
    // dV_h[d, k] = sum_{q >= k} P(k, q) dOut_h[d, q]
    detail::reference_attention_triangle_dot(P, g_h, hs, dh, dV.row(r0) + c0, dV.stride());
    // dP(k, q) = V_h[:, k] . dOut_h[:, q]
    for (std::int64_t k = 0; k < t; ++k) detail::reference_attention_row_axpy(v_h + k, hs, g_h, hs, dh, k, t, G.row(k));
    std::fill(rs, rs + t, T(0));
    for (std::int64_t k = 0; k < t; ++k) {
      const T* p = P.row(k);
      const T* g = G.row(k);
      for (std::int64_t q = k; q < t; ++q) rs[q] += p[q] * g[q];
    }
    for (std::int64_t k = 0; k < t; ++k) {
      const T* p = P.row(k);
      T* g = G.row(k);
      for (std::int64_t q = k; q < t; ++q) g[q] = scale_ * p[q] * (g[q] - rs[q]);
    }
    // dQ_h[d, q] = sum_{k <= q} K_h[d, k] (s dS)(k, q);  dK_h[d, k] = sum_{q >= k} (s dS)(k, q) Q_h[d, q]
    detail::reference_attention_triangle_axpy(k_h, hs, G, dh, dQ.row(r0) + c0, dQ.stride());
    detail::reference_attention_triangle_dot(G, q_h, hs, dh, dK.row(r0) + c0, dK.stride());
  }

  std::int64_t d_model_ = 0, heads_ = 0, d_head_ = 0;
  T scale_ = T(1);
  std::int64_t t_ = 0, pairs_ = 0, scratch_stride_ = 0;
  // the head copies' row stride, and where a thread's scratch holds the triangle and the vectors
  std::int64_t head_stride_ = 0, triangle_at_ = 0, vector_at_ = 0, sums_at_ = 0;
  std::int64_t cached_b_ = 0, cached_t_ = 0;  // the shape of the last forward (0: none yet)
  AlignedVector<T> probs_, scratch_;
};

}  // namespace sprig
