// OFT adapters (PEFT 0.17's OFTConfig): the configuration and its rules. An OFT adapter rotates a
// linear layer's input by a block-diagonal orthogonal matrix (ops/oft_rotate.h) learned through
// skew-symmetric parameters, initialised to zero (the identity). It rides on the LoRA adapter
// machinery (named adapters on FusedLinear parts, nn/lora.h: LoraConfig::is_oft).
#pragma once

#include <cstdint>
#include <string>

namespace unillm::nn {

struct OftConfig {
  int64_t rank = 0;          // r: blocks per layer (PEFT's default 0: from block_size)
  int64_t block_size = 32;   // oft_block_size; exactly one of rank and block_size is non-zero
  // module_dropout: accepted and written to adapter_config.json. PEFT 0.17.1 builds its
  // MultiplicativeDropoutLayer but Linear.forward never calls it, so it changes nothing there and
  // changes nothing here.
  double module_dropout = 0;
  bool use_cayley_neumann = true;       // Cayley–Neumann series, else the exact Cayley transform
  int64_t num_cayley_neumann_terms = 5;
};

// ConfigError unless exactly one of rank / block_size is non-zero (both ≥ 0), module_dropout is in
// [0, 1) and num_cayley_neumann_terms ≥ 0.
void validate_oft_config(const OftConfig& c);

// The number of blocks and the block size for a layer of in_features inputs. A rank or block size
// that does not divide in_features is moved to the nearest divisor exactly as PEFT's
// adjust_oft_parameters does (ties go down; above in_features: in_features), with adjusted set so
// the caller can say so (PEFT warns). PEFT re-adjusts the same way when it loads the config, so
// the saved shapes agree.
struct OftBlocks {
  int64_t blocks = 0, block_size = 0;
  bool adjusted = false;
};
OftBlocks oft_blocks(const OftConfig& c, int64_t in_features);

}  // namespace unillm::nn
