// AVX2 instantiation of the flash-style paged attention loop (attention_tile.h) for f32.
#include "backends/cpu/attention_avx2_ops.h"
#include "backends/cpu/attention_tile.h"
#include "backends/cpu/avx2_kernels.h"

namespace unillm::cpu::avx2 {

void attention_f32(const ops::AttentionArgs& a) { attention_run<float, Avx2Ops>(a); }

}  // namespace unillm::cpu::avx2
