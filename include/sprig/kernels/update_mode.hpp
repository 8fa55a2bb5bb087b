// sprig/kernels/update_mode.hpp — how a kernel combines its result with the output.
#pragma once

namespace sprig {

// BLAS beta semantics: overwrite is beta = 0 (the old output is never read, so NaN or
// garbage already there does not propagate); accumulate is beta = 1 (out += result).
enum class Update { overwrite, accumulate };

}  // namespace sprig
