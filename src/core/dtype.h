// Element types and the scalar conversions between them (bf16/f16 <-> f32 round-to-nearest-even).
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

namespace unillm {

// i8 and u4x2 hold quantised weights (ops/quant.h): u4x2 is a byte of two 4-bit codes, the
// even element in the low nibble, so a u4x2 tensor is shaped in bytes ([N, ceil(K / 2)]).
enum class DType : uint8_t { f32, f64, bf16, f16, i32, i64, i8 = 16, u4x2 = 17 };

size_t dtype_size(DType t);
const char* dtype_name(DType t);
// Parses "f32"/"float32"/"F32"/"bfloat16"/"BF16"... (safetensors and HF torch_dtype spellings).
// Throws DTypeError naming the spelling when unknown.
DType dtype_from_name(const std::string& name);
bool is_floating(DType t);
// The fixed code of t in the plugin ABI (unillm_dtype: f32 0, f64 1, bf16 2, f16 3, i32 4,
// i64 5, i8 16, u4x2 17 = UNILLM_DTYPE_I4_PACKED), and back (false for a code with no DType,
// e.g. the reserved block-quantised ones).
inline int32_t dtype_code(DType t) { return static_cast<int32_t>(t); }
bool dtype_from_code(int32_t code, DType* out);

inline float bf16_to_f32(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even
  return static_cast<uint16_t>(u >> 16);
}

float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);

// True when none of x[0, n) is NaN or inf (one vectorised pass: for logits rows and for the
// trainable weights before a save).
bool all_finite_f32(const float* x, size_t n);

// Element i of p as a double, and its inverse (any dtype; for reference code and tests).
double load_scalar(const void* p, DType t, int64_t i);
void store_scalar(void* p, DType t, int64_t i, double v);

// Converts n elements between any two floating/integer dtypes (CPU memory).
void convert_elements(const void* src, DType src_type, void* dst, DType dst_type, size_t n);

}  // namespace unillm
