// llama.cpp's tokenizer test vectors (46 strings each, ids from HF
// encode(add_special_tokens=False)) for Llama 2 (SentencePiece .model), Llama 3 (tiktoken file) and
// Qwen2 (vocab.json + merges.txt).
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "io/tokenizer.h"
#include "support/expect.h"

namespace unillm::io {
namespace {

using testing::slurp;

struct Vectors {
  std::vector<std::string> texts;
  std::vector<std::vector<int32_t>> ids;
};

Vectors read_vectors(const std::string& name) {
  std::string base =
      testing::source_path("tests/data/llama.cpp-vocab-tests/ggml-vocab-" + name + ".gguf");
  Vectors v;
  std::string inp = slurp(base + ".inp");
  const std::string sep = "\n__ggml_vocab_test__\n";
  for (size_t pos = 0, hit; (hit = inp.find(sep, pos)) != std::string::npos; pos = hit + sep.size())
    v.texts.push_back(inp.substr(pos, hit - pos));
  std::istringstream out(slurp(base + ".out"));
  for (std::string line; std::getline(out, line);) {
    std::istringstream ls(line);
    std::vector<int32_t> ids;
    for (int32_t id; ls >> id;) ids.push_back(id);
    v.ids.push_back(ids);
  }
  return v;
}

void check_vectors(const std::string& dir, const std::string& name) {
  auto tok = Tokenizer::load(testing::source_path(dir));
  Vectors v = read_vectors(name);
  ASSERT_EQ(v.texts.size(), 46u);
  ASSERT_EQ(v.ids.size(), 46u);
  int ok = 0;
  for (size_t i = 0; i < v.texts.size(); ++i) {
    std::vector<int32_t> got = tok->encode(v.texts[i], {.add_special_tokens = false});
    if (got == v.ids[i]) {
      ++ok;
    } else {
      std::ostringstream g;
      for (int32_t id : got) g << ' ' << id;
      ADD_FAILURE() << name << " #" << i << " '" << v.texts[i] << "'\n got:" << g.str();
    }
  }
  std::printf("[ vectors ] %s: %d/%zu\n", name.c_str(), ok, v.texts.size());
  EXPECT_EQ(ok, 46);
}

TEST(TokenizerVectors, LlamaSpm) { check_vectors("tests/data/llama2-tokenizer", "llama-spm"); }
TEST(TokenizerVectors, LlamaBpe) { check_vectors("tests/data/llama3-tokenizer", "llama-bpe"); }
TEST(TokenizerVectors, Qwen2) { check_vectors("tests/data/qwen2-tokenizer", "qwen2"); }

}  // namespace
}  // namespace unillm::io
