// sprig/nn/sparse_linear.hpp — SparseLinear<T, Index>: Y = W X + b with W a PaddedCSR.
//
// Shapes (feature-major): X [in x B], Y and dY [out x B], dX [in x B], W out x in.
//   forward:  Y = W X + b                                   (spmm; bias in its store)
//             or Y = relu(W X + b) with FusedActivation::relu (ReLU fused; Sequential uses it)
//   backward: dW[s] = dot(dY[i,:], X[c,:]) at live slots    (sddmm, aligned with W's slots)
//             db    = sum over the batch of dY
//             dX    = W^T dY                                (spmm_transposed on the cached W^T)
//             (the weight gradient and dX in one pass over W^T where it applies: sddmm_dx;
//             with FusedActivation::relu for an X that a ReLU produced, dX gets its backward;
//             with gelu and x_derivative for an X that a GELU produced, its derivative)
// backward overwrites the gradients (it does not accumulate): the loss already averages
// over the batch. The two-argument backward skips dX, for the first layer of a network.
//
// Cost: forward and backward are O(nnz x B) (plus O(nnz) to rebuild the cached W^T after a
// topology change); a steady-state step allocates nothing (the workspaces are kept).
// Threads: every result is bitwise identical for any OpenMP thread count (the kernels' and
// bias.hpp's guarantee). A layer is not safe to use from two threads at once (it owns its
// caches and workspaces); distinct layers are, unless they share a scratch (below).
//
// Memory, and what lives from forward to backward: the layer keeps W, its gradient and
// optimizer state, the cached W^T (rebuilt only after a topology change) and two kernel
// workspaces (W's and W^T's: row partitions and column-block bounds keyed by topology,
// O(rows)). backward needs the X of the last forward, which the caller keeps (the layer holds
// no activation). The packing buffers ([in x B] for W's passes, [out x B] for W^T's) matter
// only within one kernel call: by default the layer owns them, and share_scratch() makes
// them one buffer shared with other layers (a model's, nn/model_scratch.hpp), sized by the
// largest request. Sharing is safe because layers sharing a scratch run their kernel calls
// one after another (a call may itself use OpenMP threads), and gives the same bits.
//
// Slot order, and per-slot arrays kept by the caller: a layer wide enough that the kernels
// block its columns (a panel's X rows beyond SPRIG_COLUMN_BLOCK_BYTES, core/tuning.hpp;
// kernels/panels.hpp, ColumnBlocks) keeps each row's live weights grouped by column block, so
// a block's are contiguous. After a topology change
// forward regroups them (group_columns below) before it multiplies: that moves slots, as a
// topology change does. weight.grad and weight.state move with their weights. An array the
// caller keeps aligned with W's slots itself (its own momentum, a mask, a copy of values())
// must follow too: either attach a SlotLog with set_slot_log(), to which forward appends each
// regrouping, and replay it on the array; or call group_columns(B, &log) right after the
// topology change, with the log of that change, so the next forward has nothing to regroup.
//
// Precision (set_precision; core/precision.hpp): with Precision::bf16 (T = float only) the
// products run on the bf16 kernels (kernels/bf16_spmm.hpp, bf16_sddmm.hpp): forward rounds
// W's values into a bf16 shadow (W's slot layout, refreshed from the float masters on every
// forward, so an optimizer step, a topology change or a restored checkpoint is always seen)
// and X to bf16, multiplies with float accumulation and adds the bias (and a ReLU) in float in
// the kernel's store; backward rounds X and dY, computes dW (float, at W's slots) and
// dX = W^T dY (float) from them, and applies x_activation in a pass after. Activations, gradients, bias, optimizer state and DST
// stay float; the rounded X and dY live only within the call, in a Bf16Scratch (the layer's
// own, or a model's: share_bf16_scratch). Results: each output within the bound of the
// fp32 products computed from the rounded operands (the kernels' headers), bitwise identical
// for any thread count.
#pragma once

#include <type_traits>

#include <cstdint>
#include <span>
#include <utility>

