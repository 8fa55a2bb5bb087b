// sprig/io/checkpoint_kinds.hpp — what each component that owns saved state records of
// itself in a training-state file (io/checkpoint.hpp; layout in docs/checkpoint_format.md):
// one traits struct per layer kind, parameter kind and optimizer, giving its kind code, its
// name and (optimizers) its options by name. The checkpoint's encoder and decoder read
// these and nothing else about the component, so teaching checkpoints a new layer or
// optimizer is one specialisation here; its codes must be new (the format is fixed).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "../core/concepts.hpp"
#include "../nn/parameter.hpp"
#include "../nn/sequential.hpp"
#include "../optim/adamw.hpp"
#include "../optim/sgd.hpp"
#include "binary_format.hpp"

namespace sprig::detail::ckpt {

// Section tags of a training-state file, in file order.
inline constexpr std::uint32_t kModel = binary::tag("MODL");
inline constexpr std::uint32_t kSparse = binary::tag("SPAR");
inline constexpr std::uint32_t kDense = binary::tag("DENS");
inline constexpr std::uint32_t kBlockSparse = binary::tag("BSPR");
inline constexpr std::uint32_t kOptimizer = binary::tag("OPTM");
inline constexpr std::uint32_t kDST = binary::tag("DST ");
inline constexpr std::uint32_t kProgress = binary::tag("PROG");
inline constexpr std::uint32_t kSettings = binary::tag("RUNS");

// The name of the kind with `code` among the traits Kinds... ("unknown" if none has it):
// messages name what a file holds, which need not be what the target is.
template <class... Kinds>
const char* name_of_code(std::uint8_t code) noexcept {
  const char* name = "unknown";
  (void)((code == Kinds::code ? (name = Kinds::name, true) : false) || ...);
  return name;
}

// ---- layer kinds: the "MODL" entries of a Sequential -------------------------------------------

template <class L>
struct LayerKind {
  static_assert(sizeof(L) == 0, "checkpoint: unknown layer type; give it a LayerKind in io/checkpoint_kinds.hpp");
};
template <Value T, ColumnIndex Index>
struct LayerKind<SparseLinear<T, Index>> {
  static constexpr std::uint8_t code = 1;
  static constexpr const char* name = "SparseLinear";
};
template <Value T>
struct LayerKind<Linear<T>> {
  static constexpr std::uint8_t code = 2;
  static constexpr const char* name = "Linear";
};
template <Value T>
struct LayerKind<ReLU<T>> {
  static constexpr std::uint8_t code = 3;
  static constexpr const char* name = "ReLU";
};
template <Value T>
struct LayerKind<GELU<T>> {
  static constexpr std::uint8_t code = 4;
  static constexpr const char* name = "GELU";
};

// ---- parameter kinds: their sections, and the "MODL" entries of any other model ---------------

// A parameter is block-sparse if it has entry_count(), sparse if its weight has storage, else
// dense (nn/parameter.hpp).
template <class P>
concept BlockSparseParameterLike = requires(const P& p) {
  p.entry_count();
};
template <class P>
concept SparseParameterLike = !BlockSparseParameterLike<P> && requires(const P& p) {
  p.matrix.storage_size();
};

struct SparseKind {
  static constexpr std::uint8_t code = 5;
  static constexpr const char* name = "sparse parameter";
  static constexpr std::uint32_t tag = kSparse;
  static constexpr const char* matrix = "sparse weight";  // as messages name the saved matrix
};
struct DenseKind {
  static constexpr std::uint8_t code = 6;
  static constexpr const char* name = "dense parameter";
  static constexpr std::uint32_t tag = kDense;
  static constexpr const char* matrix = "dense parameter";
};
struct BlockSparseKind {
  static constexpr std::uint8_t code = 7;
  static constexpr const char* name = "block-sparse parameter";
  static constexpr std::uint32_t tag = kBlockSparse;
  static constexpr const char* matrix = "block-sparse weight";
};
template <class P>
using ParameterKind = std::conditional_t<BlockSparseParameterLike<P>, BlockSparseKind,
                                         std::conditional_t<SparseParameterLike<P>, SparseKind, DenseKind>>;

// The name of a "MODL" entry's kind code, layer or parameter.
inline const char* structure_kind_name(std::uint8_t code) noexcept {
  using I = std::int32_t;
  return name_of_code<LayerKind<SparseLinear<float, I>>, LayerKind<Linear<float>>, LayerKind<ReLU<float>>,
                      LayerKind<GELU<float>>, SparseKind, DenseKind, BlockSparseKind>(code);
}

// ---- optimizers ----------------------------------------------------------------------------------

// OptimizerKind<O>: code and name; option_names and options(o), in file order; and
// older_option_count, an option count that files written before the last option existed hold
// (they load into any value of it; equal to option_names.size() when there are none).
template <class O>
struct OptimizerKind {
  static_assert(sizeof(O) == 0,
                "checkpoint: unknown optimizer type; give it an OptimizerKind in io/checkpoint_kinds.hpp");
};
template <Value T>
struct OptimizerKind<SGD<T>> {
  static constexpr std::uint8_t code = 1;
  static constexpr const char* name = "SGD";
  static constexpr std::array<const char*, 3> option_names = {"momentum", "weight_decay", "nesterov"};
  static constexpr std::size_t older_option_count = 3;
  static std::vector<double> options(const SGD<T>& o) {
    return {o.options().momentum, o.options().weight_decay, o.options().nesterov ? 1.0 : 0.0};
  }
};
template <Value T>
struct OptimizerKind<AdamW<T>> {
  static constexpr std::uint8_t code = 2;
  static constexpr const char* name = "AdamW";
  static constexpr std::array<const char*, 5> option_names = {"beta1", "beta2", "eps", "weight_decay",
                                                              "bias_correction"};
  static constexpr std::size_t older_option_count = 4;  // before bias_correction (optim/adamw.hpp)
  static std::vector<double> options(const AdamW<T>& o) {
    return {o.options().beta1, o.options().beta2, o.options().eps, o.options().weight_decay,
            static_cast<double>(o.options().bias_correction)};
  }
};

inline const char* optimizer_name(std::uint8_t code) noexcept {
  return name_of_code<OptimizerKind<SGD<float>>, OptimizerKind<AdamW<float>>>(code);
}

}  // namespace sprig::detail::ckpt
