// KV blocks of the serving engine: per-sequence block tables over a fixed pool, with reference
// counts and prefix caching. A full block's identity is a chain hash of everything before it
// (its parent's hash), its tokens and a salt (the adapter and KV dtype), so a new sequence whose
// prompt starts with an already computed run of full blocks takes those blocks instead of
// recomputing them. Cached blocks nobody holds stay on an LRU list and are evicted only when a
// free block is needed. Cached full blocks are never written again (new tokens go to later
// blocks). A forked sequence (the other choices of an n > 1 request) shares every block of its
// parent, the partial last one too: whichever of them first writes into a block still shared
// gets a private copy of it (copy-on-write), which the caller copies the K/V into.
#pragma once

#include <cstdint>
#include <list>
#include <unordered_map>
#include <vector>

namespace unillm::infer {

// One sequence's view: its blocks in order and the hashes of its first full blocks.
struct BlockTable {
  std::vector<int32_t> blocks;
  std::vector<uint64_t> hashes;  // of blocks[0 .. hashes.size()), all full and registered
};

// A block replaced by a private copy: the caller copies the K/V of block `from` into `to`
// before the forward that writes `to`.
struct BlockCopy {
  int32_t from, to;
};

class BlockManager {
 public:
  BlockManager(int64_t num_blocks, int64_t block_size, bool prefix_caching);

  int64_t block_size() const { return block_size_; }
  int64_t num_blocks() const { return static_cast<int64_t>(refs_.size()); }
  // Blocks that allocate() can hand out now: free plus evictable cached ones.
  int64_t available() const { return static_cast<int64_t>(free_.size() + lru_.size()); }
  int64_t used() const { return num_blocks() - available(); }  // held by some sequence
  int64_t cached() const { return static_cast<int64_t>(by_hash_.size()); }
  // Prefix-cache statistics: full prompt blocks looked up and found.
  int64_t lookups() const { return lookups_; }
  int64_t hits() const { return hits_; }

  // For a sequence with an empty table: takes the longest run of cached full blocks that starts
  // tokens, never all of it (the last token is always computed, for its logits). Returns the
  // number of tokens those blocks hold (a multiple of the block size).
  int64_t match_prefix(BlockTable& t, const std::vector<int32_t>& tokens, uint64_t salt);
  // Grows t to hold n tokens; false (and t unchanged) when not enough blocks are available.
  bool reserve(BlockTable& t, int64_t n) { return reserve(t, n, n, nullptr); }
  // Makes t ready to write positions [begin, end): grows it to end tokens and gives every block
  // of that range still shared with another table a private copy (copy-on-write), appended to
  // copies. false (t and copies unchanged) when not enough blocks are available.
  bool reserve(BlockTable& t, int64_t begin, int64_t end, std::vector<BlockCopy>* copies);
  // A second table over t's blocks (each one's reference count raised): the fork of a sequence.
  BlockTable fork(const BlockTable& t);
  int32_t refs(int32_t block) const { return refs_.at(block); }
  // Registers t's full blocks among tokens[0 .. computed) in the prefix cache.
  void commit(BlockTable& t, const std::vector<int32_t>& tokens, int64_t computed, uint64_t salt);
  // Drops t's references (cached blocks go to the LRU list, the others back to the free list).
  void release(BlockTable& t);

 private:
  int32_t take_block();
  int64_t blocks_for(int64_t tokens) const;
  uint64_t hash_block(uint64_t parent, const int32_t* tokens, uint64_t salt) const;

  int64_t block_size_;
  bool prefix_caching_;
  std::vector<int32_t> refs_;
  std::vector<int32_t> free_;  // stack; lowest ids first
  struct Cached {
    uint64_t hash = 0;
    std::vector<int32_t> tokens;  // checked on a hit, so a hash collision is never a wrong hit
    uint64_t parent = 0, salt = 0;
    std::list<int32_t>::iterator lru;  // valid while refs == 0
    bool hashed = false;
  };
  std::vector<Cached> meta_;
  std::unordered_map<uint64_t, int32_t> by_hash_;
  std::list<int32_t> lru_;  // least recently released first
  int64_t lookups_ = 0, hits_ = 0;
};

}  // namespace unillm::infer
