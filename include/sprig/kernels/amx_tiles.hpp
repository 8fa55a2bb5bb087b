// sprig/kernels/amx_tiles.hpp — AMX's tile configuration and the calls that start and end a
// thread's use of the tiles, shared by the AMX paths (bf16_gemm.hpp, bf16_block_amx.hpp).
// Exists where SPRIG_BF16_GEMM_AMX is 1 (bf16_paths.hpp: x86-64 Linux, GCC >= 11 or
// Clang >= 12); a kernel may use the tiles only once bf16_gemm_reason(Bf16GemmPath::amx) is
// empty (the CPU has them and Linux granted this process the tile state).
#pragma once

#include <cstdint>

#include "../core/config.hpp"
#include "bf16_paths.hpp"

#if SPRIG_BF16_GEMM_AMX
namespace sprig::detail {

// The 64-byte configuration _tile_loadconfig reads (palette 1): per tile its rows (at most 16)
// and bytes per row (at most 64). Defaults: 8 tiles of 16 rows of 64 bytes.
struct alignas(64) AmxTileConfig {
  std::uint8_t palette_id = 1;
  std::uint8_t start_row = 0;
  std::uint8_t reserved[14] = {};
  std::uint16_t colsb[16] = {64, 64, 64, 64, 64, 64, 64, 64};
  std::uint8_t rows[16] = {16, 16, 16, 16, 16, 16, 16, 16};
};
static_assert(sizeof(AmxTileConfig) == 64);

// GCC 12's tile intrinsics are asm statements whose operands name only the first 8 bytes of
// the configuration and none of the memory a tile load reads: a compiler barrier that sees
// the address makes every store before it (the whole configuration, C copied into scratch)
// happen before the tile instructions.
inline __attribute__((always_inline)) void amx_compiler_barrier(const void* p) noexcept {
  __asm__ volatile("" : : "r"(p) : "memory");
}

// Loads `cfg` on the calling thread (before its first tile instruction) / releases its tiles.
__attribute__((target("amx-tile"))) inline void amx_begin(const AmxTileConfig& cfg) noexcept {
  amx_compiler_barrier(&cfg);
  _tile_loadconfig(&cfg);
}
__attribute__((target("amx-tile"))) inline void amx_end() noexcept { _tile_release(); }

}  // namespace sprig::detail
#endif
