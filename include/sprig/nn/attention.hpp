// sprig/nn/attention.hpp — CausalSelfAttention<T>: the core of causal multi-head
// self-attention, between the projections (a model computes Q, K and V with Linear or
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
// The masked half (k > q) is never computed beyond the diagonal's SIMD registers.
//
// Layout of the scores: key-major and in whole SIMD registers (kernels/attention.hpp,
// AttentionBlockTriangle). Row k of a (b, h)'s triangle holds the queries from k rounded down
// to the SIMD width w up to T rounded up to w, so every pass walks contiguous whole registers
// along q: the scores and dP are register tiles of 4 keys by 2-4 registers of queries summed
// over d (d_head multiply-adds per entry), the softmax runs element-wise over q (one running
// max and sum per query, the lanes below the key set to 0), Out_h and dQ_h are tiles of 4 head
// rows by 2-4 registers of queries summed over the keys, and dV_h and dK_h the same with keys
// and queries swapped, over a query-major copy of P and of dS (a register transpose per w x w
// block costs less than the horizontal sum per output of summing along q). The head's
// inputs are first copied into per-thread scratch rows of T rounded up to a 64-byte line,
// zero past T (d_head x T per operand, small beside the d_head x T^2 products): the tiles read
// whole registers past T, and at the model's row stride (B*T, often a power of two) the d_head
// rows would share a few L1 sets. One (b, h)'s copies and triangle are about 150 KB in float
// at T 128, d_head 64: they stay in L2 while its products run. Every entry's terms are added
// in one fixed order that depends on the shape and the SIMD architecture only.
//
// The probabilities P are cached by forward (B x heads x about T(T+w)/2 values, sized on the
// first call per shape) rather than recomputed in backward as FlashAttention's online softmax
// does: recomputing costs the score pass again (a quarter more multiply-adds in backward, plus
// all the exps), caching costs 4 bytes per (sequence, head, query, key <= query) in float: 2.9
// MB at B 8, 10 heads, T 128. The scratch per thread is 4 head copies, two triangles (dS, and
// the query-major copy of P, then of dS) and two vectors, kept between calls.
//
// Precision::bf16 (set_precision; a float core only): Q, K, V and dOut rounded to bf16, P and
// s dS rounded to bf16 before the products that read them, every sum and the softmax in
// float, P cached in bf16 (half the cache). Two paths (bf16_attention_path()): avx512_bf16
// runs kernels/bf16_attention.hpp's `vdpbf16ps` products on bf16 copies laid out in pairs
// along each product's reduction; portable runs the float kernels above on the rounded
// values. The paths round the same operands and sum in different orders, so a float score
// may round P to the neighbouring bf16: they agree to about one bf16 ulp per term, not bit
// for bit. Each path is bitwise identical for any thread count. Q, K and V may be given in
// bf16 (forward and backward's bf16 forms), which a model keeps instead of float copies.
//
// Preconditions: Q, K, V are the forward's inputs when backward runs (only their shapes are
// checked); outputs share no memory with the inputs or each other (checked, ArgumentError;
// disjoint row blocks of one matrix, as a fused QKV projection gives, are fine), except that
// backward's bf16-output form may write dQ, dK, dV over Q, K, V themselves.
// Complexity: forward d_model*B*E multiply-adds twice plus heads*B*E exps, E = T(T+w)/2 about
// (the triangle's entries, w the SIMD width: the causal half plus the diagonal's registers);
// backward four such products. Steady state allocates nothing (the cache and the per-thread
// scratch grow only for a larger shape or more OpenMP threads).
// Threads: OpenMP over the B*heads (sequence, head) pairs once the work reaches
// kParallelMinWork multiply-adds; each pair writes only its own block of Out (dQ, dK, dV) and
// its own triangle, so the results are bitwise identical for any thread count. One object
// serves one call at a time.
// Throws: ArgumentError for d_model or heads < 1, d_model % heads != 0, B or T < 1, backward
// before any forward; ShapeError for an operand that is not d_model x (B*T) (naming it and
// the values). The block size limit on T is the model's to check.
#pragma once

#include <type_traits>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>

#include "../core/aligned_allocator.hpp"
#include "../core/concepts.hpp"
#include "../core/config.hpp"
#include "../core/error.hpp"
#include "../core/matrix.hpp"
#include "../core/precision.hpp"
#include "../kernels/attention.hpp"
#include "../kernels/bf16_attention.hpp"
#include "../kernels/simd.hpp"

