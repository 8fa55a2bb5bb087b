// sprig/kernels/dispatch.hpp — which architecture the sparse kernels run on: the one this
// translation unit is compiled for, or, in a dispatching build (SPRIG_DISPATCH defined), the
// widest of the program's targets that the CPU runs, chosen at the first kernel call.
//
// Dispatching build (x86-64, GCC or Clang): every translation unit that includes sprig
// defines SPRIG_DISPATCH and is compiled for the oldest CPU the program must run on (no
// -march, or -march=x86-64-v2); the program also links one translation unit per target,
// which includes dispatch_target.hpp, compiled with that target's flags:
//   sse4_2  -msse4.2
//   avx2    -mavx2 -mfma
//   avx512  -mavx512f -mavx512cd -mavx512dq -mavx512bw -mavx512vl -mavx2 -mfma
// cmake/SprigDispatch.cmake's sprig_dispatch(<target>) does all of this in one line.
// Dispatched (the lists SPRIG_DETAIL_SPARSE_KERNELS and SPRIG_DETAIL_DENSE_KERNELS below):
// spmm, spmm_transposed, sddmm and sddmm_dx, each instantiated for every (T, Index) pair, the
// column blocks SparseLinear groups its rows for, the narrow dense kernels (a classifier's
// head), the optimizers' element-wise updates (AdamW, SGD), LayerNorm's column passes, the
// residual add and gradient clipping's two passes (elementwise.hpp), the GELU's row passes
// (gelu.hpp), and the bf16 sparse kernels (bf16_spmm, bf16_spmm_transposed and bf16_sddmm's
// portable path, for every Index; bf16_sddmm's AVX512-BF16 path is picked by its own CPU probe,
// bf16_paths.hpp). The other kernels (block-sparse, the portable GEMM, the bias passes) run on
// the architecture of the translation unit that calls them.
// Choice: SPRIG_KERNEL_ARCH=sse4_2|avx2|avx512 in the environment at the first kernel call, or
// sprig::set_kernel_arch(name), forces a target; otherwise the widest the CPU runs. A forced
// target the CPU lacks, an unknown name, or a CPU without SSE4.2 throws sprig::Error at the
// first call.
// Determinism: each target's results are bitwise identical for any thread count; targets
// differ from each other within the kernels' rounding (register width changes the order of
// the sums).
#pragma once

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <vector>

#include "../core/bfloat16.hpp"
#include "../core/concepts.hpp"
#include "../core/error.hpp"
#include "../core/matrix.hpp"
#include "../core/padded_csr.hpp"
#include "panels.hpp"
#include "row_epilogue.hpp"
#include "simd.hpp"
#include "transpose.hpp"
#include "update_mode.hpp"
#include "workspace.hpp"

