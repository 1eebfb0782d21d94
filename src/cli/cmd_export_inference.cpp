// `unillm export --inference_model --model DIR --output DIR [--dtype f32|bf16|f16]
// [--quant_type weight_only_int8|weight_only_int4] [--group-size N] [--quant-symmetric]`:
// PaddleNLP's static inference export, as an inference bundle (models/inference_bundle.h) that
// generate, chat, eval ppl and serve load directly. PaddleNLP's spellings are accepted too
// (--model_name_or_path, --output_path, --block_attn: the engine always uses block attention).
#include <cstdio>
#include <filesystem>

#include "cli/commands.h"
#include "cli/common.h"
#include "core/error.h"
#include "models/inference_bundle.h"

namespace unillm::cli {

namespace fs = std::filesystem;

int export_inference_model(const std::vector<std::string>& args) {
  std::string model, output, dtype = "f32";
  bool inference_model = false, block_attn = false;
  InferenceOptions inference;
  RuntimeOptions runtime;
  ArgParser p("export --inference_model",
              "Write an inference bundle: weights in the kernels' layout (quantised when asked), the "
              "plan of passes applied, the tokenizer (docs/export.md).");
  p.flag("inference_model", "write an inference bundle (this command)", &inference_model);
  p.option("model", "source model dir (Hugging Face layout)", &model);
  p.option("model_name_or_path", "the same as --model (PaddleNLP)", &model);
  p.option("output", "bundle dir to write", &output);
  p.option("output_path", "the same as --output (PaddleNLP)", &output);
  p.option("dtype", "dense matrices (embedding, lm_head, unquantised layers): f32 (default), bf16, f16", &dtype);
  p.flag("block_attn", "accepted for PaddleNLP: unillm's engine always runs block (paged) attention", &block_attn);
  add_inference_options(p, inference);
  add_runtime_options(p, runtime);
  if (!p.parse(args)) return print_help(p);
  if (model.empty()) UNILLM_THROW(ConfigError, "[export] --model (or --model_name_or_path) is required");
  if (output.empty()) UNILLM_THROW(ConfigError, "[export] --output (or --output_path) is required");
  DType dense;
  try {
    dense = dtype_from_name(dtype);
  } catch (const DTypeError&) {
    UNILLM_THROW(ConfigError, "[export] --dtype must be f32, bf16 or f16, got '", dtype, "'");
  }
  if (dense != DType::f32 && dense != DType::bf16 && dense != DType::f16)
    UNILLM_THROW(ConfigError, "[export] --dtype must be f32, bf16 or f16, got '", dtype, "'");
  std::error_code ec;
  if (fs::exists(output, ec) && fs::equivalent(output, model, ec))
    UNILLM_THROW(ConfigError, "[export] --output is the source model dir; writing there would destroy it");
  const Device device = setup_runtime(runtime);
  models::PassPlan plan;
  auto [tok, loaded] = load_model(model, {}, device, &inference, &plan);
  models::BundleOptions bo;
  bo.source_dir = model;
  bo.dense_dtype = dense;
  models::save_inference_bundle(*loaded, plan, output, bo);
  std::string passes;
  for (const auto& name : plan.passes)
    passes += (passes.empty() ? "" : ", ") +
              (name == "quantize_weights" ? name + " " + ops::quant_type_name(plan.quantize.type) : name);
  std::printf("exported %s -> %s (inference bundle, %s dense; passes: %s)\n", model.c_str(), output.c_str(),
              dtype_name(dense), passes.empty() ? "none" : passes.c_str());
  return 0;
}

}  // namespace unillm::cli
