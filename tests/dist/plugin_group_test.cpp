// dist::PluginGroup over the reference plugin's collectives table (ABI 1.1, MPI underneath) under
// `mpirun` with 1, 2 and 4 processes: tests/dist/plugin_group_worker.cpp checks every collective
// on device tensors against closed forms and that none went through host staging, a hung peer
// ending by the watchdog's deadline; the ABI checks (a 1.0 host, a 1.0 plugin) and the table
// outside an MPI job.
#include <gtest/gtest.h>

#include <string>

#include "support/run_cli.h"

namespace unillm {
namespace {

const std::string kWorker = std::string(UNILLM_BINARY_DIR) + "/tests/plugin_group_worker ";
const std::string kRef = std::string(UNILLM_BINARY_DIR) + "/plugins/libunillm_ref.so";
const std::string kRefV0 = std::string(UNILLM_BINARY_DIR) + "/tests/plugins/libunillm_ref_v0.so";

testing::CliResult mpirun(int np, const std::string& args) {
  return testing::run_shell(
      "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader "
      "timeout -k 5 120 mpirun --oversubscribe --bind-to none -np " +
      std::to_string(np) + " " + kWorker + args);
}

int count(const std::string& s, const std::string& what) {
  int n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}

TEST(PluginGroup, EveryCollectiveOnDeviceTensorsOnOneTwoAndFourRanks) {
  for (int np : {1, 2, 4}) {
    auto r = mpirun(np, "collectives " + kRef);
    EXPECT_EQ(r.exit_code, 0) << "np " << np << "\n" << r.out << r.err;
    EXPECT_EQ(count(r.out, "ok rank"), np) << r.out;
    EXPECT_EQ(count(r.out, "FAIL"), 0) << r.out;
  }
}

TEST(PluginGroup, AWaitOnAPeerThatNeverComesEndsByTheDeadline) {
  auto r = mpirun(2, "hang " + kRef);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.exit_code, 124) << "timed out: the watchdog did not end the wait";
  EXPECT_NE(r.err.find("rank 0: ref's allreduce of 4 f32 (group of 2) did not complete within 2 s"),
            std::string::npos)
      << r.err;
}

TEST(PluginGroup, OlderHostsAndPluginsOfTheMinorVersion) {
  auto r = mpirun(1, "abi " + kRef + " " + kRefV0);
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(count(r.out, "ok rank"), 1) << r.out;
}

TEST(PluginGroup, TheTableOutsideAnMpiJobSaysUnsupported) {
  auto r = testing::run_shell("timeout -k 5 60 " + kWorker + "no-mpi " + kRef);
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(count(r.out, "ok rank"), 1) << r.out;
}

}  // namespace
}  // namespace unillm
