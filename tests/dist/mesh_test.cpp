// dist::mesh_shape / coord_of / rank_of without MPI: the layout (tp fastest, pp slowest), the
// bijection over every rank, and the errors for degrees that do not divide the world; and the
// launcher's environment (launch_env.h) from a fake environment.
#include "dist/mesh.h"

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>

#include "core/error.h"
#include "dist/launch_env.h"

namespace unillm::dist {
namespace {

TEST(Mesh, DataParallelIsWhatTheOtherDegreesLeave) {
  const MeshShape s = mesh_shape(16, 2, 2, 2);
  EXPECT_EQ(s.dp, 2);
  EXPECT_EQ(s.world(), 16);
  EXPECT_EQ(mesh_shape(8, 1, 1, 1).dp, 8);
}

TEST(Mesh, TensorParallelIsFastestAndPipelineSlowest) {
  const MeshShape s = mesh_shape(16, 2, 2, 2);  // pp 2 × dp 2 × sharding 2 × tp 2
  EXPECT_EQ(coord_of(s, 1), (MeshCoord{0, 0, 0, 1}));
  EXPECT_EQ(coord_of(s, 2), (MeshCoord{0, 0, 1, 0}));
  EXPECT_EQ(coord_of(s, 4), (MeshCoord{0, 1, 0, 0}));
  EXPECT_EQ(coord_of(s, 8), (MeshCoord{1, 0, 0, 0}));
  std::set<int> seen;
  for (int r = 0; r < 16; ++r) {
    EXPECT_EQ(rank_of(s, coord_of(s, r)), r);
    seen.insert(rank_of(s, coord_of(s, r)));
  }
  EXPECT_EQ(seen.size(), 16u);
  EXPECT_THROW(coord_of(s, 16), ShapeError);
}

TEST(Mesh, DegreesThatDoNotDivideTheWorldAreNamed) {
  try {
    mesh_shape(6, 4, 1, 1);
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("tensor_parallel_degree 4"), std::string::npos) << e.what();
  }
  EXPECT_THROW(mesh_shape(4, 0, 1, 1), ConfigError);
}

GetEnv fake(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const char* n) -> const char* {
    auto it = vars.find(n);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
}

TEST(LaunchEnv, OpenMpiRanksAndVisibleDevices) {
  const LaunchEnv none = read_launch_env(fake({}));
  EXPECT_FALSE(none.under_mpi);
  EXPECT_EQ(none.size, 1);
  const auto env = fake({{"OMPI_COMM_WORLD_RANK", "3"}, {"OMPI_COMM_WORLD_SIZE", "4"},
                         {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                         {"ASCEND_RT_VISIBLE_DEVICES", "4,5"}, {"CUDA_VISIBLE_DEVICES", "0,1"}});
  const LaunchEnv e = read_launch_env(env);
  EXPECT_TRUE(e.under_mpi);
  EXPECT_EQ(e.rank, 3);
  EXPECT_EQ(e.local_rank, 1);
  EXPECT_EQ(local_device_index(e, env), 5);  // ASCEND_RT_ before CUDA_
  EXPECT_EQ(local_device_index(e, fake({{"UNILLM_VISIBLE_DEVICES", "7,2"}, {"ASCEND_RT_VISIBLE_DEVICES", "4,5"}})), 2);
  EXPECT_EQ(local_device_index(e, fake({})), 1);
  EXPECT_THROW(local_device_index(e, fake({{"UNILLM_VISIBLE_DEVICES", "7"}})), ConfigError);
  EXPECT_THROW(local_device_index(e, fake({{"UNILLM_VISIBLE_DEVICES", "7,x"}})), ConfigError);
}

TEST(LaunchEnv, TorchrunIsRefusedByNameAndBadValuesAreNamed) {
  try {
    read_launch_env(fake({{"RANK", "0"}, {"WORLD_SIZE", "2"}}));
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("mpirun"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("unillm launch"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(read_launch_env(fake({{"RANK", "0"}, {"WORLD_SIZE", "1"}})).under_mpi);  // a world of one is fine
  try {
    read_launch_env(fake({{"OMPI_COMM_WORLD_RANK", "2"}, {"OMPI_COMM_WORLD_SIZE", "two"}}));
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("OMPI_COMM_WORLD_SIZE"), std::string::npos) << e.what();
  }
  EXPECT_THROW(read_launch_env(fake({{"OMPI_COMM_WORLD_RANK", "2"}, {"OMPI_COMM_WORLD_SIZE", "2"}})), ConfigError);
}

}  // namespace
}  // namespace unillm::dist
