// sprig/nn/gemm.hpp — forwarding header, kept for one release: the dense GEMM is a kernel
// and moved to sprig/kernels/dense_gemm.hpp (the names, sprig::gemm and sprig::Trans, are
// unchanged).
#pragma once

#include "../kernels/dense_gemm.hpp"
