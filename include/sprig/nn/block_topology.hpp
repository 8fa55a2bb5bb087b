// sprig/nn/block_topology.hpp — BlockTopology: how dynamic sparse training reaches the
// blocks of a block-sparse layer through a stand-in over its block grid.
#pragma once

#include <cstdint>

#include "../core/concepts.hpp"
#include "../core/padded_csr.hpp"
#include "../core/slot_log.hpp"

namespace sprig {

// A layer whose weight is stored in dense R x C blocks (BlockSparseLinear), as dynamic sparse
// training changes it: through a stand-in SparseLinear over the block grid (one entry per
// block, its value the block's Frobenius norm), whose slot changes are replayed here.
template <Value T, ColumnIndex Index>
class BlockTopology {
public:
  virtual std::int64_t block_height() const noexcept = 0;  // R: output rows per block
  virtual std::int64_t block_width() const noexcept = 0;   // C: inputs per block
  virtual std::int64_t out_features() const noexcept = 0;  // rows of the weight
  virtual std::int64_t in_features() const noexcept = 0;   // columns of the weight
  // Replays one chunk of the stand-in's SlotLog on the blocks, their gradient and optimizer
  // state (R x C entries per slot).
  virtual void apply_slot_moves(const SlotLog& chunk) = 0;
  // Takes the stand-in's pattern once every chunk was replayed (BlockPaddedCSR::adopt_pattern).
  virtual void adopt_pattern(const PaddedCSR<T, Index>& grid) = 0;
  // The mean of |m| over the weight's live entries inside the matrix (an edge block's entries
  // beyond it excluded), m the optimizer's first state vector (SGD's momentum, AdamW's first
  // moment), or the gradient while the optimizer has made none; 0 with no live entry. SNFS
  // redistributes by it, as it does by the same mean of an unstructured layer. Reads only.
  virtual double mean_abs_momentum() const = 0;
  // Redraws the weight with exactly blocks_per_row live blocks in every block row
  // (BlockPaddedCSR::random_per_row from `seed`), Kaiming-uniform values with the mean fan-in
  // of the live in-matrix entries, the padding ratio and weight-decay flag kept, the gradient
  // zero, no optimizer state, growth_reserve reserved (0: none); the bias stays
  // (dst::redraw_constant_fan_in). Throws ArgumentError for blocks_per_row outside
  // [1, block columns], nothing changed.
  virtual void redraw_per_row(std::int64_t blocks_per_row, std::uint64_t seed, double growth_reserve) = 0;

protected:
  ~BlockTopology() = default;
};

}  // namespace sprig
