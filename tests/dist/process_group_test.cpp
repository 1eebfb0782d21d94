// dist::ProcessGroup over Open MPI: the collectives and the mesh's groups under `mpirun` with 1, 2
// and 4 processes on loopback (tests/dist/dist_worker.cpp checks each result against closed
// forms), each run bounded by `timeout` so a hung collective fails the test instead of the suite.
#include <gtest/gtest.h>

#include <string>

#include "support/run_cli.h"

namespace unillm {
namespace {

// mpirun as root needs Open MPI's consent variables; --oversubscribe lets 4 ranks share 2 cores.
testing::CliResult mpirun(int np, const std::string& args) {
  return testing::run_shell("OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader "
                            "timeout -k 5 120 mpirun --oversubscribe --bind-to none -np " +
                            std::to_string(np) + " " + UNILLM_BINARY_DIR + "/tests/dist_worker " + args);
}

int count(const std::string& s, const std::string& what) {
  int n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}

TEST(ProcessGroup, CollectivesOnOneTwoAndFourRanks) {
  for (int np : {1, 2, 4}) {
    auto r = mpirun(np, "collectives");
    EXPECT_EQ(r.exit_code, 0) << "np " << np << "\n" << r.out << r.err;
    EXPECT_EQ(count(r.out, "ok rank"), np) << r.out;
    EXPECT_EQ(count(r.out, "FAIL"), 0) << r.out;
  }
}

TEST(ProcessGroup, MeshGroupsHoldTheRightRanks) {
  // (tp, pp, sharding) over 4 ranks: every axis gets a turn at being 2 wide, dp the rest.
  for (const char* layout : {"2 1 1", "1 2 1", "1 1 2", "2 2 1", "1 1 1"}) {
    auto r = mpirun(4, std::string("mesh ") + layout);
    EXPECT_EQ(r.exit_code, 0) << layout << "\n" << r.out << r.err;
    EXPECT_EQ(count(r.out, "ok rank"), 4) << layout << "\n" << r.out;
  }
}

TEST(ProcessGroup, AFailingRankEndsTheWholeRunInsteadOfHanging) {
  // 3 processes cannot be split into tp 2: every rank throws ConfigError and aborts the world.
  auto r = mpirun(3, "mesh 2 1 1");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.exit_code, 124) << "timed out: a rank hung";
  EXPECT_NE(r.err.find("tensor_parallel_degree 2"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace unillm
