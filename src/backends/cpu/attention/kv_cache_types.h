// Element types of a KV cache stored in 16 bits (--kv-cache-dtype bf16 / f16): the paged
// attention's query, scores and accumulators stay f32, and its vector-ops policies widen cache
// rows as they load them (attention_tile.h's C parameter).
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace unillm::cpu {

// Element types of a KV cache stored in 16 bits (--kv-cache-dtype bf16 / f16): the query,
// scores and accumulators stay f32, the vector-ops policies widen cache rows as they load them.
struct Bf16Cache {
  uint16_t bits;
};
struct F16Cache {
  uint16_t bits;
};
inline float cache_to_f32(float v) { return v; }
inline double cache_to_f32(double v) { return v; }
inline float cache_to_f32(Bf16Cache v) { return bf16_to_f32(v.bits); }
inline float cache_to_f32(F16Cache v) { return f16_to_f32(v.bits); }

}  // namespace unillm::cpu
