// sprig/kernels/dispatch_target.hpp — one target of a dispatching build (dispatch.hpp): the
// sparse kernels instantiated for the architecture of this translation unit's flags.
//
// Include it in exactly one translation unit per target, with nothing else, compiled with
// SPRIG_DISPATCH_TARGET=<sse4_2|avx2|avx512>, SPRIG_NO_ABI_GUARD, that target's flags
// (dispatch.hpp), and without SPRIG_DISPATCH; sprig_dispatch() in cmake/SprigDispatch.cmake
// does so. Flags that give another architecture fail to compile (static_assert).
//
// Link order: these objects after the program's own, the narrowest target first. Besides
// the kernels, whose names carry their architecture, a target's object defines inline
// functions that others define too (containers, workspaces); the linker keeps the first
// definition it meets, which must run on every CPU that reaches it: the program's own (its
// baseline) or the narrowest target's. Link-time optimisation must not merge them (they are
// compiled without it).
#pragma once

#if defined(SPRIG_DISPATCH)
#  error "dispatch_target.hpp: compile the target translation units without SPRIG_DISPATCH"
#endif
#if !defined(SPRIG_DISPATCH_TARGET)
#  error "dispatch_target.hpp: define SPRIG_DISPATCH_TARGET (sse4_2, avx2 or avx512)"
#endif
#if !defined(SPRIG_NO_ABI_GUARD)
#  error "dispatch_target.hpp: define SPRIG_NO_ABI_GUARD (a target's flags differ from the program's on purpose)"
#endif

#include "bf16_sddmm.hpp"
#include "bf16_spmm.hpp"
#include "dispatch.hpp"
#include "elementwise.hpp"
#include "gelu.hpp"
#include "narrow_dense.hpp"
#include "optimizer_update.hpp"
#include "sddmm.hpp"
#include "sddmm_dx.hpp"
#include "spmm.hpp"
#include "spmm_transposed.hpp"

#define SPRIG_DETAIL_DISPATCH_CAT2(a, b) a##b
#define SPRIG_DETAIL_DISPATCH_CAT(a, b) SPRIG_DETAIL_DISPATCH_CAT2(a, b)
#define SPRIG_DETAIL_DISPATCH_STR2(a) #a
#define SPRIG_DETAIL_DISPATCH_STR(a) SPRIG_DETAIL_DISPATCH_STR2(a)

namespace sprig::detail {

inline constexpr std::string_view kThisDispatchTarget = SPRIG_DETAIL_DISPATCH_STR(SPRIG_DISPATCH_TARGET);
static_assert(!dispatch_target_arch(kThisDispatchTarget).empty(),
              "SPRIG_DISPATCH_TARGET must be sse4_2, avx2 or avx512");
static_assert(dispatch_target_arch(kThisDispatchTarget) == std::string_view(KernelArch::name()),
              "this translation unit's flags do not give SPRIG_DISPATCH_TARGET's architecture");

const TargetKernels& SPRIG_DETAIL_DISPATCH_CAT(target_kernels_, SPRIG_DISPATCH_TARGET)() noexcept {
  static constexpr TargetKernels kernels{SPRIG_DETAIL_DISPATCH_STR(SPRIG_DISPATCH_TARGET),
                                         KernelArch::name(),
                                         static_cast<std::int64_t>(simd_width<float, KernelArch>()),
                                         static_cast<std::int64_t>(simd_width<double, KernelArch>()),
                                         tables_on<KernelArch>(std::type_identity<SparseKernelTables>{}),
                                         tables_on<KernelArch>(std::type_identity<DenseKernelTables>{}),
                                         tables_on<KernelArch>(std::type_identity<Bf16KernelTables>{})};
  return kernels;
}

}  // namespace sprig::detail
