// sprig/kernels/bf16_block_kernels.hpp — the block-sparse products of a linear layer trained in bf16:
// bf16 operands, float accumulation and float results (or a bf16 Y), on a BlockPaddedCSR<float>
// W (M x K in R x C blocks) whose float values are the optimizer's master weights.
//
//   refresh_bf16_values(W, values)                  values[k] = bfloat16(W.values()[k]), every entry
//   bf16_block_spmm(W, values, X, Y, ws, mode)      Y[M,B]  (=|+=) W X
//   bf16_block_spmm(W, values, X, Y, ws, epilogue)  Y = act(W X + bias), in the store
//   bf16_block_spmm_transposed(W, values, cache, dY, dX, ws, mode)   dX[K,B] (=|+=) W^T dY
//   bf16_block_spmm_transposed(W, values, cache, dY, dX, D, ws)      dX = D * (W^T dY), dX float or bf16
//   bf16_block_sddmm(W, dY, X, grad, ws, mode)      grad (=|+=) the weight gradient at live blocks
//   (each also with a trailing Bf16BlockPath: that path, for tests and benchmarks; without it
//   the fastest here, bf16_block_path<R, C>(kernel))
//
// The weights come from `values`, a bf16 shadow with W.values()'s layout (storage_size() * R * C
// entries, block after block, row-major in a block); X, dY are bf16 and feature-major; dX and
// grad are float, Y float or bf16 (the float result rounded once). Every shape the float block
// kernels take (any R x C).
//
// How: these are the float block kernels (block_spmm.hpp, block_sddmm.hpp) instantiated with
// bf16 inputs: the same tiles, panels, chains and edge handling, each input register loaded as
// N bf16 and widened to float in registers (operands.hpp), each weight widened before its
// broadcast. What changes is only the bytes read: half of the float kernels' X, dY and weight
// traffic. No second kernel body, and no per-ISA code: the same xsimd template on AVX2,
// AVX-512, NEON and SSE, the scalar path widening element by element. This is the portable
// path (Bf16BlockPath, bf16_paths.hpp).
//
// The avx512_bf16 path: the same kernels again, where only the innermost multiply-add changes
// to `vdpbf16ps` (two bf16 products added into one float lane per instruction, twice the
// multiply-adds of fma per instruction), fed pairs along a reduction:
//   forward     W's block columns (c, c + 1), C even: X packed as pair rows (rows 2k, 2k + 1
//               interleaved per batch column, zero-padded to whole blocks), W's two weights of
//               a block row broadcast as one 32-bit pair;
//   input grad  W's block rows (r, r + 1), R even: the same on W^T's blocks (copied
//               transposed first, so that a pair is adjacent) and dY;
//   weight grad adjacent batch columns: 32 bf16 of dY and of X per step, no repacking.
// The forward paths read X zero-padded to whole blocks, so an edge block's out-of-matrix weights
// meet zeros there (BlockPaddedCSR keeps them 0, and refresh_bf16_values rounds them to 0).
// The amx path (bf16_block_amx.hpp): every block (or its transpose, for the input gradient)
// is a tile of A for `tdpbf16ps`, and each block's weight gradient a tile of C; where the CPU
// has AMX and Linux grants the tile state, it is the default for the shapes it takes.
// Both paths exist where the kernels are built for AVX-512 with AVX512-BF16 (-march on such a
// CPU: they reuse the tiles' 512-bit xsimd registers; amx also needs x86-64 Linux), and run
// where the CPU and OS allow them (the probe bf16_gemm uses). Each sums each output in a
// different order from the portable path (and `vdpbf16ps` and `tdpbf16ps` flush subnormal
// inputs and results): they agree to twice the bound below, not bit for bit.
//
// Numerics: every product is exact in float (a bf16 times a bf16 fits), and each result is a
// float sum of n = (C for Y, R for dX) x (live blocks of its row or column) products (n = B for
// the weight gradient) plus, in accumulate mode, the old value: within gamma_{n+1} *
// (sum |products| + |old|) of the exact sum, gamma_n = n u / (1 - n u), u = 2^-24. NaN and
// infinities propagate; the portable path keeps subnormals.
// Determinism: each output is summed in an order fixed by the path, the block shape, W's row and
// the batch width alone (as the float kernels), so each path's result is bitwise identical for
// every thread count.
#pragma once

