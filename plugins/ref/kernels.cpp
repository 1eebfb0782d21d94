// The reference device's kernel table: plain C++ over the pool's read-write view.
#include "device.h"

namespace unillm_ref {

const std::vector<unillm_kernel>& kernel_table() {
  static const std::vector<unillm_kernel> table;
  return table;
}

}  // namespace unillm_ref
