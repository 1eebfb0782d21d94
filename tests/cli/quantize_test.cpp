// `--quant_type` at load (the quantize_weights pass): perplexity of the bundled stories260K on a
// held-out story written for these tests (tests/data/heldout) within the bounds of the
// f32 model — int8 within 0.5 %, int4 g32 (asymmetric, round to nearest) within 8 %, GPTQ int4
// calibrated on other hand-written stories (tests/data/calibration) below round to nearest, with
// and without act order (the 4 % is reached on this model only by symmetric g32 with act
// order on a larger, self-generated calibration set: docs/export.md) — the fusion
// passes changing nothing, f16 against f32 scales, generation on the quantised model, the pass
// flags' errors, and `export --inference_model` (also from a LLaMA-Factory export YAML, with
// GPTQ).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <fstream>
#include <regex>

#include "support/expect.h"
#include "support/run_cli.h"

namespace unillm {
namespace {

using testing::run_unillm;

const std::string kModel = testing::source_path("assets/stories260K");
const std::string kText = testing::source_path("tests/data/heldout/story.txt");
const std::string kCalib = testing::source_path("tests/data/calibration");
const std::string kCalibFlags = " --calibration-data stories_calib --dataset_dir " + kCalib +
                                " --calibration-samples 64 --calibration-len 128";

double ppl(const std::string& flags, std::string* log = nullptr, const std::string& model = kModel) {
  auto r = run_unillm("eval ppl --model " + model + " --file " + kText + " --json --threads 1 " + flags);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  if (log) *log = r.err;
  return nlohmann::json::parse(r.out).at("ppl").get<double>();
}

TEST(Quantize, PerplexityStaysWithinTheBounds) {
  const double f32 = ppl("");
  std::string log;
  const double int8 = ppl("--quant_type weight_only_int8", &log);
  EXPECT_NE(log.find("[pass] quantize_weights: 20 linear layers to weight_only_int8"), std::string::npos) << log;
  EXPECT_LE(std::abs(int8 / f32 - 1), 0.005) << "int8 " << int8 << " vs f32 " << f32;
  const double int4 = ppl("--quant_type weight_only_int4 --group-size 32");
  EXPECT_LE(int4 / f32 - 1, 0.08) << "int4 g32 " << int4 << " vs f32 " << f32;
  EXPECT_GT(int4, int8) << "int4 loses more than int8";
  // Exact activations (--quant-activations f32; the default quantises them to int8 on VNNI CPUs)
  // meet the bounds too: docs/export.md's table gives both.
  const double int8_exact = ppl("--quant_type weight_only_int8 --quant-activations f32");
  EXPECT_LE(std::abs(int8_exact / f32 - 1), 0.005) << "int8, f32 activations " << int8_exact << " vs f32 " << f32;
  const double int4_exact = ppl("--quant_type weight_only_int4 --group-size 32 --quant-activations f32");
  EXPECT_LE(int4_exact / f32 - 1, 0.08) << "int4 g32, f32 activations " << int4_exact << " vs f32 " << f32;
  // --no-pass turns the quantisation off again: exactly the f32 figure.
  EXPECT_EQ(ppl("--quant_type weight_only_int8 --no-pass quantize_weights"), f32);
}

TEST(Quantize, CalibratedInt4BeatsRoundToNearest) {
  const double f32 = ppl("");
  const double rtn = ppl("--quant_type weight_only_int4");
  std::string log;
  const double gptq = ppl("--quant_type weight_only_int4" + kCalibFlags, &log);
  EXPECT_NE(log.find("[calibration] stories_calib: "), std::string::npos) << log;
  EXPECT_NE(log.find("GPTQ on 20 (calibration: stories_calib: "), std::string::npos) << log;
  // Measured 6.34 % here (round to nearest: 6.81 %); 3.9-7.4 % over calibration lengths.
  EXPECT_LE(gptq / f32 - 1, 0.08) << "GPTQ int4 g32 " << gptq << " vs f32 " << f32;
  EXPECT_LT(gptq, rtn) << "GPTQ " << gptq << " vs round to nearest " << rtn;
  const double act = ppl("--quant_type weight_only_int4 --quant-symmetric --gptq-act-order" + kCalibFlags, &log);
  EXPECT_NE(log.find("GPTQ (act order) on 20"), std::string::npos) << log;
  EXPECT_LE(act / f32 - 1, 0.08) << "GPTQ act order, symmetric int4 g32 " << act << " vs f32 " << f32;
  EXPECT_LT(act, ppl("--quant_type weight_only_int4 --quant-symmetric")) << "act order beats round to nearest";
  auto bad = run_unillm("eval ppl --model " + kModel + " --file " + kText + " --quant_type weight_only_int4 --gptq-act-order");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("--gptq-act-order orders GPTQ's sweep: it needs --calibration-data"), std::string::npos) << bad.err;
  // A calibration without quantisation, or from nowhere, is a clear error.
  auto r = run_unillm("eval ppl --model " + kModel + " --file " + kText + kCalibFlags);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("--calibration-data calibrates a quantisation: it needs --quant_type"), std::string::npos) << r.err;
  r = run_unillm("eval ppl --model " + kModel + " --file " + kText +
                 " --quant_type weight_only_int4 --calibration-data no_such --dataset_dir " + kCalib);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("no_such"), std::string::npos) << r.err;
  r = run_unillm("eval ppl --model " + kModel + " --file " + kText + " --quant_type weight_only_int4" + kCalibFlags +
                 " --calibration-len 100000");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("fewer than one sample of 100000"), std::string::npos) << r.err;
}

