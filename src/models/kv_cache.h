// The per-layer paged KV storage a forward writes into: for each layer K and V tensors of
// [num_blocks, block_size, Hkv, D]. Which blocks belong to which sequence is the caller's
// business (infer's block pool); a forward without a cache uses one block per sequence.
#pragma once

#include <vector>

#include "core/tensor.h"
#include "models/model_config.h"

namespace unillm::models {

struct KvCaches {
  std::vector<Tensor> k, v;  // per layer [NB, BS, Hkv, D]
  int64_t num_blocks = 0, block_size = 0;
  static KvCaches allocate(const ModelConfig& c, int64_t num_blocks, int64_t block_size,
                           DType dtype = DType::f32, Device device = {});
  size_t bytes() const;
};

}  // namespace unillm::models
