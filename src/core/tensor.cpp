// Tensor views and copies. Copies between devices go through the owning backend.
#include "core/tensor.h"

#include "core/device_ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <sstream>

namespace unillm {

std::string shape_str(const Shape& s) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < s.size(); ++i) os << (i ? ", " : "") << s[i];
  os << "]";
  return os.str();
}

int64_t shape_numel(const Shape& s) {
  int64_t n = 1;
  for (auto d : s) n *= d;
  return n;
}

namespace {
std::vector<int64_t> contiguous_strides(const Shape& s) {
  std::vector<int64_t> st(s.size());
  int64_t acc = 1;
  for (int i = static_cast<int>(s.size()) - 1; i >= 0; --i) {
    st[i] = acc;
    acc *= s[i];
  }
  return st;
}

int norm_dim(int dim, int ndim, const char* what) {
  int d = dim < 0 ? dim + ndim : dim;
  if (d < 0 || d >= ndim) UNILLM_THROW(ShapeError, "[tensor] ", what, ": dim ", dim, " out of range for ", ndim, "-d tensor");
  return d;
}
}  // namespace

Tensor::Tensor(std::shared_ptr<Storage> storage, Shape shape, DType dtype, int64_t offset)
    : storage_(std::move(storage)),
      shape_(std::move(shape)),
      strides_(contiguous_strides(shape_)),
      offset_(offset),
      dtype_(dtype) {}

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  for (auto d : shape)
    if (d < 0) UNILLM_THROW(ShapeError, "[tensor] negative size in ", shape_str(shape));
  auto bytes = static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype);
  return Tensor(Storage::allocate(bytes, device), shape, dtype);
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) {
  for (auto d : shape)
    if (d < 0) UNILLM_THROW(ShapeError, "[tensor] negative size in ", shape_str(shape));
  bool zeroed = false;
  auto bytes = static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype);
  Tensor t(Storage::allocate(bytes, device, &zeroed), shape, dtype);
  if (!zeroed) t.fill(0.0);  // fresh host mappings are zero already: their pages stay untouched
  return t;
}

Tensor Tensor::from_vector(const std::vector<float>& values, const Shape& shape, DType dtype) {
  if (static_cast<int64_t>(values.size()) != shape_numel(shape))
    UNILLM_THROW(ShapeError, "[tensor] from_vector: ", values.size(), " values for shape ", shape_str(shape));
  Tensor t = empty(shape, dtype);
  convert_elements(values.data(), DType::f32, t.raw_data(), dtype, values.size());
  return t;
}

Tensor Tensor::from_ints(const std::vector<int32_t>& values, const Shape& shape) {
  if (static_cast<int64_t>(values.size()) != shape_numel(shape))
    UNILLM_THROW(ShapeError, "[tensor] from_ints: ", values.size(), " values for shape ", shape_str(shape));
  Tensor t = empty(shape, DType::i32);
  if (!values.empty()) std::memcpy(t.raw_data(), values.data(), values.size() * 4);
  return t;
}

Tensor Tensor::from_blob(void* data, const Shape& shape, DType dtype, std::shared_ptr<void> owner) {
  auto bytes = static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype);
  return Tensor(std::make_shared<Storage>(data, bytes, Device{}, std::move(owner)), shape, dtype);
}

int64_t Tensor::size(int i) const { return shape_[norm_dim(i, ndim(), "size")]; }

bool Tensor::is_contiguous() const { return strides_ == contiguous_strides(shape_) || numel() <= 1; }

void* Tensor::raw_data() const {
  UNILLM_CHECK(storage_, "[tensor] undefined tensor");
  return static_cast<char*>(storage_->data()) + offset_ * static_cast<int64_t>(dtype_size(dtype_));
}

Tensor Tensor::view(const Shape& shape) const {
  if (!is_contiguous()) UNILLM_THROW(ShapeError, "[tensor] view of a non-contiguous tensor ", shape_str(shape_));
  Shape s = shape;
  int infer = -1;
  int64_t known = 1;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == -1) {
      if (infer >= 0) UNILLM_THROW(ShapeError, "[tensor] view: two -1 dims in ", shape_str(shape));
      infer = static_cast<int>(i);
    } else {
      known *= s[i];
    }
  }
  if (infer >= 0 && known > 0) s[infer] = numel() / known;
  if (shape_numel(s) != numel())
    UNILLM_THROW(ShapeError, "[tensor] view ", shape_str(shape_), " as ", shape_str(shape), ": element count differs");
  Tensor t = *this;
  t.autograd_.reset();
  t.shape_ = s;
  t.strides_ = contiguous_strides(s);
  return t;
}

Tensor Tensor::reshape(const Shape& shape) const { return is_contiguous() ? view(shape) : contiguous().view(shape); }

