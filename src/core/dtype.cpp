// Scalar dtype helpers; the vectorised conversions used in hot loops live in backends/cpu.
#include "core/dtype.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace unillm {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32: return 4;
    case DType::f64: return 8;
    case DType::bf16: return 2;
    case DType::f16: return 2;
    case DType::i32: return 4;
    case DType::i64: return 8;
    case DType::i8: return 1;
    case DType::u4x2: return 1;
  }
  return 0;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::f64: return "f64";
    case DType::bf16: return "bf16";
    case DType::f16: return "f16";
    case DType::i32: return "i32";
    case DType::i64: return "i64";
    case DType::i8: return "i8";
    case DType::u4x2: return "u4x2";
  }
  return "?";
}

DType dtype_from_name(const std::string& name) {
  std::string n = name;
  std::transform(n.begin(), n.end(), n.begin(), [](unsigned char c) { return std::tolower(c); });
  if (n == "f32" || n == "float32" || n == "float") return DType::f32;
  if (n == "f64" || n == "float64" || n == "double") return DType::f64;
  if (n == "bf16" || n == "bfloat16") return DType::bf16;
  if (n == "f16" || n == "float16" || n == "half") return DType::f16;
  if (n == "i32" || n == "int32") return DType::i32;
  if (n == "i64" || n == "int64") return DType::i64;
  if (n == "i8" || n == "int8") return DType::i8;
  if (n == "u4x2") return DType::u4x2;
  UNILLM_THROW(DTypeError, "[dtype] unknown dtype '", name, "'");
}

bool dtype_from_code(int32_t code, DType* out) {
  const bool known = (code >= 0 && code <= static_cast<int32_t>(DType::i64)) ||
                     code == static_cast<int32_t>(DType::i8) || code == static_cast<int32_t>(DType::u4x2);
  if (!known) return false;
  *out = static_cast<DType>(code);
  return true;
}

bool is_floating(DType t) {
  return t == DType::f32 || t == DType::f64 || t == DType::bf16 || t == DType::f16;
}

float f16_to_f32(uint16_t h) {
  uint32_t sign = (h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t man = h & 0x3ffu;
  uint32_t u;
  if (exp == 0) {
    if (man == 0) {
      u = sign;
    } else {  // subnormal: normalise
      int e = -1;
      do {
        man <<= 1;
        ++e;
      } while ((man & 0x400u) == 0);
      u = sign | static_cast<uint32_t>(127 - 15 - e) << 23 | (man & 0x3ffu) << 13;
    }
  } else if (exp == 31) {
    u = sign | 0x7f800000u | man << 13;
  } else {
    u = sign | (exp + 127 - 15) << 23 | man << 13;
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t f32_to_f16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  uint32_t sign = (u >> 16) & 0x8000u;
  int32_t exp = static_cast<int32_t>((u >> 23) & 0xff) - 127 + 15;
  uint32_t man = u & 0x7fffffu;
  if (((u >> 23) & 0xff) == 0xff) return static_cast<uint16_t>(sign | 0x7c00u | (man ? 0x200u : 0));
  if (exp >= 31) return static_cast<uint16_t>(sign | 0x7c00u);
  if (exp <= 0) {
    if (exp < -10) return static_cast<uint16_t>(sign);
    man |= 0x800000u;
    uint32_t shift = static_cast<uint32_t>(14 - exp);
    uint32_t half = man >> shift;
    uint32_t rem = man & ((1u << shift) - 1);
    uint32_t mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t half = sign | static_cast<uint32_t>(exp) << 10 | man >> 13;
  uint32_t rem = man & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (half & 1))) ++half;
  return static_cast<uint16_t>(half);
}

double load_scalar(const void* p, DType t, int64_t i) {
  switch (t) {
    case DType::f32: return static_cast<const float*>(p)[i];
    case DType::f64: return static_cast<const double*>(p)[i];
    case DType::bf16: return bf16_to_f32(static_cast<const uint16_t*>(p)[i]);
    case DType::f16: return f16_to_f32(static_cast<const uint16_t*>(p)[i]);
    case DType::i32: return static_cast<const int32_t*>(p)[i];
    case DType::i64: return static_cast<double>(static_cast<const int64_t*>(p)[i]);
    case DType::i8: return static_cast<const int8_t*>(p)[i];
    case DType::u4x2: return static_cast<const uint8_t*>(p)[i];  // the byte (both codes)
  }
  return 0;
}

void store_scalar(void* p, DType t, int64_t i, double v) {
  switch (t) {
    case DType::f32: static_cast<float*>(p)[i] = static_cast<float>(v); return;
    case DType::f64: static_cast<double*>(p)[i] = v; return;
    case DType::bf16: static_cast<uint16_t*>(p)[i] = f32_to_bf16(static_cast<float>(v)); return;
    case DType::f16: static_cast<uint16_t*>(p)[i] = f32_to_f16(static_cast<float>(v)); return;
    case DType::i32: static_cast<int32_t*>(p)[i] = static_cast<int32_t>(v); return;
    case DType::i64: static_cast<int64_t*>(p)[i] = static_cast<int64_t>(v); return;
    case DType::i8: static_cast<int8_t*>(p)[i] = static_cast<int8_t>(v); return;
    case DType::u4x2: static_cast<uint8_t*>(p)[i] = static_cast<uint8_t>(v); return;
  }
}

void convert_elements(const void* src, DType st, void* dst, DType dt, size_t n) {
  if (st == dt) {
    std::memcpy(dst, src, n * dtype_size(st));
    return;
  }
  if (st == DType::f32 && dt == DType::bf16) {  // loading f32 checkpoints into bf16 weights
    auto* s = static_cast<const float*>(src);
    auto* d = static_cast<uint16_t*>(dst);
    for (size_t i = 0; i < n; ++i) d[i] = f32_to_bf16(s[i]);
    return;
  }
  if (st == DType::bf16 && dt == DType::f32) {
    auto* s = static_cast<const uint16_t*>(src);
    auto* d = static_cast<float*>(dst);
    for (size_t i = 0; i < n; ++i) d[i] = bf16_to_f32(s[i]);
    return;
  }
  for (size_t i = 0; i < n; ++i) {
    auto k = static_cast<int64_t>(i);
    store_scalar(dst, dt, k, load_scalar(src, st, k));
  }
}

bool all_finite_f32(const float* x, size_t n) {
  // An exponent of all ones is NaN or inf: adding one to the exponent field then carries into
  // the sign bit, for those values only. Written on 4-lane vectors (GCC's vectoriser leaves the
  // plain loop scalar): under 1 instruction per element.
  using V = uint32_t __attribute__((vector_size(16)));
  const V mask = {0x7f800000u, 0x7f800000u, 0x7f800000u, 0x7f800000u};
  const V one = {0x00800000u, 0x00800000u, 0x00800000u, 0x00800000u};
  V acc = {0, 0, 0, 0};
  V acc2 = acc;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {  // two independent accumulators
    V v, w;
    std::memcpy(&v, x + i, sizeof v);
    std::memcpy(&w, x + i + 4, sizeof w);
    acc |= (v & mask) + one;
    acc2 |= (w & mask) + one;
  }
  acc |= acc2;
  uint32_t carry = acc[0] | acc[1] | acc[2] | acc[3];
  for (; i < n; ++i) {
    uint32_t b;
    std::memcpy(&b, x + i, sizeof b);
    carry |= (b & 0x7f800000u) + 0x00800000u;
  }
  return (carry & 0x80000000u) == 0;
}

}  // namespace unillm