#if SPRIG_HAS_OPENMP
#  include <omp.h>
#endif

namespace sprig {

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
      throw ArgumentError(
          detail::message("CausalSelfAttention: d_model ", d_model, " is not divisible by heads ", heads));
    d_head_ = d_model / heads;
    scale_ = static_cast<T>(1.0 / std::sqrt(static_cast<double>(d_head_)));
  }

  std::int64_t d_model() const noexcept { return d_model_; }
  std::int64_t heads() const noexcept { return heads_; }
  std::int64_t head_dim() const noexcept { return d_head_; }

  // Precision::bf16 (float only): Q, K, V, dOut, P and dS rounded to bf16 for the products,
  // every sum in float, P cached in bf16; on bf16_attention_path(), or `path` (tests,
  // benchmarks). Invalidates the cache (backward needs a forward after it). Throws
  // ArgumentError for bf16 on a double core or a path not available here.
  void set_precision(Precision p, Bf16AttentionPath path = bf16_attention_path()) {
    if (p == Precision::bf16 && !std::is_same_v<T, float>)
      throw ArgumentError("CausalSelfAttention::set_precision: bf16 needs a float core, this one is double");
    if (const std::string why = bf16_attention_unavailable_reason(path); p == Precision::bf16 && !why.empty())
      throw ArgumentError(detail::message("CausalSelfAttention::set_precision: the ", path_name(path),
                                          " path is not available: ", why));
    precision_ = p;
    path_ = path;
    cached_b_ = cached_t_ = 0;
  }
  Precision precision() const noexcept { return precision_; }
  // The bf16 path in use (meaningful in Precision::bf16).
  Bf16AttentionPath bf16_path() const noexcept { return path_; }

  // Out = the causal attention of Q, K, V over B sequences of T tokens (header comment), and
  // the probabilities cached for backward. Throws ArgumentError for B or T < 1, ShapeError
  // unless Q, K, V and Out are all d_model x (B*T), ArgumentError if Out overlaps an input.
  void forward(std::type_identity_t<ConstMatrixView<T>> Q, std::type_identity_t<ConstMatrixView<T>> K,
               std::type_identity_t<ConstMatrixView<T>> V, std::int64_t B, std::int64_t T_len,
               std::type_identity_t<MatrixView<T>> Out) {
    forward_of(Q, K, V, B, T_len, Out);
  }
  // The same with Q, K and V in bf16 (a model that keeps them in bf16), read as they are:
  // bitwise the float form's results for float inputs that hold these values (but subnormal
  // ones, which the float form's avx512_bf16 path flushes to zero). Needs Precision::bf16 (else
  // ArgumentError); throws as the float form.
  void forward(ConstMatrixView<bfloat16> Q, ConstMatrixView<bfloat16> K, ConstMatrixView<bfloat16> V, std::int64_t B,
               std::int64_t T_len, std::type_identity_t<MatrixView<T>> Out) requires std::is_same_v<T, float> {
    require_bf16("CausalSelfAttention::forward");
    forward_of(Q, K, V, B, T_len, Out);
  }

  // dQ, dK, dV (overwritten) from dOut, through the probabilities the last forward cached;
  // Q, K, V must be that forward's inputs. Throws ArgumentError before any forward,
  // ShapeError unless every operand is d_model x (B*T) of that forward, ArgumentError if an
  // output overlaps an input or another output.
  void backward(std::type_identity_t<ConstMatrixView<T>> Q, std::type_identity_t<ConstMatrixView<T>> K,
                std::type_identity_t<ConstMatrixView<T>> V, std::type_identity_t<ConstMatrixView<T>> dOut,
                std::type_identity_t<MatrixView<T>> dQ, std::type_identity_t<MatrixView<T>> dK,
                std::type_identity_t<MatrixView<T>> dV) {
    backward_of(Q, K, V, dOut, dQ, dK, dV);
  }
  // The same with Q, K and V in bf16, as forward's bf16 form.
  void backward(ConstMatrixView<bfloat16> Q, ConstMatrixView<bfloat16> K, ConstMatrixView<bfloat16> V,
                std::type_identity_t<ConstMatrixView<T>> dOut, std::type_identity_t<MatrixView<T>> dQ,
                std::type_identity_t<MatrixView<T>> dK,
                std::type_identity_t<MatrixView<T>> dV) requires std::is_same_v<T, float> {
    require_bf16("CausalSelfAttention::backward");
    backward_of(Q, K, V, dOut, dQ, dK, dV);
  }
  // The same into bf16 dQ, dK, dV: the float form's results rounded once (bitwise). dQ may be
  // Q itself, dK K and dV V (in place: each pair reads its blocks of Q, K, V before it writes
  // them, from a float tile in its scratch); otherwise as the float form, and an output that
  // overlaps its own input partly is an ArgumentError too.
  void backward(ConstMatrixView<bfloat16> Q, ConstMatrixView<bfloat16> K, ConstMatrixView<bfloat16> V,
                std::type_identity_t<ConstMatrixView<T>> dOut, MatrixView<bfloat16> dQ, MatrixView<bfloat16> dK,
                MatrixView<bfloat16> dV) requires std::is_same_v<T, float> {
    require_bf16("CausalSelfAttention::backward");
    backward_of(Q, K, V, dOut, dQ, dK, dV);
  }

  // Bytes of the probability cache and the scratch (allocation capacity).
  std::int64_t memory_bytes() const noexcept {
    return static_cast<std::int64_t>((probs_.capacity() + scratch_.capacity()) * sizeof(T) +
                                     (probs16_.capacity() + scratch16_.capacity()) * sizeof(bfloat16));
  }

