// sprig/kernels/bf16_paths.hpp — which instruction paths the bf16 kernels may take on this CPU
// and OS: Bf16GemmPath, Bf16SpmmPath, Bf16SddmmPath, Bf16BlockPath, Bf16AttentionPath, path_name, and
// detail::bf16_gemm_reason (why a path cannot run, empty when it can; probed once per process:
// CPUID, XCR0 and, for AMX, Linux's grant of the tile state, which the probe asks for). Part of kernels/bf16_gemm.hpp and
// kernels/bf16_sddmm.hpp, which state their paths.
#pragma once

#include <cstdint>
#include <string>

#include "../core/error.hpp"

// The x86-64 fast paths: GCC >= 11 or Clang >= 12 know the AMX and AVX512-BF16 intrinsics and
// target attributes. AMX also needs Linux (the tile-state grant).
#if defined(__x86_64__) && \
    ((defined(__clang__) && __clang_major__ >= 12) || (!defined(__clang__) && defined(__GNUC__) && __GNUC__ >= 11))
#  define SPRIG_BF16_GEMM_X86 1
#  include <cpuid.h>
#  include "intrinsics.hpp"
#  if defined(__linux__)
#    define SPRIG_BF16_GEMM_AMX 1
#    include <sys/syscall.h>
#    include <unistd.h>
#    include <cerrno>
#  else
#    define SPRIG_BF16_GEMM_AMX 0
#  endif
#else
#  define SPRIG_BF16_GEMM_X86 0
#  define SPRIG_BF16_GEMM_AMX 0
#endif

namespace sprig {

// The instruction paths of bf16_gemm (top of this file).
enum class Bf16GemmPath { portable, avx512_bf16, amx };

// "portable", "avx512_bf16", "amx".
constexpr const char* path_name(Bf16GemmPath p) noexcept {
  switch (p) {
    case Bf16GemmPath::portable: return "portable";
    case Bf16GemmPath::avx512_bf16: return "avx512_bf16";
    case Bf16GemmPath::amx: return "amx";
  }
  return "?";
}

// The instruction paths of bf16_sddmm (kernels/bf16_sddmm.hpp): avx512_bf16 runs where
// bf16_gemm's does (the same probe), portable everywhere.
enum class Bf16SddmmPath { portable, avx512_bf16 };

// "portable", "avx512_bf16".
constexpr const char* path_name(Bf16SddmmPath p) noexcept {
  return p == Bf16SddmmPath::avx512_bf16 ? "avx512_bf16" : "portable";
}

// The instruction paths of bf16_spmm and bf16_spmm_transposed (kernels/bf16_spmm.hpp).
enum class Bf16SpmmPath { portable, avx512_bf16 };

// "portable", "avx512_bf16".
constexpr const char* path_name(Bf16SpmmPath p) noexcept {
  return p == Bf16SpmmPath::avx512_bf16 ? "avx512_bf16" : "portable";
}

// The instruction paths of the bf16 block kernels (kernels/bf16_block_kernels.hpp).
enum class Bf16BlockPath { portable, avx512_bf16, amx };

// "portable", "avx512_bf16", "amx".
constexpr const char* path_name(Bf16BlockPath p) noexcept {
  return p == Bf16BlockPath::amx ? "amx" : p == Bf16BlockPath::avx512_bf16 ? "avx512_bf16" : "portable";
}

// The instruction paths of the bf16 attention core (kernels/bf16_attention.hpp,
// nn/attention.hpp).
enum class Bf16AttentionPath { portable, avx512_bf16 };

// "portable", "avx512_bf16".
constexpr const char* path_name(Bf16AttentionPath p) noexcept {
  return p == Bf16AttentionPath::avx512_bf16 ? "avx512_bf16" : "portable";
}

namespace detail {

#if SPRIG_BF16_GEMM_X86
inline std::uint64_t bf16_gemm_xcr0() noexcept {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27))) return 0;  // no OSXSAVE: no XGETBV
  unsigned lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (std::uint64_t{hi} << 32) | lo;
}

// Empty when the CPU and the OS run AVX512F + AVX512BW + AVX512-BF16, else why not.
inline std::string avx512_bf16_probe() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return "CPUID has no leaf 7";
  const bool f = b & (1u << 16), bw = b & (1u << 30);
  const unsigned max_sub = a;
  unsigned a1 = 0, b1 = 0, c1 = 0, d1 = 0;
  const bool bf16 = max_sub >= 1 && __get_cpuid_count(7, 1, &a1, &b1, &c1, &d1) && (a1 & (1u << 5));
  if (!f || !bw || !bf16)
    return message("the CPU lacks", f ? "" : " AVX512F", bw ? "" : " AVX512BW", bf16 ? "" : " AVX512-BF16");
  // XCR0: SSE, AVX, opmask, ZMM_Hi256, Hi16_ZMM state enabled by the OS.
  if ((bf16_gemm_xcr0() & 0xE6) != 0xE6) return "the OS has not enabled the AVX-512 register state (XCR0)";
  return {};
}

#  if SPRIG_BF16_GEMM_AMX
// Empty when the CPU runs AMX-TILE + AMX-BF16 and Linux granted this process the tile data
// state (asked here: the grant is per process and lasts), else why not.
inline std::string amx_probe() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return "CPUID has no leaf 7";
  const bool bf16 = d & (1u << 22), tile = d & (1u << 24);
  if (!bf16 || !tile) return message("the CPU lacks", tile ? "" : " AMX-TILE", bf16 ? "" : " AMX-BF16");
  constexpr long kArchGetXcompPerm = 0x1022, kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) != 0)
    return message("Linux refused the AMX tile state (arch_prctl(ARCH_REQ_XCOMP_PERM, 18): errno ", errno, ")");
  unsigned long granted = 0;
  if (syscall(SYS_arch_prctl, kArchGetXcompPerm, &granted) != 0 || !(granted & (1ul << kXfeatureXtiledata)))
    return "Linux did not grant the AMX tile state (ARCH_GET_XCOMP_PERM)";
  if ((bf16_gemm_xcr0() & (3u << 17)) != (3u << 17)) return "the OS has not enabled the AMX tile state (XCR0)";
  return {};
}
#  endif
#endif

// Why path p cannot run in this process, empty when it can. Probed once per path and
// process (a function-local constant: the CPU and the grant do not change while it runs).
inline const std::string& bf16_gemm_reason(Bf16GemmPath p) {
  static const std::string none;
#if SPRIG_BF16_GEMM_X86
  static const std::string avx512 = avx512_bf16_probe();
#  if SPRIG_BF16_GEMM_AMX
  static const std::string amx = amx_probe();
#  else
  static const std::string amx = "AMX is used on Linux only (the tile state needs arch_prctl)";
#  endif
#else
  static const std::string avx512 = "not compiled for x86-64 (or the compiler is older than GCC 11 / Clang 12)";
  static const std::string amx = avx512;
#endif
  switch (p) {
    case Bf16GemmPath::portable: return none;
    case Bf16GemmPath::avx512_bf16: return avx512;
    case Bf16GemmPath::amx: return amx;
  }
  return none;
}

}  // namespace detail
}  // namespace sprig