namespace sprig::detail {

// The kernels on architecture A once their operands are checked (spmm.hpp, spmm_transposed.hpp,
// sddmm.hpp, sddmm_dx.hpp, narrow_dense.hpp, optimizer_update.hpp, elementwise.hpp, gelu.hpp).
template <class A, Value T, ColumnIndex Index>
void spmm_on(const PaddedCSR<T, Index>& W, ConstMatrixView<T> X, MatrixView<T> Y, KernelWorkspace<T>& ws, Update mode,
             const RowEpilogue<T>& epilogue);
template <class A, Value T, ColumnIndex Index>
void spmm_transposed_on(const PaddedCSR<T, Index>& W, TransposeCache<T, Index>& cache, ConstMatrixView<T> dY,
                        MatrixView<T> dX, KernelWorkspace<T>& workspace, Update mode);
template <class A, Value T, ColumnIndex Index>
void sddmm_on(const PaddedCSR<T, Index>& W, ConstMatrixView<T> dY, ConstMatrixView<T> X, std::span<T> grad,
              KernelWorkspace<T>& ws, Update mode);
template <class A, Value T, ColumnIndex Index>
void sddmm_dx_on(const PaddedCSR<T, Index>& W, TransposeCache<T, Index>& cache, ConstMatrixView<T> dY,
                 ConstMatrixView<T> X, std::span<T> grad, MatrixView<T> dX, KernelWorkspace<T>& workspace,
                 KernelWorkspace<T>& transpose_workspace, FusedActivation x_activation,
                 ConstMatrixView<T> x_derivative);
template <class A, class T>
void narrow_forward_on(ConstMatrixView<T> W, ConstMatrixView<T> X, MatrixView<T> Y, std::span<const T> bias,
                       FusedActivation act);
template <class A, class T>
void narrow_backward_on(ConstMatrixView<T> W, ConstMatrixView<T> X, ConstMatrixView<T> dY, MatrixView<T> dW,
                        MatrixView<T> dX, FusedActivation x_activation, ConstMatrixView<T> x_derivative);

template <Value T>
struct AdamWStep;
template <Value T>
struct SGDStep;
template <class A, class T>
void adamw_update_on(const AdamWStep<T>& k, T c1, T c2, T* w, const T* g, T* m, T* v, std::int64_t n);
template <class A, class T>
void adamw_counted_update_on(const AdamWStep<T>& k, const T* c1, const T* c2, T top, T* w, const T* g, T* m, T* v,
                             T* counts, std::int64_t n);
template <class A, class T>
void sgd_update_on(const SGDStep<T>& k, T* w, const T* g, T* buffer, std::int64_t n);
template <class A, class T>
bool zero_moments_on(const T* m, const T* v, std::int64_t n);

template <Value T>
struct LayerNormForwardArgs;
template <Value T>
struct LayerNormBackwardArgs;
template <class A, class T>
void layer_norm_forward_on(const LayerNormForwardArgs<T>& a);
template <class A, class T>
void layer_norm_backward_on(const LayerNormBackwardArgs<T>& a);
template <class A, class T>
void layer_norm_dy_xhat_on(const T* x, const T* dy, const T* mean, const T* rstd, T* out, std::int64_t n);
template <class A, class T>
void add_arrays_on(const T* a, const T* b, T* y, std::int64_t n);
template <class A, class T>
double sum_squares_on(const T* p, std::int64_t n);
template <class A, class T>
void gelu_forward_on(const T* x, T* y, std::int64_t n);
template <class A, class T>
void gelu_keep_derivative_on(T* z, T* y, std::int64_t n);
template <class A, class T>
void gelu_backward_on(const T* x, const T* dy, T* dx, std::int64_t n);
template <class A, class T>
void scale_array_on(T* p, T c, std::int64_t n);
template <class A, class T>
void gelu_keep_derivative_bf16_on(const T* z, bfloat16* y, bfloat16* d, std::int64_t n);
template <class A, class T>
void gelu_scale_bf16_on(const bfloat16* d, const T* dx, bfloat16* dy, std::int64_t n);
template <class A, class T>
void gelu_scale_widened_on(const bfloat16* d, T* dx, std::int64_t n);

// The bf16 sparse kernels (bf16_spmm.hpp, bf16_sddmm.hpp): W's structure with float master
// values, bf16 operands.
template <class A, ColumnIndex Index, class Out>
void bf16_spmm_on(const PaddedCSR<float, Index>& W, const bfloat16* values, std::span<const SourceSlot> source,
                  ConstMatrixView<bfloat16> X, MatrixView<Out> Y, KernelWorkspace<float>& ws, Update mode,
                  const float* bias, bool relu, ConstMatrixView<bfloat16> D, bool pairs);
template <class A, ColumnIndex Index>
void bf16_sddmm_portable_on(const PaddedCSR<float, Index>& W, ConstMatrixView<bfloat16> dY, ConstMatrixView<bfloat16> X,
                            std::span<float> grad, KernelWorkspace<float>& ws, Update mode);

// The dispatched kernels, one line each: X(name) for the kernel name##_on declared above.
// Adding a kernel: declare its name##_on, add it here, and include its header in
// dispatch_target.hpp; the tables, name##_kernel() below and every target follow.
// Sparse kernels take <A, T, Index>, dense ones <A, T>.
#define SPRIG_DETAIL_SPARSE_KERNELS(X) X(spmm) X(spmm_transposed) X(sddmm) X(sddmm_dx)
// clang-format off
#define SPRIG_DETAIL_DENSE_KERNELS(X)                                                          \
  X(narrow_forward) X(narrow_backward) X(adamw_update) X(adamw_counted_update) X(zero_moments) \
  X(sgd_update)                                                                                 \
  X(layer_norm_forward) X(layer_norm_backward) X(layer_norm_dy_xhat) X(add_arrays)      \
  X(sum_squares) X(scale_array) X(gelu_forward) X(gelu_keep_derivative) X(gelu_backward)  \
  X(gelu_keep_derivative_bf16) X(gelu_scale_bf16) X(gelu_scale_widened)
// clang-format on

// One target's sparse kernels for one (T, Index) pair: a pointer per kernel, named as it.
template <Value T, ColumnIndex Index>
struct SparseKernelTable {
#define SPRIG_DETAIL_MEMBER(name) decltype(&name##_on<KernelArch, T, Index>) name;
  SPRIG_DETAIL_SPARSE_KERNELS(SPRIG_DETAIL_MEMBER)
#undef SPRIG_DETAIL_MEMBER

