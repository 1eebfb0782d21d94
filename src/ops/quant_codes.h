// The per-group arithmetic of ops/quant.h's formats, shared by round-to-nearest quantisation
// (quant.cpp) and GPTQ (gptq.cpp): fitting a group's scale, and a weight's code and value.
#pragma once

#include <cstdint>
#include <string>

#include "ops/quant.h"

namespace unillm::ops::quant_detail {

// One group's scale (and low end, asymmetric int4).
struct GroupScale {
  float scale = 0, lo = 0;
};

// The scale (and low end) of the len weights of one group, by the formulas of quant.h.
GroupScale group_scale(const float* w, int64_t len, QuantType t, bool symmetric);
// g as it will be stored in `dtype` (f32: unchanged; f16: scale and low end rounded to f16), so
// that codes chosen for the result are the nearest for the stored values. A value beyond f16's
// range is a ConfigError naming `what`.
GroupScale stored_as(GroupScale g, DType dtype, const std::string& what);
// Stores v as element i of a scale (or min) buffer of dtype f32 or f16.
void store_scale(void* p, DType dtype, int64_t i, float v);
// The code of w (nearest, clamped) and the value a code stands for.
int code_of(float w, const GroupScale& g, QuantType t, bool symmetric);
float value_of(int code, float scale, float lo, QuantType t, bool symmetric);
// Stores code c of row r, column at into a zero-initialised code buffer of q's layout (i8 [N, K],
// or u4x2 [N, ⌈K/2⌉] with the even column in the low nibble).
inline void store_code(void* data, QuantType t, int64_t k, int64_t r, int64_t at, int c) {
  if (t == QuantType::int8) {
    static_cast<int8_t*>(data)[r * k + at] = static_cast<int8_t>(c);
  } else {
    static_cast<uint8_t*>(data)[r * ((k + 1) / 2) + at / 2] |= static_cast<uint8_t>(c << ((at & 1) * 4));
  }
}

}  // namespace unillm::ops::quant_detail
