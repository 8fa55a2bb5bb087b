// sprig/nn/block_sparse_linear.hpp — BlockSparseLinear<T, Index, R, C>: Y = W X + b with W
// a BlockPaddedCSR of dense R x C blocks (R output rows by C inputs).
//
// Shapes (feature-major) as SparseLinear: X [in x B], Y and dY [out x B], dX [in x B],
// W out x in (out and in need not be multiples of R and C).
//   forward:  Y = act(W X + b), act none or relu          (block_spmm; bias and ReLU in its store)
//   backward: dW = dY X^T at the entries of live blocks   (block_sddmm, aligned with W's blocks)
//             db = sum over the batch of dY
//             dX = W^T dY                                  (block_spmm_transposed on the
//                                                          cached transposed block pattern),
//             then the backward of the activation that produced X (x_activation relu or gelu
//             with x_derivative, as SparseLinear)
// backward overwrites the gradients. The two-argument backward skips dX.
//
// Cost: O(live blocks x R x C x B) per pass, plus O(live blocks) to rebuild the transposed
// pattern after a topology change; a steady-state step allocates nothing.
// Threads: bitwise identical results for any OpenMP thread count (the kernels' guarantee).
// One layer serves one thread at a time (it owns its caches and workspaces); layers sharing a
// scratch serve one thread together.
//
// Memory, and what lives from forward to backward: as SparseLinear. The layer keeps W, its
// gradient and state, the cached transposed block pattern and two workspaces' per-topology
// parts; backward needs the caller's X of the last forward. The packing buffers (X and dY
// panels, up to [(in + out) x B] in the weight gradient) live only within one kernel call,
// so share_scratch() may make them one buffer shared by a model's layers (sequential calls:
// safe, the same bits).
//
// Precision (set_precision; core/precision.hpp), as SparseLinear's: with Precision::bf16
// (T = float only) the products run on the bf16 block kernels (kernels/bf16_block_kernels.hpp):
// forward rounds W's values into a bf16 shadow (W.values()' layout, refreshed from the float
// masters on every forward, so an optimizer step is seen by the next forward) and X to bf16,
// multiplies with float accumulation and adds the bias (and ReLU) in float in the kernel's
// store; backward rounds X and dY and uses the shadow of the last forward. Gradients, bias and
// optimizer state stay float. X and dY are rounded into the layer's own bf16 buffer or a model's
// (share_bf16_scratch).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <type_traits>
#include <utility>

#include "../core/block_padded_csr.hpp"
#include "../core/concepts.hpp"
#include "../core/error.hpp"
#include "../core/matrix.hpp"
#include "../core/rng.hpp"
#include "../core/precision.hpp"
#include "../kernels/bf16_block_kernels.hpp"
#include "../kernels/block_sddmm.hpp"
#include "../kernels/block_spmm.hpp"
#include "../kernels/row_epilogue.hpp"
#include "../kernels/transpose.hpp"
#include "../kernels/workspace.hpp"
#include "bf16_scratch.hpp"
#include "bias.hpp"
#include "init.hpp"
#include "model.hpp"
#include "parameter.hpp"
#include "sparse_linear.hpp"

namespace sprig {

// The parameters of a random BlockSparseLinear, by name:
//     BlockSparseLinear<float, std::int32_t, 4, 4> layer(1024, 4096, {.density = 0.1, .seed = 1});
struct BlockSparseLinearOptions {
  double density = 0.0;         // fraction of the block grid's blocks that are live, in (0, 1]; required
  std::uint64_t seed = 0;       // with layer_key, the only input of the topology and the values
  std::uint64_t layer_key = 0;  // tells apart the layers of one model drawn from one seed
  WeightInit init = {};         // how the live blocks' values are drawn (init.hpp)
  double padding_ratio = kDefaultPaddingRatio;  // spare slots per block row (PaddedCSR)
  double growth_reserve = 0.0;                  // storage reserved for relocated block rows (reserve_growth)
};

template <Value T, ColumnIndex Index, int R, int C>
class BlockSparseLinear final : public BlockTopology<T, Index> {
public:
  using value_type = T;
  using index_type = Index;
  using Options = BlockSparseLinearOptions;
  using Weight = BlockPaddedCSR<T, Index, R, C>;
  static constexpr int kBlockRows = R;
  static constexpr int kBlockCols = C;

