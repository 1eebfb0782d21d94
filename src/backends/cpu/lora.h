// Registration of the CPU LoRA kernels (strided GEMMs for ops::lora_linear).
#pragma once

namespace unillm::cpu {

void register_lora();

}  // namespace unillm::cpu
