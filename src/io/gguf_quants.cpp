// ggml element formats: the type table, Q8_0/Q4_0 quantisers and the dequantisers of every type
// unillm reads (block layouts as in ggml's ggml-common.h / ggml-quants.c).
#include "io/gguf_quants.h"

#include <cmath>
#include <cstring>

#include "core/dtype.h"
#include "core/error.h"

namespace unillm::io {

namespace {

constexpr int64_t kQK = 32;    // Q8_0 / Q4_0 block
constexpr int64_t kQKK = 256;  // K-quant super-block

float half(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return f16_to_f32(h);
}

void put_half(uint8_t* p, float v) {
  const uint16_t h = f32_to_f16(v);
  std::memcpy(p, &h, 2);
}

void quantize_q8_0(const float* x, uint8_t* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK; ++b, x += kQK, y += 34) {
    float amax = 0.0f;
    for (int64_t j = 0; j < kQK; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    put_half(y, d);
    for (int64_t j = 0; j < kQK; ++j)
      y[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(std::round(x[j] * id)));
  }
}

void quantize_q4_0(const float* x, uint8_t* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK; ++b, x += kQK, y += 18) {
    float amax = 0.0f, max = 0.0f;  // the largest magnitude, and that element with its sign
    for (int64_t j = 0; j < kQK; ++j)
      if (amax < std::fabs(x[j])) {
        amax = std::fabs(x[j]);
        max = x[j];
      }
    const float d = max / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    put_half(y, d);
    auto code = [&](float v) {
      const float t = std::trunc(v * id + 8.5f);
      return static_cast<uint8_t>(t > 15.0f ? 15 : t < 0.0f ? 0 : static_cast<int>(t));
    };
    for (int64_t j = 0; j < kQK / 2; ++j)
      y[2 + j] = static_cast<uint8_t>(code(x[j]) | (code(x[j + kQK / 2]) << 4));
  }
}

void dequantize_q8_0(const uint8_t* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK; ++b, x += 34, y += kQK) {
    const float d = half(x);
    for (int64_t j = 0; j < kQK; ++j) y[j] = d * static_cast<float>(static_cast<int8_t>(x[2 + j]));
  }
}

void dequantize_q4_0(const uint8_t* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK; ++b, x += 18, y += kQK) {
    const float d = half(x);
    for (int64_t j = 0; j < kQK / 2; ++j) {
      y[j] = d * static_cast<float>((x[2 + j] & 0xF) - 8);
      y[j + kQK / 2] = d * static_cast<float>((x[2 + j] >> 4) - 8);
    }
  }
}

