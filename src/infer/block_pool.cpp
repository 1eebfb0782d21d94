// Block allocation with reference counts.
#include "infer/block_pool.h"

#include "core/error.h"

namespace unillm::infer {

BlockPool::BlockPool(int64_t num_blocks) : refs_(num_blocks, 0) {
  for (int64_t b = num_blocks - 1; b >= 0; --b) free_.push_back(static_cast<int32_t>(b));
}

int32_t BlockPool::allocate() {
  if (free_.empty()) UNILLM_THROW(OutOfMemory, "[kv] all ", refs_.size(), " KV blocks are in use");
  int32_t b = free_.back();
  free_.pop_back();
  refs_[b] = 1;
  return b;
}

void BlockPool::retain(int32_t block) {
  UNILLM_CHECK(refs_.at(block) > 0, "[kv] retain of a free block");
  ++refs_[block];
}

void BlockPool::release(int32_t block) {
  UNILLM_CHECK(refs_.at(block) > 0, "[kv] release of a free block");
  if (--refs_[block] == 0) free_.push_back(block);
}

}  // namespace unillm::infer
