// The reference device's kernel table: plain C++ over the pool's read-write view, one file per
// group of ops (kernels_*.cpp). A test build leaves one op out (UNILLM_REF_OMIT_OP) to exercise
// the host fallback.
#include <cstring>

#include "kernel_util.h"

namespace unillm_ref {

const std::vector<unillm_kernel>& kernel_table() {
  static const std::vector<unillm_kernel> table = [] {
    std::vector<unillm_kernel> t;
    add_dense_kernels(t);
    add_norm_kernels(t);
    add_attention_kernels(t);
#ifdef UNILLM_REF_OMIT_OP
    std::vector<unillm_kernel> kept;
    for (const unillm_kernel& k : t)
      if (std::strcmp(k.op, UNILLM_REF_OMIT_OP) != 0) kept.push_back(k);
    t = kept;
#endif
    return t;
  }();
  return table;
}

}  // namespace unillm_ref