#include "../core/concepts.hpp"
#include "../core/error.hpp"
#include "../core/matrix.hpp"
#include "../core/padded_csr.hpp"
#include "../core/precision.hpp"
#include "../core/rng.hpp"
#include "../kernels/bf16_sddmm.hpp"
#include "../kernels/bf16_spmm.hpp"
#include "../kernels/sddmm.hpp"
#include "../kernels/sddmm_dx.hpp"
#include "../kernels/spmm.hpp"
#include "../kernels/spmm_transposed.hpp"
#include "../kernels/transpose.hpp"
#include "../kernels/workspace.hpp"
#include "bf16_scratch.hpp"
#include "bias.hpp"
#include "init.hpp"
#include "parameter.hpp"

namespace sprig {

// The parameters of a random SparseLinear, set by name (as positional arguments two adjacent
// integers and two adjacent doubles were easy to swap):
//     SparseLinear<float, std::int32_t> layer(784, 300, {.density = 0.1, .seed = 1, .layer_key = 0});
struct SparseLinearOptions {
  double density = 0.0;         // fraction of the in x out weights that are live, in (0, 1]; required
  std::uint64_t seed = 0;       // with layer_key, the only input of the topology and the values
  std::uint64_t layer_key = 0;  // tells apart the layers of one model drawn from one seed
  WeightInit init = {};         // how the live values are drawn (init.hpp)
  // spare slots per row, as a fraction of its live count, for weights that topology updates
  // insert without moving the row (PaddedCSR)
  double padding_ratio = kDefaultPaddingRatio;
  // storage reserved for rows that topology updates relocate (SparseParameter::reserve_growth);
  // 0 for static sparsity, SparseParameter<T, Index>::kGrowthReserve for dynamic sparse training
  double growth_reserve = 0.0;
};

template <Value T, ColumnIndex Index>
class SparseLinear {
public:
  using value_type = T;
  using index_type = Index;
  using Options = SparseLinearOptions;

  SparseParameter<T, Index> weight;  // out x in
  DenseParameter<T> bias;            // out x 1, not decayed

  // A random in -> out layer: round(density * in * out) live weights at uniformly random
  // positions (per layer, so rows differ in length), drawn by options.init with the effective
  // fan-in nnz / out = in * density (init.hpp), zero bias. Topology and values are a function of
  // (options.seed, options.layer_key) only. options.growth_reserve > 0 reserves that fraction
  // of storage right away (SparseParameter::reserve_growth), before later layers allocate.
  // Memory O(nnz), never in x out (PaddedCSR::random_total). Throws ShapeError for
  // in or out < 1; ArgumentError for a density outside (0, 1] (the default 0 included: it has
  // no sensible default) or one that rounds to no weight, a padding ratio or growth reserve
  // outside [0, 64], more columns than Index holds, or a normal init's std not finite and > 0.
  SparseLinear(std::int64_t in, std::int64_t out, const SparseLinearOptions& options) {
    if (in <= 0 || out <= 0)
      throw ShapeError(detail::message("SparseLinear: in and out must be > 0, got ", in, " and ", out));
    const double density = options.density;
    if (!(density > 0.0 && density <= 1.0))
      throw ArgumentError(
          detail::message("SparseLinear: density ", density, " outside (0, 1] (set SparseLinearOptions::density)"));
    if (!(options.padding_ratio >= 0.0 && options.padding_ratio <= 64.0))
      throw ArgumentError(detail::message("SparseLinear: padding_ratio ", options.padding_ratio, " outside [0, 64]"));
    if (!(options.growth_reserve >= 0.0 && options.growth_reserve <= 64.0))
      throw ArgumentError(detail::message("SparseLinear: growth_reserve ", options.growth_reserve, " outside [0, 64]"));
    CounterRng rng(options.seed, options.layer_key, kInitKey);
    auto w = PaddedCSR<T, Index>::random_density(out, in, density, rng(), options.padding_ratio);
    if (w.nnz() == 0)
      throw ArgumentError(detail::message("SparseLinear: density ", density, " of a ", out, "x", in,
                                          " layer rounds to no weight at all"));
    const double fan_in = static_cast<double>(w.nnz()) / static_cast<double>(out);
    if (options.init.is_normal()) {  // live values redrawn in slot order, from the same stream
      const double scale = normal_init_std("SparseLinear", options.init, static_cast<double>(in), fan_in);
      const std::span<T> values = w.values();
      w.for_each_live([&](std::int64_t, std::int64_t, T, std::int64_t s) { values[s] = static_cast<T>(scale * rng.normal()); });
    } else {
      const double bound = kaiming_uniform_bound(fan_in);
      for (T& v : w.values()) v = static_cast<T>(v * bound);  // values in U[-1, 1); padding stays 0
    }
    init(std::move(w));
    if (options.growth_reserve > 0.0) weight.reserve_growth(options.growth_reserve);
  }