  BlockSparseParameter<T, Index, R, C> weight;  // out x in
  DenseParameter<T> bias;                       // out x 1, not decayed

  // A random in -> out layer: round(density * block grid) live blocks at uniformly random
  // block positions, drawn by options.init with the effective fan-in (live entries / out),
  // zero bias; a function of (options.seed, options.layer_key) only. Memory O(live blocks).
  // Throws ShapeError for in or out < 1; ArgumentError for a density outside (0, 1] or one
  // that rounds to no block, a padding ratio or growth reserve outside [0, 64], more block
  // columns than Index holds, or a normal init's std not finite and > 0.
  BlockSparseLinear(std::int64_t in, std::int64_t out, const BlockSparseLinearOptions& options) {
    if (in <= 0 || out <= 0)
      throw ShapeError(detail::message("BlockSparseLinear: in and out must be > 0, got ", in, " and ", out));
    const double density = options.density;
    if (!(density > 0.0 && density <= 1.0))
      throw ArgumentError(detail::message("BlockSparseLinear: density ", density,
                                          " outside (0, 1] (set BlockSparseLinearOptions::density)"));
    if (!(options.growth_reserve >= 0.0 && options.growth_reserve <= 64.0))
      throw ArgumentError(
          detail::message("BlockSparseLinear: growth_reserve ", options.growth_reserve, " outside [0, 64]"));
    CounterRng rng(options.seed, options.layer_key, kInitKey);
    Weight w = Weight::random_density(out, in, density, rng(), options.padding_ratio);
    if (w.nnz_blocks() == 0)
      throw ArgumentError(detail::message("BlockSparseLinear: density ", density, " of a ", out, "x", in, " layer in ",
                                          R, "x", C, " blocks rounds to no block at all"));
    const double fan_in = mean_fan_in(w);
    if (options.init.is_normal()) {  // in-matrix entries of live blocks redrawn in slot order
      const double scale = normal_init_std("BlockSparseLinear", options.init, static_cast<double>(in), fan_in);
      const std::span<T> values = w.values();
      w.for_each_block([&](std::int64_t i, std::int64_t j, std::int64_t s, const T*) {
        for (std::int64_t r = 0; r < R; ++r)
          for (std::int64_t c = 0; c < C; ++c)
            if (i * R + r < out && j * C + c < in) values[(s * R + r) * C + c] = static_cast<T>(scale * rng.normal());
      });
    } else {
      const double bound = kaiming_uniform_bound(fan_in);
      for (T& v : w.values()) v = static_cast<T>(v * bound);  // zeros (padding, outside) stay 0
    }
    init(std::move(w));
    if (options.growth_reserve > 0.0) weight.reserve_growth(options.growth_reserve);
  }

  // A layer with the given weight and zero bias. Throws ShapeError for an empty weight.
  explicit BlockSparseLinear(Weight w) {
    if (w.rows() <= 0 || w.cols() <= 0)
      throw ShapeError(detail::message("BlockSparseLinear: weight must be non-empty, got ", w.rows(), "x", w.cols()));
    init(std::move(w));
  }

  std::int64_t in_features() const noexcept override { return weight.matrix.cols(); }
  std::int64_t out_features() const noexcept override { return weight.matrix.rows(); }
  // Live blocks over the blocks of the grid.
  double density() const noexcept { return weight.matrix.block_density(); }

  // Y = act(W X + b). Throws ShapeError for the shapes, ArgumentError for act = gelu or
  // overlapping operands (block_spmm's checks), before writing anything.
  void forward(std::type_identity_t<ConstMatrixView<T>> X, std::type_identity_t<MatrixView<T>> Y,
               FusedActivation act = FusedActivation::none) {
    if constexpr (std::is_same_v<T, float>)
      if (bf16_.bf16()) {
        detail::check_forward_activation("BlockSparseLinear::forward", act);
        forward_bf16(X, Y, act);
        return;
      }
    block_spmm(weight.matrix, X, Y, workspace_, RowEpilogue<T>{bias.value, act});
  }
  // The same with X in bf16 (a model that keeps its activations in bf16,
  // nn/projection_input.hpp): bitwise the float form's results for a float X that rounds to
  // this X. Needs Precision::bf16 (else ArgumentError); throws as the float form.
  void forward(ConstMatrixView<bfloat16> X, std::type_identity_t<MatrixView<T>> Y,
               FusedActivation act = FusedActivation::none)
    requires std::is_same_v<T, float>
  {
    bf16_.require_bf16_input("BlockSparseLinear::forward");
    detail::check_forward_activation("BlockSparseLinear::forward", act);
    forward_bf16(X, Y, act);
  }
  // The same into a bf16 Y: the float Y rounded once, bitwise (bf16_block_spmm's bf16 output).
  void forward(ConstMatrixView<bfloat16> X, MatrixView<bfloat16> Y,
               FusedActivation act = FusedActivation::none) requires std::is_same_v<T, float> {
    bf16_.require_bf16_input("BlockSparseLinear::forward");
    detail::check_forward_activation("BlockSparseLinear::forward", act);
    forward_bf16(X, Y, act);
  }