TEST(Quantize, FusionPassesChangeNothing) {
  std::string log;
  const double fused = ppl("", &log);
  EXPECT_NE(log.find("[pass] fuse_residual_rms_norm: 11 norms"), std::string::npos) << log;
  EXPECT_NE(log.find("[pass] fuse_rope_into_qk: 5 attention layers"), std::string::npos) << log;
  EXPECT_EQ(ppl("--no-pass fuse_residual_rms_norm --no-pass fuse_rope_into_qk", &log), fused);
  EXPECT_EQ(log.find("[pass]"), std::string::npos) << log;
}

TEST(Quantize, GenerateRunsOnQuantisedWeights) {
  auto r = run_unillm("generate --model " + kModel + " --prompt 'Once upon a time' --max-new-tokens 12 "
                      "--temperature 0 --output-ids --threads 1 --quant_type weight_only_int4");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("weight_only_int4 g32 asymmetric"), std::string::npos) << r.err;
  const std::string last = r.out.substr(r.out.rfind('['));
  EXPECT_EQ(nlohmann::json::parse(last).size(), 12u) << r.out;
}

TEST(Quantize, BadPassFlagsAreClearErrors) {
  auto r = run_unillm("eval ppl --model " + kModel + " --file " + kText + " --passes fuse_everything");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("unknown pass 'fuse_everything'"), std::string::npos) << r.err;
  r = run_unillm("eval ppl --model " + kModel + " --file " + kText + " --quant_type weight_only_int3");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("unknown quant_type 'weight_only_int3'"), std::string::npos) << r.err;
  r = run_unillm("eval ppl --model " + kModel + " --file " + kText + " --passes quantize_weights");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("needs --quant_type"), std::string::npos) << r.err;
  r = run_unillm("eval ppl --model " + kModel + " --file " + kText + " --quant_type weight_only_int4 --group-size 0");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("--group-size must be positive"), std::string::npos) << r.err;
  r = run_unillm("eval ppl --model " + kModel + " --file " + kText + " --quant_type weight_only_int8 --quant-activations int4");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("--quant-activations must be int8 or f32, got 'int4'"), std::string::npos) << r.err;
  r = run_unillm("eval ppl --model " + kModel + " --file " + kText + " --scale-dtype f16");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("--scale-dtype sets how quantised scales are stored: it needs --quant_type"), std::string::npos)
      << r.err;
  r = run_unillm("eval ppl --model " + kModel + " --file " + kText + " --quant_type weight_only_int4 --scale-dtype bf16");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("bf16"), std::string::npos) << r.err;
}

// --scale-dtype f32 keeps int4's scales and minimums in f32: the same codes' perplexity within
// f16's rounding of them (stories260K: +6.77 % against +6.81 % over f32 weights).
TEST(Quantize, ScaleDtypeF32AndF16GiveNearlyTheSamePerplexity) {
  const double f16 = ppl("--quant_type weight_only_int4 --group-size 32");
  const double f32 = ppl("--quant_type weight_only_int4 --group-size 32 --scale-dtype f32");
  EXPECT_NE(f16, f32);
  EXPECT_NEAR(f16, f32, 0.005 * f32);
}

