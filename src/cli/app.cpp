// Sub-command dispatch. Each command lives in its own cmd_<name>.cpp.
#include "cli/app.h"

#include <cstdio>
#include <exception>

#include "core/error.h"

namespace unillm::cli {

int run(int argc, char** argv) {
  try {
    std::fprintf(stderr, "usage: unillm <command> [options]\n");
    return 2;
  } catch (const Error& e) {
    std::fprintf(stderr, "unillm: error: %s\n", e.what());
    return 1;
  }
}

}  // namespace unillm::cli
