// `unillm train` with tokens the tokenizer lacks (LLaMA-Factory's template fix, resize_vocab,
// add_special_tokens) and LoRA modules_to_save (resize_vocab, additional_target), end to end on
// the bundled stories260K model (Llama 2 tokenizer, tied embeddings) with the chatml template.
// transformers / PEFT read the results the same way: tests/reference/vocab_check.py.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "io/safetensors.h"
#include "support/expect.h"
#include "support/run_cli.h"
#include "train_log_util.h"

namespace unillm {
namespace {

namespace fs = std::filesystem;
using testing::run_unillm;
using testing::slurp;
using testing::source_path;

// 16 rows, 4 per step: three epochs; the last epoch's mean loss is below the first's.
void expect_loss_falls(const std::vector<double>& l) {
  ASSERT_EQ(l.size(), 12u);
  EXPECT_LT(l[8] + l[9] + l[10] + l[11], l[0] + l[1] + l[2] + l[3]);
}

std::string chatml_config(const std::string& dir, const std::string& name,
                          const std::string& extra) {
  const std::string path = dir + "/" + name + ".yaml";
  std::ofstream(path) << "model_name_or_path: " << source_path("assets/stories260K") << "\n"
                      << "stage: sft\ndo_train: true\ndataset: alpaca_en_demo\ndataset_dir: "
                      << source_path("data")
                      << "\ntemplate: chatml\ncutoff_len: 96\nmax_samples: 16\n"
                      << "output_dir: " << dir << "/" << name << "\n"
                      << "per_device_train_batch_size: 4\nlearning_rate: 5.0e-3\n"
                      << "max_steps: 12\nlogging_steps: 1\nsave_steps: 6\nseed: 3\n"
                      << extra;
  return path;
}

nlohmann::json json_of(const std::string& path) { return nlohmann::json::parse(slurp(path)); }

void expect_chats(const std::string& model, const std::string& dir) {
  std::ofstream(dir + "/in.txt") << "Tell me a story.\n";
  auto c =
      run_unillm("chat --model " + model + " --template chatml --temperature 0 --max-new-tokens 8",
                 dir + "/in.txt");
  ASSERT_EQ(c.exit_code, 0) << c.err;
  EXPECT_EQ(c.out.rfind("Assistant: ", 0), 0u) << c.out;
}

TEST(Vocab, MissingTemplateTokenNamesTheKey) {
  const std::string dir = testing::temp_dir("vocab_err");
  auto r = run_unillm("train " + chatml_config(dir, "e", "finetuning_type: full\n") + " --quiet");
  EXPECT_NE(r.exit_code, 0);
  // The EOS is encoded and must fit; the other stop word (<|im_start|>) is left out instead.
  EXPECT_NE(r.err.find("<|im_end|> (id 512) added"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("set resize_vocab: true"), std::string::npos) << r.err;
}

TEST(Vocab, FullTrainingGrowsTheVocabularyAndSavesTheTokens) {
  const std::string dir = testing::temp_dir("vocab_full");
  auto r =
      run_unillm("train " + chatml_config(dir, "f", "finetuning_type: full\nresize_vocab: true\n") +
                 " learning_rate=2.0e-3 --quiet");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  expect_loss_falls(testing::train_losses(dir + "/f"));
  EXPECT_EQ(json_of(dir + "/f/config.json").at("vocab_size"), 576);  // 514 padded to 64
  EXPECT_EQ(json_of(dir + "/f/tokenizer_config.json").at("eos_token"), "<|im_end|>");
  auto ids = run_unillm("tokenize --model " + dir +
                        "/f --text '<|im_start|>hi<|im_end|>' --parse-special --no-special-tokens");
  ASSERT_EQ(ids.exit_code, 0) << ids.err;
  const auto v = nlohmann::json::parse(ids.out);
  EXPECT_EQ(v.front(), 513);
  EXPECT_EQ(v.back(), 512);
  expect_chats(dir + "/f", dir);
}

TEST(Vocab, LoraTrainsEmbeddingsAsModulesToSaveAndResumes) {
  const std::string dir = testing::temp_dir("vocab_lora");
  const std::string extra = "finetuning_type: lora\nlora_rank: 4\nadd_special_tokens: <|tool|>\n";
  auto a = run_unillm("train " + chatml_config(dir, "a", extra) + " --quiet");
  ASSERT_EQ(a.exit_code, 0) << a.err;
  const auto cfg = json_of(dir + "/a/adapter_config.json");
  EXPECT_EQ(cfg.at("modules_to_save"), nlohmann::json({"embed_tokens", "lm_head"}));
  auto f = io::SafetensorsFile::open(dir + "/a/adapter_model.safetensors");
  ASSERT_TRUE(f->has("base_model.model.model.embed_tokens.weight"));
  ASSERT_TRUE(f->has("base_model.model.lm_head.weight"));  // untied, as PEFT copies each module
  EXPECT_EQ(f->info("base_model.model.lm_head.weight").shape, (Shape{576, 64}));
  EXPECT_EQ(json_of(dir + "/a/tokenizer.json").at("added_tokens").back().at("content"),
            "<|im_start|>");
  const auto losses = testing::train_losses(dir + "/a");
  expect_loss_falls(losses);
  // kill -9 after step 6's checkpoint, resume: the same losses and adapter bytes.
  const std::string b = chatml_config(dir, "b", extra);
  EXPECT_EQ(run_unillm("train " + b + " --quiet --kill-after-step 6").exit_code, 128 + 9);
  auto resumed = run_unillm("train " + b + " resume_from_checkpoint=true --quiet");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_EQ(testing::train_losses(dir + "/b"), losses);
  EXPECT_EQ(slurp(dir + "/a/adapter_model.safetensors"),
            slurp(dir + "/b/adapter_model.safetensors"));
  // export merges: a full model with the grown, untied vocabulary and the run's tokenizer.
  std::ofstream(dir + "/merge.yaml")
      << "model_name_or_path: " << source_path("assets/stories260K")
      << "\nadapter_name_or_path: " << dir << "/a\ntemplate: chatml\n"
      << "finetuning_type: lora\nexport_dir: " << dir << "/merged\n";
  auto e = run_unillm("export " + dir + "/merge.yaml");
  ASSERT_EQ(e.exit_code, 0) << e.err;
  const auto merged = json_of(dir + "/merged/config.json");
  EXPECT_EQ(merged.at("vocab_size"), 576);
  EXPECT_EQ(merged.at("tie_word_embeddings"), false);
  auto ppl_merged = run_unillm("eval ppl --model " + dir + "/merged --file " +
                               source_path("assets/stories260K/llama2c_sample.txt") + " --json");
  auto ppl_adapter =
      run_unillm("eval ppl --model " + source_path("assets/stories260K") + " --adapter " + dir +
                 "/a --file " + source_path("assets/stories260K/llama2c_sample.txt") + " --json");
  ASSERT_EQ(ppl_merged.exit_code, 0) << ppl_merged.err;
  ASSERT_EQ(ppl_adapter.exit_code, 0) << ppl_adapter.err;
  EXPECT_NEAR(nlohmann::json::parse(ppl_merged.out).at("nll").get<double>(),
              nlohmann::json::parse(ppl_adapter.out).at("nll").get<double>(), 1e-5);
  expect_chats(dir + "/merged", dir);
  // chat with the adapter itself: it grew the vocabulary, so its run's tokenizer (with chatml's
  // tokens) is used, and greedy replies equal the merged model's.
  const std::string chat = " --template chatml --temperature 0 --max-new-tokens 8";
  auto with_adapter = run_unillm("chat --model " + source_path("assets/stories260K") + " --adapter " + dir + "/a" + chat,
                                 dir + "/in.txt");
  ASSERT_EQ(with_adapter.exit_code, 0) << with_adapter.err;
  EXPECT_NE(with_adapter.err.find("using its tokenizer"), std::string::npos) << with_adapter.err;
  auto with_merged = run_unillm("chat --model " + dir + "/merged" + chat, dir + "/in.txt");
  ASSERT_EQ(with_merged.exit_code, 0) << with_merged.err;
  EXPECT_EQ(with_adapter.out, with_merged.out);
}

TEST(Vocab, AdditionalTargetSavesTheNamedModules) {
  const std::string dir = testing::temp_dir("vocab_target");
  auto r = run_unillm("train " +
                      chatml_config(dir, "n",
                                    "finetuning_type: lora\nlora_rank: 4\nresize_vocab: true\n"
                                    "additional_target: norm\n") +
                      " --quiet");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(json_of(dir + "/n/adapter_config.json").at("modules_to_save"),
            nlohmann::json({"norm"}));
  auto f = io::SafetensorsFile::open(dir + "/n/adapter_model.safetensors");
  EXPECT_TRUE(f->has("base_model.model.model.norm.weight"));
  EXPECT_TRUE(f->has("base_model.model.model.layers.4.post_attention_layernorm.weight"));
  // Not listed, but stored: the vocabulary grew (PEFT's save_embedding_layers="auto").
  EXPECT_TRUE(f->has("base_model.model.model.embed_tokens.weight"));
  auto ppl =
      run_unillm("eval ppl --model " + source_path("assets/stories260K") + " --adapter " + dir +
                 "/n --file " + source_path("assets/stories260K/llama2c_sample.txt") + " --json");
  EXPECT_EQ(ppl.exit_code, 0) << ppl.err;
  auto bad = run_unillm("train " +
                        chatml_config(dir, "q",
                                      "finetuning_type: lora\nresize_vocab: true\n"
                                      "additional_target: q_proj\n") +
                        " --quiet");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("only embed_tokens, lm_head and norm"), std::string::npos) << bad.err;
}

}  // namespace
}  // namespace unillm
