// Inference bundles (models/inference_bundle.h): what a bundle holds loads back to the same
// logits as the model it was written from — f32 exactly as the source dir, bf16 exactly as the
// source loaded with bf16 weights, int8/int4 exactly as the source quantised in memory — with its
// codes mmapped; and a damaged bundle or plan is a clear error naming the file. (The export
// command itself: tests/cli/quantize_test.cpp.)
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "autograd/grad_mode.h"
#include "io/json_file.h"
#include "models/causal_lm.h"
#include "models/inference_bundle.h"
#include "models/passes.h"
#include "nn/linear.h"
#include "support/expect.h"
#include "support/run_cli.h"  // temp_dir

namespace unillm {
namespace {

namespace fs = std::filesystem;
using testing::expect_throw_with;

const std::string kModel = testing::source_path("assets/stories260K");
const std::vector<int32_t> kIds = {1, 403, 407, 261, 378, 260, 266, 292, 284, 343, 300, 280};

models::QuantizeOptions quantize(ops::QuantType type, int64_t group, bool symmetric,
                                 std::optional<DType> scales = std::nullopt) {
  models::QuantizeOptions q;
  q.type = type;
  q.group = group;
  q.symmetric = symmetric;
  q.scale_dtype = scales;
  return q;
}

std::vector<float> logits(models::CausalLM& m) {
  autograd::NoGradGuard no_grad;
  return m.logits_all(kIds).to_float_vector();
}

std::string write_bundle(const std::string& tag, const std::optional<models::QuantizeOptions>& q,
                         DType dense = DType::f32) {
  auto m = models::load_causal_lm(kModel);
  const models::PassPlan plan = models::make_pass_plan(q, {}, {});
  models::run_passes(*m, plan, [](const std::string&) {});
  const std::string dir = testing::temp_dir(tag);
  models::BundleOptions o;
  o.source_dir = kModel;
  o.dense_dtype = dense;
  models::save_inference_bundle(*m, plan, dir, o);
  return dir;
}

TEST(InferenceBundle, DenseBundlesGiveTheSourceLogits) {
  testing::init_cpu();
  auto src = models::load_causal_lm(kModel);
  auto f32 = models::load_causal_lm(write_bundle("bundle_f32", std::nullopt));
  EXPECT_EQ(logits(*f32), logits(*src));
  models::LoadOptions bf;
  bf.weight_dtype = "bf16";
  auto src_bf16 = models::load_causal_lm(kModel, bf);
  const std::string dir = write_bundle("bundle_bf16", std::nullopt, DType::bf16);
  auto b16 = models::load_causal_lm(dir);
  EXPECT_EQ(logits(*b16), logits(*src_bf16));
  EXPECT_TRUE(fs::exists(fs::path(dir) / "tokenizer.json"));
  EXPECT_TRUE(fs::exists(fs::path(dir) / "generation_config.json"));
}

TEST(InferenceBundle, QuantisedBundlesLoadTheirCodesAsTheyAre) {
  testing::init_cpu();
  for (const models::QuantizeOptions& q :
       {quantize(ops::QuantType::int8, 0, true), quantize(ops::QuantType::int4, 32, false),
        quantize(ops::QuantType::int4, 64, true), quantize(ops::QuantType::int4, 32, false, DType::f32),
        quantize(ops::QuantType::int8, 0, true, DType::f16)}) {
    SCOPED_TRACE(::testing::Message() << ops::quant_type_name(q.type) << " g" << q.group << " "
                                      << dtype_name(q.scales()) << " scales");
    auto mem = models::load_causal_lm(kModel);
    models::run_passes(*mem, models::make_pass_plan(q, {}, {}), [](const std::string&) {});
    const std::string dir = write_bundle("bundle_q", q);
    auto loaded = models::load_causal_lm(dir);
    EXPECT_EQ(logits(*loaded), logits(*mem));
    int quantised = 0;
    loaded->module().for_each_module("", [&](const std::string&, nn::Module& m) {
      if (auto* l = dynamic_cast<nn::FusedLinear*>(&m); l && l->is_quantized()) ++quantised;
    });
    EXPECT_EQ(quantised, 4 * mem->config().num_layers) << "qkv, o, gate/up and down of every layer";
    // The plan says what was applied.
    const auto plan = models::read_inference_plan(dir);
    ASSERT_TRUE(plan.has_value());
    EXPECT_EQ(plan->passes, (std::vector<std::string>{"quantize_weights", "fuse_residual_rms_norm", "fuse_rope_into_qk"}));
    EXPECT_EQ(plan->quantize.type, q.type);
    EXPECT_EQ(plan->quantize.scales(), q.scales()) << "f16 for int4 and f32 for int8 unless set";
    loaded->module().for_each_module("", [&](const std::string& name, nn::Module& m) {
      if (auto* l = dynamic_cast<nn::FusedLinear*>(&m); l && l->is_quantized()) {
        EXPECT_EQ(l->quantized().scales.dtype(), q.scales()) << name;
      }
    });
  }
}

void rewrite(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::trunc) << text;
}

TEST(InferenceBundle, DamagedBundlesAreClearErrors) {
  testing::init_cpu();
  const std::string dir = write_bundle("bundle_bad", quantize(ops::QuantType::int4, 32, false));
  const std::string plan = dir + "/inference_plan.json";
  const std::string good = io::read_file_bytes(plan);
  rewrite(plan, R"({"format": "unillm-inference", "version": 1, "passes": [{"name": "fuse_everything"}]})");
  expect_throw_with<ConfigError>([&] { models::load_causal_lm(dir); }, "names an unknown pass 'fuse_everything'");
  rewrite(plan, R"({"format": "unillm-inference", "version": 2, "passes": []})");
  expect_throw_with<ConfigError>([&] { models::load_causal_lm(dir); }, "inference_plan.json: 'version' must be 1");
  rewrite(plan, R"({"format": "unillm-inference", "version": 1, "passes": [{"name": "quantize_weights", "quant_type": "weight_only_int4", "group_size": 64}]})");
  expect_throw_with<ShapeError>([&] { models::load_causal_lm(dir); }, "scales must be f32");
  // The plan and the tensors disagree on the scales' dtype (f16, the int4 default, stored).
  const std::string f16 = R"("scale_dtype": "f16")";
  const size_t at = good.find(f16);
  ASSERT_NE(at, std::string::npos) << good;
  rewrite(plan, std::string(good).replace(at, f16.size(), R"("scale_dtype": "f32")"));
  expect_throw_with<IoError>([&] { models::load_causal_lm(dir); }, "scales is f16 but inference_plan.json says scale_dtype f32");
  rewrite(plan, std::string(good).replace(at, f16.size(), R"("scale_dtype": "bf16")"));
  expect_throw_with<ConfigError>([&] { models::load_causal_lm(dir); }, R"('scale_dtype' must be "f16" or "f32")");
  rewrite(plan, good);
  // A truncated weight file.
  const std::string weights = dir + "/model.safetensors";
  const std::string bytes = io::read_file_bytes(weights);
  rewrite(weights, bytes.substr(0, bytes.size() / 2));
  expect_throw_with<IoError>([&] { models::load_causal_lm(dir); }, "model.safetensors");
}

}  // namespace
}  // namespace unillm
