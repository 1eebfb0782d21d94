// Bad input through the CLI: one line naming the file/flag, non-zero exit, never a crash.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "support/expect.h"
#include "support/run_cli.h"

namespace unillm {
namespace {

namespace fs = std::filesystem;
using testing::run_unillm;
using testing::shell_quote;
using testing::source_path;

// A copy of the bundled model that a test may damage.
std::string model_copy() {
  std::string dir = testing::temp_dir("badmodel");
  fs::copy(source_path("assets/stories260K"), dir, fs::copy_options::recursive | fs::copy_options::overwrite_existing);
  return dir;
}

void expect_one_line_error(const testing::CliResult& r, const std::string& needle) {
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("unillm: error: "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(needle), std::string::npos) << "missing '" << needle << "' in: " << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
}

std::string gen(const std::string& dir) { return "generate --model " + shell_quote(dir) + " --prompt-ids 1 --max-new-tokens 2 --quiet"; }

TEST(CliErrors, TruncatedSafetensors) {
  std::string dir = model_copy();
  fs::resize_file(dir + "/model.safetensors", 1000);
  expect_one_line_error(run_unillm(gen(dir)), "model.safetensors");
}

TEST(CliErrors, HeaderOffsetsOutOfRange) {
  std::string dir = model_copy();
  fs::resize_file(dir + "/model.safetensors", fs::file_size(dir + "/model.safetensors") - 4);
  expect_one_line_error(run_unillm(gen(dir)), "model.safetensors");
}

TEST(CliErrors, GarbageSafetensors) {
  std::string dir = model_copy();
  std::ofstream(dir + "/model.safetensors", std::ios::trunc) << "this is not a safetensors file at all";
  expect_one_line_error(run_unillm(gen(dir)), "model.safetensors");
}

TEST(CliErrors, MissingWeights) {
  std::string dir = model_copy();
  fs::remove(dir + "/model.safetensors");
  expect_one_line_error(run_unillm(gen(dir)), dir);
}

TEST(CliErrors, PickledCheckpointRefused) {
  std::string dir = model_copy();
  fs::remove(dir + "/model.safetensors");
  std::ofstream(dir + "/pytorch_model.bin") << "PK";
  expect_one_line_error(run_unillm(gen(dir)), "pytorch_model.bin");
}

TEST(CliErrors, UnknownModelType) {
  std::string dir = model_copy();
  std::string cfg = "{\"model_type\": \"gpt_neox\", \"architectures\": [\"GPTNeoXForCausalLM\"], \"vocab_size\": 512}";
  std::ofstream(dir + "/config.json", std::ios::trunc) << cfg;
  expect_one_line_error(run_unillm(gen(dir)), "gpt_neox");
}

TEST(CliErrors, WrongTensorShape) {
  std::string dir = model_copy();
  std::string cfg;
  {
    std::ifstream f(dir + "/config.json");
    cfg.assign(std::istreambuf_iterator<char>(f), {});
  }
  auto at = cfg.find("\"intermediate_size\": 172");
  ASSERT_NE(at, std::string::npos) << cfg;
  cfg.replace(at, 24, "\"intermediate_size\": 176");
  std::ofstream(dir + "/config.json", std::ios::trunc) << cfg;
  expect_one_line_error(run_unillm(gen(dir)), "gate_proj");
}

TEST(CliErrors, MalformedTokenizerJson) {
  std::string dir = model_copy();
  std::ofstream(dir + "/tokenizer.json", std::ios::trunc) << "{\"model\": {\"type\": \"BPE\", \"vocab\": ";
  expect_one_line_error(run_unillm(gen(dir)), "tokenizer.json");
}

TEST(CliErrors, InvalidUtf8FileToTokenize) {
  std::string dir = testing::temp_dir("utf8");
  std::ofstream(dir + "/bad.txt", std::ios::binary) << "abc\xff\xfe def";
  auto r = run_unillm("tokenize --model " + shell_quote(source_path("assets/stories260K")) + " --file " + dir + "/bad.txt");
  EXPECT_NE(r.exit_code, 139);  // never a crash: either ids or a one-line error
  if (r.exit_code != 0) expect_one_line_error(r, "UTF-8");
}

TEST(CliErrors, UnknownFlagSuggests) {
  auto r = run_unillm("generate --model x --temprature 0");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("did you mean --temperature"), std::string::npos) << r.err;
}

TEST(CliErrors, BadPromptIds) {
  auto r = run_unillm("generate --model " + shell_quote(source_path("assets/stories260K")) + " --prompt-ids 1,x,3 --quiet");
  expect_one_line_error(r, "prompt-ids");
  auto r2 = run_unillm("generate --model " + shell_quote(source_path("assets/stories260K")) + " --prompt-ids 1,9999 --quiet");
  expect_one_line_error(r2, "outside the vocabulary");
}

TEST(CliErrors, UnavailableDevice) {
  auto r = run_unillm("generate --model " + shell_quote(source_path("assets/stories260K")) + " --prompt-ids 1 --device cuda");
  expect_one_line_error(r, "cuda");
}

}  // namespace
}  // namespace unillm
