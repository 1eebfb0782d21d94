// LLaMA-Factory's Muon (`use_muon: true`, its third_party/muon after Moonlight and Keller
// Jordan): each HF-named 2-D tensor whose name holds neither "embed" nor "lm_head" (a fused QKV's
// q, k and v apart, as LLaMA-Factory sees separate Linear weights) takes SGD momentum 0.95 with
// Nesterov, orthogonalised by 5 quintic Newton–Schulz steps in bf16, scaled by lr·0.2·√max(R, C);
// everything else (embeddings, lm_head, 1-D tensors) takes its AdamW (adam_beta1/2, adam_epsilon,
// eps outside the bias correction). Weight decay lr·weight_decay applies to every tensor, norms
// and biases included, as LLaMA-Factory builds a single param group.
#pragma once

#include <string>
#include <vector>

#include "train/adamw.h"

namespace unillm::train {

class Muon : public Optimizer {
 public:
  static constexpr double kMomentum = 0.95;
  static constexpr int kNsSteps = 5;
  Muon(ParamArena& arena, const AdamWConfig& c);
  const char* kind() const override { return "muon"; }
  void step(double lr) override;
  // momentum_buffer: the Muon tensors' momenta; moment1 / moment2: the AdamW tensors' moments.
  // Each concatenated in arena order, f32.
  StateTensors state() override;
  // Elements Muon updates and elements it leaves to AdamW (logs and tests).
  int64_t muon_numel() const { return buf_.numel(); }
  int64_t adamw_numel() const { return m1_.numel(); }

 private:
  struct Slot {
    ArenaPart part;
    bool muon = false;
    int64_t state_offset = 0;  // into buf_ (muon) or m1_/m2_
  };
  void step_muon(const Slot& s, float* p, const float* g, double lr);
  void step_adamw(const Slot& s, float* p, const float* g, double lr);

  AdamWConfig c_;
  std::vector<Slot> slots_;
  Tensor buf_, m1_, m2_;
};

// LLaMA-Factory's rule: a 2-D tensor whose HF name has neither "embed" nor "lm_head".
bool muon_takes(const std::string& hf_name, bool matrix);

// zeropower_via_newtonschulz5 on a row-major [rows, cols] matrix g, in bf16 as torch runs it on a
// GPU: every op's result rounded to bf16 (round to nearest even), scalars kept in f32, matrix
// products accumulated in f32. X = g/‖g‖ (transposed when rows > cols), then per step
// A = XXᵀ, B = bA + (cA)A, X = aX + BX with (a, b, c) = (3.4445, −4.7750, 2.0315).
// Returns the [rows, cols] result (bf16 values held in f32).
std::vector<float> newton_schulz5(const float* g, int64_t rows, int64_t cols, int steps);

// The bf16 value nearest to x (ties to even), as an f32.
float round_bf16(float x);

}  // namespace unillm::train
