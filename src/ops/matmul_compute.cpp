#include "ops/matmul_compute.h"

#include <atomic>

namespace unillm::ops {
namespace {
// Process-wide, like PyTorch's setting: the kernels read it on whichever thread runs them.
std::atomic<MatmulCompute> g_mode{MatmulCompute::f32};
}  // namespace

MatmulCompute matmul_compute() { return g_mode.load(std::memory_order_relaxed); }
void set_matmul_compute(MatmulCompute mode) { g_mode.store(mode, std::memory_order_relaxed); }
const char* matmul_compute_name(MatmulCompute mode) {
  return mode == MatmulCompute::bf16 ? "bf16" : "f32";
}

}  // namespace unillm::ops
