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
  // uint16_t holds bf16 bit patterns (the bf16 GEMM operands, gemm/bf16_compute.h).
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, uint16_t>);
  static constexpr DType kDType = std::is_same_v<T, double>    ? DType::f64
                                  : std::is_same_v<T, uint16_t> ? DType::bf16
                                                                : DType::f32;

 public:
  explicit Scratch(int64_t n) : t_(n > 0 ? Tensor::empty({n}, kDType) : Tensor()) {}
  T* data() { return t_.defined() ? t_.template data<T>() : nullptr; }
  const T* data() const { return t_.defined() ? t_.template data<T>() : nullptr; }

 private:
  Tensor t_;
};

// A Scratch that is sized after construction (std::vector's resize, without its zero fill):
// resize(n) drops the old contents and leaves n uninitialised elements.
template <typename T>
class ScratchBuffer {
 public:
  void resize(int64_t n) {
    buf_ = Scratch<T>(n);
    n_ = n;
  }
  T* data() { return buf_.data(); }
  const T* data() const { return buf_.data(); }
  int64_t size() const { return n_; }
  T& operator[](int64_t i) { return data()[i]; }
  const T& operator[](int64_t i) const { return data()[i]; }

 private:
  Scratch<T> buf_{0};
  int64_t n_ = 0;
};

}  // namespace unillm::cpu
