// sprig/nn/gpt_block.hpp — detail::GPTBlock<T, Projection>: one transformer block of
// nn/gpt.hpp's GPT, its layers and the buffers its forward and backward keep (GPT's
// "Buffers" says which hold what when), and the calls that route a projection's operands
// (float or bf16) to it. GPT alone builds and runs it.
#pragma once

#include <type_traits>

#include <algorithm>
#include <cstdint>
#include <utility>
#include <variant>

#include "../core/bfloat16.hpp"
#include "../core/concepts.hpp"
#include "../core/error.hpp"
#include "../core/matrix.hpp"
#include "../kernels/row_epilogue.hpp"
#include "attention.hpp"
#include "bf16_scratch.hpp"
#include "gelu.hpp"
#include "gpt_config.hpp"
#include "layer_norm.hpp"
#include "projection_input.hpp"

namespace sprig::detail {

template <Value T, class Projection>
struct GPTBlock {
  GPTBlock(std::int64_t d, std::int64_t heads, Projection qkv_, Projection proj_, Projection fc_, Projection fc_proj_)
      : ln1(d),
        ln2(d),
        attn(d, heads),
        qkv(std::move(qkv_)),
        proj(std::move(proj_)),
        fc(std::move(fc_)),
        fc_proj(std::move(fc_proj_)) {}
  LayerNorm<T> ln1, ln2;
  CausalSelfAttention<T> attn;
  Projection qkv, proj, fc, fc_proj;
  // activations of the last forward (fc_out holds gelu' of fc's output); after backward,
  // qkv_out and fc_out hold a sparse qkv's and fc's dY instead (GPT::backward); the
  // projections' inputs in bf16 where the projection runs in bf16
  ProjectionInput<T> ln1_out, att_out, ln2_out, gelu_out;
  Matrix<T> qkv_out, x_mid, fc_out, x_out;
  // with GPTOptions::bf16_activations, qkv_out's and fc_out's roles in bf16 (the float ones
  // then empty): Q, K, V, then a sparse qkv's dY; gelu', then a sparse fc's dY
  Matrix<bfloat16> qkv16, fc16;
  // whether qkv16, fc16 and the bf16 residual gradients are in use, and whether the block
  // keeps proj's and fc_proj's dY after backward (GPT::shape_buffers)
  bool qkv_bf16 = false, gelu_bf16 = false, grad_bf16 = false, keep_grads = true;