  // The positional form that SparseLinearOptions replaced, kept [[deprecated]] for one minor
  // version (the deprecation policy, CONTRIBUTING.md): the same layer as the options form.
  [[deprecated("use SparseLinear(in, out, {.density = d, .seed = s, .layer_key = k}); removed in 0.3")]] SparseLinear(
      std::int64_t in, std::int64_t out, double density, std::uint64_t seed, std::uint64_t layer_key = 0,
      double padding_ratio = kDefaultPaddingRatio, double growth_reserve = 0.0)
      : SparseLinear(in, out,
                     SparseLinearOptions{.density = density,
                                         .seed = seed,
                                         .layer_key = layer_key,
                                         .padding_ratio = padding_ratio,
                                         .growth_reserve = growth_reserve}) {}

  // A layer with the given weight (out x in = weight.rows() x weight.cols()) and zero bias, as
  // a checkpoint restores one. O(1) beyond the move. Throws ShapeError for an empty weight.
  explicit SparseLinear(PaddedCSR<T, Index> w) {
    if (w.rows() <= 0 || w.cols() <= 0)
      throw ShapeError(detail::message("SparseLinear: weight must be non-empty, got ", w.rows(), "x", w.cols()));
    init(std::move(w));
  }

  // Shape and live fraction of W (O(1)).
  std::int64_t in_features() const noexcept { return weight.matrix.cols(); }
  std::int64_t out_features() const noexcept { return weight.matrix.rows(); }
  double density() const noexcept { return weight.matrix.density(); }

  // Y = act(W X + b); the bias and the activation are applied in the kernel's store. May
  // first regroup W's slots (see the top of this file; logged to slot_log() if set). X and Y
  // [in x B] and [out x B], Y apart from X and from W's values. Throws, before anything
  // moves or is written: ShapeError for the shapes or, when it regroups, for a weight.grad /
  // state not aligned with W's slots; ArgumentError for act = gelu (not a forward epilogue)
  // or for overlapping operands.
  void forward(std::type_identity_t<ConstMatrixView<T>> X, std::type_identity_t<MatrixView<T>> Y,
               FusedActivation act = FusedActivation::none) {
    forward_of(X, Y, act);
  }
  // The same with X in bf16 (a model that keeps its activations in bf16,
  // nn/projection_input.hpp): bitwise the float form's results for a float X that rounds to
  // this X. Needs Precision::bf16 (else ArgumentError); throws as the float form.
  void forward(ConstMatrixView<bfloat16> X, std::type_identity_t<MatrixView<T>> Y,
               FusedActivation act = FusedActivation::none)
    requires std::is_same_v<T, float>
  {
    bf16_.require_bf16_input("SparseLinear::forward");
    forward_of(X, Y, act);
  }
  // The same into a bf16 Y: the float Y rounded once, bitwise (bf16_spmm's bf16 output).
  void forward(ConstMatrixView<bfloat16> X, MatrixView<bfloat16> Y,
               FusedActivation act = FusedActivation::none) requires std::is_same_v<T, float> {
    bf16_.require_bf16_input("SparseLinear::forward");
    forward_of(X, Y, act);
  }

