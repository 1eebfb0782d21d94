// Mixed-precision activation storage: while a LowPrecisionSaves is in scope, every f32 activation
// an op saves for backward (autograd::SavedTensor::activation) is kept as bf16 or f16 and
// converted back to f32 when backward reads it. The ops compute in f32 either way (this CPU has
// no bf16 arithmetic); what shrinks is the memory held between forward and backward.
//
// The same tensor saved by two ops (attention's output is also o_proj's input) is packed once:
// the pack hook remembers its recent conversions by source storage and shape, and reuses one
// while its source is still alive (a freed source's address can be reused by a new tensor, so
// liveness is checked, not just the address).
#pragma once

#include "autograd/grad_mode.h"
#include "core/dtype.h"

namespace unillm::nn {

// Hooks that pack f32 activations to dtype (bf16 or f16) and unpack them to f32; other dtypes
// (f64 reference runs, integer ids) are kept as they are.
std::shared_ptr<const autograd::SavedTensorHooks> low_precision_save_hooks(DType dtype);

class LowPrecisionSaves {
 public:
  explicit LowPrecisionSaves(DType dtype) : guard_(low_precision_save_hooks(dtype)) {}

 private:
  autograd::SavedTensorHooksGuard guard_;
};

}  // namespace unillm::nn
