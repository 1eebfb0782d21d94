// Block tables, reference counts, the prefix-cache hash index and its LRU list.
#include "infer/block_manager.h"

#include <algorithm>

#include "core/error.h"

namespace unillm::infer {

namespace {
uint64_t mix(uint64_t h, uint64_t v) {  // splitmix64 finaliser over h ^ v
  uint64_t z = h ^ (v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2));
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
}  // namespace

BlockManager::BlockManager(int64_t num_blocks, int64_t block_size, bool prefix_caching)
    : block_size_(block_size), prefix_caching_(prefix_caching), refs_(num_blocks, 0),
      meta_(num_blocks) {
  UNILLM_CHECK(num_blocks > 0 && block_size > 0, "[kv] the cache needs at least one block of one slot");
  for (int64_t b = num_blocks - 1; b >= 0; --b) free_.push_back(static_cast<int32_t>(b));
}

int64_t BlockManager::blocks_for(int64_t tokens) const { return (tokens + block_size_ - 1) / block_size_; }

uint64_t BlockManager::hash_block(uint64_t parent, const int32_t* tokens, uint64_t salt) const {
  uint64_t h = mix(parent, salt);
  for (int64_t i = 0; i < block_size_; ++i) h = mix(h, static_cast<uint32_t>(tokens[i]));
  return h;
}

int32_t BlockManager::take_block() {
  int32_t b;
  if (!free_.empty()) {
    b = free_.back();
    free_.pop_back();
  } else {
    UNILLM_CHECK(!lru_.empty(), "[kv] no block to take");
    b = lru_.front();  // evict the least recently released cached block
    lru_.pop_front();
    by_hash_.erase(meta_[b].hash);
    meta_[b] = Cached();
  }
  refs_[b] = 1;
  return b;
}

int64_t BlockManager::match_prefix(BlockTable& t, const std::vector<int32_t>& tokens, uint64_t salt) {
  if (!prefix_caching_ || !t.blocks.empty() || tokens.empty()) return 0;
  const int64_t full = (static_cast<int64_t>(tokens.size()) - 1) / block_size_;
  lookups_ += full;
  uint64_t parent = 0;
  for (int64_t i = 0; i < full; ++i) {
    const int32_t* blk = tokens.data() + i * block_size_;
    const uint64_t h = hash_block(parent, blk, salt);
    auto it = by_hash_.find(h);
    if (it == by_hash_.end()) break;
    const int32_t b = it->second;
    const Cached& m = meta_[b];
    if (m.parent != parent || m.salt != salt || !std::equal(m.tokens.begin(), m.tokens.end(), blk))
      break;
    if (refs_[b] == 0) lru_.erase(meta_[b].lru);
    ++refs_[b];
    ++hits_;
    t.blocks.push_back(b);
    t.hashes.push_back(h);
    parent = h;
  }
  return static_cast<int64_t>(t.blocks.size()) * block_size_;
}

bool BlockManager::reserve(BlockTable& t, int64_t begin, int64_t end, std::vector<BlockCopy>* copies) {
  const auto have = static_cast<int64_t>(t.blocks.size());
  const int64_t grow = std::max<int64_t>(0, blocks_for(end) - have);
  // Blocks of [begin, end) that t already holds and shares: each needs a copy.
  std::vector<int64_t> shared;
  if (end > begin)
    for (int64_t i = begin / block_size_; i < std::min(have, blocks_for(end)); ++i)
      if (refs_[t.blocks[i]] > 1) shared.push_back(i);
  if (grow + static_cast<int64_t>(shared.size()) > available()) return false;
  UNILLM_CHECK(shared.empty() || copies, "[kv] a write into a shared block needs copy-on-write");
  for (int64_t i : shared) {
    const int32_t from = t.blocks[i];
    const int32_t to = take_block();
    --refs_[from];  // still > 0: the other holders keep it
    t.blocks[i] = to;
    copies->push_back({from, to});
  }
  for (int64_t i = 0; i < grow; ++i) t.blocks.push_back(take_block());
  return true;
}

BlockTable BlockManager::fork(const BlockTable& t) {
  for (int32_t b : t.blocks) {
    UNILLM_CHECK(refs_.at(b) > 0, "[kv] fork of a table holding a free block");
    ++refs_[b];
  }
  return t;
}

void BlockManager::commit(BlockTable& t, const std::vector<int32_t>& tokens, int64_t computed,
                          uint64_t salt) {
  if (!prefix_caching_) return;
  const int64_t full = std::min<int64_t>(computed / block_size_, static_cast<int64_t>(t.blocks.size()));
  for (int64_t i = static_cast<int64_t>(t.hashes.size()); i < full; ++i) {
    const uint64_t parent = i ? t.hashes[i - 1] : 0;
    const int32_t* blk = tokens.data() + i * block_size_;
    const uint64_t h = hash_block(parent, blk, salt);
    t.hashes.push_back(h);
    const int32_t b = t.blocks[i];
    if (by_hash_.count(h) || meta_[b].hashed) continue;  // the same content is cached elsewhere
    Cached& m = meta_[b];
    m.hash = h;
    m.tokens.assign(blk, blk + block_size_);
    m.parent = parent;
    m.salt = salt;
    m.hashed = true;
    by_hash_[h] = b;
  }
}

void BlockManager::release(BlockTable& t) {
  for (int32_t b : t.blocks) {
    UNILLM_CHECK(refs_.at(b) > 0, "[kv] release of a free block");
    if (--refs_[b] > 0) continue;
    if (meta_[b].hashed) {
      meta_[b].lru = lru_.insert(lru_.end(), b);
    } else {
      free_.push_back(b);
    }
  }
  t.blocks.clear();
  t.hashes.clear();
}

}  // namespace unillm::infer