  // Weight and bias gradients (overwritten) and dX = W^T dY, with the backward of X's
  // activation applied to dX (x_activation relu: relu_backward(X, .); gelu: x_derivative *
  // .). X is the input of the last forward. Throws ShapeError for the shapes or a gradient
  // not aligned with W's slots, ArgumentError for overlapping operands, before writing.
  void backward(std::type_identity_t<ConstMatrixView<T>> X, std::type_identity_t<ConstMatrixView<T>> dY,
                std::type_identity_t<MatrixView<T>> dX, FusedActivation x_activation = FusedActivation::none,
                std::type_identity_t<ConstMatrixView<T>> x_derivative = {}) {
    backward_of(X, dY, dX, x_activation, x_derivative);
  }
  // The same with X in bf16, as forward's bf16 form (x_activation relu reads X widened).
  void backward(ConstMatrixView<bfloat16> X, std::type_identity_t<ConstMatrixView<T>> dY,
                std::type_identity_t<MatrixView<T>> dX, FusedActivation x_activation = FusedActivation::none,
                std::type_identity_t<ConstMatrixView<T>> x_derivative = {})
    requires std::is_same_v<T, float>
  {
    bf16_.require_bf16_input("BlockSparseLinear::backward");
    backward_of(X, dY, dX, x_activation, x_derivative);
  }
  // The same with dY in bf16 too (a model that keeps its layers' dY in bf16, nn/gpt.hpp): the
  // products read dY as it is (nothing rounded) and the bias gradient sums it widened:
  // bitwise the float form's results for a float dY that holds these values. No x_activation.
  // Needs Precision::bf16 (else ArgumentError); throws as the float form.
  void backward(ConstMatrixView<bfloat16> X, ConstMatrixView<bfloat16> dY, std::type_identity_t<MatrixView<T>> dX)
    requires std::is_same_v<T, float>
  {
    bf16_.require_bf16_input("BlockSparseLinear::backward");
    backward_of(X, dY, dX, FusedActivation::none, ConstMatrixView<T>{});
  }
  // The same with X the output of a GELU whose derivative D is kept in bf16: dX = bf16(D *
  // W^T dY) in the product's store, bitwise GELU::backward(D, dX float, dX bf16) after the
  // form above. dX may be D itself (in place); it must not overlap X or dY (ArgumentError).
  void backward(ConstMatrixView<bfloat16> X, ConstMatrixView<bfloat16> dY, MatrixView<bfloat16> dX,
                ConstMatrixView<bfloat16> x_derivative) requires std::is_same_v<T, float> {
    bf16_.require_bf16_input("BlockSparseLinear::backward");
    if (dX.rows() != in_features() || dX.cols() != X.cols())
      throw ShapeError(detail::message("BlockSparseLinear::backward: dX is ", dX.rows(), "x", dX.cols(), ", expected ",
                                       in_features(), "x", X.cols()));
    check_backward(X, dY);
    detail::check_no_overlap("BlockSparseLinear::backward", "dX", dX, "X", X);
    const auto values = bf16_.forwarded_shadow(weight.matrix.values().size(), "BlockSparseLinear::backward");
    bf16_block_sddmm(weight.matrix, dY, X, std::span<float>(weight.grad), workspace_);
    bf16_block_spmm_transposed(weight.matrix, values, transpose_cache(), dY, dX, x_derivative, transpose_workspace_);
    detail::sum_rows(dY, std::span<float>(bias.grad));
  }

