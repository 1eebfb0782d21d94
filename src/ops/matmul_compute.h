// How matrix products of f32 operands may compute, set by the caller for a whole run (PyTorch's
// autocast to bf16 / torch.set_float32_matmul_precision): `f32` (the default) multiplies f32 (or
// f32-converted bf16/f16) values; `bf16` lets a backend whose device has bf16 arithmetic round both
// inputs of its GEMMs to bf16 and accumulate in f32, as `bf16: true` does on a GPU. A backend
// without bf16 arithmetic ignores it. Element-wise ops, reductions and the optimizer are not
// affected. docs/training.md, "Mixed precision", states the numerics.
#pragma once

namespace unillm::ops {

enum class MatmulCompute { f32, bf16 };

MatmulCompute matmul_compute();
void set_matmul_compute(MatmulCompute mode);
const char* matmul_compute_name(MatmulCompute mode);

// Sets the mode for a scope and restores the previous one at its end.
class MatmulComputeScope {
 public:
  explicit MatmulComputeScope(MatmulCompute mode) : prev_(matmul_compute()) { set_matmul_compute(mode); }
  ~MatmulComputeScope() { set_matmul_compute(prev_); }
  MatmulComputeScope(const MatmulComputeScope&) = delete;
  MatmulComputeScope& operator=(const MatmulComputeScope&) = delete;

 private:
  MatmulCompute prev_;
};

}  // namespace unillm::ops
