// BlockManager: reservation, release, prefix-cache hits (full blocks only, never the whole
// prompt), collisions checked by content, salts, LRU eviction.
#include <gtest/gtest.h>

#include "infer/block_manager.h"

namespace unillm::infer {
namespace {

std::vector<int32_t> tokens(int n, int base = 0) {
  std::vector<int32_t> t;
  for (int i = 0; i < n; ++i) t.push_back(base + i);
  return t;
}

TEST(BlockManager, ReserveAndRelease) {
  BlockManager m(4, 4, false);
  BlockTable t;
  EXPECT_TRUE(m.reserve(t, 9));  // 3 blocks
  EXPECT_EQ(t.blocks.size(), 3u);
  EXPECT_EQ(m.available(), 1);
  BlockTable u;
  EXPECT_FALSE(m.reserve(u, 8));  // 2 blocks, 1 left: nothing taken
  EXPECT_TRUE(u.blocks.empty());
  EXPECT_EQ(m.available(), 1);
  m.release(t);
  EXPECT_EQ(m.available(), 4);
  EXPECT_EQ(m.used(), 0);
}

TEST(BlockManager, PrefixHitsTakeFullBlocksButNeverTheWholePrompt) {
  BlockManager m(8, 4, true);
  const auto p = tokens(12);  // exactly three blocks
  BlockTable a;
  EXPECT_EQ(m.match_prefix(a, p, 0), 0);
  ASSERT_TRUE(m.reserve(a, 12));
  m.commit(a, p, 12, 0);
  EXPECT_EQ(m.cached(), 3);
  BlockTable b;
  EXPECT_EQ(m.match_prefix(b, p, 0), 8) << "the last block is recomputed for the last logits";
  EXPECT_EQ(b.blocks[0], a.blocks[0]);
  EXPECT_EQ(b.blocks[1], a.blocks[1]);
  EXPECT_EQ(m.hits(), 2);
  BlockTable c;  // another adapter: no hit
  EXPECT_EQ(m.match_prefix(c, p, 7), 0);
  auto q = p;
  q[5] = 99;  // differs in the second block: one hit
  BlockTable d;
  EXPECT_EQ(m.match_prefix(d, q, 0), 4);
  m.release(a);
  m.release(b);
  m.release(d);
  EXPECT_EQ(m.used(), 0);
  EXPECT_EQ(m.cached(), 3) << "released cached blocks stay cached";
}

TEST(BlockManager, LeastRecentlyReleasedCachedBlocksAreEvictedFirst) {
  BlockManager m(3, 2, true);
  BlockTable a, b;
  const auto pa = tokens(3, 0), pb = tokens(3, 50);
  ASSERT_TRUE(m.reserve(a, 3));  // 2 blocks
  m.commit(a, pa, 3, 0);  // one full block cached
  m.release(a);
  ASSERT_TRUE(m.reserve(b, 2));
  m.commit(b, pb, 2, 0);
  m.release(b);
  EXPECT_EQ(m.cached(), 2);
  BlockTable c;
  ASSERT_TRUE(m.reserve(c, 6));  // all three blocks: evicts both cached ones
  EXPECT_EQ(m.cached(), 0);
  m.release(c);
  BlockTable d;
  EXPECT_EQ(m.match_prefix(d, pa, 0), 0);
}

TEST(BlockManager, ForksShareBlocksAndTheFirstWriterCopies) {
  BlockManager m(6, 4, false);
  BlockTable a;
  ASSERT_TRUE(m.reserve(a, 6));  // blocks of positions 0-3 and 4-5
  BlockTable b = m.fork(a);
  EXPECT_EQ(b.blocks, a.blocks);
  EXPECT_EQ(m.used(), 2);
  EXPECT_EQ(m.refs(a.blocks[1]), 2);
  // b writes position 6: its partial block is shared, so b gets a copy; block 0 stays shared.
  std::vector<BlockCopy> copies;
  ASSERT_TRUE(m.reserve(b, 6, 7, &copies));
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(copies[0].from, a.blocks[1]);
  EXPECT_EQ(copies[0].to, b.blocks[1]);
  EXPECT_NE(b.blocks[1], a.blocks[1]);
  EXPECT_EQ(b.blocks[0], a.blocks[0]);
  EXPECT_EQ(m.refs(a.blocks[1]), 1);
  // a is the last holder of its block now: it writes in place.
  ASSERT_TRUE(m.reserve(a, 6, 9, &copies));
  EXPECT_EQ(copies.size(), 1u);
  EXPECT_EQ(a.blocks.size(), 3u);
  // Not enough blocks for a copy: refused, nothing changed.
  BlockTable c = m.fork(b), d;
  ASSERT_TRUE(m.reserve(d, 8));  // the last two free blocks
  EXPECT_FALSE(m.reserve(c, 7, 8, &copies));
  EXPECT_EQ(c.blocks, b.blocks);
  EXPECT_EQ(copies.size(), 1u);
  for (BlockTable* t : {&a, &b, &c, &d}) m.release(*t);
  EXPECT_EQ(m.used(), 0);
}

}  // namespace
}  // namespace unillm::infer
