// KV storage allocation.
#include "models/kv_cache.h"

namespace unillm::models {

KvCaches KvCaches::allocate(const ModelConfig& c, int64_t num_blocks, int64_t block_size, DType dtype,
                            Device device) {
  KvCaches kv;
  kv.num_blocks = num_blocks;
  kv.block_size = block_size;
  for (int64_t l = 0; l < c.num_layers; ++l) {
    kv.k.push_back(Tensor::empty({num_blocks, block_size, c.num_kv_heads, c.head_dim}, dtype, device));
    kv.v.push_back(Tensor::empty({num_blocks, block_size, c.num_kv_heads, c.head_dim}, dtype, device));
  }
  return kv;
}

size_t KvCaches::bytes() const {
  size_t b = 0;
  for (auto& t : k) b += t.nbytes();
  for (auto& t : v) b += t.nbytes();
  return b;
}

}  // namespace unillm::models
