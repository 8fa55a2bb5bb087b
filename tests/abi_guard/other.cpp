// The second translation unit of the abi_guard tests (main.cpp): built with other flags or
// SPRIG_NO_SIMD, it must make the program fail to link.
#include <sprig/kernels/simd.hpp>

const char* other_kernel_arch() { return sprig::kernel_arch(); }
