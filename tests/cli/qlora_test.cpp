// QLoRA (`quantization_bit: 4|8`, docs/qlora.md) end to end on stories260K: 50 steps of 4-bit
// nf4 QLoRA land close to plain LoRA's loss, the memory plan and the measured quantised base
// stay under 0.3x the frozen weights' f32 bytes (and agree to the byte), the adapter exports into
// the unquantised base, and the LLaMA-Factory refusals hold.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <regex>

#include "models/causal_lm.h"
#include "nn/linear.h"
#include "support/expect.h"
#include "support/run_cli.h"
#include "train/finetune.h"
#include "train/memory_plan.h"
#include "train_log_util.h"

namespace unillm {
namespace {

namespace fs = std::filesystem;
using testing::run_unillm;
using testing::source_path;

std::string config(const std::string& dir, const std::string& name, const std::string& extra) {
  const std::string path = dir + "/" + name + ".yaml";
  std::ofstream(path) << "model_name_or_path: " << source_path("assets/stories260K") << "\n"
                      << "stage: sft\ndo_train: true\nfinetuning_type: lora\nlora_rank: 8\nlora_target: all\n"
                      << "dataset: alpaca_en_demo\ndataset_dir: " << source_path("data") << "\n"
                      << "template: alpaca\ncutoff_len: 128\nmax_samples: 400\n"
                      << "output_dir: " << dir << "/" << name << "\n"
                      << "per_device_train_batch_size: 4\nlearning_rate: 5.0e-3\n"
                      << "max_steps: 50\nlogging_steps: 1\nsave_steps: 1000\nseed: 3\n"
                      << extra;
  return path;
}

// The mean of the last n training losses (one batch's loss is noisy; both runs see the same
// batches in the same order).
double tail_mean(const std::vector<double>& l, size_t n) {
  return std::accumulate(l.end() - static_cast<std::ptrdiff_t>(n), l.end(), 0.0) / static_cast<double>(n);
}

TEST(Qlora, FourBitTrainsCloseToLoraInAFractionOfTheMemory) {
  const std::string dir = testing::temp_dir("qlora");
  auto lora = run_unillm("train " + config(dir, "lora", ""));
  ASSERT_EQ(lora.exit_code, 0) << lora.err;
  auto q = run_unillm("train " + config(dir, "qlora", "quantization_bit: 4\n"));
  ASSERT_EQ(q.exit_code, 0) << q.err;
  const std::vector<double> l = testing::train_losses(dir + "/lora"), ql = testing::train_losses(dir + "/qlora");
  ASSERT_EQ(l.size(), 50u);
  ASSERT_EQ(ql.size(), 50u);
  const double step0 = l.front(), lora_final = tail_mean(l, 5), qlora_final = tail_mean(ql, 5);
  std::printf("step-0 loss %.4f (QLoRA's %.4f), final (mean of the last 5) LoRA %.4f, QLoRA %.4f: "
              "gap %.4f of %.4f (%.1f%%)\n",
              step0, ql.front(), lora_final, qlora_final, qlora_final - lora_final, step0 - lora_final,
              100 * (qlora_final - lora_final) / (step0 - lora_final));
  EXPECT_GT(step0 - lora_final, 0.5);  // LoRA learnt something
  EXPECT_LE(qlora_final - lora_final, 0.1 * (step0 - lora_final));
  EXPECT_NE(ql.front(), step0);  // the base really is quantised (its step-0 loss moved)

  // The plan's line: "of which frozen (QLoRA)  ...  (B bytes, R of f32's F)".
  std::smatch m;
  const std::regex re(R"(of which frozen \(QLoRA\).*\((\d+) bytes, ([0-9.]+) of f32's (\d+)\))");
  ASSERT_TRUE(std::regex_search(q.err, m, re)) << q.err;  // the trainer's info lines
  const int64_t planned = std::stoll(m[1]), f32 = std::stoll(m[3]);
  EXPECT_LE(std::stod(m[2]), 0.3);
  EXPECT_EQ(lora.err.find("of which frozen"), std::string::npos);

  // Measured: the frozen storage of a model quantised as the run does it, to the byte the plan's.
  testing::init_cpu();
  auto model = models::load_causal_lm(source_path("assets/stories260K"));
  size_t before = 0, after = 0;
  for (auto& p : model->module().parameters()) before += p.tensor->nbytes();
  train::TrainArgs a;
  a.finetuning_type = "lora";
  a.quantization_bit = 4;
  const train::QloraSummary s = train::quantize_base_for_qlora(*model, a);
  for (auto& p : model->module().parameters()) after += p.tensor->nbytes();
  after += s.quantized_bytes;
  std::printf("measured: frozen weights %zu bytes of f32's %zu (%.3f); the %lld projections %zu of %zu (%.3f)\n",
              after, before, double(after) / double(before), static_cast<long long>(s.layers), s.quantized_bytes,
              s.f32_bytes, double(s.quantized_bytes) / double(s.f32_bytes));
  EXPECT_EQ(static_cast<int64_t>(before), f32);
  EXPECT_EQ(static_cast<int64_t>(after), planned);
  EXPECT_LE(double(after), 0.3 * double(before));

  // The adapter merges into the base loaded unquantised (as LLaMA-Factory's export).
  std::ofstream(dir + "/merge.yaml") << "model_name_or_path: " << source_path("assets/stories260K")
                                     << "\nadapter_name_or_path: " << dir << "/qlora\nfinetuning_type: lora\n"
                                     << "export_dir: " << dir << "/merged\n";
  auto e = run_unillm("export " + dir + "/merge.yaml");
  ASSERT_EQ(e.exit_code, 0) << e.err;
  EXPECT_TRUE(fs::exists(dir + "/merged/model.safetensors"));
  // With quantization_bit in the export config: LLaMA-Factory's refusal.
  auto eq = run_unillm("export " + dir + "/merge.yaml quantization_bit=4 export_dir=" + dir + "/merged4");
  EXPECT_NE(eq.exit_code, 0);
  EXPECT_NE(eq.err.find("Cannot merge adapters to a quantized model"), std::string::npos) << eq.err;
}

// The trainer quantises each projection as soon as it is read (LoadOptions::on_linear_loaded),
// so the load never holds the dense decoder: the same codes and scales as quantising after the
// load, every projection once, and the dense parameters unchanged.
TEST(Qlora, QuantisingWhileLoadingGivesTheSameBase) {
  testing::init_cpu();
  const std::string path = source_path("assets/stories260K");
  for (int bits : {4, 8}) {
    SCOPED_TRACE(bits);
    train::TrainArgs a;
    a.finetuning_type = "lora";
    a.quantization_bit = bits;
    auto after = models::load_causal_lm(path);
    const train::QloraSummary s = train::quantize_base_for_qlora(*after, a);
    models::LoadOptions lo;
    int calls = 0;
    auto hook = train::qlora_load_hook(a);
    lo.on_linear_loaded = [&](nn::FusedLinear& lin) {
      ++calls;
      hook(lin);
    };
    auto during = models::load_causal_lm(path, lo);
    EXPECT_EQ(calls, s.layers);
    EXPECT_EQ(train::quantize_base_for_qlora(*during, a).layers, 0) << "every projection was quantised on load";
    std::vector<const nn::FusedLinear*> x, y;
    after->module().for_each_module("", [&](const std::string&, nn::Module& m) {
      if (auto* l = dynamic_cast<nn::FusedLinear*>(&m)) x.push_back(l);
    });
    during->module().for_each_module("", [&](const std::string&, nn::Module& m) {
      if (auto* l = dynamic_cast<nn::FusedLinear*>(&m)) y.push_back(l);
    });
    ASSERT_EQ(x.size(), y.size());
    for (size_t i = 0; i < x.size(); ++i) {
      const ops::QuantizedWeight &p = x[i]->quantized(), &q = y[i]->quantized();
      ASSERT_EQ(p.data.nbytes(), q.data.nbytes());
      EXPECT_EQ(std::memcmp(p.data.raw_data(), q.data.raw_data(), p.data.nbytes()), 0) << "linear " << i;
      ASSERT_EQ(p.scales.nbytes(), q.scales.nbytes());
      EXPECT_EQ(std::memcmp(p.scales.raw_data(), q.scales.raw_data(), p.scales.nbytes()), 0) << "linear " << i;
    }
    const auto pa = after->named_parameters(), pd = during->named_parameters();
    ASSERT_EQ(pa.size(), pd.size());
    for (size_t i = 0; i < pa.size(); ++i) {
      EXPECT_EQ(pa[i].first, pd[i].first);
      const Tensor u = pa[i].second.contiguous(), v = pd[i].second.contiguous();
      EXPECT_EQ(std::memcmp(u.raw_data(), v.raw_data(), u.nbytes()), 0) << pa[i].first;
    }
  }
}

TEST(Qlora, EightBitAndFp4Train) {
  const std::string dir = testing::temp_dir("qlora8");
  for (const char* extra : {"quantization_bit: 8\n", "quantization_bit: 4\nquantization_type: fp4\ndouble_quantization: false\n"}) {
    auto r = run_unillm("train " + config(dir, "q", extra) + " max_steps=3 overwrite_output_dir=true --quiet");
    ASSERT_EQ(r.exit_code, 0) << extra << r.err;
    const std::vector<double> l = testing::train_losses(dir + "/q");
    ASSERT_EQ(l.size(), 3u) << extra;
    EXPECT_TRUE(std::isfinite(l.back()));
  }
}

TEST(Qlora, ResumesExactlyOverTheQuantisedBase) {
  const std::string dir = testing::temp_dir("qlora_resume");
  const std::string extra = "quantization_bit: 4\nlora_dropout: 0.1\n";
  const std::string a_cfg = config(dir, "a", extra) + " max_steps=6 save_steps=3";
  const std::string b_cfg = config(dir, "b", extra) + " max_steps=6 save_steps=3";
  auto a = run_unillm("train " + a_cfg + " --quiet");
  ASSERT_EQ(a.exit_code, 0) << a.err;
  auto killed = run_unillm("train " + b_cfg + " --quiet --kill-after-step 3");
  EXPECT_EQ(killed.exit_code, 128 + 9) << killed.err;
  auto resumed = run_unillm("train " + b_cfg + " resume_from_checkpoint=true --quiet");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_EQ(testing::train_losses(dir + "/a"), testing::train_losses(dir + "/b"));
  EXPECT_EQ(testing::slurp(dir + "/a/adapter_model.safetensors"), testing::slurp(dir + "/b/adapter_model.safetensors"));
}

TEST(Qlora, RefusalsNameTheKey) {
  const std::string dir = testing::temp_dir("qlora_bad");
  auto full = run_unillm("train " + config(dir, "full", "quantization_bit: 4\n") + " finetuning_type=full --quiet");
  EXPECT_NE(full.exit_code, 0);
  EXPECT_NE(full.err.find("Quantization is only compatible with the LoRA method"), std::string::npos) << full.err;
  auto hqq = run_unillm("train " + config(dir, "hqq", "quantization_bit: 4\nquantization_method: hqq\n") + " --quiet");
  EXPECT_NE(hqq.exit_code, 0);
  EXPECT_NE(hqq.err.find("quantization_method"), std::string::npos) << hqq.err;
  auto bits = run_unillm("train " + config(dir, "bits", "quantization_bit: 3\n") + " --quiet");
  EXPECT_NE(bits.exit_code, 0);
  EXPECT_NE(bits.err.find("quantization_bit"), std::string::npos) << bits.err;
}

}  // namespace
}  // namespace unillm