// The 6-bit scale and min of sub-block j (0..7) packed in 12 bytes (Q4_K, Q5_K): bytes 0-3 hold
// the scales of 0-3 (low 6 bits), 4-7 their mins; 8-11 the low 4 bits of the scales (low
// nibble) and mins (high nibble) of 4-7, whose top 2 bits sit in the spare bits of 0-7.
void scale_min(int j, const uint8_t* q, float* sc, float* m) {
  if (j < 4) {
    *sc = static_cast<float>(q[j] & 63);
    *m = static_cast<float>(q[j + 4] & 63);
  } else {
    *sc = static_cast<float>((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    *m = static_cast<float>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

// Q4_K super-block (144 bytes): f16 d, f16 dmin, scales[12], qs[128]. Each 64 elements use 32
// bytes of qs: the low nibbles are the first 32 elements (sub-block 2i), the high nibbles the
// next 32 (sub-block 2i+1); x = d·scale·q − dmin·min.
void dequantize_q4_k(const uint8_t* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / kQKK; ++b, x += 144) {
    const float d = half(x), dmin = half(x + 2);
    const uint8_t* scales = x + 4;
    const uint8_t* q = x + 16;
    for (int is = 0; is < 8; is += 2, q += 32) {
      float sc1, m1, sc2, m2;
      scale_min(is, scales, &sc1, &m1);
      scale_min(is + 1, scales, &sc2, &m2);
      for (int l = 0; l < 32; ++l) *y++ = d * sc1 * static_cast<float>(q[l] & 0xF) - dmin * m1;
      for (int l = 0; l < 32; ++l) *y++ = d * sc2 * static_cast<float>(q[l] >> 4) - dmin * m2;
    }
  }
}

// Q5_K super-block (176 bytes): f16 d, f16 dmin, scales[12], qh[32], qs[128]. As Q4_K, plus a
// fifth bit per element from qh: sub-block s takes bit s of qh[l] for its element l.
void dequantize_q5_k(const uint8_t* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / kQKK; ++b, x += 176) {
    const float d = half(x), dmin = half(x + 2);
    const uint8_t* scales = x + 4;
    const uint8_t* qh = x + 16;
    const uint8_t* ql = x + 48;
    for (int is = 0; is < 8; is += 2, ql += 32) {
      float sc1, m1, sc2, m2;
      scale_min(is, scales, &sc1, &m1);
      scale_min(is + 1, scales, &sc2, &m2);
      const uint8_t u1 = static_cast<uint8_t>(1u << is), u2 = static_cast<uint8_t>(2u << is);
      for (int l = 0; l < 32; ++l)
        *y++ = d * sc1 * static_cast<float>((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - dmin * m1;
      for (int l = 0; l < 32; ++l)
        *y++ = d * sc2 * static_cast<float>((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - dmin * m2;
    }
  }
}

// Q6_K super-block (210 bytes): ql[128] (low 4 bits), qh[64] (high 2 bits), i8 scales[16] (one
// per 16 elements), f16 d. Each half of 128 elements uses 64 bytes of ql and 32 of qh: element
// l + 32k (k = 0..3) takes the low/high nibble of ql[l] or ql[l + 32] and bits 2k..2k+1 of
// qh[l]; x = d · scale · (q − 32).
void dequantize_q6_k(const uint8_t* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / kQKK; ++b, x += 210) {
    const uint8_t* ql = x;
    const uint8_t* qh = x + 128;
    const auto* sc = reinterpret_cast<const int8_t*>(x + 192);
    const float d = half(x + 208);
    for (int h = 0; h < 2; ++h, ql += 64, qh += 32, sc += 8, y += 128) {
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l] = d * static_cast<float>(sc[is]) * static_cast<float>(q1);
        y[l + 32] = d * static_cast<float>(sc[is + 2]) * static_cast<float>(q2);
        y[l + 64] = d * static_cast<float>(sc[is + 4]) * static_cast<float>(q3);
        y[l + 96] = d * static_cast<float>(sc[is + 6]) * static_cast<float>(q4);
      }
    }
  }
}

}  // namespace

const GgmlTypeInfo* ggml_type_info(uint32_t type) {
  // Sizes from ggml's block structs; only the ones marked readable are decoded here.
  static const struct {
    uint32_t code;
    GgmlTypeInfo info;
  } kTypes[] = {
      {0, {"F32", 1, 4, true}},          {1, {"F16", 1, 2, true}},
      {2, {"Q4_0", 32, 18, true}},       {3, {"Q4_1", 32, 20, false}},
      {6, {"Q5_0", 32, 22, false}},      {7, {"Q5_1", 32, 24, false}},
      {8, {"Q8_0", 32, 34, true}},       {9, {"Q8_1", 32, 36, false}},
      {10, {"Q2_K", 256, 84, false}},    {11, {"Q3_K", 256, 110, false}},
      {12, {"Q4_K", 256, 144, true}},    {13, {"Q5_K", 256, 176, true}},
      {14, {"Q6_K", 256, 210, true}},    {15, {"Q8_K", 256, 292, false}},
      {16, {"IQ2_XXS", 256, 66, false}}, {17, {"IQ2_XS", 256, 74, false}},
      {18, {"IQ3_XXS", 256, 98, false}}, {19, {"IQ1_S", 256, 50, false}},
      {20, {"IQ4_NL", 32, 18, false}},   {21, {"IQ3_S", 256, 110, false}},
      {22, {"IQ2_S", 256, 82, false}},   {23, {"IQ4_XS", 256, 136, false}},
      {24, {"I8", 1, 1, false}},         {25, {"I16", 1, 2, false}},
      {26, {"I32", 1, 4, false}},        {27, {"I64", 1, 8, false}},
      {28, {"F64", 1, 8, false}},        {29, {"IQ1_M", 256, 56, false}},
      {30, {"BF16", 1, 2, true}},        {34, {"TQ1_0", 256, 54, false}},
      {35, {"TQ2_0", 256, 66, false}},
  };
  for (const auto& t : kTypes)
    if (t.code == type) return &t.info;
  return nullptr;
}

std::string ggml_type_name(uint32_t type) {
  const GgmlTypeInfo* t = ggml_type_info(type);
  return t ? std::string(t->name) : "type " + std::to_string(type);
}

size_t ggml_row_bytes(GgmlType type, int64_t n) {
  const GgmlTypeInfo* t = ggml_type_info(static_cast<uint32_t>(type));
  UNILLM_CHECK(t != nullptr, "[gguf] unknown ggml type ", static_cast<uint32_t>(type));
  if (n < 0 || n % t->block != 0)
    UNILLM_THROW(IoError, "[gguf] a row of ", n, " elements is not whole ", t->name, " blocks of ",
                 t->block);
  return static_cast<size_t>(n / t->block) * t->block_bytes;
}

void quantize_row(GgmlType type, const float* x, uint8_t* dst, int64_t n) {
  (void)ggml_row_bytes(type, n);  // checks whole blocks
  switch (type) {
    case GgmlType::kF32:
      std::memcpy(dst, x, static_cast<size_t>(n) * 4);
      return;
    case GgmlType::kF16:
      for (int64_t j = 0; j < n; ++j) put_half(dst + 2 * j, x[j]);
      return;
    case GgmlType::kBF16:
      for (int64_t j = 0; j < n; ++j) {
        const uint16_t h = f32_to_bf16(x[j]);
        std::memcpy(dst + 2 * j, &h, 2);
      }
      return;
    case GgmlType::kQ8_0:
      return quantize_q8_0(x, dst, n);
    case GgmlType::kQ4_0:
      return quantize_q4_0(x, dst, n);
    default:
      UNILLM_THROW(NotImplemented, "[gguf] writing ", ggml_type_name(static_cast<uint32_t>(type)),
                   " is not supported (F32, F16, BF16, Q8_0, Q4_0 are)");
  }
}

void dequantize_row(uint32_t type, const uint8_t* src, float* dst, int64_t n) {
  const GgmlTypeInfo* t = ggml_type_info(type);
  if (t == nullptr || !t->readable)
    UNILLM_THROW(IoError, "[gguf] cannot read ", ggml_type_name(type),
                 " tensors (readable: F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K)");
  (void)ggml_row_bytes(static_cast<GgmlType>(type), n);
  switch (static_cast<GgmlType>(type)) {
    case GgmlType::kF32:
      std::memcpy(dst, src, static_cast<size_t>(n) * 4);
      return;
    case GgmlType::kF16:
      for (int64_t j = 0; j < n; ++j) dst[j] = half(src + 2 * j);
      return;
    case GgmlType::kBF16:
      for (int64_t j = 0; j < n; ++j) {
        uint16_t h;
        std::memcpy(&h, src + 2 * j, 2);
        dst[j] = bf16_to_f32(h);
      }
      return;
    case GgmlType::kQ8_0:
      return dequantize_q8_0(src, dst, n);
    case GgmlType::kQ4_0:
      return dequantize_q4_0(src, dst, n);
    case GgmlType::kQ4_K:
      return dequantize_q4_k(src, dst, n);
    case GgmlType::kQ5_K:
      return dequantize_q5_k(src, dst, n);
    case GgmlType::kQ6_K:
      return dequantize_q6_k(src, dst, n);
  }
}

}  // namespace unillm::io
