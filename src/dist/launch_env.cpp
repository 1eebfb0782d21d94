// The launcher's environment (launch_env.h).
#include "dist/launch_env.h"

#include <cstdlib>
#include <vector>

#include "core/error.h"

namespace unillm::dist {
namespace {

int parse_int(const char* name, const char* v, int lo) {
  char* end = nullptr;
  errno = 0;
  const long x = std::strtol(v, &end, 10);
  if (end == v || *end != '\0' || errno != 0 || x < lo || x > 1 << 24)
    UNILLM_THROW(ConfigError, "[dist] ", name, "='", v, "' is not an integer >= ", lo);
  return static_cast<int>(x);
}

}  // namespace

LaunchEnv read_launch_env(const GetEnv& getenv) {
  LaunchEnv e;
  const char* rank = getenv("OMPI_COMM_WORLD_RANK");
  const char* size = getenv("OMPI_COMM_WORLD_SIZE");
  if (!rank || !size) {
    if (getenv("RANK") && getenv("WORLD_SIZE") && std::string(getenv("WORLD_SIZE")) != "1")
      UNILLM_THROW(ConfigError, "[dist] RANK/WORLD_SIZE are set (torchrun or torch.distributed.launch), but unillm's "
                                "processes are started by Open MPI: run `mpirun -np N unillm train CONFIG` or "
                                "`unillm launch --nproc N CONFIG`");
    return e;
  }
  e.under_mpi = true;
  e.size = parse_int("OMPI_COMM_WORLD_SIZE", size, 1);
  e.rank = parse_int("OMPI_COMM_WORLD_RANK", rank, 0);
  if (e.rank >= e.size)
    UNILLM_THROW(ConfigError, "[dist] OMPI_COMM_WORLD_RANK=", e.rank, " is not below OMPI_COMM_WORLD_SIZE=", e.size);
  const char* lr = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
  const char* ls = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  e.local_rank = lr ? parse_int("OMPI_COMM_WORLD_LOCAL_RANK", lr, 0) : e.rank;
  e.local_size = ls ? parse_int("OMPI_COMM_WORLD_LOCAL_SIZE", ls, 1) : e.size;
  if (e.local_rank >= e.local_size)
    UNILLM_THROW(ConfigError, "[dist] OMPI_COMM_WORLD_LOCAL_RANK=", e.local_rank,
                 " is not below OMPI_COMM_WORLD_LOCAL_SIZE=", e.local_size);
  return e;
}

LaunchEnv read_launch_env() {
  return read_launch_env([](const char* n) -> const char* { return std::getenv(n); });
}

int local_device_index(const LaunchEnv& env, const GetEnv& getenv) {
  for (const char* name : {"UNILLM_VISIBLE_DEVICES", "ASCEND_RT_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"}) {
    const char* v = getenv(name);
    if (!v || !*v) continue;
    std::vector<int> ids;
    std::string s(v), item;
    for (size_t i = 0; i <= s.size(); ++i) {
      if (i == s.size() || s[i] == ',') {
        ids.push_back(parse_int(name, item.c_str(), 0));
        item.clear();
      } else {
        item += s[i];
      }
    }
    if (env.local_rank >= static_cast<int>(ids.size()))
      UNILLM_THROW(ConfigError, "[dist] ", name, "='", v, "' lists ", ids.size(), " devices, but this host runs ",
                   env.local_size, " ranks (local rank ", env.local_rank, ")");
    return ids[static_cast<size_t>(env.local_rank)];
  }
  return env.local_rank;
}

}  // namespace unillm::dist
