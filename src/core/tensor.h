// Tensor: a strided view (shape, strides, element offset, dtype) over shared Storage, plus the
// autograd slot. Views share storage; contiguous() copies only when needed. Shapes use the
// letters of STYLE.md in comments: [B, T, H, D] etc.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "core/error.h"

namespace unillm {

namespace autograd {
class Node;
}

using Shape = std::vector<int64_t>;
std::string shape_str(const Shape& s);
int64_t shape_numel(const Shape& s);

class Tensor;

// Autograd state of a leaf or an op output. grad_fn is set on outputs of recorded ops.
struct AutogradMeta {
  bool requires_grad = false;
  std::shared_ptr<Tensor> grad;  // accumulated (+=) by backward
  std::shared_ptr<autograd::Node> grad_fn;
  int output_index = 0;  // which output of grad_fn this tensor is
};

class Tensor {
 public:
  Tensor() = default;
  Tensor(std::shared_ptr<Storage> storage, Shape shape, DType dtype, int64_t offset = 0);

  static Tensor empty(const Shape& shape, DType dtype, Device device = {});
  static Tensor zeros(const Shape& shape, DType dtype, Device device = {});
  // CPU tensor filled from values (converted to dtype).
  static Tensor from_vector(const std::vector<float>& values, const Shape& shape,
                            DType dtype = DType::f32);
  static Tensor from_ints(const std::vector<int32_t>& values, const Shape& shape);
  // Wraps external CPU memory; owner keeps it alive (e.g. an mmap).
  static Tensor from_blob(void* data, const Shape& shape, DType dtype, std::shared_ptr<void> owner);

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  const std::vector<int64_t>& strides() const { return strides_; }
  int ndim() const { return static_cast<int>(shape_.size()); }
  // Size of dim i; negative i counts from the end.
  int64_t size(int i) const;
  int64_t numel() const { return shape_numel(shape_); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
  DType dtype() const { return dtype_; }
  Device device() const { return storage_ ? storage_->device() : Device{}; }
  int64_t offset() const { return offset_; }
  const std::shared_ptr<Storage>& storage() const { return storage_; }
  bool is_contiguous() const;

  void* raw_data() const;
  // Typed pointer to the first element; checks that T matches the dtype's size class.
  template <typename T>
  T* data() const {
    UNILLM_CHECK(sizeof(T) == dtype_size(dtype_), "[tensor] data<T>() size mismatch for ",
                 dtype_name(dtype_));
    return static_cast<T*>(raw_data());
  }

  // Views (share storage). view() needs a contiguous tensor; -1 infers one dim.
  Tensor view(const Shape& shape) const;
  Tensor reshape(const Shape& shape) const;  // view when contiguous, else a copy
  Tensor slice(int dim, int64_t start, int64_t end) const;
  Tensor select(int dim, int64_t index) const;
  Tensor transpose(int d0, int d1) const;
  Tensor unsqueeze(int dim) const;

  // Copies.
  Tensor contiguous() const;
  Tensor clone() const;
  Tensor to(DType dtype) const;
  Tensor to(Device device) const;
  // Copies src's values into this tensor (same shape; dtype converted; CPU for mixed dtypes).
  void copy_from(const Tensor& src);
  void fill(double value);

  // CPU element access for tests and small host-side logic (any dtype; converts through double).
  double item(std::initializer_list<int64_t> index) const;
  double item_flat(int64_t i) const;  // i indexes the logical row-major order
  std::vector<float> to_float_vector() const;

  // Autograd.
  bool requires_grad() const { return autograd_ && autograd_->requires_grad; }
  Tensor& set_requires_grad(bool on);
  Tensor grad() const;
  void set_grad(const Tensor& g);
  std::shared_ptr<autograd::Node> grad_fn() const {
    return autograd_ ? autograd_->grad_fn : nullptr;
  }
  AutogradMeta& autograd_meta();
  std::shared_ptr<AutogradMeta> autograd_meta_ptr() { autograd_meta(); return autograd_; }
  // The same view (shared storage, shape, strides) without autograd state: no grad_fn, not
  // requiring grad, no .grad. Writes through either handle are visible to both.
  Tensor detach() const;
  // True when both share storage and metadata (same view).
  bool same_view(const Tensor& o) const;

 private:
  std::shared_ptr<Storage> storage_;
  Shape shape_;
  std::vector<int64_t> strides_;
  int64_t offset_ = 0;  // in elements
  DType dtype_ = DType::f32;
  std::shared_ptr<AutogradMeta> autograd_;
};

}  // namespace unillm
