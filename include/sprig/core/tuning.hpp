// sprig/core/tuning.hpp — every tuning knob of the library in one place: the sizes, distances
// and thresholds the kernels and threaded passes are built with.
//
// Each knob is a macro with a default and the one reason for it; the measurements behind the
// defaults are in docs/design.md (the section named beside each). A program may define any
// of them before it includes sprig (or with -D) to move it; every translation unit of the
// program must then define it alike. A knob changes speed only: every kernel gives the same
// bits for any thread count, and no knob changes what a kernel computes (abi_guard.hpp does
// not check them). Knobs are read where a kernel is compiled, so changing one recompiles.
// Included by core/config.hpp, so every sprig header sees the same values.
#pragma once

#include <cstdint>

// --- Threads (docs/design.md, "Threads and determinism") ---

// Work (elements of a pass, or multiply-adds of a kernel) below which a loop runs on the
// calling thread: an OpenMP parallel region costs a few microseconds, about that much work.
// One value for every threaded loop in the library.
#ifndef SPRIG_PARALLEL_MIN_WORK
#  define SPRIG_PARALLEL_MIN_WORK (std::int64_t{1} << 16)
#endif

// --- Panels and column blocks (kernels/panels.hpp; docs/design.md, "spmm") ---

// Bytes of X one panel may span (K rows x panel width): 1 MiB, a typical per-core L2. At
// K <= 1024 that allows 512-byte panel rows (B = 128 floats in one panel), at K = 4096 256-byte
// ones; wide panel rows amortise each weight's index and broadcast.
#ifndef SPRIG_PANEL_BUDGET_BYTES
#  define SPRIG_PANEL_BUDGET_BYTES (1 << 20)
#endif

// Bytes of X one weight-gradient panel may span (sddmm, and the one-pass backward's test for
// one panel). Twice the spmm budget: every panel re-reads the row's indices, re-adds into grad
// and pays a batched horizontal sum per N slots, so wide panels pay off even when they spill
// from L2 (docs/design.md, "sddmm").
#ifndef SPRIG_SDDMM_PANEL_BUDGET_BYTES
#  define SPRIG_SDDMM_PANEL_BUDGET_BYTES (2 * SPRIG_PANEL_BUDGET_BYTES)
#endif

// Bytes of packed X one block weight-gradient panel may span (block_sddmm). Twice the spmm
// budget, as for sddmm: every panel pays a horizontal sum per tile and re-adds into grad.
#ifndef SPRIG_BLOCK_SDDMM_PANEL_BUDGET_BYTES
#  define SPRIG_BLOCK_SDDMM_PANEL_BUDGET_BYTES (2 * SPRIG_PANEL_BUDGET_BYTES)
#endif

// Bytes of X one column block may span (block columns x panel width): where the K rows of a
// full-width panel are more than this, the kernels work through W's columns in blocks, so one
// block's X rows stay in L2 while every row uses them. Half the L2: W streams through it too.
// This budget also bounds sddmm_dx's one pass (dY within one block of the transposed
// workspace): lowering it for a core means keeping the transposed workspace's, or the one
// pass turns off for 1024-row layers. Per call: KernelWorkspace::column_block_bytes.
#ifndef SPRIG_COLUMN_BLOCK_BYTES
#  define SPRIG_COLUMN_BLOCK_BYTES (1 << 19)
#endif

// --- Prefetch distances (docs/design.md, "spmm", "The transpose", "The one pass") ---

// Bytes at the start of each X row segment that the kernels prefetch ahead of use. The
// columns are random, so the first lines must be asked for; the hardware's own prefetchers
// follow on with the rest of the row, and asking for every line spends a load slot per line.
#ifndef SPRIG_PREFETCH_ROW_BYTES
#  define SPRIG_PREFETCH_ROW_BYTES 128
#endif

// Live weights ahead whose X rows spmm prefetches: the columns are random, so the hardware
// cannot guess the next rows.
#ifndef SPRIG_SPMM_PREFETCH
#  define SPRIG_SPMM_PREFETCH 16
#endif

