// Fuzz target for llama2.c tokenizer.bin (src/io/llama2c_tokenizer.cpp): it must read consistently
// (also with expected_vocab) and convert to a tokenizer.json that loads, or throw unillm::Error.
// See docs/fuzzing.md.
#include <cstdint>

#include "fuzz_support.h"
#include "io/llama2c_tokenizer.h"

namespace {

using namespace unillm;

// Reading with a wrong expected_vocab must fail with an unillm::Error.
void expect_count_mismatch(const std::string& path, int64_t n) {
  try {
    io::read_llama2c_tokenizer(path, n);
  } catch (const Error& e) {
    fuzz::expect_input_error(e);
    return;
  }
  fuzz::require(false, "a wrong expected_vocab is refused");
}

void check_conversion(const io::Llama2cTokenizer& t, const std::string& path) {
  nlohmann::ordered_json j;
  try {
    j = io::llama2c_tokenizer_json(t, path);
  } catch (const Error& e) {  // invalid UTF-8 or a repeated piece
    fuzz::expect_input_error(e);
    return;
  }
  // What the converter accepts, the tokenizer.json loader must accept too.
  auto tok = io::Tokenizer::from_tokenizer_json(j.dump(), path + " (converted)");
  fuzz::require(tok->vocab_size() == static_cast<int32_t>(t.pieces.size()),
                "converted vocab_size == records");
  fuzz::check_tokenizer(*tok);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // Merge generation is quadratic in a piece's length (as HF's); real pieces are < 100 bytes.
  if (size > (1 << 16)) return 0;
  const std::string path = fuzz::scratch().file("tokenizer.bin");
  fuzz::write_bytes(path, fuzz::bytes_of(data, size));
  io::Llama2cTokenizer t;
  try {
    t = io::read_llama2c_tokenizer(path);
  } catch (const Error& e) {
    fuzz::expect_input_error(e);
    return 0;
  }
  const int64_t n = static_cast<int64_t>(t.pieces.size());
  fuzz::require(n >= 3 && t.scores.size() == t.pieces.size(), "records >= 3, one score each");
  for (const auto& p : t.pieces)
    fuzz::require(!p.empty() && static_cast<int64_t>(p.size()) <= t.max_token_length,
                  "piece lengths in 1..max_token_length");
  io::Llama2cTokenizer again = io::read_llama2c_tokenizer(path, n);
  fuzz::require(again.pieces == t.pieces, "expected_vocab = records reads the same");
  expect_count_mismatch(path, n - 1);
  expect_count_mismatch(path, n + 1);
  check_conversion(t, path);
  return 0;
}
