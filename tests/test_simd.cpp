// tests/test_simd.cpp — sprig::kernel_arch() names the architecture the kernels are
// compiled for (checked against the compiler's own macros, not xsimd's), and
// kernel_arch_warning() speaks exactly when this x86-64 CPU runs AVX2 + FMA (read from
// /proc/cpuinfo, not from the code under test) and the kernels were built for less.
// tests/simd.cmake builds this file a second time for the x86-64 baseline (SSE2), the
// build a user gets without -march, where the warning must appear on this machine.
#include "sprig/kernels/simd.hpp"

#include <catch2/catch.hpp>

#include <fstream>
#include <sstream>
#include <string>

using namespace sprig;

namespace {

// The architecture the compiler's macros say the kernels get, as xsimd names it.
std::string expected_arch() {
#if !SPRIG_KERNEL_SIMD
  return "scalar";
#elif defined(__AVX512BW__)  // xsimd takes the best architecture whose own macro is set
  return "avx512bw";
#elif defined(__AVX512DQ__)
  return "avx512dq";
#elif defined(__AVX512CD__)
  return "avx512cd";
#elif defined(__AVX512F__)
  return "avx512f";
#elif defined(__AVX2__) && defined(__FMA__)
  return "fma3+avx2";
#elif defined(__AVX2__)
  return "avx2";
#elif defined(__aarch64__)
  return "arm64+neon";
#elif defined(__ARM_NEON)
  return "arm32+neon";
#elif defined(__SSE4_2__)
  return "sse4.2";
#elif defined(__SSE2__) && !defined(__SSE3__)
  return "sse2";
#else
  return "";  // a combination this test does not list: the name is checked non-empty only
#endif
}

#if defined(__linux__) && (defined(__x86_64__) || defined(__i386__))
// Whether /proc/cpuinfo's first "flags" line lists both avx2 and fma.
bool cpuinfo_avx2_fma() {
  std::ifstream in("/proc/cpuinfo");
  REQUIRE(in.good());
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("flags", 0) != 0) continue;
    std::istringstream words(line.substr(line.find(':') + 1));
    bool avx2 = false, fma = false;
    for (std::string w; words >> w;) {
      avx2 = avx2 || w == "avx2";
      fma = fma || w == "fma";
    }
    return avx2 && fma;
  }
  FAIL("/proc/cpuinfo has no flags line");
  return false;
}
#endif

}  // namespace

TEST_CASE("kernel_arch names the architecture the compiler flags give the kernels", "[kernel_arch]") {
  const std::string name = kernel_arch();
  CAPTURE(name);
  CHECK_FALSE(name.empty());
  const std::string expected = expected_arch();
  if (!expected.empty()) CHECK(name == expected);
  CHECK((name == "scalar") == (detail::simd_width<float>() == 1));
#ifdef SPRIG_TEST_BASELINE_ARCH
  CHECK(name == "sse2");  // the x86-64 baseline: what a build without -march runs
#endif
}

TEST_CASE("arch_warning speaks only for vector kernels below the CPU's AVX2 + FMA", "[kernel_arch]") {
  const std::string below = detail::arch_warning("sse2", false, true);
  CHECK(below.find("sse2") != std::string::npos);
  CHECK(below.find("-march=native") != std::string::npos);
  CHECK(detail::arch_warning("fma3+avx2", true, true).empty());
  CHECK(detail::arch_warning("avx512bw", true, true).empty());
  CHECK(detail::arch_warning("sse2", false, false).empty());       // an old CPU: nothing better to build for
  CHECK(detail::arch_warning("scalar", false, true).empty());      // a scalar build is a choice
  CHECK_FALSE(detail::arch_warning("avx2", false, true).empty());  // AVX2 without FMA
}

#if defined(__linux__) && (defined(__x86_64__) || defined(__i386__))
TEST_CASE("kernel_arch_warning agrees with /proc/cpuinfo and the build's flags", "[kernel_arch]") {
  const bool cpu = cpuinfo_avx2_fma();
  const std::string name = kernel_arch();
  const bool built_for_it = name == "fma3+avx2" || name.rfind("avx512", 0) == 0;
  CAPTURE(cpu, name);
  CHECK(kernel_arch_warning().empty() == (!cpu || built_for_it || name == "scalar"));
#  ifdef SPRIG_TEST_BASELINE_ARCH
  if (cpu) CHECK(kernel_arch_warning().find("sse2") != std::string::npos);
#  endif
}
#endif

#if SPRIG_KERNEL_SIMD
// The register transpose the attention core's dV and dK use (kernels/attention.hpp): in
// register shuffles for float on AVX-512 and AVX, through memory elsewhere (double here, and
// float in the SSE2 baseline build of this file).
TEMPLATE_TEST_CASE("transpose_square moves lane j of row i to lane i of row j", "[simd]", float, double) {
  if constexpr (detail::kSimdFor<TestType>) {
    using V = detail::Batch<TestType>;
    constexpr int w = static_cast<int>(V::size);
    alignas(64) TestType in[w * w], out[w];
    for (int i = 0; i < w * w; ++i) in[i] = static_cast<TestType>(i) + TestType(0.25);
    V v[w];
    for (int i = 0; i < w; ++i) v[i] = V::load_aligned(in + i * w);
    detail::transpose_square(v);
    CAPTURE(kernel_arch(), w);
    for (int j = 0; j < w; ++j) {
      v[j].store_aligned(out);
      for (int i = 0; i < w; ++i) CHECK(out[i] == in[i * w + j]);
    }
  }
}
#endif