  // fn(Q, K, V's rows: qkv_out, or qkv16 in bf16).
  template <class Fn>
  void with_qkv(Fn&& fn) const {
    if constexpr (std::is_same_v<T, float>)
      if (qkv_bf16) return fn(qkv16.view());
    fn(qkv_out.view());
  }
  // A projection's dY where it is kept in bf16 (qkv16, fc16, kept_dy16), else an empty view.
  ConstMatrixView<bfloat16> dy16(GPTProjection which) const noexcept {
    if (which == GPTProjection::qkv && qkv_bf16) return qkv16.view();
    if (which == GPTProjection::fc && gelu_bf16) return fc16.view();
    if ((which == GPTProjection::proj || which == GPTProjection::fc_proj) && grad_bf16 && keep_grads)
      return kept_dy16(which);
    return {};
  }
  // Where a sparse proj's or fc_proj's bf16 dY is rounded to: the block's (kept for DST), or
  // without keep_grads the model's `shared` one.
  MatrixView<bfloat16> g16(GPTProjection which, Matrix<bfloat16>& shared) noexcept {
    return keep_grads ? kept_dy16(which) : shared.view();
  }
  // A sparse proj's and fc_proj's bf16 dY, kept for DST, live in x_out's memory: dead from the
  // start of this block's backward (the next block's LN1, or LN_f, has read it) until the next
  // forward writes it, the span in which the dY are kept (GPT's "Sparse layers"). fc_proj's in
  // the first half of each float row, proj's in the second (a row of x_out holds 2 stride()
  // bf16), so they take no memory of their own (19.7 MB at mini40m).
  ConstMatrixView<bfloat16> kept_dy16(GPTProjection which) const noexcept {
    const std::int64_t s = x_out.stride();
    const auto* base = reinterpret_cast<const bfloat16*>(x_out.data());
    return {base + (which == GPTProjection::proj ? s : 0), x_out.rows(), x_out.cols(), 2 * s};
  }
  MatrixView<bfloat16> kept_dy16(GPTProjection which) noexcept {
    const ConstMatrixView<bfloat16> v = std::as_const(*this).kept_dy16(which);
    return {const_cast<bfloat16*>(v.data()), v.rows(), v.cols(), v.stride()};
  }
  // The residual gradients after the FFN (fc_proj's dY) and after attention (proj's dY): with
  // grad_bf16 or without keep_grads the model's `shared` one, updated in place (residual_add
  // allows it; each value is dead when the next overwrites it). Else they are kept, in the
  // memory of the activations they are the gradients of, each dead when its gradient is
  // written: proj's dY in x_mid (LN2's backward has read it), fc_proj's in x_out (the next
  // block's LN1 has read it), and the last block's fc_proj's, which LN_f's backward writes
  // from x_out, in the block's own g_out.
  MatrixView<T> g_out_in(Matrix<T>& shared) noexcept { return kept_grad(GPTProjection::fc_proj, shared).view(); }
  MatrixView<T> g_mid_in(Matrix<T>& shared) noexcept { return kept_grad(GPTProjection::proj, shared).view(); }
  // Whether the block keeps proj's and fc_proj's dY in float (kept_grad), not in bf16
  // (kept_dy16) or not at all.
  bool keeps_float_grads() const noexcept { return keep_grads && !grad_bf16; }
  // Where proj's (x_mid) or fc_proj's (x_out or g_out) dY is: as g_mid_in / g_out_in.
  Matrix<T>& kept_grad(GPTProjection which, Matrix<T>& shared) noexcept {
    if (!keeps_float_grads()) return shared;
    if (which == GPTProjection::proj) return x_mid;
    return g_out.size() == 0 ? x_out : g_out;
  }
  // g_out in float for the last block (last) where the dY are kept in float; none otherwise.
  void shape_residual_grads(std::int64_t d, std::int64_t n, std::int64_t stride, bool last) {
    keeps_float_grads() && last ? reshape(g_out, d, n, stride) : void(g_out = Matrix<T>());
  }
  // Bytes of the block's buffers and its attention core's cache.
  std::int64_t buffer_bytes() const noexcept {
    std::int64_t bytes = attn.memory_bytes();
    for (const Matrix<T>* m : {&qkv_out, &x_mid, &fc_out, &x_out, &g_out}) bytes += m->memory_bytes();
    for (const ProjectionInput<T>* m : {&ln1_out, &att_out, &ln2_out, &gelu_out}) bytes += m->memory_bytes();
    for (const Matrix<bfloat16>* m : {&qkv16, &fc16}) bytes += m->memory_bytes();
    return bytes;
  }
  // Shapes m to rows x cols at `stride` unless it has that shape (then keeps its contents).
  template <class E>
  static void reshape(Matrix<E>& m, std::int64_t rows, std::int64_t cols, std::int64_t stride) {
    if (m.rows() != rows || m.cols() != cols) m.resize(rows, cols, stride);
  }
  // Shapes `wide` (at `stride`) or, for bf16, `narrow` to rows x cols, and releases the other.
  static void reshape_one_of(Matrix<T>& wide, Matrix<bfloat16>& narrow, bool bf16, std::int64_t rows, std::int64_t cols,
                             std::int64_t stride) {
    if (bf16) {
      wide = Matrix<T>();
      reshape(narrow, rows, cols, cols);
    } else {
      narrow = Matrix<bfloat16>();
      reshape(wide, rows, cols, stride);
    }
  }
  // the last block's residual-stream gradient at x_out (fc_proj's dY) where the block keeps
  // its dY in float (kept_grad); else empty
  Matrix<T> g_out;