private:
  void require_bf16(const char* fn) const {
    if (!bf16())
      throw ArgumentError(detail::message(fn, ": bf16 Q, K and V need the core in Precision::bf16 (set_precision)"));
  }

  // forward for float Q, K, V (QT = T) or bf16 ones (the core then in bf16: checked by the caller).
  template <class QT>
  void forward_of(ConstMatrixView<QT> Q, ConstMatrixView<QT> K, ConstMatrixView<QT> V, std::int64_t B,
                  std::int64_t T_len, MatrixView<T> Out) {
    constexpr const char* fn = "CausalSelfAttention::forward";
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
    if (fast_bf16())
      run_pairs([&](std::int64_t pair, T* scratch) { forward_pair_dp(pair, Q, K, V, Out, scratch); });
    else
      run_pairs([&](std::int64_t pair, T* scratch) { forward_pair(pair, Q, K, V, Out, scratch); });
    cached_b_ = B;
    cached_t_ = T_len;
  }

  // Where one pair writes its dQ_h, dK_h, dV_h: row d of each at ptr + d * stride.
  struct PairOutputs {
    T* q;
    T* k;
    T* v;
    std::int64_t q_stride, k_stride, v_stride;
  };

  // backward for float or bf16 Q, K, V (as forward_of), into float or bf16 (OT) outputs; bf16
  // ones through a float tile per thread, rounded once the pair is done.
  template <class QT, class OT>
  void backward_of(ConstMatrixView<QT> Q, ConstMatrixView<QT> K, ConstMatrixView<QT> V, ConstMatrixView<T> dOut,
                   MatrixView<OT> dQ, MatrixView<OT> dK, MatrixView<OT> dV) {
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
    const ConstMatrixView<QT> inputs[] = {Q, K, V};
    const char* input_names[] = {"Q", "K", "V"};
    const MatrixView<OT> outputs[] = {dQ, dK, dV};
    const char* output_names[] = {"dQ", "dK", "dV"};
    for (int o = 0; o < 3; ++o) {
      for (int i = 0; i < 3; ++i) {
        constexpr bool narrow = !std::is_same_v<OT, T>;  // in place over its own input allowed
        if (narrow && o == i && static_cast<const void*>(outputs[o].data()) == inputs[i].data() &&
            outputs[o].stride() == inputs[i].stride())
          continue;
        detail::check_no_overlap(fn, output_names[o], outputs[o], input_names[i], inputs[i]);
      }
      detail::check_no_overlap(fn, output_names[o], outputs[o], "dOut", dOut);
      for (int p = o + 1; p < 3; ++p)
        detail::check_no_overlap(fn, output_names[o], outputs[o], output_names[p], outputs[p]);
    }
    run_pairs([&](std::int64_t pair, T* scratch) {
      const std::int64_t r0 = (pair % heads_) * d_head_, c0 = pair / heads_ * t_;
      PairOutputs out{};
      if constexpr (std::is_same_v<OT, T>) {
        out = {dQ.row(r0) + c0, dK.row(r0) + c0, dV.row(r0) + c0, dQ.stride(), dK.stride(), dV.stride()};
      } else {
        T* tile = scratch + out_tile_at_;
        const std::int64_t n = d_head_ * head_stride_;
        out = {tile, tile + n, tile + 2 * n, head_stride_, head_stride_, head_stride_};
      }
      if (fast_bf16())
        backward_pair_dp(pair, Q, K, V, dOut, out, scratch);
      else
        backward_pair(pair, Q, K, V, dOut, out, scratch);
      if constexpr (!std::is_same_v<OT, T>) {
        const T* rows[] = {out.q, out.k, out.v};
        for (int o = 0; o < 3; ++o)
          for (std::int64_t d = 0; d < d_head_; ++d)
            to_bfloat16(std::span<const float>(rows[o] + d * head_stride_, static_cast<std::size_t>(t_)),
                        std::span<bfloat16>(outputs[o].row(r0 + d) + c0, static_cast<std::size_t>(t_)));
      }
    });
  }

  template <class View>
  void check_shape(const char* fn, const char* name, const View& X, std::int64_t B, std::int64_t T_len) const {
    if (X.rows() != d_model_ || X.cols() != B * T_len)
      throw ShapeError(detail::message(fn, ": ", name, " is ", X.rows(), "x", X.cols(), ", expected d_model x (B*T) = ",
                                       d_model_, "x", B * T_len, " (B ", B, ", T ", T_len, ")"));
  }

  // The triangle of scores of one (sequence, head) at `base`, for T_len keys.
  detail::AttentionBlockTriangle<T> triangle_at(T* base, std::int64_t T_len) const noexcept {
    return {base, T_len, static_cast<std::int64_t>(detail::simd_width<T>())};
  }
  // Entries of one triangle of T keys (with the padding of the block layout).
  std::int64_t triangle(std::int64_t T_len) const noexcept { return triangle_at(nullptr, T_len).size(); }

  static int max_threads() noexcept {
#if SPRIG_HAS_OPENMP
    return omp_in_parallel() ? 1 : omp_get_max_threads();
#else
    return 1;
#endif
  }

  bool bf16() const noexcept { return precision_ == Precision::bf16; }
  bool fast_bf16() const noexcept { return bf16() && path_ == Bf16AttentionPath::avx512_bf16; }

  // Sizes the cache for B sequences of T_len tokens (allocating only when it grows) and sets
  // the scratch's per-thread stride.
  void prepare(std::int64_t B, std::int64_t T_len) {
    t_ = T_len;
    pairs_ = B * heads_;
    if (fast_bf16()) return prepare_dp();
    const auto probs = static_cast<std::size_t>(pairs_ * triangle(T_len));
    if (bf16()) {  // the portable bf16 path: P cached in bf16, a second float triangle for it in backward
      if (probs16_.size() < probs) probs16_.resize(probs);
    } else if (probs_.size() < probs) {
      probs_.resize(probs);
    }
    // Per thread: the head copies (below), one triangle (dS) and two vectors of the padded
    // length, in whole 64-byte lines (no false sharing). A copy's rows are T rounded up to a
    // line (a whole number of SIMD registers), plus a line when that is a multiple of 512
    // bytes: d_head rows at a stride of a large power of two share a few L1 sets (as at the
    // model's 4 KB stride of B*T = 1024 floats, read in place; docs/design.md, "Measurements
    // behind the code").
    constexpr std::int64_t line = 64 / static_cast<std::int64_t>(sizeof(T));
    static_assert(line % static_cast<std::int64_t>(detail::simd_width<T>()) == 0,
                  "a line holds whole registers, so rows of T rounded up to a line hold the padded queries");
    head_stride_ = (T_len + line - 1) / line * line;
    if (head_stride_ * static_cast<std::int64_t>(sizeof(T)) % 512 == 0) head_stride_ += line;
    const std::int64_t tri = (triangle(T_len) + line - 1) / line * line;
    const std::int64_t vec = (T_len + line - 1) / line * line;
    triangle_at_ = 4 * d_head_ * head_stride_;
    queries_at_ = triangle_at_ + tri;
    const std::int64_t w = static_cast<std::int64_t>(detail::simd_width<T>());
    vector_at_ = queries_at_ + (detail::AttentionQueryTriangle<T>{nullptr, T_len, w}.size() + line - 1) / line * line;
    sums_at_ = vector_at_ + vec;
    probs_at_ = sums_at_ + vec;
    out_tile_at_ = probs_at_ + (bf16() ? tri : 0);  // bf16: the float tile of a pair's dQ, dK, dV
    scratch_stride_ = out_tile_at_ + (bf16() ? 3 * d_head_ * head_stride_ : 0);
  }

  // The AVX512-BF16 path's scratch (kernels/bf16_attention.hpp's layouts): per thread, float:
  // a triangle of group width 32 and two vectors; bf16: three head copies in d pairs, three
  // natural ones, and a row triangle, a key-pair triangle of dS (P's pairs in forward) and the
  // query pairs of P, then of dS (backward).
  void prepare_dp() {
    const std::int64_t t = t_, tri = detail::bf16_attention_triangle<T>(nullptr, t).size();
    const auto probs = static_cast<std::size_t>(pairs_ * tri);
    if (probs16_.size() < probs) probs16_.resize(probs);
    constexpr std::int64_t line = 32;  // bf16 in a 64-byte line, and the triangles' group width
    const std::int64_t tp = (t + line - 1) / line * line;
    head_stride_ = tp % 256 == 0 ? tp + line : tp;  // no 512-byte row stride (L1 sets)
    pair_stride_ = 2 * head_stride_;
    const std::int64_t pair_copy = (d_head_ + 1) / 2 * pair_stride_, natural = d_head_ * head_stride_;
    const std::int64_t tri_lines = (tri + line - 1) / line * line;
    const std::int64_t pair_tri = (detail::Bf16PairTriangle{nullptr, t}.size() + line - 1) / line * line;
    const std::int64_t query_pairs = detail::Bf16QueryPairs{nullptr, t}.size();  // whole lines
    scratch16_stride_ = 3 * pair_copy + 3 * natural + tri_lines + pair_tri + query_pairs;
    natural_at_ = 3 * pair_copy;
    row_tri_at_ = natural_at_ + 3 * natural;
    pair_tri_at_ = row_tri_at_ + tri_lines;
    query_pairs_at_ = pair_tri_at_ + pair_tri;
    const std::int64_t vec = tp;
    triangle_at_ = 0;
    vector_at_ = tri_lines;  // float lines are 16 entries: tri_lines (a multiple of 32) keeps them whole
    sums_at_ = vector_at_ + vec;
    out_tile_at_ = sums_at_ + vec;  // a pair's dQ, dK, dV in float (rows of head_stride_ floats)
    scratch_stride_ = out_tile_at_ + 3 * d_head_ * head_stride_;
  }

  // dst[d * head_stride_ + j] = X(r0 + d, c0 + j) for d < d_head, j < t_, and 0 for j in
  // [t_, head_stride_) (the kernels read the padding).
  // (X in bf16: widened.)
  template <class XT>
  void copy_head(ConstMatrixView<XT> X, std::int64_t r0, std::int64_t c0, T* dst) const noexcept {
    for (std::int64_t d = 0; d < d_head_; ++d) {
      T* row = dst + d * head_stride_;
      const XT* x = X.row(r0 + d) + c0;
      if constexpr (std::is_same_v<XT, T>)
        std::copy_n(x, t_, row);
      else
        to_float(std::span<const bfloat16>(x, static_cast<std::size_t>(t_)),
                 std::span<float>(row, static_cast<std::size_t>(t_)));
      std::fill(row + t_, row + head_stride_, T(0));
    }
  }

  // Calls fn(pair, scratch of the running thread) for every (sequence, head) pair, the
  // scratch grown first if the thread count has.
  template <class Fn>
  void run_pairs(Fn&& fn) {
    const int threads = max_threads();
    const std::int64_t stride = scratch_stride_;
    const auto needed = static_cast<std::size_t>(stride * threads);
    if (scratch_.size() < needed) scratch_.resize(needed);
    if (fast_bf16() && scratch16_.size() < static_cast<std::size_t>(scratch16_stride_ * threads))
      scratch16_.resize(static_cast<std::size_t>(scratch16_stride_ * threads));
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
  // another at head_stride_, then a triangle, then two vectors.
  template <class QT>
  void forward_pair(std::int64_t pair, ConstMatrixView<QT> Q, ConstMatrixView<QT> K, ConstMatrixView<QT> V,
                    MatrixView<T> Out, T* scratch) {
    const std::int64_t t = t_, dh = d_head_, hs = head_stride_, b = pair / heads_, r0 = (pair % heads_) * dh,
                       c0 = b * t;
    const std::int64_t n = triangle(t);
    const auto P = triangle_at(bf16() ? scratch + triangle_at_ : probs_.data() + pair * n, t);
    T* q_h = scratch;
    T* k_h = q_h + dh * hs;
    T* v_h = k_h + dh * hs;
    copy_head(Q, r0, c0, q_h);
    copy_head(K, r0, c0, k_h);
    copy_head(V, r0, c0, v_h);
    if constexpr (std::is_same_v<T, float>)
      if (bf16()) detail::round_to_bfloat16(q_h, 3 * dh * hs);
    // raw scores P(k, q) = K_h[:, k] . Q_h[:, q], then the causal softmax of every query
    detail::attention_scores(k_h, q_h, hs, dh, P);
    detail::attention_softmax(P, scale_, scratch + vector_at_, scratch + sums_at_);
    if constexpr (std::is_same_v<T, float>)
      if (bf16()) {  // P rounded for the product and kept in bf16 (exact: already rounded)
        detail::round_to_bfloat16(P.base, n);
        to_bfloat16(std::span<const float>(P.base, n), std::span<bfloat16>(probs16_.data() + pair * n, n));
      }
    // Out_h[d, q] = sum_{k <= q} V_h[d, k] P(k, q)
    detail::attention_weighted_sum(v_h, hs, P, dh, Out.row(r0) + c0, Out.stride());
  }

  template <class QT>
  void backward_pair(std::int64_t pair, ConstMatrixView<QT> Q, ConstMatrixView<QT> K, ConstMatrixView<QT> V,
                     ConstMatrixView<T> dOut, const PairOutputs& out, T* scratch) {
    const std::int64_t t = t_, dh = d_head_, hs = head_stride_, b = pair / heads_, r0 = (pair % heads_) * dh,
                       c0 = b * t;
    const std::int64_t n = triangle(t);
    const auto P = triangle_at(bf16() ? scratch + probs_at_ : probs_.data() + pair * n, t);
    const auto G = triangle_at(scratch + triangle_at_, t);  // dP, then s * dS
    T* q_h = scratch;
    T* k_h = q_h + dh * hs;
    T* v_h = k_h + dh * hs;
    T* g_h = v_h + dh * hs;
    copy_head(Q, r0, c0, q_h);
    copy_head(K, r0, c0, k_h);
    copy_head(V, r0, c0, v_h);
    copy_head(dOut, r0, c0, g_h);
    if constexpr (std::is_same_v<T, float>)
      if (bf16()) {
        to_float(std::span<const bfloat16>(probs16_.data() + pair * n, n), std::span<float>(P.base, n));
        detail::round_to_bfloat16(q_h, 4 * dh * hs);
      }
    // dV_h[d, k] = sum_{q >= k} P(k, q) dOut_h[d, q], over P's query-major copy
    const detail::AttentionQueryTriangle<T> PT{scratch + queries_at_, t, P.w};
    detail::attention_to_queries(P, PT);
    detail::attention_query_sum(PT, g_h, hs, dh, out.v, out.v_stride);
    // dP(k, q) = V_h[:, k] . dOut_h[:, q], then s * dS
    detail::attention_scores(v_h, g_h, hs, dh, G);
    detail::attention_softmax_backward(P, G, scale_, scratch + vector_at_);
    if constexpr (std::is_same_v<T, float>)
      if (bf16()) detail::round_to_bfloat16(G.base, n);
    // dQ_h[d, q] = sum_{k <= q} K_h[d, k] (s dS)(k, q);  dK_h[d, k] = sum_{q >= k} (s dS)(k, q) Q_h[d, q]
    detail::attention_weighted_sum(k_h, hs, G, dh, out.q, out.q_stride);
    detail::attention_to_queries(G, PT);
    detail::attention_query_sum(PT, q_h, hs, dh, out.k, out.k_stride);
  }

  // The AVX512-BF16 path (kernels/bf16_attention.hpp): copies narrowed into the layouts each
  // product reads, scores and softmax in float, P kept as bf16 rows (and its key pairs for Out).
  bfloat16* scratch16_of(const T* scratch) noexcept {
    return scratch16_.data() + (scratch - scratch_.data()) / scratch_stride_ * scratch16_stride_;
  }
  // dst[(d / 2) pair_stride_ + 2 j + d % 2] = X(r0 + d, c0 + j), zero for j >= t_ (and an odd
  // d_head's last high half); X float (rounded) or bf16 (copied).
  template <class XT>
  void copy_pairs(ConstMatrixView<XT> X, std::int64_t r0, std::int64_t c0, bfloat16* dst) const noexcept {
#if SPRIG_BF16_GEMM_X86
    if constexpr (std::is_same_v<T, float>)
      for (std::int64_t d = 0; d < d_head_; d += 2) {
        bfloat16* row = dst + d / 2 * pair_stride_;
        const XT* hi = d + 1 < d_head_ ? X.row(r0 + d + 1) + c0 : nullptr;
        if constexpr (std::is_same_v<XT, bfloat16>)
          detail::interleave_bfloat16_pairs_avx512(X.row(r0 + d) + c0, hi, t_, row);
        else
          detail::to_bfloat16_pairs_avx512(X.row(r0 + d) + c0, hi, t_, row);
        std::memset(static_cast<void*>(row + 2 * t_), 0, sizeof(bfloat16) * (pair_stride_ - 2 * t_));
      }
#else
    (void)X, (void)r0, (void)c0, (void)dst;
#endif
  }
  // dst[d head_stride_ + j] = X(r0 + d, c0 + j), zero for j >= t_; X float (rounded) or bf16.
  template <class XT>
  void copy_natural(ConstMatrixView<XT> X, std::int64_t r0, std::int64_t c0, bfloat16* dst) const noexcept {
#if SPRIG_BF16_GEMM_X86
    if constexpr (std::is_same_v<T, float>)
      for (std::int64_t d = 0; d < d_head_; ++d) {
        bfloat16* row = dst + d * head_stride_;
        if constexpr (std::is_same_v<XT, bfloat16>)
          std::memcpy(static_cast<void*>(row), X.row(r0 + d) + c0, sizeof(bfloat16) * t_);
        else
          detail::to_bfloat16_avx512(X.row(r0 + d) + c0, t_, row);
        std::memset(static_cast<void*>(row + t_), 0, sizeof(bfloat16) * (head_stride_ - t_));
      }
#else
    (void)X, (void)r0, (void)c0, (void)dst;
#endif
  }

  template <class QT>
  void forward_pair_dp(std::int64_t pair, ConstMatrixView<QT> Q, ConstMatrixView<QT> K, ConstMatrixView<QT> V,
                       MatrixView<T> Out, T* scratch) {
#if SPRIG_BF16_GEMM_X86
    if constexpr (std::is_same_v<T, float>) {
      const std::int64_t t = t_, dh = d_head_, b = pair / heads_, r0 = (pair % heads_) * dh, c0 = b * t;
      const auto S = detail::bf16_attention_triangle(scratch + triangle_at_, t);
      bfloat16* s16 = scratch16_of(scratch);
      bfloat16* q_p = s16;
      bfloat16* k_p = q_p + (dh + 1) / 2 * pair_stride_;
      bfloat16* v_n = s16 + natural_at_;
      const detail::Bf16PairTriangle P_pairs{s16 + pair_tri_at_, t};
      copy_pairs(Q, r0, c0, q_p);
      copy_pairs(K, r0, c0, k_p);
      copy_natural(V, r0, c0, v_n);
      detail::bf16_attention_scores_avx512(k_p, q_p, pair_stride_, dh, S);
      detail::attention_softmax(S, scale_, scratch + vector_at_, scratch + sums_at_);
      const std::int64_t n = S.size();
      detail::to_bfloat16_avx512(S.base, n, probs16_.data() + pair * n);
      detail::to_bfloat16_key_pairs_avx512(S, P_pairs);
      detail::bf16_attention_pair_sum_avx512(v_n, head_stride_, P_pairs, dh, Out.row(r0) + c0, Out.stride());
    }
#else
    (void)pair, (void)Q, (void)K, (void)V, (void)Out, (void)scratch;
#endif
  }

  template <class QT>
  void backward_pair_dp(std::int64_t pair, ConstMatrixView<QT> Q, ConstMatrixView<QT> K, ConstMatrixView<QT> V,
                        ConstMatrixView<T> dOut, const PairOutputs& out, T* scratch) {
#if SPRIG_BF16_GEMM_X86
    if constexpr (std::is_same_v<T, float>) {
      const std::int64_t t = t_, dh = d_head_, hs = head_stride_, b = pair / heads_, r0 = (pair % heads_) * dh,
                         c0 = b * t;
      const auto G = detail::bf16_attention_triangle(scratch + triangle_at_, t);  // dP, then s * dS
      const std::int64_t n = G.size();
      const auto P = detail::bf16_attention_triangle(probs16_.data() + pair * n, t);
      bfloat16* s16 = scratch16_of(scratch);
      bfloat16* v_p = s16;
      bfloat16* g_p = v_p + (dh + 1) / 2 * pair_stride_;
      bfloat16* g_n = s16 + natural_at_;
      bfloat16* k_n = g_n + dh * hs;
      bfloat16* q_n = k_n + dh * hs;
      const auto dS_rows = detail::bf16_attention_triangle(s16 + row_tri_at_, t);
      const detail::Bf16PairTriangle dS_pairs{s16 + pair_tri_at_, t};
      const detail::Bf16QueryPairs query_pairs{s16 + query_pairs_at_, t};  // P's, then dS's
      copy_natural(dOut, r0, c0, g_n);
      // dV_h[d, k] = sum_{q >= k} P(k, q) dOut_h[d, q]
      detail::to_query_pairs_avx512(P, query_pairs);
      detail::bf16_attention_query_pair_sum_avx512(g_n, hs, query_pairs, dh, out.v, out.v_stride);
      // dP(k, q) = V_h[:, k] . dOut_h[:, q], then s * dS, in bf16 rows and key pairs
      copy_pairs(V, r0, c0, v_p);
      copy_pairs(dOut, r0, c0, g_p);
      detail::bf16_attention_scores_avx512(v_p, g_p, pair_stride_, dh, G);
      detail::attention_softmax_backward(P, G, scale_, scratch + vector_at_);
      detail::to_bfloat16_avx512(G.base, n, dS_rows.base);
      detail::to_bfloat16_key_pairs_avx512(G, dS_pairs);
      copy_natural(K, r0, c0, k_n);
      copy_natural(Q, r0, c0, q_n);
      detail::bf16_attention_pair_sum_avx512(k_n, hs, dS_pairs, dh, out.q, out.q_stride);
      detail::to_query_pairs_avx512(dS_rows, query_pairs);
      detail::bf16_attention_query_pair_sum_avx512(q_n, hs, query_pairs, dh, out.k, out.k_stride);
    }
#else
    (void)pair, (void)Q, (void)K, (void)V, (void)dOut, (void)out, (void)scratch;
#endif
  }

  std::int64_t d_model_ = 0, heads_ = 0, d_head_ = 0;
  T scale_ = T(1);
  Precision precision_ = Precision::fp32;
  Bf16AttentionPath path_ = Bf16AttentionPath::portable;
  // bf16: the portable path's float copy of P in backward; the AVX512-BF16 path's layout
  std::int64_t probs_at_ = 0, pair_stride_ = 0, scratch16_stride_ = 0, natural_at_ = 0, row_tri_at_ = 0,
               pair_tri_at_ = 0, query_pairs_at_ = 0;
  AlignedVector<bfloat16> probs16_, scratch16_;  // bf16: P (rows) and the per-thread bf16 scratch
  std::int64_t t_ = 0, pairs_ = 0, scratch_stride_ = 0;
  // the head copies' row stride, and where a thread's scratch holds the triangle and the vectors
  std::int64_t head_stride_ = 0, triangle_at_ = 0, queries_at_ = 0, vector_at_ = 0, sums_at_ = 0, out_tile_at_ = 0;
  std::int64_t cached_b_ = 0, cached_t_ = 0;  // the shape of the last forward (0: none yet)
  AlignedVector<T> probs_, scratch_;
};

}  // namespace sprig