#include <type_traits>

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>

#include "../core/bfloat16.hpp"
#include "../core/block_padded_csr.hpp"
#include "../core/error.hpp"
#include "../core/matrix.hpp"
#include "bf16_block_amx.hpp"
#include "bf16_paths.hpp"
#include "bfloat16_convert.hpp"
#include "block_sddmm.hpp"
#include "block_spmm.hpp"
#include "output_store.hpp"
#include "row_epilogue.hpp"
#include "simd.hpp"
#include "transpose.hpp"
#include "update_mode.hpp"
#include "workspace.hpp"

namespace sprig {

// values[k] = bfloat16(W.values()[k]) for every entry (padding, dead slots and edge blocks'
// out-of-matrix zeros included), rounded to nearest even: the shadow the bf16 block kernels
// read. Throws ShapeError unless values.size() == W.values().size() (storage_size() * R * C),
// ArgumentError when values overlaps W's. O(storage_size() * R * C), one thread.
template <ColumnIndex Index, int R, int C>
void refresh_bf16_values(const BlockPaddedCSR<float, Index, R, C>& W, std::span<bfloat16> values) {
  if (values.size() != W.values().size())
    throw ShapeError(detail::message("sprig::refresh_bf16_values: W has ", W.storage_size(), " slots of ", R, "x", C,
                                     " (", W.values().size(), " values), values has ", values.size(), " entries"));
  detail::check_no_overlap("sprig::refresh_bf16_values", "values", values, "W's values", W.values());
  to_bfloat16(W.values(), values);
}

// The three bf16 block kernels, for asking which path each may take.
enum class Bf16BlockKernel { spmm, spmm_transposed, sddmm };

// Why `path` cannot run `kernel` on R x C blocks in this process, empty when it can (portable:
// always). amx (bf16_block_amx.hpp) takes for the forward blocks of at most 16 rows and an even
// number of columns up to 32, for the input gradient the transposed shapes, and for the weight
// gradient blocks of at most 16 rows and 16 columns.
template <int R, int C>
std::string bf16_block_unavailable_reason(Bf16BlockKernel kernel, Bf16BlockPath path) {
  if (path == Bf16BlockPath::portable) return {};
  if (path == Bf16BlockPath::amx) {
#if SPRIG_BF16_BLOCK_AMX
    if (kernel == Bf16BlockKernel::spmm && !detail::kAmxBlockForward<R, C>)
      return detail::message("the amx forward takes blocks of at most 16 rows and an even number of columns up ",
                             "to 32, not ", R, "x", C);
    if (kernel == Bf16BlockKernel::spmm_transposed && !detail::kAmxBlockForward<C, R>)
      return detail::message("the amx input gradient takes blocks of an even number of rows up to 32 and at most ",
                             "16 columns, not ", R, "x", C);
    if (kernel == Bf16BlockKernel::sddmm && !detail::kAmxBlockWeightGrad<R, C>)
      return detail::message("the amx weight gradient takes blocks of at most 16 rows and 16 columns, not ", R, "x",
                             C);
    return detail::bf16_gemm_reason(Bf16GemmPath::amx);
#else
    (void)kernel;
    return "the kernels are not compiled for AVX-512 with AVX512-BF16 on x86-64 Linux (build with -march for such a "
           "CPU)";
#endif
  }
#if SPRIG_BF16_BLOCK_DP
  if (kernel == Bf16BlockKernel::spmm && C % 2 != 0)
    return detail::message("the forward pairs W's block columns and C = ", C, " is odd");
  if (kernel == Bf16BlockKernel::spmm_transposed && R % 2 != 0)
    return detail::message("the input gradient pairs W's block rows and R = ", R, " is odd");
  return detail::bf16_gemm_reason(Bf16GemmPath::avx512_bf16);
#else
  (void)kernel;
  return "the kernels are not compiled for AVX-512 with AVX512-BF16 (build with -march for such a CPU)";
#endif
}

// The path the bf16 block kernel `kernel` takes on R x C blocks without one named: amx where it
// can run, else avx512_bf16 where it can, else portable.
template <int R, int C>
Bf16BlockPath bf16_block_path(Bf16BlockKernel kernel) {
  for (const Bf16BlockPath p : {Bf16BlockPath::amx, Bf16BlockPath::avx512_bf16})
    if (bf16_block_unavailable_reason<R, C>(kernel, p).empty()) return p;
  return Bf16BlockPath::portable;
}

namespace detail {

// ArgumentError naming fn unless `path` can run `kernel` here.
template <int R, int C>
void check_bf16_block_path(const char* fn, Bf16BlockKernel kernel, Bf16BlockPath path) {
  if (const std::string why = bf16_block_unavailable_reason<R, C>(kernel, path); !why.empty())
    throw ArgumentError(message(fn, ": the ", path_name(path), " path is not available: ", why));
}

// The shapes and the shadow's length (ShapeError), the output apart from every input
// (ArgumentError).
template <ColumnIndex Index, int R, int C, class Out>
void check_bf16_block_operands(const char* fn, const BlockPaddedCSR<float, Index, R, C>& W,
                               std::span<const bfloat16> values, const char* in_name,
                               const ConstMatrixView<bfloat16>& in, std::int64_t in_rows, const char* out_name,
                               const MatrixView<Out>& out, std::int64_t out_rows) {
  check_block_operands(fn, W, in_name, in, in_rows, out_name, out, out_rows);
  if (values.size() != W.values().size())
    throw ShapeError(message(fn, ": W has ", W.storage_size(), " slots of ", R, "x", C, " (", W.values().size(),
                             " values), the bf16 values have ", values.size(),
                             " entries (refresh_bf16_values writes W.values().size())"));
  check_no_overlap(fn, out_name, out, "the bf16 values", values);
}

}  // namespace detail

namespace detail {

// bf16_block_spmm once its operands and path are checked; bias (W.rows() entries, or nullptr)
// and relu: the forward's epilogue (row_epilogue.hpp) in the store.
template <ColumnIndex Index, int R, int C, class Out>
void bf16_block_spmm_run(const BlockPaddedCSR<float, Index, R, C>& W, std::span<const bfloat16> values,
                         ConstMatrixView<bfloat16> X, MatrixView<Out> Y, KernelWorkspace<float>& workspace, Update mode,
                         Bf16BlockPath path, const float* bias, bool relu) {
  if (Y.rows() == 0 || Y.cols() == 0) return;
  const ForwardBlocks<bfloat16, R, C> blocks{values.data()};
#if SPRIG_BF16_BLOCK_AMX
  if constexpr (kAmxBlockForward<R, C>)
    if (path == Bf16BlockPath::amx) {
      block_spmm_amx<KernelArch, Index, R, C, Out>(W.pattern(), values.data(), X, Y, mode, workspace, bias, relu);
      return;
    }
#endif
#if SPRIG_BF16_BLOCK_DP
  if constexpr (C % 2 == 0)
    if (path == Bf16BlockPath::avx512_bf16) {
      block_spmm_simd<KernelArch, float, Index, decltype(blocks), bfloat16, true, Out>(W.pattern(), blocks, X, Y, mode,
                                                                                       workspace, bias, relu);
      return;
    }
#else
  (void)path;
#endif
  block_spmm_on<KernelArch>(W.pattern(), blocks, X, Y, mode, workspace, bias, relu);
}

// bf16_block_spmm_transposed once its operands and path are checked; scale: the x_derivative
// form's (empty: none).
template <ColumnIndex Index, int R, int C, class Out>
void bf16_block_spmm_transposed_run(const BlockPaddedCSR<float, Index, R, C>& W, std::span<const bfloat16> values,
                                    TransposeCache<float, Index>& cache, ConstMatrixView<bfloat16> dY,
                                    MatrixView<Out> dX, KernelWorkspace<float>& workspace, Update mode,
                                    Bf16BlockPath path, ConstMatrixView<bfloat16> scale) {
  if (dX.rows() == 0 || dX.cols() == 0) return;
  const auto& t = cache.sync_topology(W.pattern());
  const TransposedBlocks<bfloat16, R, C> blocks{values.data(), t.source_slot.data()};
#if SPRIG_BF16_BLOCK_AMX
  if constexpr (kAmxBlockForward<C, R>)
    if (path == Bf16BlockPath::amx) {
      block_spmm_amx<KernelArch, Index, C, R, Out>(t.matrix, values.data(), dY, dX, mode, workspace, nullptr, false,
                                                   t.source_slot.data(), scale);
      return;
    }
#endif
#if SPRIG_BF16_BLOCK_DP
  if constexpr (R % 2 == 0)
    if (path == Bf16BlockPath::avx512_bf16) {
      block_spmm_simd<KernelArch, float, Index, decltype(blocks), bfloat16, true, Out>(t.matrix, blocks, dY, dX, mode,
                                                                                       workspace, nullptr, false,
                                                                                       scale);
      return;
    }
#else
  (void)path;
#endif
  block_spmm_on<KernelArch>(t.matrix, blocks, dY, dX, mode, workspace, static_cast<const float*>(nullptr), false,
                            scale);
}

}  // namespace detail

// Y (=|+=) W X with W's block structure, the bf16 weights `values` (top of this file), X bf16
// and Y float or bf16 (Out; a bf16 Y is the float one rounded once, bitwise, and accumulates
// onto its widened values), with a caller-owned float workspace (the kind a float layer uses).
// Preconditions: X is W.cols() x B, Y is W.rows() x B and values.size() == W.values().size()
// (else ShapeError); Y shares no memory with X, values or W's values (else ArgumentError).
// Overwrite never reads Y; W's float values are never read.
// Complexity: O(nnz_blocks x R x C x B) multiply-adds, plus O(K x B) to pack X where it is not
// read in place. Threads: OpenMP over nnz-balanced block-row ranges; bitwise identical for any
// thread count. The workspace must not be shared by concurrent calls.
// With a path: ArgumentError unless it can run here (bf16_block_unavailable_reason).
template <ColumnIndex Index, int R, int C, class Out>
void bf16_block_spmm(const BlockPaddedCSR<float, Index, R, C>& W, std::span<const bfloat16> values,
                     ConstMatrixView<bfloat16> X, MatrixView<Out> Y, KernelWorkspace<float>& workspace, Update mode,
                     Bf16BlockPath path) {
  constexpr const char* fn = "sprig::bf16_block_spmm";
  detail::check_bf16_block_operands(fn, W, values, "X", X, W.cols(), "Y", Y, W.rows());
  detail::check_bf16_block_path<R, C>(fn, Bf16BlockKernel::spmm, path);
  detail::bf16_block_spmm_run(W, values, X, Y, workspace, mode, path, nullptr, false);
}
template <ColumnIndex Index, int R, int C, class Out>
void bf16_block_spmm(const BlockPaddedCSR<float, Index, R, C>& W, std::span<const bfloat16> values,
                     ConstMatrixView<bfloat16> X, MatrixView<Out> Y, KernelWorkspace<float>& workspace,
                     Update mode = Update::overwrite) {
  bf16_block_spmm(W, values, X, Y, workspace, mode, bf16_block_path<R, C>(Bf16BlockKernel::spmm));
}

// Y = act(W X + bias) (row_epilogue.hpp) on the path bf16_block_spmm takes, the bias added in
// float after the sum and the ReLU after it, in the kernel's store: bitwise the same as
// bf16_block_spmm (overwrite) followed by a bias pass and a ReLU pass. Throws as
// bf16_block_spmm; ShapeError unless the bias is empty (none) or has W.rows() entries;
// ArgumentError for gelu (not a forward epilogue) or a bias overlapping Y. Complexity and
// threads as bf16_block_spmm.
template <ColumnIndex Index, int R, int C, class Out>
void bf16_block_spmm(const BlockPaddedCSR<float, Index, R, C>& W, std::span<const bfloat16> values,
                     ConstMatrixView<bfloat16> X, MatrixView<Out> Y, KernelWorkspace<float>& workspace,
                     const RowEpilogue<float>& epilogue) {
  constexpr const char* fn = "sprig::bf16_block_spmm";
  detail::check_bf16_block_operands(fn, W, values, "X", X, W.cols(), "Y", Y, W.rows());
  detail::check_row_epilogue(fn, epilogue, W.rows(), Y);
  detail::bf16_block_spmm_run(W, values, X, Y, workspace, Update::overwrite,
                              bf16_block_path<R, C>(Bf16BlockKernel::spmm),
                              epilogue.bias.empty() ? nullptr : epilogue.bias.data(),
                              epilogue.activation == FusedActivation::relu);
}

// dX (=|+=) W^T dY, dY bf16, dX float, reading the bf16 weights through the cached transposed
// block pattern (block_spmm_transposed's scheme: each R x C block read as its C x R transpose,
// in place on the portable path, from a transposed copy on the others). `cache` should belong to W; it is rebuilt when W's topology
// changed (O(nnz_blocks + block rows + block cols)).
// Preconditions: dY is W.rows() x B, dX is W.cols() x B, values.size() == W.values().size()
// (else ShapeError); dX shares no memory with dY, values or W's values (else ArgumentError);
// the transpose's own limits (transpose.hpp: ArgumentError). Overwrite never reads dX.
// Complexity: O(nnz_blocks x R x C x B) multiply-adds plus O(M x B) to pack dY (and on the amx
// and avx512_bf16 paths O(nnz_blocks x R x C) to copy the blocks transposed). Threads: as bf16_block_spmm,
// bitwise identical for any thread count.
template <ColumnIndex Index, int R, int C>
void bf16_block_spmm_transposed(const BlockPaddedCSR<float, Index, R, C>& W, std::span<const bfloat16> values,
                                TransposeCache<float, Index>& cache, ConstMatrixView<bfloat16> dY,
                                MatrixView<float> dX, KernelWorkspace<float>& workspace, Update mode,
                                Bf16BlockPath path) {
  constexpr const char* fn = "sprig::bf16_block_spmm_transposed";
  detail::check_bf16_block_operands(fn, W, values, "dY", dY, W.rows(), "dX", dX, W.cols());
  detail::check_bf16_block_path<R, C>(fn, Bf16BlockKernel::spmm_transposed, path);
  detail::bf16_block_spmm_transposed_run(W, values, cache, dY, dX, workspace, mode, path, {});
}
template <ColumnIndex Index, int R, int C>
void bf16_block_spmm_transposed(const BlockPaddedCSR<float, Index, R, C>& W, std::span<const bfloat16> values,
                                TransposeCache<float, Index>& cache, ConstMatrixView<bfloat16> dY,
                                MatrixView<float> dX, KernelWorkspace<float>& workspace,
                                Update mode = Update::overwrite) {
  bf16_block_spmm_transposed(W, values, cache, dY, dX, workspace, mode,
                             bf16_block_path<R, C>(Bf16BlockKernel::spmm_transposed));
}

// dX = x_derivative * (W^T dY) element by element, dX float or bf16 (rounded once), on `path`
// (or the fastest): the backward of a GELU whose output was W's input, from its derivative
// kept in bf16 (nn/gelu.hpp), in the product's store. The same bits as the float dX of
// bf16_block_spmm_transposed (overwrite) multiplied afterwards, then rounded. x_derivative
// has dX's shape (else ShapeError) and may be dX itself (a bf16 dX: each element is read
// before it is written); otherwise as the form above (overwrite only).
template <ColumnIndex Index, int R, int C, class Out>
void bf16_block_spmm_transposed(const BlockPaddedCSR<float, Index, R, C>& W, std::span<const bfloat16> values,
                                TransposeCache<float, Index>& cache, ConstMatrixView<bfloat16> dY, MatrixView<Out> dX,
                                ConstMatrixView<bfloat16> x_derivative, KernelWorkspace<float>& workspace,
                                Bf16BlockPath path = bf16_block_path<R, C>(Bf16BlockKernel::spmm_transposed)) {
  constexpr const char* fn = "sprig::bf16_block_spmm_transposed";
  detail::check_bf16_block_operands(fn, W, values, "dY", dY, W.rows(), "dX", dX, W.cols());
  detail::check_bf16_block_path<R, C>(fn, Bf16BlockKernel::spmm_transposed, path);
  detail::check_x_derivative(fn, dX, x_derivative);
  detail::bf16_block_spmm_transposed_run(W, values, cache, dY, dX, workspace, Update::overwrite, path, x_derivative);
}

// grad (=|+=) the weight gradient of W's live blocks from bf16 dY and X: for every live block
// slot s = (bi, bj) and (r, c) with bi*R + r < M and bj*C + c < K, grad[s*R*C + r*C + c] (=|+=)
// dot(dY[bi*R + r, :], X[bj*C + c, :]) in float.
// Preconditions: dY is W.rows() x B, X is W.cols() x B and grad.size() == W.values().size()
// (else ShapeError); grad shares no memory with dY, X or W's values (else ArgumentError).
// Overwrite writes every entry (0 at padding, dead slots and edge blocks' out-of-matrix
// entries) and never reads grad; accumulate leaves those unchanged. W's values are never read.
// Complexity: O(nnz_blocks x R x C x B) multiply-adds, plus O((M + K) x B) to pack dY and X
// where they are not read in place. Threads: as bf16_block_spmm, bitwise identical for any
// thread count.
template <ColumnIndex Index, int R, int C>
void bf16_block_sddmm(const BlockPaddedCSR<float, Index, R, C>& W, ConstMatrixView<bfloat16> dY,
                      ConstMatrixView<bfloat16> X, std::span<float> grad, KernelWorkspace<float>& workspace,
                      Update mode, Bf16BlockPath path) {
  detail::check_block_sddmm_operands("sprig::bf16_block_sddmm", W, dY, X, grad);
  detail::check_bf16_block_path<R, C>("sprig::bf16_block_sddmm", Bf16BlockKernel::sddmm, path);
  if (X.cols() == 0 || W.nnz_blocks() == 0) {  // every dot is empty
    if (mode == Update::overwrite) std::fill(grad.begin(), grad.end(), 0.0f);
    return;
  }
#if SPRIG_KERNEL_SIMD
  if constexpr (detail::kSimdFor<float>) {
#  if SPRIG_BF16_BLOCK_AMX
    if constexpr (detail::kAmxBlockWeightGrad<R, C>)
      if (path == Bf16BlockPath::amx) {
        detail::block_sddmm_amx<detail::KernelArch>(W, dY, X, grad, mode, workspace);
        return;
      }
#  endif
#  if SPRIG_BF16_BLOCK_DP
    if (path == Bf16BlockPath::avx512_bf16) {
      detail::block_sddmm_simd<detail::KernelArch, float, Index, R, C, bfloat16, true>(W, dY, X, grad, mode, workspace);
      return;
    }
#  endif
    detail::block_sddmm_simd<detail::KernelArch>(W, dY, X, grad, mode, workspace);
    return;
  }
#endif
  detail::block_sddmm_scalar(W, dY, X, grad, mode, workspace);
}
template <ColumnIndex Index, int R, int C>
void bf16_block_sddmm(const BlockPaddedCSR<float, Index, R, C>& W, ConstMatrixView<bfloat16> dY,
                      ConstMatrixView<bfloat16> X, std::span<float> grad, KernelWorkspace<float>& workspace,
                      Update mode = Update::overwrite) {
  bf16_block_sddmm(W, dY, X, grad, workspace, mode, bf16_block_path<R, C>(Bf16BlockKernel::sddmm));
}

}  // namespace sprig
