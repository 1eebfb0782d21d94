// gather_rows: row copies through the owning backend, so it works on any device and dtype (idx is
// read on the CPU). Backward (scatter-add of rows) goes beside gather_rows_forward.
#include "ops/gather.h"

#include "ops/dispatch.h"

namespace unillm::ops {
namespace {

constexpr const char* kOp = "gather_rows";

Tensor gather_rows_forward(const Tensor& x_in, const Tensor& idx_in) {
  check_defined(kOp, "x", x_in);
  check_defined(kOp, "idx", idx_in);
  check_ndim(kOp, "x", x_in, 2);
  check_ndim(kOp, "idx", idx_in, 1);
  check_dtype(kOp, "idx", idx_in, DType::i32);
  if (!idx_in.device().is_cpu())
    UNILLM_THROW(DeviceError, "[gather_rows] idx must be on the CPU");
  Tensor x = x_in.contiguous(), idx = idx_in.contiguous();
  const int64_t rows = x.size(0), m = idx.size(0);
  const int32_t* ip = idx.data<int32_t>();
  for (int64_t i = 0; i < m; ++i)
    if (ip[i] < 0 || ip[i] >= rows)
      UNILLM_THROW(ShapeError, "[gather_rows] idx[", i, "] = ", ip[i], " is outside [0, ", rows, ")");
  Tensor out = Tensor::empty({m, x.size(1)}, x.dtype(), x.device());
  const size_t row_bytes = static_cast<size_t>(x.size(1)) * dtype_size(x.dtype());
  if (row_bytes == 0) return out;
  Backend& be = backend_for(x.device());
  auto* src = static_cast<const char*>(x.raw_data());
  auto* dst = static_cast<char*>(out.raw_data());
  for (int64_t i = 0; i < m; ++i)
    be.copy(dst + i * row_bytes, x.device(), src + ip[i] * row_bytes, x.device(), row_bytes);
  return out;
}

}  // namespace

Tensor gather_rows(const Tensor& x, const Tensor& idx) { return gather_rows_forward(x, idx); }

}  // namespace unillm::ops
