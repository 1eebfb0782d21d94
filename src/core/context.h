// The explicit execution context: which device ops run on, the RNG, and the thread count the
// caller chose. Passed down instead of globals; the CLI builds it from flags.
#pragma once

#include "core/device.h"
#include "core/rng.h"

namespace unillm {

struct Context {
  Device device;
  int threads = 1;
  Rng rng{42};
};

}  // namespace unillm
