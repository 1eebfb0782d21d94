// A copy of a model whose decoder projections hold the weights QLoRA's codes stand for: the
// independent side of the quantised-base tests (QLoRA + DoRA, a quantised ref_model), which then
// compare against plain dense runs on this copy.
#pragma once

#include <string>
#include <vector>

#include "models/causal_lm.h"
#include "models/save.h"
#include "nn/linear.h"
#include "ops/quant.h"
#include "support/expect.h"
#include "train/finetune.h"

namespace unillm::testing {

// Writes dir: model_dir's model with every projection quantised as `quantization_bit: bits`
// (nf4 with double quantisation for 4, LLM.int8 for 8) and dequantised back to f32.
inline void write_dequantised_copy(const std::string& model_dir, const std::string& dir, int bits) {
  init_cpu();
  auto quantised = models::load_causal_lm(model_dir);
  train::TrainArgs qa;
  qa.finetuning_type = "lora";
  qa.quantization_bit = bits;
  train::quantize_base_for_qlora(*quantised, qa);
  auto dense = models::load_causal_lm(model_dir);
  std::vector<const nn::FusedLinear*> from, to;
  quantised->module().for_each_module("", [&](const std::string&, nn::Module& m) {
    if (auto* l = dynamic_cast<nn::FusedLinear*>(&m)) from.push_back(l);
  });
  dense->module().for_each_module("", [&](const std::string&, nn::Module& m) {
    if (auto* l = dynamic_cast<nn::FusedLinear*>(&m)) to.push_back(l);
  });
  UNILLM_CHECK(!from.empty() && from.size() == to.size(), "[test] projections of ", model_dir);
  for (size_t i = 0; i < from.size(); ++i) {
    Tensor w = to[i]->weight();  // shares the layer's storage
    w.copy_from(ops::dequantize_weight(from[i]->quantized()));
  }
  models::SaveOptions so;
  so.tokenizer_dir = model_dir;
  models::save_pretrained(*dense, dir, so);
}

}  // namespace unillm::testing
