// bitsandbytes' AdamW with 8-bit state (HF's adamw_8bit / adamw_bnb_8bit / paged_adamw_8bit):
// each HF-named tensor of ≥ 4096 elements (bnb's min_8bit_size) keeps both moments as 8-bit codes
// in blocks of 256 with one f32 absmax per block: exp_avg on bnb's signed dynamic map, exp_avg_sq
// on the unsigned one. A step dequantises a block, updates moments and weights in f32 as bnb's
// blockwise kernel (weight decay after the Adam step: p ← (p + Δ)·(1 − lr·wd)), then requantises
// each moment to the nearest code of its map at the block's new absmax. Smaller tensors keep
// f32 moments (bnb's 32-bit kernel, same formulas). Paging is a CUDA-memory matter: ignored.
#pragma once

#include <array>
#include <vector>

#include "train/adamw.h"

namespace unillm::train {

class AdamW8bit : public Optimizer {
 public:
  static constexpr int64_t kBlock = 256, kMin8bitSize = 4096;
  AdamW8bit(ParamArena& arena, const AdamWConfig& c);
  const char* kind() const override { return "adamw_8bit"; }
  void step(double lr) override;
  // exp_avg_codes / exp_avg_sq_codes (i8 holding u8 codes, [n8]) with exp_avg_absmax /
  // exp_avg_sq_absmax (f32 [blocks]) for the 8-bit tensors, concatenated in arena order;
  // exp_avg / exp_avg_sq (f32) for the small ones.
  StateTensors state() override;
  // The dequantised moments of every element in arena order (tests compare them).
  std::vector<float> dequantized_exp_avg() const { return dequantized(false); }
  std::vector<float> dequantized_exp_avg_sq() const { return dequantized(true); }

 private:
  struct Slot {
    ArenaPart part;
    bool q8 = false;
    int64_t state_offset = 0;  // into the code tensors (q8) or the f32 moments
    int64_t block_offset = 0;  // into the absmax tensors (q8)
  };
  struct StepScalars;
  void step_8bit(const Slot& s, float* p, const float* g, const StepScalars& k);
  void step_32bit(const Slot& s, float* p, const float* g, const StepScalars& k);
  std::vector<float> dequantized(bool second) const;

  AdamWConfig c_;
  std::vector<Slot> slots_;
  Tensor codes1_, codes2_, absmax1_, absmax2_, m32_, v32_;
};

// bnb's create_dynamic_map(signed, 7, 8): 256 ascending values ([−1, 1] signed, [0, 1] unsigned).
const std::array<float, 256>& bnb_dynamic_map(bool is_signed);
// Index of the value of map nearest to x (the lower one of two equally near).
int nearest_code(const std::array<float, 256>& map, float x);

}  // namespace unillm::train
