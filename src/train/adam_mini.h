// Adam-mini (`use_adam_mini: true`; PyPI adam-mini 1.1.1's Adam_mini as LLaMA-Factory builds it
// with dim = hidden_size, n_heads, n_kv_heads): Adam's first moment per element, but one second
// moment per block of each HF-named tensor, the blocks chosen from its lowercased name:
//   "bias"                                        → per element (plain Adam)
//   q_proj k_proj wq wk query key                  → per head: runs of dim²/n_heads elements
//   embed embd wte lm_head output final_layer v_proj wv value feed_forward linear mlp o_proj wo
//   attn.proj                                      → per output row (a matrix's row)
//   anything else (norms)                          → one for the whole tensor
// Weight decay lr·weight_decay (before the step) except on names with "norm", "ln" or "bias".
#pragma once

#include <string>
#include <vector>

#include "train/adamw.h"

namespace unillm::train {

struct AdamMiniConfig {
  AdamWConfig adam;
  int64_t hidden_size = 0, num_heads = 0, num_kv_heads = 0;  // the model's dim, heads, kv heads
};

// How one HF tensor is cut into second-moment blocks.
struct MiniBlocks {
  enum Kind { kElement, kHead, kRow, kTensor } kind = kTensor;
  int64_t block = 1;  // elements per block
  bool decay = true;  // weight decay applies
};
// The partition of tensor `hf_name` with `rows` × `cols` elements (matrix: 2-D); head_numel =
// dim²/n_heads. Throws ConfigError where adam-mini's view would fail (a q/k tensor whose size is
// not a multiple of head_numel, a per-row name on a 1-D tensor).
MiniBlocks adam_mini_blocks(const std::string& hf_name, int64_t rows, int64_t cols, bool matrix,
                            int64_t head_numel);

class AdamMini : public Optimizer {
 public:
  AdamMini(ParamArena& arena, const AdamMiniConfig& c);
  const char* kind() const override { return "adam_mini"; }
  void step(double lr) override;
  // m: the first moment of every element ([numel] f32); vmean: one second moment per block, in
  // arena order (f32).
  StateTensors state() override { return {{"m", &m_}, {"vmean", &v_}}; }

 private:
  struct Slot {
    ArenaPart part;
    MiniBlocks blocks;
    int64_t v_offset = 0;  // into v_
  };
  void step_slot(const Slot& s, float* p, const float* g, double lr);

  AdamMiniConfig c_;
  std::vector<Slot> slots_;
  Tensor m_, v_;
};

}  // namespace unillm::train
