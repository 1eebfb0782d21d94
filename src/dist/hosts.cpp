#include "dist/hosts.h"

#include <unistd.h>

#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "dist/gather_strings.h"

namespace unillm::dist {

int processes_per_host(ProcessGroup& world) {
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) != 0) UNILLM_THROW(IoError, "[dist] gethostname failed");
  const std::vector<std::string> hosts = allgather_strings(world, name);
  // Runs of consecutive ranks on one host, in rank order.
  std::vector<std::pair<std::string, int>> runs;
  for (const std::string& h : hosts) {
    if (runs.empty() || runs.back().first != h) runs.emplace_back(h, 0);
    ++runs.back().second;
  }
  std::set<std::string> seen;
  bool even = true;
  std::string placement;
  for (const auto& [host, n] : runs) {
    even = even && seen.insert(host).second && n == runs.front().second;
    placement += (placement.empty() ? "" : ", ") + host + " " + std::to_string(n);
  }
  if (!even)
    UNILLM_THROW(ConfigError, "[dist] sharding within each host needs the same number of processes on every host, "
                 "as consecutive ranks (mpirun's default --map-by slot); ranks in order run on: ", placement);
  return runs.front().second;
}

}  // namespace unillm::dist
