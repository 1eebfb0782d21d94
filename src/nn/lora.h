// LoRA adapters (PEFT's LoraConfig semantics): the configuration, which modules it targets, the
// weights one adapter holds on one FusedLinear, and the per-call choice of active adapters.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "nn/oft.h"

namespace unillm::nn {

struct LoraConfig {
  int64_t rank = 8;    // r
  double alpha = 8;    // lora_alpha: PEFT's default is 8; LLaMA-Factory's trainer uses 2 × rank
  double dropout = 0;  // lora_dropout, in [0, 1)
  // Module names as PEFT matches them: a name equal to, or a dot-suffix of, the module's full
  // name ("q_proj" matches "model.layers.0.self_attn.q_proj"). "all" (LLaMA-Factory) or
  // "all-linear" (PEFT) = every linear except lm_head. Each entry's last component must be one
  // of lora_module_names().
  std::vector<std::string> target_modules;
  // PEFT's string form of target_modules: a regex fully matching the module's full name. When
  // set, target_modules is ignored.
  std::string target_regex;
  bool use_rslora = false;
  // DoRA (PEFT's use_dora): each targeted output row also gets a trained magnitude m (initialised
  // to ‖W + s·B·A‖ of that row), and the layer computes m ⊙ (W + s·B·A)x / ‖W + s·B·A‖ (the norm
  // detached); see ops/dora_linear.h.
  bool use_dora = false;
  // PEFT's init_lora_weights: "" = true (A kaiming-uniform, B = 0); "pissa" (PiSSA from the
  // full SVD) or "pissa_niter_<n>" (from n subspace iterations): B·A = the top-r singular part of
  // W / scaling, and W is replaced by the residual W − s·B·A (nn/linear.h pissa_init).
  std::string init_lora_weights;
  // PEFT's OFT instead of LoRA (peft_type OFT, nn/oft.h): target_modules / target_regex choose the
  // layers as for LoRA; rank, alpha, dropout and the LoRA options above are unused.
  bool is_oft = false;
  OftConfig oft;

  // alpha / rank, or alpha / sqrt(rank) with use_rslora.
  double scaling() const;
};

// -1 for "pissa" (full SVD), n for "pissa_niter_<n>", -2 when the init is not PiSSA.
int64_t pissa_niter(const LoraConfig& c);

// The projection names LoRA can target: q_proj k_proj v_proj o_proj gate_proj up_proj down_proj.
const std::vector<std::string>& lora_module_names();

// Checks a config (rank > 0, dropout in [0, 1), targets known, regex valid): ConfigError naming
// the bad value and, for an unknown target, listing the valid names.
void validate_lora_config(const LoraConfig& c);

// The targets as an explicit list of short names when they are plain names ("all" expanded, in
// lora_module_names() order); used for adapter_config.json.
std::vector<std::string> expanded_targets(const LoraConfig& c);
// The same, keeping of the single names only those in `present` (the part names a model's adapter
// holds: a dense model has no router for "all" to name, as PEFT lists what it found).
std::vector<std::string> expanded_targets(const LoraConfig& c, const std::set<std::string>& present);

// True when the module whose full HF name is `module` ("model.layers.3.mlp.down_proj") gets
// this adapter.
bool lora_targets(const LoraConfig& c, const std::string& module);

// Which adapters one forward call applies, and its dropout stream. Shared by all layers of the
// call (held by value in recompute closures, so it lives until backward).
struct LoraRun {
  std::vector<std::string> active;  // applied in this order; empty = base model only
  bool dropout = false;             // training: apply each adapter's dropout
  uint64_t seed = 0;  // the call's dropout stream (each module and part derives its own)
  // Inference only: the token rows [first, second) each entry of active applies to (empty = all
  // rows for every entry). An adapter may appear twice, on two runs of rows.
  std::vector<std::pair<int64_t, int64_t>> rows;
  // Training under context parallelism: the MLP's input is rows [mask_row_begin, …) of the
  // call's tokens, and its dropout masks are those rows' (one process's masks).
  int64_t mask_row_begin = 0;
};

// One adapter on one FusedLinear: A = [A_p0; A_p1; …] [P·r, in] and B = [B_p0; B_p1; …]
// [Σ out_p, r] for the targeted parts (f32), and their scaling.
struct LoraWeights {
  std::vector<size_t> parts;  // indices of the FusedLinear's parts, ascending
  int64_t rank = 0;
  double scaling = 1, dropout = 0;
  uint64_t stream = 0;  // dropout stream of this (module, adapter)
  Tensor a;             // [P·r, in]
  Tensor b;             // [Σ out_p, r]
  Tensor magnitude;     // DoRA only: [Σ out_p] f32 (B's row order); undefined for plain LoRA
  // PiSSA only: the initial A and B (the parts of W moved out of the base), kept for
  // pissa_convert and to restore W when the adapter is removed. Not parameters.
  Tensor init_a, init_b;
  // OFT only (a, b undefined): oft_r [P·blocks, b(b−1)/2] f32, PEFT's oft_R weight of each part
  // (rows [k·blocks, (k+1)·blocks) for the k-th part), block size b and the rotation's form.
  Tensor oft_r;
  int64_t oft_block = 0;
  bool oft_neumann = true;
  int64_t oft_terms = 5;
};

// splitmix64 finaliser and a string hash, for deriving independent seeds.
uint64_t mix_seed(uint64_t a, uint64_t b);
uint64_t hash_name(const std::string& s);

}  // namespace unillm::nn
