// AVX-512 instantiation of the flash-style paged attention loop (attention/attention_tile.h) for f32.
#include "backends/cpu/kernels/paged_attention_avx512.h"

#include "backends/cpu/attention/attention_avx512_ops.h"
#include "backends/cpu/attention/attention_tile.h"

namespace unillm::cpu::avx512 {

void attention_f32(const ops::AttentionArgs& a) { attention_run_f32<Avx512Ops>(a); }

}  // namespace unillm::cpu::avx512