// Slots ahead whose gathered value the transposed product (and sddmm_dx) prefetches through
// the transpose's permutation: further than the X rows, since once other work has evicted W
// the values come from L3 or memory.
#ifndef SPRIG_SPMM_T_PREFETCH
#  define SPRIG_SPMM_T_PREFETCH 128
#endif

// Batch panels up to which spmm_transposed gathers W's values itself; beyond, the gather
// would repeat per panel, so the values are refreshed once and the plain spmm runs.
#ifndef SPRIG_SPMM_T_FUSED_PANELS
#  define SPRIG_SPMM_T_FUSED_PANELS 1
#endif

// Slots of W^T ahead whose source value the transpose's value refresh prefetches:
// consecutive slots of W^T read from different rows of W, a pattern the hardware prefetcher
// cannot follow.
#ifndef SPRIG_REFRESH_PREFETCH
#  define SPRIG_REFRESH_PREFETCH 64
#endif

// Weights ahead whose dY row the one-pass backward (sddmm_dx) asks for. Shorter than spmm's:
// a weight here costs twice the multiply-adds (dot and dX), so 4 weights cover the L2
// latency, and rows asked for further ahead are evicted again by the gathered values and
// gradient stores.
#ifndef SPRIG_SDDMM_DX_PREFETCH
#  define SPRIG_SDDMM_DX_PREFETCH 4
#endif

// The most OpenMP threads the one-pass backward runs on (more: the two kernels run): each
// thread beyond the first adds a boundary where two threads write gradients into the same
// cache lines; it beat the two kernels at 2 threads and was not tried beyond.
#ifndef SPRIG_SDDMM_DX_MAX_THREADS
#  define SPRIG_SDDMM_DX_MAX_THREADS 2
#endif

// Blocks ahead whose X rows (and, for W^T, gathered weight blocks) block_spmm prefetches: the
// block columns are random, as spmm's; distances 4 and 16 did no better (docs/block_sparse.md).
#ifndef SPRIG_BLOCK_SPMM_PREFETCH
#  define SPRIG_BLOCK_SPMM_PREFETCH 8
#endif

// Outputs of at least this many bytes (the default of KernelWorkspace::stream_bytes) are
// written by block_spmm and block_spmm_transposed (float and bf16 operands, float output) with
// streaming (non-temporal) stores in overwrite mode: an
// output larger than half an L2 is written back to memory anyway, and fetching its lines
// before writing them (read for ownership) cost the 8x8 kernels 1.1-1.6x at B = 1024
// (docs/performance.md, "Streaming stores").
#ifndef SPRIG_BLOCK_STREAM_BYTES
#  define SPRIG_BLOCK_STREAM_BYTES (std::int64_t{1} << 20)
#endif

// --- The bf16 GEMM's AMX path (kernels/bf16_gemm.hpp; docs/design.md, "bf16 GEMM") ---

// The AMX path's cache blocking (amx_compute): K blocks of at most this many 32-k tiles (a
// block's A and B tiles stay in L1/L2 while its C tiles accumulate), and column chunks of
// about this many bytes of packed B, which every row block then reuses from L2; chosen by one
// A/B comparison on one CPU, not swept.
#ifndef SPRIG_BF16_GEMM_AMX_K_TILES
#  define SPRIG_BF16_GEMM_AMX_K_TILES 32
#endif
#ifndef SPRIG_BF16_GEMM_AMX_CHUNK_BYTES
#  define SPRIG_BF16_GEMM_AMX_CHUNK_BYTES (1024 * 1024)
#endif

// --- The bf16 block kernels' AMX path (kernels/bf16_block_amx.hpp; docs/transformers.md) ---

// Outputs of at least this many bytes are written by the AMX block forward and input gradient
// with streaming (non-temporal) stores in overwrite mode: with the products on tiles, fetching
// the output's lines before writing them (read for ownership) bounds the kernel, and an output
// of more than half an L2 is mostly written back to memory anyway (the measurements:
// docs/transformers.md, bf16 training).
#ifndef SPRIG_BF16_BLOCK_AMX_STREAM_BYTES
#  define SPRIG_BF16_BLOCK_AMX_STREAM_BYTES (std::int64_t{1} << 20)
#endif
