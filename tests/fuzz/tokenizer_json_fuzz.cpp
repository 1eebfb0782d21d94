// Fuzz target for tokenizer.json (src/io/tokenizer*.cpp): any bytes must load and pass
// check_tokenizer (encode/decode of a mixed-script string: ids in the vocab, valid UTF-8, the
// stream decoder agreeing) or throw unillm::Error. See docs/fuzzing.md.
#include <cstdint>
#include <string>

#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    auto tok = unillm::io::Tokenizer::from_tokenizer_json(
        std::string(reinterpret_cast<const char*>(data), size), "<fuzz>/tokenizer.json");
    unillm::fuzz::check_tokenizer(*tok);
  } catch (const unillm::Error& e) {
    unillm::fuzz::expect_input_error(e);
  }
  return 0;
}
