// Values that used to be accepted silently: each is a clear error naming the file and key (or the
// flag), or a documented acceptance with a warning (--threads above the cores).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>

#include "support/expect.h"
#include "support/run_cli.h"

namespace unillm {
namespace {

namespace fs = std::filesystem;
using testing::run_unillm;
using testing::slurp;
using testing::source_path;

// A copy of the bundled model whose config.json has `key`'s value replaced by value (or added).
std::string model_with_config(const std::string& file, const std::string& key, const std::string& value) {
  const std::string dir = testing::temp_dir("badvalue");
  fs::copy(source_path("assets/stories260K"), dir, fs::copy_options::recursive);
  std::string text = slurp(dir + "/" + file);
  const std::regex kv("\"" + key + "\"\\s*:\\s*[^,}\\n]+");
  if (std::regex_search(text, kv))
    text = std::regex_replace(text, kv, "\"" + key + "\": " + value);
  else
    text.insert(text.find('{') + 1, "\"" + key + "\": " + value + ", ");
  std::ofstream(dir + "/" + file, std::ios::trunc) << text;
  return dir;
}

void expect_error(const testing::CliResult& r, const std::vector<std::string>& needles) {
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("unillm: error: "), std::string::npos) << r.err;
  for (const auto& n : needles) EXPECT_NE(r.err.find(n), std::string::npos) << "missing '" << n << "' in: " << r.err;
}

std::string gen(const std::string& dir, const std::string& extra = "") {
  return "generate --model " + dir + " --prompt-ids 1 --max-new-tokens 2 --quiet " + extra;
}

TEST(ConfigValues, ConfigJsonKeysAreCheckedWithFileAndKey) {
  struct Case {
    const char* key;
    const char* value;
    const char* says;
  };
  for (const Case& c : {Case{"rms_norm_eps", "-1", "must be > 0"}, Case{"rms_norm_eps", "0", "must be > 0"},
                        Case{"rope_theta", "-5", "must be > 0"},
                        Case{"num_hidden_layers", "5.5", "must be an integer"},
                        Case{"hidden_size", "1e40", "must be an integer"},
                        Case{"max_position_embeddings", "0", "must be > 0"},
                        Case{"eos_token_id", "9999", "outside the vocabulary"},
                        Case{"bos_token_id", "-7", "outside the vocabulary"},
                        Case{"tie_word_embeddings", "\"yes\"", "must be true or false"},
                        Case{"partial_rotary_factor", "1.5", "must be in (0, 1]"}}) {
    const std::string dir = model_with_config("config.json", c.key, c.value);
    expect_error(run_unillm(gen(dir)), {dir + "/config.json", std::string("key '") + c.key + "'", c.says});
  }
}

TEST(ConfigValues, GenerationConfigIsChecked) {
  std::string dir = model_with_config("generation_config.json", "eos_token_id", "9999");
  expect_error(run_unillm(gen(dir)), {"generation_config.json", "key 'eos_token_id'", "vocab_size"});
  dir = model_with_config("generation_config.json", "temperature", "\"hot\"");
  expect_error(run_unillm(gen(dir)), {"generation_config.json", "key 'temperature'", "finite"});
}

TEST(ConfigValues, ATokenizerLargerThanTheVocabularyIsRefusedAtLoad) {
  // The bundled tokenizer has 512 ids; a model with 300 embedding rows cannot take them.
  const std::string dir = model_with_config("config.json", "vocab_size", "300");
  expect_error(run_unillm(gen(dir)), {dir + "/tokenizer.json", "key 'vocab_size' is 300", "up to 511"});
  expect_error(run_unillm("eval ppl --model " + dir + " --file " + dir + "/llama2c_sample.txt"),
               {"tokenizer.json", "vocab_size"});
}

TEST(CliValues, ThreadsArePositiveAndCappedAtTheCores) {
  const std::string model = source_path("assets/stories260K");
  expect_error(run_unillm(gen(model, "--threads 0")), {"--threads must be >= 1, got 0"});
  expect_error(run_unillm(gen(model, "--threads -3")), {"--threads"});
  auto many = run_unillm(gen(model, "--threads 100000"));
  EXPECT_EQ(many.exit_code, 0) << many.err;
  EXPECT_NE(many.err.find("warning: --threads 100000 is more than the"), std::string::npos) << many.err;
  expect_error(run_unillm("train cfg.yaml --threads 0"), {"--threads: '0' is not an integer >= 1"});
  expect_error(run_unillm("train cfg.yaml --threads x"), {"--threads: 'x'"});
  expect_error(run_unillm("train cfg.yaml --threads"), {"--threads needs a value"});
  expect_error(run_unillm("export cfg.yaml --threads 0"), {"--threads"});
}

TEST(CliValues, PromptIdsWithAnEmptyEntryAreRefused) {
  const std::string model = source_path("assets/stories260K");
  for (const char* ids : {"1,2,", "1,,2", ",1"}) {
    auto r = run_unillm("generate --model " + model + " --max-new-tokens 2 --prompt-ids " + ids);
    expect_error(r, {"--prompt-ids"});
  }
}

TEST(CliValues, ModelNamingAFileOrNothing) {
  const std::string file = source_path("assets/stories260K/config.json");
  expect_error(run_unillm(gen(file)), {"--model '" + file + "' is a file; expected a model directory"});
  expect_error(run_unillm(gen("/nonexistent/model")), {"--model '/nonexistent/model' does not exist"});
  expect_error(run_unillm("eval ppl --model " + file + " --file " + file), {"is a file"});
}

TEST(CliValues, PaddleBooleansAreStrict) {
  const std::string dir = testing::temp_dir("paddlebool");
  for (const char* v : {"\"maybe\"", "2", "null"}) {
    std::ofstream(dir + "/args.json", std::ios::trunc)
        << "{\"model_name_or_path\": \"" << source_path("assets/stories260K")
        << "\", \"dataset_name_or_path\": \"" << dir << "\", \"output_dir\": \"" << dir
        << "/out\", \"lora\": " << v << "}";
    expect_error(run_unillm("train " + dir + "/args.json"), {"args.json line 1", "'lora' must be true or false"});
  }
}

}  // namespace
}  // namespace unillm