  // Weight and bias gradients only (the first layer of a network).
  void backward(std::type_identity_t<ConstMatrixView<T>> X, std::type_identity_t<ConstMatrixView<T>> dY) {
    check_backward(X, dY);
    if constexpr (std::is_same_v<T, float>)
      if (bf16_.bf16()) {
        backward_bf16(X, dY, nullptr);
        detail::sum_rows<T>(dY, bias.grad);
        return;
      }
    block_sddmm(weight.matrix, dY, X, std::span<T>(weight.grad), workspace_, Update::overwrite);
    detail::sum_rows<T>(dY, bias.grad);
  }
  void backward(ConstMatrixView<bfloat16> X, std::type_identity_t<ConstMatrixView<T>> dY)
    requires std::is_same_v<T, float>
  {
    bf16_.require_bf16_input("BlockSparseLinear::backward");
    check_backward(X, dY);
    backward_bf16(X, dY, nullptr);
    detail::sum_rows<T>(dY, bias.grad);
  }

  template <class Fn>
  void for_each_parameter(Fn&& fn) {
    fn(weight);
    fn(bias);
  }
  template <class Fn>
  void for_each_parameter(Fn&& fn) const {
    fn(weight);
    fn(bias);
  }

  // The precision of the layer's products (top of this file); fp32 by default. Switching keeps
  // every weight, gradient and optimizer state as it is. Throws ArgumentError for bf16 on a
  // layer whose values are not float. O(1); the bf16 shadow is allocated on the first forward
  // (W.values().size() bfloat16 values).
  void set_precision(Precision p) { bf16_.set_precision(p, "BlockSparseLinear"); }
  Precision precision() const noexcept { return bf16_.precision(); }

  // Rounds X and dY for the bf16 products in `scratch` (a model's, nn/model_scratch.hpp)
  // instead of a buffer of the layer's own; nullptr returns to the layer's own. The same bits
  // either way. Precondition: no two layers sharing it run a forward or backward at once.
  void share_bf16_scratch(const SharedBf16Scratch& scratch) noexcept { bf16_.share(scratch); }

  // The cached transposed block pattern backward uses (rebuilt when W's topology changes).
  TransposeCache<T, Index>& transpose_cache() noexcept { return shared_transpose_ ? *shared_transpose_ : transpose_; }

  // Builds W^T in `shared` (one cache for a model's layers, nn/model_scratch.hpp) instead of a
  // cache of the layer's own, which is freed: the model's W^T then costs its largest layer's,
  // for one rebuild (O(nnz + rows + cols), one thread) per backward. nullptr returns to a
  // cache of the layer's own. The same bits either way. Precondition: no two layers sharing
  // it run a backward at the same time. O(1).
  void share_transpose(SharedTranspose<T, Index> shared) noexcept {
    shared_transpose_ = std::move(shared);
    if (shared_transpose_) transpose_ = TransposeCache<T, Index>{};
  }

