// unillm's entry point: everything lives in cli/app.cpp so tests can call it in-process.
#include <unistd.h>

#include <cstdlib>

#include "cli/app.h"

int main(int argc, char** argv) {
  // OpenMP threads that spin at barriers collapse throughput (×30 measured) as soon as another
  // process takes a core, since every op ends in a barrier. libgomp reads its wait policy only
  // at start-up, so when the user has not chosen one we restart once with passive waiting
  // (measured cost on an idle machine: a few percent on decode). Set OMP_WAIT_POLICY to opt out.
  if (std::getenv("OMP_WAIT_POLICY") == nullptr) {
    setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
    execv("/proc/self/exe", argv);  // returns only on failure: then run as we are
  }
  return unillm::cli::run(argc, argv);
}