  // The kernels on architecture A.
  template <class A>
  static constexpr SparseKernelTable on() noexcept {
#define SPRIG_DETAIL_ADDRESS(name) &name##_on<A, T, Index>,
    return {SPRIG_DETAIL_SPARSE_KERNELS(SPRIG_DETAIL_ADDRESS)};
#undef SPRIG_DETAIL_ADDRESS
  }
};

// One target's dense kernels for T.
template <Value T>
struct DenseKernelTable {
#define SPRIG_DETAIL_MEMBER(name) decltype(&name##_on<KernelArch, T>) name;
  SPRIG_DETAIL_DENSE_KERNELS(SPRIG_DETAIL_MEMBER)
#undef SPRIG_DETAIL_MEMBER

  template <class A>
  static constexpr DenseKernelTable on() noexcept {
#define SPRIG_DETAIL_ADDRESS(name) &name##_on<A, T>,
    return {SPRIG_DETAIL_DENSE_KERNELS(SPRIG_DETAIL_ADDRESS)};
#undef SPRIG_DETAIL_ADDRESS
  }
};

// A target's tables: its sparse kernels for every (T, Index) pair, its dense ones for every T.
using SparseKernelTables = std::tuple<SparseKernelTable<float, std::int16_t>, SparseKernelTable<float, std::int32_t>,
                                      SparseKernelTable<float, std::int64_t>, SparseKernelTable<double, std::int16_t>,
                                      SparseKernelTable<double, std::int32_t>, SparseKernelTable<double, std::int64_t>>;
using DenseKernelTables = std::tuple<DenseKernelTable<float>, DenseKernelTable<double>>;

// One target's bf16 sparse kernels for one Index: bf16_spmm with a float and a bf16 output,
// bf16_sddmm's portable path.
template <ColumnIndex Index>
struct Bf16KernelTable {
  decltype(&bf16_spmm_on<KernelArch, Index, float>) spmm_float;
  decltype(&bf16_spmm_on<KernelArch, Index, bfloat16>) spmm_bf16;
  decltype(&bf16_sddmm_portable_on<KernelArch, Index>) sddmm_portable;

