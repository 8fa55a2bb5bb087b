// sprig/sprig.hpp — umbrella header: everything sprig offers except data/idx.hpp, which needs
// zlib (include it yourself and link ZLIB::ZLIB to read IDX/gzip data sets),
// io/safetensors.hpp, which needs nlohmann-json (include it yourself: Debian
// nlohmann-json3-dev, CMake nlohmann_json::nlohmann_json), dist/mpi_communicator.hpp, which
// needs MPI (include it and link sprig::dist), and
// kernels/reference.hpp, the scalar test oracle (include it in tests and benchmarks).
#pragma once

#include "version.hpp"

#include "core/aligned_allocator.hpp"
#include "core/bfloat16.hpp"
#include "core/block_padded_csr.hpp"
#include "core/block_order.hpp"
#include "core/concepts.hpp"
#include "core/config.hpp"
#include "core/error.hpp"
#include "core/matrix.hpp"
#include "core/padded_csr.hpp"
#include "core/precision.hpp"
#include "core/rank_select.hpp"
#include "core/rng.hpp"
#include "core/sampling.hpp"
#include "core/slot_log.hpp"
#include "core/topology_key.hpp"

#include "kernels/bf16_block_kernels.hpp"
#include "kernels/bf16_gemm.hpp"
#include "kernels/bf16_sddmm.hpp"
#include "kernels/bf16_spmm.hpp"
#include "kernels/bfloat16_convert.hpp"
#include "kernels/block_sddmm.hpp"
#include "kernels/block_spmm.hpp"
#include "kernels/dense_gemm.hpp"
#include "kernels/dense_gradient.hpp"
#include "kernels/narrow_dense.hpp"
#include "kernels/narrow_spmm.hpp"
#include "kernels/row_epilogue.hpp"
#include "kernels/sddmm.hpp"
#include "kernels/sddmm_dx.hpp"
#include "kernels/spmm.hpp"
#include "kernels/spmm_transposed.hpp"
#include "kernels/transpose.hpp"
#include "kernels/update_mode.hpp"

#include "nn/attention.hpp"
#include "nn/bf16_scratch.hpp"
#include "nn/block_sparse_linear.hpp"
#include "nn/embedding.hpp"
#include "nn/gelu.hpp"
#include "nn/gpt.hpp"
#include "nn/gpt_generate.hpp"
#include "nn/layer_norm.hpp"
#include "nn/linear.hpp"
#include "nn/model.hpp"
#include "nn/model_scratch.hpp"
#include "nn/parameter.hpp"
#include "nn/relu.hpp"
#include "nn/residual.hpp"
#include "nn/sampling.hpp"
#include "nn/sequential.hpp"
#include "nn/softmax_cross_entropy.hpp"
#include "nn/sparse_linear.hpp"

#include "optim/adamw.hpp"
#include "optim/clip.hpp"
#include "optim/lr_schedule.hpp"
#include "optim/sgd.hpp"

#include "models/density.hpp"
#include "models/gpt.hpp"
#include "models/mlp.hpp"

#include "dst/algorithm.hpp"
#include "dst/density.hpp"  // forwarding, deprecated: models/density.hpp
#include "dst/drop_grow.hpp"
#include "dst/fan_in.hpp"
#include "dst/gpt_builder.hpp"  // forwarding, deprecated: models/gpt.hpp
#include "dst/granet.hpp"
#include "dst/live_count.hpp"
#include "dst/model_builder.hpp"  // forwarding, deprecated: models/mlp.hpp
#include "dst/rigl.hpp"
#include "dst/schedule.hpp"
#include "dst/set.hpp"
#include "dst/snfs.hpp"
#include "dst/static_topology.hpp"

#include "data/batches.hpp"
#include "data/text.hpp"

#include "io/checkpoint.hpp"
#include "io/padded_csr_file.hpp"

#include "dist/communicator.hpp"
#include "dist/data_parallel.hpp"
