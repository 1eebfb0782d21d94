// AVX2 instantiation of the flash-style paged attention loop (attention/attention_tile.h) for f32.
#include "backends/cpu/kernels/paged_attention_avx2.h"

#include "backends/cpu/attention/attention_avx2_ops.h"
#include "backends/cpu/attention/attention_tile.h"

namespace unillm::cpu::avx2 {

void attention_f32(const ops::AttentionArgs& a) { attention_run_f32<Avx2Ops>(a); }

}  // namespace unillm::cpu::avx2
