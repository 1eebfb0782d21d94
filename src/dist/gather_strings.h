// Every rank's string on every rank (rank order): small control data such as a logging
// interval's metrics, whose size differs per rank.
#pragma once

#include <string>
#include <vector>

#include "dist/process_group.h"

namespace unillm::dist {

std::vector<std::string> allgather_strings(ProcessGroup& g, const std::string& mine);

}  // namespace unillm::dist