  // Weight and bias gradients (weight.grad, bias.grad: overwritten), and dX = W^T dY. With
  // x_activation = relu, X is the output of a ReLU and dX gets that ReLU's backward too
  // (relu_backward(X, W^T dY), in sddmm_dx's store), so the ReLU's own backward pass is not
  // needed (Sequential skips it). With gelu, X is a GELU's output and dX = x_derivative *
  // W^T dY (x_derivative [in x B] from GELU::forward_keep_derivative), in sddmm_dx's store
  // too. X is the input of the last forward (else the gradient is not the last loss's); dX
  // apart from every input and from weight.grad. Throws ShapeError for the shapes or a weight.grad / state not
  // aligned with W's slots (a topology change not replayed with weight.apply); ArgumentError
  // (from sddmm_dx) for overlapping operands.
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
    bf16_.require_bf16_input("SparseLinear::backward");
    backward_of(X, dY, dX, x_activation, x_derivative);
  }
  // The same with dY in bf16 too (a model that keeps its layers' dY in bf16, nn/gpt.hpp): the
  // products read dY as it is (nothing rounded) and the bias gradient sums it widened:
  // bitwise the float form's results for a float dY that holds these values. No x_activation.
  // Needs Precision::bf16 (else ArgumentError); throws as the float form.
  void backward(ConstMatrixView<bfloat16> X, ConstMatrixView<bfloat16> dY, std::type_identity_t<MatrixView<T>> dX)
    requires std::is_same_v<T, float>
  {
    bf16_.require_bf16_input("SparseLinear::backward");
    backward_of(X, dY, dX, FusedActivation::none, ConstMatrixView<T>{});
  }
  // The same with X the output of a GELU whose derivative D is kept in bf16: dX = bf16(D *
  // W^T dY) in the product's store (bf16_spmm_transposed's x_derivative form: bitwise
  // GELU::backward(D, dX float, dX bf16) after the form above where that runs one column
  // block). dX may be D itself (in place); it must not overlap X or dY (ArgumentError).
  void backward(ConstMatrixView<bfloat16> X, ConstMatrixView<bfloat16> dY, MatrixView<bfloat16> dX,
                ConstMatrixView<bfloat16> x_derivative) requires std::is_same_v<T, float> {
    constexpr const char* fn = "SparseLinear::backward";
    bf16_.require_bf16_input(fn);
    if (dX.rows() != in_features() || dX.cols() != X.cols())
      throw ShapeError(
          detail::message(fn, ": dX is ", dX.rows(), "x", dX.cols(), ", expected ", in_features(), "x", X.cols()));
    check_backward(X, dY);
    detail::check_no_overlap(fn, "dX", dX, "X", X);
    const auto values =
        bf16_.forwarded_shadow(static_cast<std::size_t>(weight.matrix.storage_size()), "SparseLinear::backward");
    bf16_sddmm(weight.matrix, dY, X, std::span<float>(weight.grad), workspace_);
    bf16_spmm_transposed(weight.matrix, values, transpose_cache(), dY, dX, x_derivative, transpose_workspace_);
    detail::sum_rows(dY, std::span<float>(bias.grad));
  }

  // Weight and bias gradients only (no dX: the first layer of a network). Throws as the
  // three-argument form.
  void backward(std::type_identity_t<ConstMatrixView<T>> X, std::type_identity_t<ConstMatrixView<T>> dY) {
    check_backward(X, dY);
    if constexpr (std::is_same_v<T, float>)
      if (bf16_.bf16()) {
        backward_bf16(X, dY, nullptr);
        detail::sum_rows<T>(dY, bias.grad);
        return;
      }
    sddmm(weight.matrix, dY, X, std::span<T>(weight.grad), workspace_, Update::overwrite);
    detail::sum_rows<T>(dY, bias.grad);
  }
  void backward(ConstMatrixView<bfloat16> X, std::type_identity_t<ConstMatrixView<T>> dY)
    requires std::is_same_v<T, float>
  {
    bf16_.require_bf16_input("SparseLinear::backward");
    check_backward(X, dY);
    backward_bf16(X, dY, nullptr);
    detail::sum_rows<T>(dY, bias.grad);
  }

  // Groups each row's live weights by the column blocks a forward at batch width `batch`
  // works through, if they are not grouped for it yet (after a topology change, or for a
  // batch that needs narrower blocks); forward does the same implicitly. grad and optimizer
  // state move with their weights; with a log, the permutation is appended to it (one
  // SlotLog::remap over every slot) for per-slot arrays kept outside weight, which must then
  // replay it. Returns whether any slot moved. O(nnz + rows x blocks) when it regroups, O(1)
  // when grouped already. Throws ShapeError for batch < 1, or if weight.grad or state is
  // misaligned with the weight (a topology change not yet replayed with weight.apply).
  bool group_columns(std::int64_t batch, SlotLog* log = nullptr) {
    if (batch < 1) throw ShapeError(detail::message("SparseLinear::group_columns: batch ", batch, " must be >= 1"));
    return regroup(batch, log);
  }

