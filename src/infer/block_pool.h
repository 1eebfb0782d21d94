// Fixed-size KV blocks handed out to sequences, with reference counts so a shared prefix can
// be held by several sequences (prefix cache, forked samples) and freed by the last holder.
#pragma once

#include <cstdint>
#include <vector>

namespace unillm::infer {

class BlockPool {
 public:
  explicit BlockPool(int64_t num_blocks);
  // A free block id with refcount 1; throws OutOfMemory when none is left.
  int32_t allocate();
  void retain(int32_t block);
  void release(int32_t block);
  int64_t free_blocks() const { return static_cast<int64_t>(free_.size()); }
  int64_t num_blocks() const { return static_cast<int64_t>(refs_.size()); }
  int32_t refcount(int32_t block) const { return refs_.at(block); }

 private:
  std::vector<int32_t> refs_;
  std::vector<int32_t> free_;  // stack; lowest ids handed out first
};

}  // namespace unillm::infer
