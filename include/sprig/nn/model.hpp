// sprig/nn/model.hpp — what optimizers, dynamic sparse training, checkpoints, gradient
// clipping and memory accounting need from a model, in one include:
//   trainable_model.hpp   the TrainableModel concept (what a user's model provides)
//   sparse_layer_ref.hpp  SparseLayerRef, one entry of sparse_layers(), and its check
//   block_topology.hpp    BlockTopology, how DST reaches a block-sparse layer's blocks
//   parameter_memory.hpp  parameter_memory, the bytes of a model's parameters by kind
#pragma once

#include "block_topology.hpp"
#include "parameter_memory.hpp"
#include "sparse_layer_ref.hpp"
#include "trainable_model.hpp"