  // Dynamic sparse training (SparseLayerRef, BlockTopology): a stand-in SparseLinear over the
  // block grid whose weight holds each live block's Frobenius norm, rebuilt from the blocks by
  // every call (O(storage x R x C)); a DST update changes it and replays its changes here.
  SparseLinear<T, Index>& topology_stand_in() {
    stand_in_ = SparseLinear<T, Index>(weight.matrix.block_norms());
    return stand_in_;
  }
  std::int64_t block_height() const noexcept override { return R; }
  std::int64_t block_width() const noexcept override { return C; }
  void apply_slot_moves(const SlotLog& chunk) override {
    // not BlockSparseParameter::apply: its alignment check holds only once the pattern is adopted
    weight.matrix.apply_slot_moves(chunk);
    chunk.apply(weight.grad, Weight::kBlockSize);
    for (auto& s : weight.state)
      if (!s.empty()) chunk.apply(s, Weight::kBlockSize);
    if (!weight.step_counts.empty()) chunk.apply(weight.step_counts, Weight::kBlockSize);
  }
  void adopt_pattern(const PaddedCSR<T, Index>& grid) override { weight.matrix.adopt_pattern(grid); }
  // BlockTopology's: O(storage x R x C), a new topology key.
  void redraw_per_row(std::int64_t blocks_per_row, std::uint64_t seed, double growth_reserve) override {
    const std::int64_t grid_cols = weight.matrix.block_cols();
    if (blocks_per_row < 1 || blocks_per_row > grid_cols)
      throw ArgumentError(detail::message("BlockSparseLinear::redraw_per_row: ", blocks_per_row,
                                          " blocks per row outside [1, ", grid_cols, " block columns]"));
    Weight w =
        Weight::random_per_row(out_features(), in_features(), blocks_per_row, seed, weight.matrix.padding_ratio());
    const double bound = kaiming_uniform_bound(mean_fan_in(w));
    for (T& v : w.values()) v = static_cast<T>(v * bound);  // zeros (padding, outside) stay 0
    const bool decay = weight.decay;
    weight = BlockSparseParameter<T, Index, R, C>(std::move(w));
    weight.decay = decay;
    if (growth_reserve > 0.0) weight.reserve_growth(growth_reserve);
  }
  // BlockTopology's: O(live blocks x R x C).
  double mean_abs_momentum() const override {
    const auto& m = !weight.state.empty() && !weight.state[0].empty() ? weight.state[0] : weight.grad;
    const std::int64_t out = out_features(), in = in_features();
    double sum = 0.0;
    std::int64_t entries = 0;
    weight.matrix.for_each_block([&](std::int64_t i, std::int64_t j, std::int64_t s, const T*) {
      const std::int64_t rows = std::min<std::int64_t>(R, out - i * R), cols = std::min<std::int64_t>(C, in - j * C);
      const T* b = m.data() + s * Weight::kBlockSize;
      for (std::int64_t r = 0; r < rows; ++r)
        for (std::int64_t c = 0; c < cols; ++c) sum += std::abs(static_cast<double>(b[r * C + c]));
      entries += rows * cols;
    });
    return entries > 0 ? sum / static_cast<double>(entries) : 0.0;
  }

  // Bytes of the weights (BlockPaddedCSR arrays + bias), the same layer dense, and everything
  // the layer owns (weights, gradients, optimizer state, transpose cache, workspaces; a shared
  // cache or scratch is counted by its owner, once).
  std::int64_t weight_bytes() const noexcept { return weight.weight_bytes() + bias.weight_bytes(); }
  std::int64_t dense_weight_bytes() const noexcept {
    return (in_features() * out_features() + out_features()) * static_cast<std::int64_t>(sizeof(T));
  }
  std::int64_t memory_bytes() const noexcept {
    return weight_bytes() + weight.state_bytes() + bias.state_bytes() + transpose_.memory_bytes() +
           workspace_.memory_bytes() + transpose_workspace_.memory_bytes() + bf16_.memory_bytes();
  }

  // Packs the kernels' operands into `scratch` (both workspaces: W's and W^T's) instead of
  // buffers of the layer's own, which are freed; nullptr returns to private buffers. A model
  // hands one buffer to all its layers (nn/model_scratch.hpp). The same bits either way.
  // Precondition: no two layers sharing `scratch` run a forward or backward at the same time.
  // O(1), noexcept.
  void share_scratch(const SharedScratch<T>& scratch) noexcept {
    workspace_.share_scratch(scratch);
    transpose_workspace_.share_scratch(scratch);
  }
  // Bytes of the layer's own packing buffers: 0 while it shares a scratch.
  std::int64_t scratch_bytes() const noexcept {
    return workspace_.scratch_bytes() + transpose_workspace_.scratch_bytes();
  }

private:
  static constexpr std::uint64_t kInitKey = 0xB10C'11A1ULL;

  // The three-argument backward for a float X and dY (XT = DYT = T) or bf16 ones (the layer
  // then in bf16: checked by the caller).
  template <class XT, class DYT>
  void backward_of(ConstMatrixView<XT> X, ConstMatrixView<DYT> dY, MatrixView<T> dX, FusedActivation x_activation,
                   ConstMatrixView<T> x_derivative) {
    if (dX.rows() != in_features() || dX.cols() != X.cols())
      throw ShapeError(detail::message("BlockSparseLinear::backward: dX is ", dX.rows(), "x", dX.cols(), ", expected ",
                                       in_features(), "x", X.cols()));
    detail::check_input_activation("BlockSparseLinear::backward", x_activation, X, x_derivative);
    check_backward(X, dY);
    detail::check_no_overlap("BlockSparseLinear::backward", "dX", dX, "X", X);
    detail::check_no_overlap("BlockSparseLinear::backward", "dX", dX, "dY", dY);
    detail::check_no_overlap("BlockSparseLinear::backward", "dX", dX, "the weight gradient",
                             std::span<const T>(weight.grad));
    if constexpr (std::is_same_v<T, float>)
      if (bf16_.bf16()) {
        backward_bf16(X, dY, &dX);
        detail::sum_rows(dY, std::span<float>(bias.grad));
        detail::input_activation_rows<T>(x_activation, X, x_derivative, dX);
        return;
      }
    if constexpr (std::is_same_v<XT, T> && std::is_same_v<DYT, T>) {
      block_sddmm(weight.matrix, dY, X, std::span<T>(weight.grad), workspace_, Update::overwrite);
      detail::sum_rows<T>(dY, bias.grad);
      block_spmm_transposed(weight.matrix, transpose_cache(), dY, dX, transpose_workspace_, Update::overwrite);
      detail::input_activation_rows<T>(x_activation, X, x_derivative, dX);
    }
  }

