// run_with_team: parallel_for inside it splits work exactly as outside (same chunks on the same
// threads), covers every index once, runs nested calls inline, and passes exceptions through.
#include <gtest/gtest.h>

#include <omp.h>

#include <atomic>
#include <stdexcept>
#include <vector>

#include "core/parallel.h"
#include "core/thread_team.h"

namespace unillm {
namespace {

class ThreadTeamTest : public ::testing::Test {
 protected:
  void SetUp() override {
    saved_ = num_threads();
    set_omp_threads(2);  // a team of two even on a one-core machine
  }
  void TearDown() override { set_omp_threads(saved_); }
  int saved_ = 1;
};

// Which chunk [b, e) each index fell into, and the thread that ran it.
struct Split {
  std::vector<int64_t> begin;
  std::vector<int> thread;
};

Split split_of(int64_t n, int64_t grain) {
  Split s{std::vector<int64_t>(n, -1), std::vector<int>(n, -1)};
  parallel_for(n, grain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      s.begin[i] = b;
      s.thread[i] = omp_get_thread_num();
    }
  });
  return s;
}

TEST_F(ThreadTeamTest, SameChunksOnTheSameThreadsAsWithoutATeam) {
  for (int64_t n : {1, 7, 64, 1001}) {
    for (int64_t grain : {1, 16, 600}) {
      Split plain = split_of(n, grain), held;
      run_with_team([&] { held = split_of(n, grain); });
      EXPECT_EQ(held.begin, plain.begin) << "n " << n << " grain " << grain;
      EXPECT_EQ(held.thread, plain.thread) << "n " << n << " grain " << grain;
    }
  }
}

TEST_F(ThreadTeamTest, ManyCallsInOneTeamEachCoverEveryIndexOnce) {
  std::vector<std::atomic<int>> hits(257);
  run_with_team([&] {
    EXPECT_EQ(num_threads(), 2);
    EXPECT_FALSE(in_parallel_region());
    for (int rep = 0; rep < 500; ++rep)
      parallel_for(257, 1, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) hits[i].fetch_add(1);
      });
  });
  for (auto& h : hits) EXPECT_EQ(h.load(), 500);
}

TEST_F(ThreadTeamTest, NestedParallelForRunsInline) {
  std::atomic<int> inner_calls{0};
  run_with_team([&] {
    parallel_for(4, 1, [&](int64_t, int64_t) {
      EXPECT_TRUE(in_parallel_region());
      parallel_for(100, 1, [&](int64_t b, int64_t e) {
        EXPECT_EQ(b, 0);
        EXPECT_EQ(e, 100);
        inner_calls.fetch_add(1);
      });
    });
  });
  EXPECT_EQ(inner_calls.load(), 2);  // one per outer chunk, each inline
}

TEST_F(ThreadTeamTest, ExceptionsReachTheCaller) {
  EXPECT_THROW(run_with_team([] {
                 parallel_for(10, 1, [](int64_t, int64_t) {});
                 throw std::runtime_error("boom");
               }),
               std::runtime_error);
  // The team is gone: a later parallel_for is an ordinary OpenMP one.
  Split s = split_of(10, 1);
  EXPECT_EQ(s.begin[9], 5);
}

}  // namespace
}  // namespace unillm
