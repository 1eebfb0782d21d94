// Pack/unpack hooks for bf16/f16 saved activations, with a small reuse cache (see the header).
#include "nn/low_precision_saves.h"

#include <array>

#include "ops/cast.h"

namespace unillm::nn {

namespace {

// The last few conversions. Ops save the same tensor in close succession (an op's output saved by
// it and by the next op), so a short ring finds the repeats.
class PackCache {
 public:
  Tensor pack(const Tensor& t, DType dtype) {
    for (const Entry& e : ring_) {
      if (e.shape != t.shape() || e.offset != t.offset()) continue;
      auto src = e.src.lock();
      auto packed = e.packed.lock();
      if (src && packed && src == t.storage()) return Tensor(packed, e.shape, dtype);
    }
    Tensor p = ops::cast(t, dtype);
    ring_[next_] = Entry{t.storage(), t.offset(), t.shape(), p.storage()};
    next_ = (next_ + 1) % ring_.size();
    return p;
  }

 private:
  struct Entry {
    std::weak_ptr<Storage> src;
    int64_t offset = 0;
    Shape shape;
    std::weak_ptr<Storage> packed;  // offset 0, contiguous
  };
  std::array<Entry, 8> ring_;
  size_t next_ = 0;
};

}  // namespace

std::shared_ptr<const autograd::SavedTensorHooks> low_precision_save_hooks(DType dtype) {
  UNILLM_CHECK(dtype == DType::bf16 || dtype == DType::f16, "[nn] low-precision saves need bf16 or f16, not ",
               dtype_name(dtype));
  auto cache = std::make_shared<PackCache>();
  auto hooks = std::make_shared<autograd::SavedTensorHooks>();
  hooks->pack = [cache, dtype](const Tensor& t) {
    if (t.dtype() != DType::f32) return t;
    // A contiguous source converts to an offset-0 tensor; a strided one is packed as a copy.
    return t.is_contiguous() ? cache->pack(t, dtype) : ops::cast(t, dtype);
  };
  // Activations are f32 or f64 (ops check), so a dtype-typed tensor here is one pack made.
  hooks->unpack = [dtype](const Tensor& p) { return p.dtype() == dtype ? ops::cast(p, DType::f32) : p; };
  return hooks;
}

}  // namespace unillm::nn
