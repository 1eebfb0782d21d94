// PaddleNLP's official llm/config/llama argument files (tests/cli/paddlenlp_llama/) through
// `unillm train`, on the bundled model: run_pretrain.py's annealing LR schedule, a separate
// tokenizer dir and do_predict; run_finetune.py's evaluation and checkpoints by epoch and the best
// checkpoint reloaded at the end (load_best_model_at_end), with exact resume. Overrides give
// absolute paths, a small corpus / data subset and fewer steps.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "data/corpus_data.h"
#include "support/expect.h"
#include "support/run_cli.h"
#include "train_log_util.h"

namespace unillm {
namespace {

namespace fs = std::filesystem;
using testing::log_lines;
using testing::run_unillm;
using testing::slurp;
using testing::source_path;

std::string official(const std::string& name) {
  return source_path("tests/cli/paddlenlp_llama/" + name);
}

void write(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

nlohmann::json read_json(const std::string& path) { return nlohmann::json::parse(slurp(path)); }

std::vector<nlohmann::json> lines_with(const std::string& out, const char* key) {
  std::vector<nlohmann::json> r;
  for (auto& l : log_lines(out))
    if (l.contains(key)) r.push_back(l);
  return r;
}

// The stories260K model and its tokenizer in two dirs (the model dir has no tokenizer), and a
// corpus of the non-empty lines among the first 12000 of tinyshakespeare.
struct PretrainSetup {
  std::string dir, model, tok, corpus;
  std::vector<std::string> docs;
};

PretrainSetup pretrain_setup(const std::string& tag) {
  PretrainSetup s;
  s.dir = testing::temp_dir(tag);
  s.model = s.dir + "/model";
  s.tok = s.dir + "/tok";
  fs::create_directories(s.model);
  fs::create_directories(s.tok);
  for (const char* f : {"config.json", "model.safetensors", "generation_config.json"})
    fs::copy_file(source_path("assets/stories260K/") + f, s.model + "/" + f);
  for (const char* f : {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"})
    fs::copy_file(source_path("assets/stories260K/") + f, s.tok + "/" + f);
  std::ifstream in(source_path("data/tinyshakespeare.txt"));
  std::string all, line;
  for (int i = 0; i < 12000 && std::getline(in, line); ++i) {
    all += line + "\n";
    if (!line.empty()) s.docs.push_back(line);
  }
  write(s.dir + "/shakes.txt", all);
  s.corpus = s.dir + "/corpus";
  auto pre = run_unillm("preprocess --quiet --model " + s.tok + " --input " + s.dir +
                        "/shakes.txt --output " + s.corpus + "/shakes");
  EXPECT_EQ(pre.exit_code, 0) << pre.err;
  return s;
}

// The official file with the setup's paths; the rest of args are more overrides.
testing::CliResult run_pretrain(const PretrainSetup& s, const std::string& out,
                                const std::string& args) {
  return run_unillm("train " + official("pretrain_argument.json") +
                    " model_name_or_path=" + s.model + " tokenizer_name_or_path=" + s.tok +
                    " input_dir=" + s.corpus + " output_dir=" + out +
                    " tensor_parallel_degree=1 max_seq_length=64 " + args + " --quiet");
}

void expect_lrs(const std::string& out, const std::vector<double>& want) {
  auto steps = lines_with(out, "lr");
  ASSERT_EQ(steps.size(), want.size()) << out;
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_NEAR(steps[i]["lr"].get<double>(), want[i], 1e-17) << out << " step " << i + 1;
}

TEST(PaddleNlpLlama, PretrainArgumentsAnnealTheLearningRate) {
  const PretrainSetup s = pretrain_setup("paddle_pretrain");
  // tensor_parallel_degree 2 needs two processes (PaddleNLP's own check fails on one device too).
  auto tp = run_unillm("train " + official("pretrain_argument.json") + " model_name_or_path=" + s.model +
                       " tokenizer_name_or_path=" + s.tok + " input_dir=" + s.corpus + " output_dir=" + s.dir +
                       "/tp --quiet");
  EXPECT_EQ(tp.exit_code, 1);
  EXPECT_NE(tp.err.find("tensor_parallel_degree 2 does not divide the 1 processes"), std::string::npos) << tp.err;
  // LinearAnnealingWithWarmupDecay(3e-5, 3e-6, warm-up 2, decay 5); the lr logged after step s is
  // get_lr(s + 1): 3e-5; then r = 1/3, 2/3: 3e-6 + (1 - r) 2.7e-5; then min_lr.
  auto r = run_pretrain(s, s.dir + "/lin", "max_steps=5 warmup_steps=2 decay_steps=5");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  expect_lrs(s.dir + "/lin", {3e-5, 2.1e-5, 1.2e-5, 3e-6, 3e-6});
  // Cosine: coeff (cos(pi r) + 1) / 2 = 0.75, 0.25.
  auto c = run_pretrain(s, s.dir + "/cos",
                        "max_steps=3 warmup_steps=2 decay_steps=5 lr_scheduler_type=cosine");
  ASSERT_EQ(c.exit_code, 0) << c.err;
  expect_lrs(s.dir + "/cos", {3e-5, 3e-6 + 0.75 * 2.7e-5, 3e-6 + 0.25 * 2.7e-5});
  // The tokenizer came from tokenizer_name_or_path (the model dir has none) and is saved along.
  EXPECT_EQ(slurp(s.dir + "/lin/tokenizer.json"), slurp(s.tok + "/tokenizer.json"));
  EXPECT_FALSE(fs::exists(s.model + "/tokenizer.json"));
  // A tokenizer with more ids than the model has embedding rows is refused before any data.
  auto big = run_pretrain(s, s.dir + "/big",
                          "tokenizer_name_or_path=" + source_path("assets/llama2-tokenizer"));
  EXPECT_EQ(big.exit_code, 1);
  EXPECT_NE(big.err.find("has token ids up to 31999"), std::string::npos) << big.err;
  EXPECT_NE(big.err.find("key 'vocab_size' is 512"), std::string::npos) << big.err;
}

// The official pretrain file under two processes as it is (tensor_parallel_degree 2, its
// `sharding: stage2`: ZeRO stage 2; in f32), and with tensor_parallel_degree 1 as data parallelism
// (twice the processes' accumulation), and with sep_parallel_degree 2 (context parallelism): each
// gives the run of one process, and do_predict's test loss split over the processes gives one
// process's.
TEST(PaddleNlpLlama, PretrainArgumentsUnderTwoProcessesShardAndPredict) {
  const PretrainSetup s = pretrain_setup("paddle_dp2");
  const std::string args = " model_name_or_path=" + s.model + " tokenizer_name_or_path=" + s.tok +
                           " input_dir=" + s.corpus + " max_seq_length=64 max_steps=3"
                           " per_device_eval_batch_size=16 --quiet";
  auto one = run_unillm("train " + official("pretrain_argument.json") + args +
                        " tensor_parallel_degree=1 gradient_accumulation_steps=4 output_dir=" + s.dir + "/one");
  ASSERT_EQ(one.exit_code, 0) << one.err;
  EXPECT_NE(one.err.find("one process holds everything"), std::string::npos) << one.err;
  auto two = testing::run_shell("OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader "
                                "timeout -k 5 240 mpirun --oversubscribe --bind-to none -np 2 " +
                                std::string(UNILLM_BINARY_DIR) + "/unillm train " + official("pretrain_argument.json") +
                                args + " tensor_parallel_degree=1 gradient_accumulation_steps=2 output_dir=" + s.dir +
                                "/two");
  ASSERT_EQ(two.exit_code, 0) << two.err;
  EXPECT_NE(two.err.find("(sharding: stage2): gradients and optimizer state sharded over 2 processes"), std::string::npos) << two.err;
  auto tp = testing::run_shell("OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader "
                               "timeout -k 5 240 mpirun --oversubscribe --bind-to none -np 2 " +
                               std::string(UNILLM_BINARY_DIR) + "/unillm train " + official("pretrain_argument.json") +
                               args + " gradient_accumulation_steps=4 bf16=false output_dir=" + s.dir + "/tp2");
  ASSERT_EQ(tp.exit_code, 0) << tp.err;
  EXPECT_NE(tp.err.find("tensor parallel: 2 processes"), std::string::npos) << tp.err;
  EXPECT_NE(tp.err.find("(sharding: stage2): gradients and optimizer state sharded over 2 processes"), std::string::npos) << tp.err;
  // The tensor-parallel run in f32: bf16 rounds the saved activations, and a row-parallel sum that
  // differs from one process's in its last f32 bit can round to the neighbouring bf16 value.
  auto onef = run_unillm("train " + official("pretrain_argument.json") + args +
                         " tensor_parallel_degree=1 gradient_accumulation_steps=4 bf16=false output_dir=" + s.dir +
                         "/onef");
  ASSERT_EQ(onef.exit_code, 0) << onef.err;
  // PaddleNLP's context parallelism (sep_parallel_degree): the test loss from split forwards too.
  auto cp = testing::run_shell("OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader "
                               "timeout -k 5 240 mpirun --oversubscribe --bind-to none -np 2 " +
                               std::string(UNILLM_BINARY_DIR) + "/unillm train " + official("pretrain_argument.json") +
                               args + " tensor_parallel_degree=1 sep_parallel_degree=2 gradient_accumulation_steps=4 "
                               "bf16=false output_dir=" + s.dir + "/cp2");
  ASSERT_EQ(cp.exit_code, 0) << cp.err;
  EXPECT_NE(cp.err.find("context parallel: 2 processes"), std::string::npos) << cp.err;
  for (const auto& [ref, run] :
       std::vector<std::pair<std::string, std::string>>{{"one", "two"}, {"onef", "tp2"}, {"onef", "cp2"}}) {
    const auto a = lines_with(s.dir + "/" + ref, "loss"), b = lines_with(s.dir + "/" + run, "loss");
    ASSERT_EQ(a.size(), 3u);
    ASSERT_EQ(b.size(), a.size()) << run;
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_NEAR(a[i]["loss"].get<double>(), b[i]["loss"].get<double>(), 1e-4) << run << " " << i;
      EXPECT_NEAR(a[i]["grad_norm"].get<double>(), b[i]["grad_norm"].get<double>(),
                  1e-5 * a[i]["grad_norm"].get<double>()) << run << " " << i;
    }
    const double ta = read_json(s.dir + "/" + ref + "/test_results.json")["test_loss"];
    const double tb = read_json(s.dir + "/" + run + "/test_results.json")["test_loss"];
    EXPECT_NEAR(ta, tb, 1e-5 * ta) << run;
  }
}

// do_predict: the loss over split's third part equals the evaluation loss of the same documents
// given as raw text (data::split_ranges, the documented rule) to the trained model.
TEST(PaddleNlpLlama, PretrainDoPredictScoresTheTestPartOfSplit) {
  const PretrainSetup s = pretrain_setup("paddle_predict");
  auto r = run_pretrain(s, s.dir + "/out", "max_steps=3");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto test = lines_with(s.dir + "/out", "test_loss");
  ASSERT_EQ(test.size(), 1u);
  const double test_loss = read_json(s.dir + "/out/test_results.json")["test_loss"];
  EXPECT_EQ(test[0]["test_loss"].get<double>(), test_loss);
  EXPECT_EQ(read_json(s.dir + "/out/all_results.json")["test_loss"].get<double>(), test_loss);
  EXPECT_NE(r.out.find("test_loss="), std::string::npos) << r.out;

  const auto ranges = data::split_ranges({949, 50, 1}, static_cast<int64_t>(s.docs.size()));
  std::string text;
  for (int64_t d = ranges[2].first; d < ranges[2].second; ++d) text += s.docs[d] + "\n";
  write(s.dir + "/test.txt", text);
  write(s.dir + "/dataset_info.json", R"({"t": {"file_name": "test.txt"}})");
  // The trained model (output_dir) evaluated on those documents; learning_rate 0 keeps it as is.
  // bf16 as in the official file, so that both sides compute the same way (bf16 GEMMs where the
  // CPU has them).
  write(s.dir + "/eval.yaml", "model_name_or_path: " + s.dir +
                                  "/out\nstage: pt\nfinetuning_type: full\n"
                                  "do_train: true\ndataset: t\neval_dataset: t\ndataset_dir: " +
                                  s.dir +
                                  "\ncutoff_len: 64\nlearning_rate: 0\nmax_steps: "
                                  "1\nsave_strategy: 'no'\nper_device_eval_batch_size: 2\n"
                                  "do_eval: true\nbf16: true\noutput_dir: " +
                                  s.dir + "/eval\n");
  auto e = run_unillm("train " + s.dir + "/eval.yaml --quiet");
  ASSERT_EQ(e.exit_code, 0) << e.err;
  EXPECT_NEAR(read_json(s.dir + "/eval/eval_results.json")["eval_loss"].get<double>(), test_loss,
              1e-12);
}

// Killed after step 2's checkpoint and resumed: the same learning rates, losses and weights.
TEST(PaddleNlpLlama, PretrainScheduleResumesExactly) {
  const PretrainSetup s = pretrain_setup("paddle_resume");
  const std::string args =
      "max_steps=4 warmup_steps=1 decay_steps=3 save_steps=2 do_predict=false do_eval=false";
  ASSERT_EQ(run_pretrain(s, s.dir + "/a", args).exit_code, 0);
  auto killed = run_pretrain(s, s.dir + "/b", args + " --kill-after-step 2");
  EXPECT_EQ(killed.exit_code, 128 + 9) << killed.err;
  auto resumed = run_pretrain(s, s.dir + "/b", args + " resume_from_checkpoint=true");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  auto la = log_lines(s.dir + "/a"), lb = log_lines(s.dir + "/b");
  ASSERT_EQ(la.size(), 4u);
  ASSERT_EQ(lb.size(), 4u);
  for (size_t i = 0; i < 4; ++i)
    for (const char* k : {"lr", "loss", "grad_norm"})
      EXPECT_EQ(la[i][k], lb[i][k]) << "step " << i + 1 << " " << k;
  EXPECT_EQ(la[3]["lr"].get<double>(), 3e-6);  // past decay_steps: min_learning_rate
  EXPECT_EQ(slurp(s.dir + "/a/model.safetensors"), slurp(s.dir + "/b/model.safetensors"));
}

// 8 training and 4 dev records of AdvertiseGen, one step per 2 records: epochs end at steps 4,
// 8, 12.
std::string sft_data(const std::string& dir) {
  fs::create_directories(dir + "/data");
  for (auto [name, n] : {std::pair<const char*, int>{"train.json", 8}, {"dev.json", 4}}) {
    std::ifstream in(source_path("data/advertisegen/") + name);
    std::string all, line;
    for (int i = 0; i < n && std::getline(in, line); ++i) all += line + "\n";
    write(dir + "/data/" + name, all);
  }
  return dir + "/data";
}

testing::CliResult run_finetune(const std::string& file, const std::string& dir,
                                const std::string& out, const std::string& args) {
  return run_unillm(
      "train " + official(file) + " model_name_or_path=" + source_path("assets/stories260K") +
      " dataset_name_or_path=" + dir + "/data output_dir=" + out + " " + args + " --quiet");
}

// HF's best checkpoint from the evaluations of a run: evaluations at saves and the last step
// compete; a later one wins only when strictly better.
std::pair<double, int64_t> best_of(const std::vector<nlohmann::json>& evals, const std::string& key,
                                   bool greater) {
  double best = 0;
  int64_t step = -1;
  for (const auto& e : evals) {
    const double v = e[key];
    if (step < 0 || (greater ? v > best : v < best)) best = v, step = e["eval_step"];
  }
  return {best, step};
}

TEST(PaddleNlpLlama, SftArgumentsEvaluateByEpochAndKeepTheBest) {
  const std::string dir = testing::temp_dir("paddle_sft");
  sft_data(dir);
  // The official file trains 1 epoch; 3 give checkpoints at the first two epochs' ends.
  auto r = run_finetune("sft_argument.json", dir, dir + "/acc", "num_train_epochs=3");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto evals = lines_with(dir + "/acc", "eval_loss");
  ASSERT_GE(evals.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(evals[i]["eval_step"], 4 * (i + 1));
    const double acc = evals[i]["eval_accuracy"];
    EXPECT_TRUE(acc >= 0 && acc <= 1) << acc;
  }
  // The last epoch's end is a checkpoint too (PaddleNLP's on_epoch_end save).
  EXPECT_TRUE(fs::exists(dir + "/acc/checkpoint-12"));
  const auto [acc, step] = best_of({evals.begin(), evals.begin() + 3}, "eval_accuracy", true);
  auto state = read_json(dir + "/acc/trainer_state.json");
  EXPECT_EQ(state["best_metric"].get<double>(), acc);
  {  // reloaded: output_dir holds the best checkpoint's weights, evaluated again
    const std::string best = dir + "/acc/checkpoint-" + std::to_string(step);
    EXPECT_EQ(state["best_model_checkpoint"], best);
    EXPECT_EQ(slurp(dir + "/acc/model.safetensors"), slurp(best + "/model.safetensors"));
    ASSERT_EQ(evals.size(), 4u);
    EXPECT_EQ(evals[3]["eval_loss"], evals[step / 4 - 1]["eval_loss"]);
    EXPECT_EQ(read_json(dir + "/acc/eval_results.json")["eval_accuracy"].get<double>(), acc);
  }

  // metric loss (lower is better): the evaluation losses pick another winner.
  auto l = run_finetune("sft_argument.json", dir, dir + "/loss",
                        "num_train_epochs=3 metric_for_best_model=loss");
  ASSERT_EQ(l.exit_code, 0) << l.err;
  auto le = lines_with(dir + "/loss", "eval_loss");
  ASSERT_GE(le.size(), 3u);
  const auto [loss, loss_step] = best_of({le.begin(), le.begin() + 3}, "eval_loss", false);
  EXPECT_EQ(read_json(dir + "/loss/trainer_state.json")["best_metric"].get<double>(), loss);
  EXPECT_EQ(le.size(), 4u);  // the best checkpoint (possibly the last) is evaluated again
  EXPECT_EQ(read_json(dir + "/loss/trainer_state.json")["best_model_checkpoint"],
            dir + "/loss/checkpoint-" + std::to_string(loss_step));
  EXPECT_FALSE(
      le[0].contains("eval_accuracy"));  // computed only for metric_for_best_model accuracy
}

// Token accuracy over packed rows: zero_padding's samples share rows with their attention kept
// apart, so each segment is scored as its own sequence. At learning rate 0 (the same weights) the
// packed evaluation gives the unpacked one's accuracy, and its loss within rounding.
TEST(PaddleNlpLlama, AccuracyOverZeroPaddedRowsIsTheUnpaddedOnes) {
  const std::string dir = testing::temp_dir("paddle_acc_zp");
  sft_data(dir);
  const std::string still = "num_train_epochs=1 learning_rate=0 load_best_model_at_end=false";
  auto plain = run_finetune("sft_argument.json", dir, dir + "/plain", still + " zero_padding=false");
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  auto packed = run_finetune("sft_argument.json", dir, dir + "/packed", still + " zero_padding=true");
  ASSERT_EQ(packed.exit_code, 0) << packed.err;
  const auto a = lines_with(dir + "/plain", "eval_accuracy"), b = lines_with(dir + "/packed", "eval_accuracy");
  ASSERT_EQ(a.size(), 1u);
  ASSERT_EQ(b.size(), 1u);
  EXPECT_GT(a[0]["eval_accuracy"].get<double>(), 0.0);
  EXPECT_EQ(a[0]["eval_accuracy"], b[0]["eval_accuracy"]);
  EXPECT_NEAR(a[0]["eval_loss"].get<double>(), b[0]["eval_loss"].get<double>(), 1e-4);
}

// The official LoRA file (3 epochs of one step each); killed after the second epoch's checkpoint
// and resumed, it ends with the same best checkpoint and the same adapter.
TEST(PaddleNlpLlama, LoraArgumentsResumeWithTheBestCheckpoint) {
  const std::string dir = testing::temp_dir("paddle_lora");
  sft_data(dir);
  auto a = run_finetune("lora_argument.json", dir, dir + "/a", "");
  ASSERT_EQ(a.exit_code, 0) << a.err;
  EXPECT_TRUE(fs::exists(dir + "/a/adapter_model.safetensors"));
  auto killed = run_finetune("lora_argument.json", dir, dir + "/b", "--kill-after-step 2");
  EXPECT_EQ(killed.exit_code, 128 + 9) << killed.err;
  auto b = run_finetune("lora_argument.json", dir, dir + "/b", "resume_from_checkpoint=true");
  ASSERT_EQ(b.exit_code, 0) << b.err;
  auto sa = read_json(dir + "/a/trainer_state.json"), sb = read_json(dir + "/b/trainer_state.json");
  EXPECT_EQ(sa["best_metric"], sb["best_metric"]);
  EXPECT_EQ(fs::path(sa["best_model_checkpoint"].get<std::string>()).filename(),
            fs::path(sb["best_model_checkpoint"].get<std::string>()).filename());
  EXPECT_EQ(slurp(dir + "/a/adapter_model.safetensors"),
            slurp(dir + "/b/adapter_model.safetensors"));
  // save_total_limit 1 keeps the best checkpoint beside the newest.
  const std::string best = sa["best_model_checkpoint"];
  if (fs::path(best).filename() != "a") {
    EXPECT_TRUE(fs::exists(best)) << best;
  }
  EXPECT_TRUE(fs::exists(dir + "/a/checkpoint-3"));  // the last epoch's end
}

}  // namespace
}  // namespace unillm