  template <class A>
  static constexpr Bf16KernelTable on() noexcept {
    return {&bf16_spmm_on<A, Index, float>, &bf16_spmm_on<A, Index, bfloat16>, &bf16_sddmm_portable_on<A, Index>};
  }
};
using Bf16KernelTables =
    std::tuple<Bf16KernelTable<std::int16_t>, Bf16KernelTable<std::int32_t>, Bf16KernelTable<std::int64_t>>;

// Every table of a tuple like those above, filled with the kernels on architecture A.
template <class A, class... Tables>
constexpr std::tuple<Tables...> tables_on(std::type_identity<std::tuple<Tables...>>) noexcept {
  return {Tables::template on<A>()...};
}

// One dispatch target: its name (sse4_2, avx2, avx512), the xsimd architecture it runs
// (kernel_arch()), its register widths, its sparse kernels for every (T, Index) pair and its
// dense ones for every T, and its bf16 sparse kernels for every Index.
struct TargetKernels {
  const char* target;
  const char* arch;
  std::int64_t float_width, double_width;
  SparseKernelTables sparse;
  DenseKernelTables dense;
  Bf16KernelTables bf16;
};

// The xsimd architecture a dispatch target's flags give (dispatch_target.hpp checks it).
constexpr std::string_view dispatch_target_arch(std::string_view target) noexcept {
  if (target == "sse4_2") return "sse4.2";
  if (target == "avx2") return "fma3+avx2";
  if (target == "avx512") return "avx512bw";
  return {};
}

#if defined(SPRIG_DISPATCH)
#  if !SPRIG_KERNEL_SIMD
#    error "SPRIG_DISPATCH needs the SIMD kernels: drop SPRIG_NO_SIMD"
#  endif
#  if !(defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)))
#    error "SPRIG_DISPATCH is for x86-64 with GCC or Clang"
#  endif

// Defined by the targets' translation units (dispatch_target.hpp). A program that defines
// SPRIG_DISPATCH without linking them fails to link, naming these.
const TargetKernels& target_kernels_sse4_2() noexcept;
const TargetKernels& target_kernels_avx2() noexcept;
const TargetKernels& target_kernels_avx512() noexcept;

struct DispatchTarget {
  std::string_view name;
  bool (*cpu_runs)();
  const TargetKernels& (*kernels)() noexcept;
};

inline bool cpu_runs_sse4_2() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("sse4.2");
}
inline bool cpu_runs_avx2() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}
inline bool cpu_runs_avx512() {
  __builtin_cpu_init();
  return cpu_runs_avx2() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512cd") &&
         __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
}

// Widest first: the automatic choice is the first the CPU runs.
inline constexpr DispatchTarget kDispatchTargets[] = {
    {"avx512", &cpu_runs_avx512, &target_kernels_avx512},
    {"avx2", &cpu_runs_avx2, &target_kernels_avx2},
    {"sse4_2", &cpu_runs_sse4_2, &target_kernels_sse4_2},
};

inline std::atomic<const TargetKernels*> g_active_kernels{nullptr};

// The target named `name` ("" = the widest this CPU runs). Throws ArgumentError for an
// unknown name and Error for a target this CPU does not run.
inline const TargetKernels& choose_target(std::string_view name) {
  if (name.empty()) {
    for (const DispatchTarget& t : kDispatchTargets)
      if (t.cpu_runs()) return t.kernels();
    throw Error("sprig: this CPU lacks SSE4.2, the oldest target of this dispatching build");
  }
  for (const DispatchTarget& t : kDispatchTargets) {
    if (t.name != name) continue;
    if (!t.cpu_runs())
      throw Error(message("sprig: kernel architecture '", name, "' asked for, but this CPU does not run it"));
    return t.kernels();
  }
  throw ArgumentError(message("sprig: unknown kernel architecture '", name, "' (this build has avx512, avx2, sse4_2)"));
}

// The kernels in use: chosen at the first call (SPRIG_KERNEL_ARCH, else the CPU's widest).
inline const TargetKernels& active_kernels() {
  if (const TargetKernels* k = g_active_kernels.load(std::memory_order_acquire)) return *k;
  const char* forced = std::getenv("SPRIG_KERNEL_ARCH");
  const TargetKernels& k = choose_target(forced ? std::string_view(forced) : std::string_view());
  g_active_kernels.store(&k, std::memory_order_release);
  return k;
}

template <Value T, ColumnIndex Index>
const SparseKernelTable<T, Index>& sparse_kernels() {
  return std::get<SparseKernelTable<T, Index>>(active_kernels().sparse);
}
template <Value T>
const DenseKernelTable<T>& dense_kernels() {
  return std::get<DenseKernelTable<T>>(active_kernels().dense);
}
#endif

// The kernel a public function calls, name##_kernel<T, Index>() (sparse) or
// name##_kernel<T>() (dense): architecture KernelArch's, or in a dispatching build the
// active target's.
#if defined(SPRIG_DISPATCH)
#  define SPRIG_DETAIL_SPARSE_POINTER(name) sparse_kernels<T, Index>().name
#  define SPRIG_DETAIL_DENSE_POINTER(name) dense_kernels<T>().name
#else
#  define SPRIG_DETAIL_SPARSE_POINTER(name) &name##_on<KernelArch, T, Index>
#  define SPRIG_DETAIL_DENSE_POINTER(name) &name##_on<KernelArch, T>
#endif
#define SPRIG_DETAIL_SPARSE_ENTRY(name)       \
  template <Value T, ColumnIndex Index>       \
  auto name##_kernel() {                      \
    return SPRIG_DETAIL_SPARSE_POINTER(name); \
  }