Tensor Tensor::slice(int dim, int64_t start, int64_t end) const {
  int d = norm_dim(dim, ndim(), "slice");
  if (start < 0 || end < start || end > shape_[d])
    UNILLM_THROW(ShapeError, "[tensor] slice [", start, ", ", end, ") out of range for dim ", d, " of ", shape_str(shape_));
  Tensor t = *this;
  t.autograd_.reset();
  t.offset_ += start * strides_[d];
  t.shape_[d] = end - start;
  return t;
}

Tensor Tensor::select(int dim, int64_t index) const {
  int d = norm_dim(dim, ndim(), "select");
  Tensor t = slice(d, index, index + 1);
  t.shape_.erase(t.shape_.begin() + d);
  t.strides_.erase(t.strides_.begin() + d);
  return t;
}

Tensor Tensor::transpose(int d0, int d1) const {
  int a = norm_dim(d0, ndim(), "transpose"), b = norm_dim(d1, ndim(), "transpose");
  Tensor t = *this;
  t.autograd_.reset();
  std::swap(t.shape_[a], t.shape_[b]);
  std::swap(t.strides_[a], t.strides_[b]);
  return t;
}

Tensor Tensor::unsqueeze(int dim) const {
  int d = dim < 0 ? dim + ndim() + 1 : dim;
  UNILLM_CHECK(d >= 0 && d <= ndim());
  Tensor t = *this;
  t.autograd_.reset();
  int64_t st = d < ndim() ? strides_[d] * shape_[d] : 1;
  t.shape_.insert(t.shape_.begin() + d, 1);
  t.strides_.insert(t.strides_.begin() + d, st);
  return t;
}

Tensor Tensor::contiguous() const { return is_contiguous() ? *this : clone(); }

Tensor Tensor::clone() const {
  Tensor out = empty(shape_, dtype_, device());
  out.copy_from(*this);
  return out;
}

Tensor Tensor::to(DType dtype) const {
  if (dtype == dtype_) return *this;
  Tensor out = empty(shape_, dtype, device());
  out.copy_from(*this);
  return out;
}

Tensor Tensor::to(Device dev) const {
  if (dev == device()) return *this;
  Tensor src = contiguous();
  Tensor out = empty(shape_, dtype_, dev);
  copy_bytes(out.raw_data(), dev, src.raw_data(), src.device(), nbytes());
  return out;
}

namespace {
// Calls fn(src_offset, dst_offset) for each element in row-major order of shape.
template <typename Fn>
void for_each_index(const Shape& shape, const std::vector<int64_t>& s1, const std::vector<int64_t>& s2, Fn fn) {
  int nd = static_cast<int>(shape.size());
  int64_t n = shape_numel(shape);
  std::vector<int64_t> idx(nd, 0);
  int64_t o1 = 0, o2 = 0;
  for (int64_t i = 0; i < n; ++i) {
    fn(o1, o2);
    for (int d = nd - 1; d >= 0; --d) {
      if (++idx[d] < shape[d]) {
        o1 += s1[d];
        o2 += s2[d];
        break;
      }
      o1 -= s1[d] * (shape[d] - 1);
      o2 -= s2[d] * (shape[d] - 1);
      idx[d] = 0;
    }
  }
}
}  // namespace

void Tensor::copy_from(const Tensor& src) {
  if (src.shape_ != shape_)
    UNILLM_THROW(ShapeError, "[tensor] copy_from: shape ", shape_str(src.shape_), " into ", shape_str(shape_));
  if (numel() == 0) return;
  if (!(device() == src.device())) {
    // Across devices the bytes move as they are: convert and lay out on one side first.
    if (dtype_ == src.dtype_ && is_contiguous() && src.is_contiguous())
      return copy_bytes(raw_data(), device(), src.raw_data(), src.device(), nbytes());
    Tensor packed = src.contiguous();  // on src's device
    Tensor here = empty(shape_, src.dtype_, device());
    copy_bytes(here.raw_data(), device(), packed.raw_data(), packed.device(), here.nbytes());
    return copy_from(here);
  }
  if (!device().is_cpu()) {  // one device: its "copy" kernel (core/device_ops.h)
    UNILLM_CHECK(ndim() <= UNILLM_MAX_DIMS, "[tensor] copy of more than ", UNILLM_MAX_DIMS, " dims");
    unillm_copy_args a{};
    a.size = sizeof a;
    a.src = src.raw_data();
    a.dst = raw_data();
    a.ndim = ndim();
    for (int d = 0; d < ndim(); ++d) {
      a.shape[d] = shape_[d];
      a.src_strides[d] = src.strides_[d];
      a.dst_strides[d] = strides_[d];
    }
    a.src_dtype = dtype_code(src.dtype_);
    a.dst_dtype = dtype_code(dtype_);
    return device_copy(a, device());
  }
  if (is_contiguous() && src.is_contiguous()) {
    convert_elements(src.raw_data(), src.dtype_, raw_data(), dtype_, static_cast<size_t>(numel()));
    return;
  }
  size_t es = dtype_size(src.dtype_), ed = dtype_size(dtype_);
  auto* sp = static_cast<const char*>(src.raw_data());
  auto* dp = static_cast<char*>(raw_data());
  if (ndim() >= 2 && strides_.back() == 1 && src.strides_.back() == 1) {
    // Row-contiguous views (e.g. column slices): one conversion call per row, not per element.
    Shape rows(shape_.begin(), shape_.end() - 1);
    std::vector<int64_t> ss(src.strides_.begin(), src.strides_.end() - 1), ds(strides_.begin(), strides_.end() - 1);
    const auto row = static_cast<size_t>(shape_.back());
    for_each_index(rows, ss, ds, [&](int64_t so, int64_t dof) {
      convert_elements(sp + so * static_cast<int64_t>(es), src.dtype_, dp + dof * static_cast<int64_t>(ed), dtype_, row);
    });
    return;
  }
  for_each_index(shape_, src.strides_, strides_, [&](int64_t so, int64_t dof) {
    convert_elements(sp + so * static_cast<int64_t>(es), src.dtype_, dp + dof * static_cast<int64_t>(ed), dtype_, 1);
  });
}