  Projection& projection(GPTProjection which) noexcept {
    return const_cast<Projection&>(std::as_const(*this).projection(which));
  }
  const Projection& projection(GPTProjection which) const noexcept {
    switch (which) {
      case GPTProjection::qkv: return qkv;
      case GPTProjection::proj: return proj;
      case GPTProjection::fc: return fc;
      default: return fc_proj;
    }
  }
  // The X a projection sees.
  const ProjectionInput<T>& input(GPTProjection which) const noexcept {
    switch (which) {
      case GPTProjection::qkv: return ln1_out;
      case GPTProjection::proj: return att_out;
      case GPTProjection::fc: return ln2_out;
      default: return gelu_out;
    }
  }
  // Projection is std::variant<Linear<T>, the sparse layer>.
  static bool is_sparse(const Projection& p) noexcept { return p.index() == 1; }

  static void run_forward(Projection& p, const ProjectionInput<T>& X, MatrixView<T> Y) {
    X.visit([&](auto x) { std::visit([&](auto& layer) { layer.forward(x, Y); }, p); });
  }
  // p's forward straight into a bf16 Y where the layer writes one (a sparse layer with a bf16
  // X): true; else false, and nothing is done.
  static bool run_forward_narrow(Projection& p, const ProjectionInput<T>& X, MatrixView<bfloat16> Y) {
    bool done = false;
    X.visit([&](auto x) {
      std::visit(
          [&](auto& layer) {
            if constexpr (requires { layer.forward(x, Y); }) {
              layer.forward(x, Y);
              done = true;
            }
          },
          p);
    });
    return done;
  }
  static void run_backward(Projection& p, const ProjectionInput<T>& X, ConstMatrixView<T> dY, MatrixView<T> dX,
                           FusedActivation x_activation = FusedActivation::none, ConstMatrixView<T> x_derivative = {}) {
    X.visit(
        [&](auto x) { std::visit([&](auto& layer) { layer.backward(x, dY, dX, x_activation, x_derivative); }, p); });
  }
  // p's backward from the float dY g; where keep16 and p is sparse, g is rounded into g16 first
  // and the layer reads that (it keeps the dY for DST; p's X must then be bf16).
  static void backward_from(Projection& p, const ProjectionInput<T>& X, ConstMatrixView<T> g, bool keep16,
                            MatrixView<bfloat16> g16, MatrixView<T> dX) {
    if constexpr (std::is_same_v<T, float>)
      if (keep16 && is_sparse(p)) {
        detail::narrow_rows(g, g16);
        return run_backward(p, X, ConstMatrixView<bfloat16>(g16), dX);
      }
    run_backward(p, X, g, dX);
  }
  // backward_from with keep16 where p's X is a GELU's output whose derivative D is kept in
  // bf16: dX = bf16(D * W^T dY) written over D in the product's store, where p's layer does
  // that (a sparse layer, unstructured or in blocks, with a bf16 X): true; else false, and
  // nothing is done.
  static bool backward_through_gelu(Projection& p, const ProjectionInput<T>& X, ConstMatrixView<T> g,
                                    MatrixView<bfloat16> g16, Matrix<bfloat16>& D) {
    bool done = false;
    if constexpr (std::is_same_v<T, float>)
      X.visit([&](auto x) {
        std::visit(
            [&](auto& layer) {
              const ConstMatrixView<bfloat16> dy = g16, d = D.view();
              if constexpr (requires { layer.backward(x, dy, D.view(), d); }) {
                detail::narrow_rows(g, g16);
                layer.backward(x, dy, D.view(), d);
                done = true;
              }
            },
            p);
      });
    return done;
  }
  // qkv's forward into Q, K, V: into qkv16 where qkv_bf16 (through `spare`, a float [3 d_model
  // x N], where the layer writes no bf16 Y), else into qkv_out.
  void forward_qkv(MatrixView<T> spare) {
    if (!qkv_bf16 || !run_forward_narrow(qkv, ln1_out, qkv16.view())) {
      run_forward(qkv, ln1_out, qkv_bf16 ? spare : qkv_out.view());
      if constexpr (std::is_same_v<T, float>)
        if (qkv_bf16) detail::narrow_rows(ConstMatrixView<T>(spare), qkv16.view());
    }
  }
  // The attention core's forward from Q, K, V into att_out (through `scratch`, a float
  // [d_model x N] dead in forward, where att_out is kept in bf16).
  void forward_attention(std::int64_t batch, std::int64_t seq_len, MatrixView<T> scratch) {
    att_out.write(
        [&](MatrixView<T> y) {
          with_qkv([&](auto q) {
            const std::int64_t d = y.rows(), n = q.cols();
            attn.forward(q.block(0, 0, d, n), q.block(d, 0, d, n), q.block(2 * d, 0, d, n), batch, seq_len, y);
          });
        },
        scratch);
  }
  // With gelu_bf16, fc's forward and the GELU: fc's float output through `spare` (a float
  // [d_ff x w], any w >= 1) in chunks of w columns (a product's columns are independent, so
  // the same bits as in one), the GELU output rounded into gelu_out and gelu' into fc16; each
  // chunk's product and GELU timed into clock's fc_forward and gelu_forward (where not null).
  void forward_ffn_in_chunks(const GELU<T>& gelu, MatrixView<T> spare, GPTPhaseClock* clock) {
    if constexpr (std::is_same_v<T, float>) {
      const std::int64_t f = fc16.rows(), n = fc16.cols(), w = spare.cols();
      for (std::int64_t c = 0; c < n; c += w) {
        const std::int64_t cols = std::min(w, n - c);
        const MatrixView<T> z = spare.block(0, 0, f, cols);
        timed(clock, GPTPhase::fc_forward, [&] {
          ln2_out.visit(
              [&](auto x) { std::visit([&](auto& layer) { layer.forward(x.block(0, c, x.rows(), cols), z); }, fc); });
        });
        timed(clock, GPTPhase::gelu_forward, [&] {
          gelu.forward_keep_derivative(z, gelu_out.narrow_buffer().block(0, c, f, cols),
                                       fc16.view().block(0, c, f, cols));
        });
      }
    }
  }
  // Whether backward_ffn_bf16 needs a float [d_ff x N] spare: unless fc_proj's layer applies
  // gelu' in its store (backward_through_gelu).
  bool ffn_needs_full_spare() const noexcept {
    bool fused = false;
    std::visit(
        [&](const auto& layer) {
          fused =
              requires(std::remove_cvref_t<decltype(layer)> & l, ConstMatrixView<bfloat16> c, MatrixView<bfloat16> m) {
            l.backward(c, c, m, c);
          };
        },
        fc_proj);
    return !(gelu_bf16 && grad_bf16 && is_sparse(fc) && fused);
  }
  // With gelu_bf16, fc_proj's and fc's backward from the residual gradient g_out, fc's dX into
  // dX: gelu' (fc16) is read once, and a sparse fc's dY, rounded, replaces it (made in
  // fc_proj's store where its layer can: backward_through_gelu); g16: fc_proj's bf16 dY
  // (g16(fc_proj, ...)); spare: a float [d_ff x N]. Timed into clock's fc_proj_backward (with
  // the GELU's backward) and fc_backward where it is not null.
  void backward_ffn_bf16(ConstMatrixView<T> g_out, MatrixView<bfloat16> g16, Matrix<T>& spare, MatrixView<T> dX,
                         GPTPhaseClock* clock) {
    if constexpr (std::is_same_v<T, float>) {
      const bool sparse_fc = is_sparse(fc);
      timed(clock, GPTPhase::fc_proj_backward, [&] {
        if (!sparse_fc || !grad_bf16 || !backward_through_gelu(fc_proj, gelu_out, g_out, g16, fc16)) {
          backward_from(fc_proj, gelu_out, g_out, grad_bf16, g16, spare.view());
          if (sparse_fc)
            GELU<T>::backward(fc16.view(), spare.view(), fc16.view());
          else
            GELU<T>::backward(fc16.view(), spare.view());
        }
      });
      timed(clock, GPTPhase::fc_backward, [&] {
        if (sparse_fc)
          run_backward(fc, ln2_out, fc16.view(), dX);
        else
          run_backward(fc, ln2_out, spare.view(), dX);
      });
    }
  }
  // Whether the attention core's backward writes a sparse qkv's dY over Q, K, V (in bf16): its
  // layer then also writes Q, K, V in bf16 and reads a bf16 dY, so no float spare serves qkv.
  bool dqkv_over_qkv() const noexcept {
    bool bf16_io = false;
    std::visit(
        [&](const auto& layer) {
          bf16_io = requires(std::remove_cvref_t<decltype(layer)> & l, ConstMatrixView<bfloat16> c,
                             MatrixView<bfloat16> y, MatrixView<T> dx) {
            l.forward(c, y);
            l.backward(c, c, dx);
          };
        },
        qkv);
    return qkv_bf16 && is_sparse(qkv) && bf16_io;
  }
  // Where a float qkv's dY is after backward_attention: a sparse qkv's in qkv_out (swapped
  // in), a dense one's in `spare`.
  Matrix<T>& qkv_dy(Matrix<T>& spare) noexcept { return is_sparse(qkv) && !qkv_bf16 ? qkv_out : spare; }
  // The attention core's and qkv's backward; g: the attention output's gradient, then qkv's dX.
  // Q, K, V die in the core's backward: a sparse qkv's dY takes their buffer (written over them
  // with dqkv_over_qkv(), else swapped in after, the old buffer then the next spare); a dense
  // qkv's goes to spare, a float [3 d_model x N] (unused with dqkv_over_qkv()). Timed into
  // clock's attention_backward and qkv_backward where it is not null.
  void backward_attention(Matrix<T>& spare, MatrixView<T> g, GPTPhaseClock* clock) {
    const std::int64_t d = g.rows();
    const bool over = dqkv_over_qkv();
    timed(clock, GPTPhase::attention_backward, [&] {
      with_qkv([&](auto qkv) {
        const std::int64_t n = qkv.cols();
        const auto core = [&](auto dqkv) {
          attn.backward(qkv.block(0, 0, d, n), qkv.block(d, 0, d, n), qkv.block(2 * d, 0, d, n), g,
                        dqkv.block(0, 0, d, n), dqkv.block(d, 0, d, n), dqkv.block(2 * d, 0, d, n));
        };
        if constexpr (std::is_same_v<typename decltype(qkv)::value_type, bfloat16>)
          if (over) return core(qkv16.view());
        core(spare.view());
      });
    });
    timed(clock, GPTPhase::qkv_backward, [&] {
      if (over) return run_backward(qkv, ln1_out, ConstMatrixView<bfloat16>(qkv16.view()), g);
      if (!qkv_bf16 && is_sparse(qkv)) std::swap(qkv_out, spare);
      backward_from(qkv, ln1_out, qkv_dy(spare).view(), qkv_bf16, qkv16, g);
    });
  }
  // The same with a bf16 dY: for a sparse layer in bf16 with a bf16 X only (else ArgumentError).
  static void run_backward(Projection& p, const ProjectionInput<T>& X, ConstMatrixView<bfloat16> dY, MatrixView<T> dX) {
    X.visit([&](auto x) {
      std::visit(
          [&](auto& layer) {
            if constexpr (requires { layer.backward(x, dY, dX); })
              layer.backward(x, dY, dX);
            else
              throw ArgumentError("GPT: a bf16 dY needs a sparse projection with a bf16 input");
          },
          p);
    });
  }
};

}  // namespace sprig::detail