#define SPRIG_DETAIL_DENSE_ENTRY(name)       \
  template <Value T>                         \
  auto name##_kernel() {                     \
    return SPRIG_DETAIL_DENSE_POINTER(name); \
  }
SPRIG_DETAIL_SPARSE_KERNELS(SPRIG_DETAIL_SPARSE_ENTRY)
SPRIG_DETAIL_DENSE_KERNELS(SPRIG_DETAIL_DENSE_ENTRY)
#undef SPRIG_DETAIL_SPARSE_ENTRY
#undef SPRIG_DETAIL_DENSE_ENTRY
#undef SPRIG_DETAIL_SPARSE_POINTER
#undef SPRIG_DETAIL_DENSE_POINTER

// The bf16 kernels a public function calls: KernelArch's, or the active target's.
template <ColumnIndex Index, class Out>
auto bf16_spmm_kernel() {
#if defined(SPRIG_DISPATCH)
  const auto& table = std::get<Bf16KernelTable<Index>>(active_kernels().bf16);
  if constexpr (std::is_same_v<Out, float>)
    return table.spmm_float;
  else
    return table.spmm_bf16;
#else
  return &bf16_spmm_on<KernelArch, Index, Out>;
#endif
}
template <ColumnIndex Index>
auto bf16_sddmm_portable_kernel() {
#if defined(SPRIG_DISPATCH)
  return std::get<Bf16KernelTable<Index>>(active_kernels().bf16).sddmm_portable;
#else
  return &bf16_sddmm_portable_on<KernelArch, Index>;
#endif
}

// The column blocks of the kernels that run (spmm_column_blocks of the active target).
template <Value T>
ColumnBlocks kernel_column_blocks(std::int64_t K, std::int64_t B, std::int64_t budget_bytes = kColumnBlockBytes) {
#if defined(SPRIG_DISPATCH)
  const TargetKernels& k = active_kernels();
  return column_blocks_for_width(std::is_same_v<T, float> ? k.float_width : k.double_width,
                                 static_cast<std::int64_t>(sizeof(T)), K, B, budget_bytes);
#else
  return spmm_column_blocks<T>(K, B, budget_bytes);
#endif
}

}  // namespace sprig::detail

#if defined(SPRIG_DISPATCH)
namespace sprig {

// The architecture the sparse kernels run on, in xsimd's words ("avx512bw", "fma3+avx2",
// "sse4.2"): the target chosen at the first kernel call (which this call makes if none has).
// Throws as that choice does (header comment).
inline const char* kernel_arch() { return detail::active_kernels().arch; }

// Forces the target the sparse kernels run on from the next call: "sse4_2", "avx2",
// "avx512", or "" for the widest this CPU runs. Throws ArgumentError for an unknown name and
// Error for a target this CPU does not run (the kernels in use are then unchanged). Not to
// be called while another thread runs a kernel.
inline void set_kernel_arch(std::string_view target) {
  const detail::TargetKernels& k = detail::choose_target(target);
  detail::g_active_kernels.store(&k, std::memory_order_release);
}

// The dispatch targets this CPU runs, widest first.
inline std::vector<std::string_view> runnable_kernel_archs() {
  std::vector<std::string_view> out;
  for (const detail::DispatchTarget& t : detail::kDispatchTargets)
    if (t.cpu_runs()) out.push_back(t.name);
  return out;
}

// Empty unless the kernels were forced to a target below the CPU's AVX2 + FMA; then one
// sentence saying so.
inline std::string kernel_arch_warning() {
  const detail::TargetKernels& k = detail::active_kernels();
  if (std::string_view(k.target) != "sse4_2" || !detail::cpu_runs_avx2()) return {};
  return detail::message("sprig's kernels are forced to ", k.arch,
                         " (SPRIG_KERNEL_ARCH or set_kernel_arch) but this CPU runs AVX2 and FMA");
}

}  // namespace sprig
#endif
