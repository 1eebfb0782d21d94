// Settings and shared pieces of the low-rank gradient optimisers GaLore (train/galore.h) and
// APOLLO (train/apollo.h): LLaMA-Factory's GaloreArguments / ApolloArguments, which HF-named
// matrices they project, and the full-rank step both apply to every other tensor. Header-light
// so that TrainArgs (args.h) can hold the settings.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace unillm::train {

struct LowRankSettings {
  bool use = false;
  std::vector<std::string> target{"all"};  // "all" = every linear weight but lm_head
  int64_t rank = 16;
  int64_t update_interval = 200;  // steps between projection refreshes
  double scale = 2.0;             // GaLore 2.0, APOLLO 32.0 (LLaMA-Factory's defaults)
  std::string proj_type = "std";  // GaLore: std reverse_std right left full; APOLLO: std right left
  bool layerwise = false;         // LLaMA-Factory's per-parameter update inside backward
  // APOLLO only
  std::string proj = "random";         // random | svd
  std::string scale_type = "channel";  // channel | tensor
  bool scale_front = false;            // sqrt(scale) before the norm-growth limiter
  // HF's own GaLore (optim: galore_adamw[_layerwise], optim_target_modules, optim_args) matches
  // `target` as transformers' check_target_module_exists does, against module names: a YAML
  // string is one regex (full match; "all-linear": every linear, lm_head included), a list
  // matches a name exactly, as a substring or as a full-match regex.
  bool hf_targets = false;
  bool hf_target_is_string = false;
};

inline LowRankSettings apollo_defaults() {
  LowRankSettings s;
  s.scale = 32.0;
  return s;
}

// Whether the HF-named 2-D weight `hf_name` is projected: LLaMA-Factory takes the torch.nn.Linear
// modules whose name contains one of `targets` ("all": find_all_linear_modules, i.e. every linear
// but lm_head), weights only. Embeddings are not linear modules.
bool is_low_rank_target(const std::string& hf_name, const std::vector<std::string>& targets);
// The same under s's matching rule (LLaMA-Factory's above, or HF's with s.hf_targets).
bool is_low_rank_target(const std::string& hf_name, const LowRankSettings& s);

// The AdamW step of galore_torch / apollo_torch (transformers' old AdamW) for one full-rank tensor
// of n elements: m, v updated in f32; p -= step_size · m / (sqrt(v) + eps) with step_size =
// lr·sqrt(1−β2^t)/(1−β1^t); then decoupled weight decay on the updated p: p -= lr·wd·p.
struct AdamScalars {
  float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;
  float step_size = 0;  // lr · sqrt(bc2) / bc1
  float decay = 0;      // lr · weight_decay (0: none)
};
void adam_full_rank_step(float* p, const float* g, float* m, float* v, int64_t n,
                         const AdamScalars& s);

}  // namespace unillm::train
