// `unillm train` started as several processes is refused before it reads or writes anything:
// parallel training is not wired into the trainer yet, and N independent runs would write one
// output_dir. mpirun's processes (OMPI_COMM_WORLD_SIZE > 1) and torchrun's (RANK/WORLD_SIZE) get
// a clear error; a world of one trains as before.
#include <gtest/gtest.h>

#include <filesystem>

#include "support/expect.h"
#include "support/run_cli.h"

namespace unillm {
namespace {

using testing::run_shell;
using testing::source_path;

const std::string kConfig = "examples/train_lora/stories260K_lora_sft.yaml";

TEST(ParallelLaunch, SeveralMpiProcessesAreRefusedAndWriteNothing) {
  const std::string dir = testing::temp_dir("mpi_train");
  auto r = run_shell("cd " + source_path("") + " && OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "
                     "OMPI_MCA_btl=self,vader timeout -k 5 120 mpirun --oversubscribe --bind-to none -np 2 " +
                     std::string(UNILLM_BINARY_DIR) + "/unillm train " + kConfig + " output_dir=" + dir + "/out --quiet");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.exit_code, 124) << "timed out";
  EXPECT_NE(r.err.find("started as one of 2 processes"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(dir + "/out"));
}

TEST(ParallelLaunch, TorchrunVariablesAreRefusedNamingMpirun) {
  const std::string dir = testing::temp_dir("torchrun_train");
  auto r = run_shell("cd " + source_path("") + " && RANK=0 WORLD_SIZE=2 " + std::string(UNILLM_BINARY_DIR) +
                     "/unillm train " + kConfig + " output_dir=" + dir + "/out --quiet");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("mpirun"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(dir + "/out"));
}

}  // namespace
}  // namespace unillm
