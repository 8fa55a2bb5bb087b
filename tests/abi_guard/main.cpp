// The program of the abi_guard tests: two translation units that both include sprig (this one
// and other.cpp), each naming the instruction set its kernels were compiled for.
#include <sprig/kernels/simd.hpp>

#include <cstdio>
#include <cstring>

const char* other_kernel_arch();

int main() {
  std::printf("main: %s, other: %s\n", sprig::kernel_arch(), other_kernel_arch());
  return std::strcmp(sprig::kernel_arch(), other_kernel_arch()) == 0 ? 0 : 1;
}