void Tensor::fill(double value) {
  if (!device().is_cpu()) {
    // A device fills contiguous memory: zero by memset, any other value from a host pattern
    // (scalars and small tensors: loss sums, seeds; large fills are zeros).
    UNILLM_CHECK(is_contiguous(), "[tensor] fill of a strided device tensor");
    if (value == 0.0 && !std::signbit(value)) {
      backend_for(device()).memset(raw_data(), 0, nbytes(), device().index);
      return;
    }
    Tensor host = empty(shape_, dtype_);
    host.fill(value);
    copy_bytes(raw_data(), device(), host.raw_data(), Device{}, nbytes());
    return;
  }
  Tensor one = empty({1}, DType::f64);
  *one.data<double>() = value;
  size_t es = dtype_size(dtype_);
  std::vector<char> elem(es);
  convert_elements(one.raw_data(), DType::f64, elem.data(), dtype_, 1);
  auto* dp = static_cast<char*>(raw_data());
  if (is_contiguous()) {
    const int64_t n = numel();
    if (value == 0.0) {
      std::memset(dp, 0, static_cast<size_t>(n) * es);
    } else if (dtype_ == DType::f32) {
      std::fill_n(reinterpret_cast<float*>(dp), n, static_cast<float>(value));
    } else {
      for (int64_t i = 0; i < n; ++i) std::memcpy(dp + i * static_cast<int64_t>(es), elem.data(), es);
    }
    return;
  }
  for_each_index(shape_, strides_, strides_, [&](int64_t, int64_t o) {
    std::memcpy(dp + o * static_cast<int64_t>(es), elem.data(), es);
  });
}

double Tensor::item(std::initializer_list<int64_t> index) const {
  UNILLM_CHECK(static_cast<int>(index.size()) == ndim(), "[tensor] item: wrong index rank");
  int64_t off = 0;
  int d = 0;
  for (auto i : index) {
    UNILLM_CHECK(i >= 0 && i < shape_[d], "[tensor] item: index out of range");
    off += i * strides_[d++];
  }
  double v;
  convert_elements(static_cast<const char*>(raw_data()) + off * static_cast<int64_t>(dtype_size(dtype_)), dtype_, &v, DType::f64, 1);
  return v;
}

double Tensor::item_flat(int64_t i) const {
  Tensor c = device().is_cpu() ? contiguous() : to(Device{});
  double v;
  convert_elements(static_cast<const char*>(c.raw_data()) + i * static_cast<int64_t>(dtype_size(dtype_)), dtype_, &v, DType::f64, 1);
  return v;
}

std::vector<float> Tensor::to_float_vector() const {
  Tensor c = (device().is_cpu() ? *this : to(Device{})).contiguous();
  std::vector<float> out(static_cast<size_t>(numel()));
  convert_elements(c.raw_data(), dtype_, out.data(), DType::f32, out.size());
  return out;
}

Tensor& Tensor::set_requires_grad(bool on) {
  autograd_meta().requires_grad = on;
  return *this;
}

Tensor Tensor::grad() const { return autograd_ && autograd_->grad ? *autograd_->grad : Tensor(); }

void Tensor::set_grad(const Tensor& g) { autograd_meta().grad = std::make_shared<Tensor>(g); }

AutogradMeta& Tensor::autograd_meta() {
  if (!autograd_) autograd_ = std::make_shared<AutogradMeta>();
  return *autograd_;
}

Tensor Tensor::detach() const {
  Tensor t = *this;
  t.autograd_.reset();
  return t;
}

bool Tensor::same_view(const Tensor& o) const {
  return storage_ == o.storage_ && offset_ == o.offset_ && shape_ == o.shape_ && strides_ == o.strides_;
}

}  // namespace unillm
