// Element conversions of the reference device's kernels (written from the IEEE formats, not
// shared with unillm: a plugin sees only the public headers).
#include "kernel_util.h"

namespace unillm_ref {

size_t dtype_bytes(unillm_dtype t) {
  switch (t) {
    case UNILLM_DTYPE_F32:
      return 4;
    case UNILLM_DTYPE_F64:
      return 8;
    case UNILLM_DTYPE_BF16:
      return 2;
    case UNILLM_DTYPE_F16:
      return 2;
    case UNILLM_DTYPE_I32:
      return 4;
    case UNILLM_DTYPE_I64:
      return 8;
    default:
      return 0;
  }
}

float bf16_to_float(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t float_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u)
    return static_cast<uint16_t>((u >> 16) | 0x40u);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);                    // round to nearest even
  return static_cast<uint16_t>(u >> 16);
}

float f16_to_float(uint16_t h) {
  const int exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  const float sign = (h & 0x8000) ? -1.0f : 1.0f;
  if (exp == 0) return sign * std::ldexp(static_cast<float>(man), -24);
  if (exp == 31) return man ? std::nanf("") : sign * INFINITY;
  return sign * std::ldexp(static_cast<float>(man | 0x400), exp - 25);
}

uint16_t float_to_f16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const float a = std::fabs(f);
  if (std::isnan(f)) return static_cast<uint16_t>(sign | 0x7e00u);
  if (a >= 65520.0f) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds past the largest
  if (a < std::ldexp(1.0f, -14)) {  // subnormal: multiples of 2^-24, nearest even
    const float q = std::nearbyint(a * 16777216.0f);
    return static_cast<uint16_t>(sign | static_cast<uint16_t>(q));
  }
  int e;
  const float m = std::frexp(a, &e);            // a = m · 2^e, m in [0.5, 1)
  float q = std::nearbyint(std::ldexp(m, 11));  // 11 significant bits, nearest even
  if (q == 2048.0f) {
    q = 1024.0f;
    ++e;
  }
  const int exp = e - 1 + 15;
  if (exp >= 31) return static_cast<uint16_t>(sign | 0x7c00u);
  return static_cast<uint16_t>(sign | exp << 10 | (static_cast<int>(q) - 1024));
}

double load(const void* p, unillm_dtype t, int64_t i) {
  switch (t) {
    case UNILLM_DTYPE_F32:
      return static_cast<const float*>(p)[i];
    case UNILLM_DTYPE_F64:
      return static_cast<const double*>(p)[i];
    case UNILLM_DTYPE_BF16:
      return bf16_to_float(static_cast<const uint16_t*>(p)[i]);
    case UNILLM_DTYPE_F16:
      return f16_to_float(static_cast<const uint16_t*>(p)[i]);
    case UNILLM_DTYPE_I32:
      return static_cast<const int32_t*>(p)[i];
    case UNILLM_DTYPE_I64:
      return static_cast<double>(static_cast<const int64_t*>(p)[i]);
    default:
      throw std::runtime_error("unsupported dtype " + std::to_string(t));
  }
}

std::vector<double> load_all(const void* p, unillm_dtype t, int64_t n) {
  std::vector<double> v(static_cast<size_t>(n));
  const auto count = static_cast<size_t>(n);
  if (t == UNILLM_DTYPE_F32) {  // the common case, with the dtype switch out of the loop
    const auto* f = static_cast<const float*>(p);
    for (size_t i = 0; i < count; ++i) v[i] = f[i];
  } else if (t == UNILLM_DTYPE_F64) {
    std::memcpy(v.data(), p, count * sizeof(double));
  } else {
    for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = load(p, t, i);
  }
  return v;
}

void store(void* p, unillm_dtype t, int64_t i, double v) {
  switch (t) {
    case UNILLM_DTYPE_F32:
      static_cast<float*>(p)[i] = static_cast<float>(v);
      return;
    case UNILLM_DTYPE_F64:
      static_cast<double*>(p)[i] = v;
      return;
    case UNILLM_DTYPE_BF16:
      static_cast<uint16_t*>(p)[i] = float_to_bf16(static_cast<float>(v));
      return;
    case UNILLM_DTYPE_F16:
      static_cast<uint16_t*>(p)[i] = float_to_f16(static_cast<float>(v));
      return;
    case UNILLM_DTYPE_I32:
      static_cast<int32_t*>(p)[i] = static_cast<int32_t>(v);
      return;
    case UNILLM_DTYPE_I64:
      static_cast<int64_t*>(p)[i] = static_cast<int64_t>(v);
      return;
    default:
      throw std::runtime_error("unsupported dtype " + std::to_string(t));
  }
}

}  // namespace unillm_ref
