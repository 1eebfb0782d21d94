// Kernel scratch buffers from the CPU allocator rather than std::vector: uninitialised (a vector
// zero-fills, 32 MiB a call for the cross-entropy logits), counted in the allocator's peak that
// the memory plan checks, and reused by its block cache instead of glibc's heap.
#pragma once

#include <cstdint>
#include <type_traits>

#include "core/tensor.h"

namespace unillm::cpu {

template <typename T>
class Scratch {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>);

 public:
  explicit Scratch(int64_t n)
      : t_(n > 0 ? Tensor::empty({n}, std::is_same_v<T, double> ? DType::f64 : DType::f32) : Tensor()) {}
  T* data() { return t_.defined() ? t_.template data<T>() : nullptr; }

 private:
  Tensor t_;
};

}  // namespace unillm::cpu
