// do_predict with predict_with_generate (LLaMA-Factory's examples/extras/nlg_eval): predictions
// through the batched engine equal one-at-a-time greedy chat replies, labels are the datasets'
// responses, and predict_results.json holds the metrics `unillm eval similarity` computes from the
// written file (itself checked against jieba + nltk + rouge-chinese by metrics_check.py).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "support/expect.h"
#include "support/run_cli.h"

namespace unillm {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::run_unillm;
using testing::run_unillm_in;
using testing::slurp;
using testing::source_path;

bool has(const std::string& text, const std::string& needle) { return text.find(needle) != std::string::npos; }

std::vector<json> read_lines(const std::string& path) {
  std::vector<json> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) out.push_back(json::parse(line));
  return out;
}

TEST(Predict, NlgEvalExampleScoresGreedyPredictions) {
  const std::string dir = testing::temp_dir("predict");
  auto t = run_unillm_in(source_path(""), "train examples/train_lora/stories260K_lora_sft.yaml output_dir=" + dir +
                                              "/a max_steps=3 eval_strategy=no val_size=0 eval_on_start=false "
                                              "plot_loss=false --quiet");
  ASSERT_EQ(t.exit_code, 0) << t.err;
  // The vendored example with only paths, sample count and decoding changed.
  auto p = run_unillm_in(source_path(""), "train examples/extras/nlg_eval/stories260K_lora_predict.yaml "
                                          "adapter_name_or_path=" + dir + "/a output_dir=" + dir +
                                              "/pred max_samples=3 do_sample=false max_new_tokens=24");
  ASSERT_EQ(p.exit_code, 0) << p.err;
  EXPECT_FALSE(has(p.err, "nothing to do")) << p.err;
  const auto lines = read_lines(dir + "/pred/generated_predictions.jsonl");
  ASSERT_EQ(lines.size(), 6u);  // 3 of identity + 3 of alpaca_en_demo
  // Keys in LLaMA-Factory's order, as json.dumps writes them.
  EXPECT_EQ(slurp(dir + "/pred/generated_predictions.jsonl").rfind("{\"prompt\": ", 0), 0u);
  const json demo = json::parse(slurp(source_path("data/alpaca_en_demo.json")));
  for (int i = 0; i < 3; ++i) {
    // The label is the response's ids decoded: alpaca's assistant slots are content, EOS (dropped
    // with the special tokens) and "\n\n", which SentencePiece encodes on its own, with a space.
    EXPECT_EQ(lines[3 + i]["label"], demo[i]["output"].get<std::string>() + " \n\n") << i;
    // A greedy chat reply to the same instruction, alone in its engine, is the same text.
    std::string user = demo[i]["instruction"].get<std::string>();
    if (!demo[i]["input"].get<std::string>().empty()) user += "\n" + demo[i]["input"].get<std::string>();
    if (user.find('\n') != std::string::npos) continue;  // chat reads one line per turn
    std::ofstream(dir + "/in.txt") << user << "\n";
    auto c = run_unillm("chat --model " + source_path("assets/stories260K") + " --adapter " + dir +
                            "/a --template alpaca --temperature 0 --max-new-tokens 24",
                        dir + "/in.txt");
    ASSERT_EQ(c.exit_code, 0) << c.err;
    EXPECT_EQ(c.out, "Assistant: " + lines[3 + i]["predict"].get<std::string>() + "\n") << i;
  }
  // predict_results.json: `eval similarity` of the written file, plus HF's speed metrics.
  const json r = json::parse(slurp(dir + "/pred/predict_results.json"));
  auto e = run_unillm("eval similarity --predictions " + dir + "/pred/generated_predictions.jsonl");
  ASSERT_EQ(e.exit_code, 0) << e.err;
  const json m = json::parse(e.out);
  for (const char* k : {"predict_bleu-4", "predict_rouge-1", "predict_rouge-2", "predict_rouge-l"})
    EXPECT_EQ(r[k], m[k]) << k;
  EXPECT_TRUE(r.contains("predict_runtime"));
  EXPECT_TRUE(r.contains("predict_samples_per_second"));
  EXPECT_EQ(json::parse(slurp(dir + "/pred/all_results.json"))["predict_bleu-4"], r["predict_bleu-4"]);
}

TEST(Predict, AfterTrainingScoresTheTrainedAdapter) {
  const std::string dir = testing::temp_dir("predicttrain");
  auto t = run_unillm_in(source_path(""), "train examples/train_lora/stories260K_lora_sft.yaml output_dir=" + dir +
                                              "/a max_steps=2 eval_strategy=no val_size=0 eval_on_start=false "
                                              "plot_loss=false do_predict=true predict_with_generate=true "
                                              "eval_dataset=alpaca_en_demo max_samples=2 do_sample=false "
                                              "max_new_tokens=8 --quiet");
  ASSERT_EQ(t.exit_code, 0) << t.err;
  EXPECT_TRUE(fs::exists(dir + "/a/adapter_model.safetensors"));
  EXPECT_EQ(read_lines(dir + "/a/generated_predictions.jsonl").size(), 2u);
  const json all = json::parse(slurp(dir + "/a/all_results.json"));
  EXPECT_TRUE(all.contains("train_loss")) << all.dump();
  EXPECT_TRUE(all.contains("predict_rouge-l")) << all.dump();
}

TEST(Predict, RefusedCombinationsSayWhy) {
  const std::string dir = testing::temp_dir("predictbad");
  std::ofstream(dir + "/a.yaml") << "model_name_or_path: " << source_path("assets/stories260K")
                                 << "\nstage: sft\ndo_predict: true\neval_dataset: alpaca_en_demo\n";
  auto a = run_unillm("train " + dir + "/a.yaml");
  EXPECT_EQ(a.exit_code, 1);
  EXPECT_TRUE(has(a.err, "needs predict_with_generate: true")) << a.err;
  std::ofstream(dir + "/b.yaml") << "model_name_or_path: " << source_path("assets/stories260K")
                                 << "\nstage: sft\ndo_predict: true\npredict_with_generate: true\n"
                                    "eval_strategy: steps\nstage: dpo\n";
  auto b = run_unillm("train " + dir + "/b.yaml");
  EXPECT_EQ(b.exit_code, 1);
  EXPECT_TRUE(has(b.err, "appears twice")) << b.err;
  EXPECT_TRUE(has(b.err, "generating during evaluation is not implemented")) << b.err;
  EXPECT_TRUE(has(b.err, "needs eval_dataset or val_size")) << b.err;
}

}  // namespace
}  // namespace unillm