  template <class XT, class DYT = T>
  void check_backward(ConstMatrixView<XT> X, ConstMatrixView<DYT> dY) const {
    if (X.rows() != in_features() || dY.rows() != out_features() || dY.cols() != X.cols())
      throw ShapeError(detail::message("BlockSparseLinear::backward: layer is ", out_features(), "x", in_features(),
                                       ", X is ", X.rows(), "x", X.cols(), ", dY is ", dY.rows(), "x", dY.cols()));
    weight.check_aligned("BlockSparseLinear::backward");
  }

  // The bf16 products (T = float): see the top of this file. Checks as block_spmm's before
  // anything is rounded or written (the shapes: ShapeError; overlaps: ArgumentError).
  template <class XT, class Out>
  void forward_bf16(ConstMatrixView<XT> X, MatrixView<Out> Y, FusedActivation act) {
    detail::check_block_operands("BlockSparseLinear::forward", weight.matrix, "X", X, in_features(), "Y", Y,
                                 out_features());
    detail::check_no_overlap("BlockSparseLinear::forward", "Y", Y, "the bias", std::span<const float>(bias.value));
    const auto values = bf16_.shadow(weight.matrix.values().size());
    refresh_bf16_values(weight.matrix, values);
    const auto Xb = bf16_.rounded(X);
    bf16_block_spmm(weight.matrix, std::span<const bfloat16>(values), Xb, Y, workspace_,
                    RowEpilogue<float>{bias.value, act});
  }
  // dW at W's live blocks, and dX = W^T dY when dX is given (no activation: the caller's pass).
  template <class XT, class DYT>
  void backward_bf16(ConstMatrixView<XT> X, ConstMatrixView<DYT> dY, const MatrixView<float>* dX) {
    const auto values = bf16_.forwarded_shadow(weight.matrix.values().size(), "BlockSparseLinear::backward");
    const auto [Xb, dYb] = bf16_.rounded(X, dY);
    bf16_block_sddmm(weight.matrix, dYb, Xb, std::span<float>(weight.grad), workspace_);
    if (dX) bf16_block_spmm_transposed(weight.matrix, values, transpose_cache(), dYb, *dX, transpose_workspace_);
  }

  // Live in-matrix entries per output row (an edge block's entries beyond the matrix excluded).
  static double mean_fan_in(const Weight& w) {
    std::int64_t live = 0;
    w.for_each_block([&](std::int64_t i, std::int64_t j, std::int64_t, const T*) {
      live += (std::min<std::int64_t>(w.rows(), (i + 1) * R) - i * R) *
              (std::min<std::int64_t>(w.cols(), (j + 1) * C) - j * C);
    });
    return static_cast<double>(live) / static_cast<double>(w.rows());
  }

  void init(Weight w) {
    const std::int64_t out = w.rows();
    weight = BlockSparseParameter<T, Index, R, C>(std::move(w));
    bias = DenseParameter<T>(out, 1);
    bias.decay = false;
  }

  TransposeCache<T, Index> transpose_;
  SharedTranspose<T, Index> shared_transpose_;  // share_transpose; null: transpose_
  KernelWorkspace<T> workspace_;
  KernelWorkspace<T> transpose_workspace_;
  SparseLinear<T, Index> stand_in_{PaddedCSR<T, Index>(1, 1)};  // topology_stand_in()
  Bf16Operands<T> bf16_;  // precision, bf16 shadow of W's values (their layout), rounded X and dY
};

}  // namespace sprig
