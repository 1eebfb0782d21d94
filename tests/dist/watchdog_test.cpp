// dist::Watchdog in-process, with a recording action instead of _exit: an operation that outlives
// its deadline is reported once, naming the rank, the operation and the timeout; one that finishes
// in time, or a watchdog that is off, reports nothing. (The end-to-end behaviour under mpirun is in
// tests/cli/launch_test.cpp.)
#include "dist/watchdog.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

namespace unillm::dist {
namespace {

using std::chrono::milliseconds;

struct Recorder {
  std::mutex mu;
  std::vector<std::string> messages;
  ExpiryAction action() {
    return [this](const std::string& m) {
      std::lock_guard<std::mutex> lk(mu);
      messages.push_back(m);
    };
  }
  std::vector<std::string> get() {
    std::lock_guard<std::mutex> lk(mu);
    return messages;
  }
};

TEST(Watchdog, AnOperationPastItsDeadlineIsReportedOnceWithRankAndOperation) {
  Recorder rec;
  Watchdog dog(0.1, rec.action());
  dog.set_rank(3);
  {
    auto armed = dog.arm("allreduce of 1000 f32 (group of 2)");
    std::this_thread::sleep_for(milliseconds(400));
  }
  const auto m = rec.get();
  ASSERT_EQ(m.size(), 1u);
  EXPECT_EQ(m[0].rfind("rank 3: allreduce of 1000 f32 (group of 2) did not complete within 0.1 s; "
                       "another process "
                       "has died or hung",
                       0),
            0u)
      << m[0];
  EXPECT_NE(m[0].find("--dist-timeout"), std::string::npos) << m[0];
}

TEST(Watchdog, OperationsThatFinishInTimeAreNotReported) {
  Recorder rec;
  Watchdog dog(0.2, rec.action());
  dog.set_rank(0);
  // Many short operations back to back: each re-arms; none lasts its 0.2 s, together they do.
  for (int i = 0; i < 30; ++i) {
    auto armed = dog.arm("barrier");
    std::this_thread::sleep_for(milliseconds(10));
  }
  std::this_thread::sleep_for(milliseconds(300));  // idle between operations is not waiting
  EXPECT_TRUE(rec.get().empty()) << rec.get()[0];
  // A later slow one is still caught, with its own name.
  {
    auto armed = dog.arm("recv of 4 f32 (group of 2) from rank 1 tag 7");
    std::this_thread::sleep_for(milliseconds(400));
  }
  ASSERT_EQ(rec.get().size(), 1u);
  EXPECT_NE(rec.get()[0].find("rank 0: recv of 4 f32"), std::string::npos) << rec.get()[0];
}

TEST(Watchdog, ZeroTimeoutIsOffAndAnUnknownRankIsAQuestionMark) {
  Recorder rec;
  {
    Watchdog off(0, rec.action());
    auto armed = off.arm("barrier");
    std::this_thread::sleep_for(milliseconds(100));
  }
  EXPECT_TRUE(rec.get().empty());
  Watchdog dog(2, rec.action());
  EXPECT_EQ(dog.message("MPI_Init").rfind("rank ?: MPI_Init did not complete within 2 s", 0), 0u);
}

}  // namespace
}  // namespace unillm::dist