// --lm-head-quant int4: the lm_head in the layers' int4 format (fewer bytes than llama.cpp's Q6_K
// output). stories260K's 64-wide lm_head is a worst case for it: +7.2 % over f32 with asymmetric
// g32 (+6.7 % with the int8 head), still within int4's 8 %. A bundle keeps it (plan "lm_head":
// "int4", lm_head.mins) and gives the at-load model's perplexity; bad combinations are refused.
TEST(Quantize, Int4LmHeadWithinTheInt4BoundAndInBundles) {
  const double f32 = ppl("");
  std::string log;
  const double head4 = ppl("--quant_type weight_only_int4 --lm-head-quant int4", &log);
  EXPECT_NE(log.find("lm_head int4 g32 asymmetric"), std::string::npos) << log;
  EXPECT_LE(head4 / f32 - 1, 0.08) << "int4 with int4 lm_head " << head4 << " vs f32 " << f32;
  EXPECT_NE(head4, ppl("--quant_type weight_only_int4")) << "the int4 lm_head is used";
  const std::string out = testing::temp_dir("bundle_head4") + "/b";
  auto r = run_unillm("export --inference_model --model " + kModel + " --output " + out +
                      " --quant_type weight_only_int4 --lm-head-quant int4 --threads 1");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::ifstream plan(out + "/inference_plan.json");
  EXPECT_EQ(nlohmann::json::parse(plan)["passes"][0]["lm_head"], "int4");
  EXPECT_EQ(ppl("", nullptr, out), head4);
  for (const auto& [flags, want] : std::vector<std::pair<std::string, std::string>>{
           {"--quant_type weight_only_int8 --lm-head-quant int4", "--lm-head-quant int4 needs --quant_type weight_only_int4"},
           {"--lm-head-quant int8", "needs --quant_type"},
           {"--quant_type weight_only_int4 --lm-head-quant int2", "--lm-head-quant must be int8 or int4, got 'int2'"},
           {"--quant_type weight_only_int4 --lm-head-quant int4 --keep-f32 lm_head", "contradict"}}) {
    r = run_unillm("eval ppl --model " + kModel + " --file " + kText + " " + flags);
    EXPECT_NE(r.exit_code, 0) << flags;
    EXPECT_NE(r.err.find(want), std::string::npos) << flags << ": " << r.err;
  }
}

TEST(Quantize, ExportInferenceModelWritesWhatGenerateLoads) {
  const std::string out = testing::temp_dir("bundle_cli") + "/b";
  auto r = testing::run_unillm("export --inference_model --model_name_or_path " + kModel + " --output_path " + out +
                               " --quant_type weight_only_int8 --block_attn --threads 1");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string gen = " --prompt 'Once upon a time' --max-new-tokens 10 --temperature 0 --output-ids --threads 1";
  auto a = testing::run_unillm("generate --model " + out + gen);
  auto b = testing::run_unillm("generate --model " + kModel + " --quant_type weight_only_int8" + gen);
  ASSERT_EQ(a.exit_code, 0) << a.err;
  ASSERT_EQ(b.exit_code, 0) << b.err;
  EXPECT_EQ(a.out, b.out);
  r = testing::run_unillm("export --inference_model --model " + kModel + " --output " + out + " --dtype f8");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("--dtype must be f32, bf16 or f16"), std::string::npos) << r.err;
  r = testing::run_unillm("export --inference_model --model " + kModel + " --output " + kModel);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("would destroy it"), std::string::npos) << r.err;
}

// LLaMA-Factory's `export_quantization_bit` in an export YAML: an inference bundle (said on
// stderr), which loads to the in-memory quantised model; with export_quantization_dataset (a
// file path, as LLaMA-Factory's example gives it) GPTQ, the same codes as --calibration-data.
TEST(Quantize, ExportYamlWithQuantizationBitWritesABundle) {
  const std::string dir = testing::temp_dir("export_qbit");
  const std::string yaml = dir + "/export.yaml";
  std::ofstream(yaml) << "model_name_or_path: " << kModel << "\nexport_dir: " << dir << "/out\n"
                      << "export_quantization_bit: 4\n";
  auto r = run_unillm("export " + yaml + " --threads 1");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("export_quantization_bit 4: writing an inference bundle (weight-only int4 g32, round to nearest)"),
            std::string::npos) << r.err;
  EXPECT_EQ(ppl("", nullptr, dir + "/out"), ppl("--quant_type weight_only_int4"));
  std::ofstream(yaml) << "model_name_or_path: " << kModel << "\nexport_dir: " << dir << "/gptq\n"
                      << "export_quantization_bit: 4\nexport_quantization_dataset: " << kCalib << "/stories.txt\n"
                      << "export_quantization_nsamples: 64\nexport_quantization_maxlen: 128\n";
  r = run_unillm("export " + yaml + " --threads 1");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("(weight-only int4 g32, GPTQ)"), std::string::npos) << r.err;
  EXPECT_EQ(ppl("", nullptr, dir + "/gptq"),
            ppl("--quant_type weight_only_int4 --calibration-data " + kCalib +
                "/stories.txt --calibration-samples 64 --calibration-len 128"));
  std::ifstream plan(dir + "/gptq/inference_plan.json");
  const auto j = nlohmann::json::parse(plan);
  EXPECT_EQ(j["passes"][0]["method"], "gptq");
  std::ofstream(yaml) << "model_name_or_path: " << kModel << "\nexport_dir: " << dir << "/out3\n"
                      << "export_quantization_bit: 3\n";
  r = run_unillm("export " + yaml);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("export_quantization_bit 3 is not supported"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace unillm
