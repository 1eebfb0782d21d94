// Stop strings across token boundaries; held-back prefixes are released when they diverge.
#include "infer/stop_matcher.h"

#include <gtest/gtest.h>

#include "core/error.h"
#include "infer/block_pool.h"

namespace unillm::infer {
namespace {

TEST(StopMatcher, MatchAcrossPiecesCutsBeforeStop) {
  StopMatcher m({"\nUser:"});
  std::string out = m.push("Hello");
  out += m.push(" there\nU");
  out += m.push("se");
  EXPECT_EQ(out, "Hello there");
  EXPECT_FALSE(m.stopped());
  out += m.push("r: hi");
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(out, "Hello there");
}

TEST(StopMatcher, DivergingPrefixIsReleased) {
  StopMatcher m({"END"});
  std::string out = m.push("the EN");
  EXPECT_EQ(out, "the ");
  out += m.push("D? no, ENTER");
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(out, "the ");
  StopMatcher m2({"END"});
  out = m2.push("EN");
  out += m2.push("TER");
  out += m2.flush();
  EXPECT_EQ(out, "ENTER");
}

TEST(BlockPool, RefcountsFreeOnLastRelease) {
  BlockPool pool(2);
  int32_t a = pool.allocate(), b = pool.allocate();
  EXPECT_EQ(a, 0);
  EXPECT_EQ(b, 1);
  EXPECT_THROW(pool.allocate(), OutOfMemory);
  pool.retain(a);
  pool.release(a);
  EXPECT_EQ(pool.free_blocks(), 0);
  pool.release(a);
  EXPECT_EQ(pool.free_blocks(), 1);
  EXPECT_EQ(pool.allocate(), a);
}

}  // namespace
}  // namespace unillm::infer
