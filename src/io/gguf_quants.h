// ggml's tensor element formats as GGUF stores them: the plain ones (F32, F16, BF16) and the
// block quantisations. Q8_0 and Q4_0 are written (blocks of 32 along a row, one f16 scale);
// Q4_K, Q5_K and Q6_K (super-blocks of 256) are read, which covers the Q4_K_M/Q5_K_M files
// llama.cpp users download. Rows must hold whole blocks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace unillm::io {

// The ggml type codes unillm reads or writes (other codes are still named in messages).
enum class GgmlType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ8_0 = 8,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kBF16 = 30,
};

struct GgmlTypeInfo {
  const char* name;    // "Q4_K"
  int64_t block;       // elements per block (1 for plain types)
  size_t block_bytes;  // bytes per block
  bool readable;       // unillm can dequantise it
};

// Size and name of a ggml type code; nullptr when the code is unknown here (sizes are known for
// the common non-IQ types so a file holding them can still be opened and listed).
const GgmlTypeInfo* ggml_type_info(uint32_t type);
// "Q4_K", or "type 99" for an unknown code.
std::string ggml_type_name(uint32_t type);
// Bytes of a row of n elements (n a multiple of the block). Throws IoError otherwise.
size_t ggml_row_bytes(GgmlType type, int64_t n);

// One row of n f32 values into dst (ggml_row_bytes(type, n) bytes). type is F32, F16, BF16,
// Q8_0 or Q4_0; n a multiple of 32 for the quantised ones.
//   Q8_0 block: f16 d, i8 q[32]; d = max|x| / 127, q = roundf(x / d) (half away from zero).
//   Q4_0 block: f16 d, u8 qs[16]; m = the element of largest magnitude (sign kept, first one
//   on ties), d = m / -8, code = min(15, trunc(x / d + 8.5)); element j < 16 in the low
//   nibble of qs[j], element j + 16 in its high nibble; x ≈ d · (code − 8).
// Both compute 1/d once in f32 and multiply, as ggml does, so codes match ggml's bit for bit.
void quantize_row(GgmlType type, const float* x, uint8_t* dst, int64_t n);
// One row of n elements of any readable type back to f32. Throws IoError for other types.
void dequantize_row(uint32_t type, const uint8_t* src, float* dst, int64_t n);

}  // namespace unillm::io