  // The log forward appends its regrouping to (see group_columns), or nullptr (the default:
  // nothing recorded; the caller then keeps no per-slot array of its own). The log is the
  // caller's and must outlive the layer's forward calls; copies of the layer share it.
  void set_slot_log(SlotLog* log) noexcept { slot_log_ = log; }
  SlotLog* slot_log() const noexcept { return slot_log_; }

  // Calls fn(weight) then fn(bias): what an optimizer's step visits.
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

  // The precision of the layer's products (top of this file); fp32 by default. Switching
  // keeps every weight, gradient and optimizer state as it is. Throws ArgumentError for bf16
  // on a layer whose values are not float. O(1); the bf16 shadow is allocated on the first
  // forward (W.storage_size() bfloat16 values).
  void set_precision(Precision p) { bf16_.set_precision(p, "SparseLinear"); }
  Precision precision() const noexcept { return bf16_.precision(); }

  // Rounds X and dY for the bf16 products in `scratch` (a model's, nn/model_scratch.hpp)
  // instead of a buffer of the layer's own; nullptr returns to the layer's own. The same bits
  // either way. Precondition: no two layers sharing it run a forward or backward at once.
  void share_bf16_scratch(const SharedBf16Scratch& scratch) noexcept { bf16_.share(scratch); }

  // The cached W^T backward uses (rebuilt when W's topology_key changes).
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

  // Bytes of the model's weights (PaddedCSR arrays + bias), what a checkpoint must hold.
  std::int64_t weight_bytes() const noexcept { return weight.weight_bytes() + bias.weight_bytes(); }
  // The same layer dense: (in * out + out) values.
  std::int64_t dense_weight_bytes() const noexcept {
    return (in_features() * out_features() + out_features()) * static_cast<std::int64_t>(sizeof(T));
  }
  // Everything the layer owns: weights, gradients, optimizer state, transpose cache and
  // kernel workspaces (the cache and packing buffers only while not shared: a shared one is
  // counted by its owner, once).
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
  static constexpr std::uint64_t kInitKey = 0x11A1'7EA2ULL;

  // forward for a float X (XT = T) or a bf16 one (the layer then in bf16: checked by the caller).
  template <class XT, class Out = T>
  void forward_of(ConstMatrixView<XT> X, MatrixView<Out> Y, FusedActivation act) {
    constexpr const char* fn = "SparseLinear::forward";
    if (X.rows() != in_features() || Y.rows() != out_features() || Y.cols() != X.cols())
      throw ShapeError(detail::message(fn, ": layer is ", out_features(), "x", in_features(), ", X is ", X.rows(), "x",
                                       X.cols(), ", Y is ", Y.rows(), "x", Y.cols()));
    // the kernels check these too, but only after the regrouping below has moved the slots
    detail::check_forward_activation(fn, act);
    if constexpr (std::is_same_v<XT, T>) {
      detail::check_spmm_operands(fn, weight.matrix, X, Y);
    } else {
      detail::check_no_overlap(fn, "the output", Y, "the input", X);
      detail::check_no_overlap(fn, "the output", Y, "W's values", weight.matrix.values());
    }
    if (X.cols() > 0) regroup(X.cols(), slot_log_);
    if (bf16_.bf16()) {
      if constexpr (std::is_same_v<T, float>) forward_bf16(X, Y, act);
      return;
    }
    if constexpr (std::is_same_v<XT, T> && std::is_same_v<Out, T>)
      spmm(weight.matrix, X, Y, workspace_, RowEpilogue<T>{bias.value, act});
  }

  // The three-argument backward for a float or a bf16 X (as forward_of), and a float dY or (with
  // a bf16 X) a bf16 one.
  template <class XT, class DYT>
  void backward_of(ConstMatrixView<XT> X, ConstMatrixView<DYT> dY, MatrixView<T> dX, FusedActivation x_activation,
                   ConstMatrixView<T> x_derivative) {
    constexpr const char* fn = "SparseLinear::backward";
    if (dX.rows() != in_features() || dX.cols() != X.cols())
      throw ShapeError(detail::message(fn, ": dX is ", dX.rows(), "x", dX.cols(), ", expected ", in_features(), "x",
                                       X.cols()));
    check_backward(X, dY);
    if (bf16_.bf16()) {
      if constexpr (std::is_same_v<T, float>) {
        detail::check_input_activation<T>(fn, x_activation, X, x_derivative);
        detail::check_no_overlap(fn, "dX", dX, "dY", dY);
        detail::check_no_overlap(fn, "dX", dX, "X", X);
        backward_bf16(X, dY, &dX);
        detail::input_activation_rows<T>(x_activation, X, x_derivative, dX);
        detail::sum_rows(dY, std::span<float>(bias.grad));
      }
      return;
    }
    if constexpr (std::is_same_v<XT, T> && std::is_same_v<DYT, T>) {
      sddmm_dx(weight.matrix, transpose_cache(), dY, X, std::span<T>(weight.grad), dX, workspace_, transpose_workspace_,
               x_activation, x_derivative);
      detail::sum_rows<T>(dY, bias.grad);
    }
  }

