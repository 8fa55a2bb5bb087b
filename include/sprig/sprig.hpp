// sprig/sprig.hpp — umbrella header: everything sprig offers.
#pragma once

#include "core/aligned_allocator.hpp"
#include "core/concepts.hpp"
#include "core/config.hpp"
#include "core/error.hpp"
#include "core/matrix.hpp"
#include "core/padded_csr.hpp"
#include "core/rng.hpp"
#include "core/slot_log.hpp"
#include "kernels/reference.hpp"
#include "kernels/sddmm.hpp"
#include "kernels/spmm.hpp"
#include "kernels/transpose.hpp"
#include "kernels/update_mode.hpp"