  // The checks every backward form makes before writing any gradient.
  template <class XT, class DYT = T>
  void check_backward(ConstMatrixView<XT> X, ConstMatrixView<DYT> dY) const {
    if (X.rows() != in_features() || dY.rows() != out_features() || dY.cols() != X.cols())
      throw ShapeError(detail::message("SparseLinear::backward: layer is ", out_features(), "x", in_features(),
                                       ", X is ", X.rows(), "x", X.cols(), ", dY is ", dY.rows(), "x", dY.cols()));
    weight.check_aligned("SparseLinear::backward");
  }

  // The bf16 products (T = float): see the top of this file.
  template <class XT, class Out>
  void forward_bf16(ConstMatrixView<XT> X, MatrixView<Out> Y, FusedActivation act) {
    const auto values = bf16_.shadow(static_cast<std::size_t>(weight.matrix.storage_size()));
    refresh_bf16_values(weight.matrix, values);
    const auto Xb = bf16_.rounded(X);
    bf16_spmm(weight.matrix, std::span<const bfloat16>(values), Xb, Y, workspace_, RowEpilogue<float>{bias.value, act});
  }
  // dW at W's slots, and dX = W^T dY when dX is given (no activation: the caller's pass).
  template <class XT, class DYT>
  void backward_bf16(ConstMatrixView<XT> X, ConstMatrixView<DYT> dY, const MatrixView<float>* dX) {
    const auto values =
        bf16_.forwarded_shadow(static_cast<std::size_t>(weight.matrix.storage_size()), "SparseLinear::backward");
    const auto [Xb, dYb] = bf16_.rounded(X, dY);
    bf16_sddmm(weight.matrix, dYb, Xb, std::span<float>(weight.grad), workspace_);
    if (dX) bf16_spmm_transposed(weight.matrix, values, transpose_cache(), dYb, *dX, transpose_workspace_);
  }

  bool regroup(std::int64_t batch, SlotLog* log) {
    const auto blocks = detail::kernel_column_blocks<T>(in_features(), batch, workspace_.column_block_bytes);
    if (blocks.count <= 1 || (grouped_key_ == weight.matrix.topology_key() && blocks.shift >= grouped_shift_))
      return false;
    const bool moved = weight.group_columns(blocks.shift, log);
    grouped_key_ = weight.matrix.topology_key();
    grouped_shift_ = blocks.shift;
    return moved;
  }

  void init(PaddedCSR<T, Index> w) {
    const std::int64_t out = w.rows();
    weight = SparseParameter<T, Index>(std::move(w));
    bias = DenseParameter<T>(out, 1);
    bias.decay = false;
  }

  TransposeCache<T, Index> transpose_;
  SharedTranspose<T, Index> shared_transpose_;  // share_transpose; null: transpose_
  // Kernel scratch (row partition keyed by topology, X packing buffer: the layer's own or a
  // shared one) kept across steps so a steady-state step allocates nothing: one for W
  // (forward, weight gradient), one for W^T.
  KernelWorkspace<T> workspace_;
  KernelWorkspace<T> transpose_workspace_;
  // The weight's topology when forward last grouped its rows, and the block shift it grouped
  // them for (grouped for one width means grouped for wider ones).
  TopologyKey grouped_key_;
  int grouped_shift_ = 0;
  SlotLog* slot_log_ = nullptr;  // where forward's regrouping is recorded (set_slot_log)
  Bf16Operands<T> bf16_;  // precision, bf16 shadow of W's values (slot layout), rounded X and dY
};

}  // namespace sprig
