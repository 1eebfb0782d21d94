// Fuzz target for tokenizer.model (src/io/tokenizer_sentencepiece.cpp; a tiktoken ranks file goes
// to tokenizer_tiktoken.cpp): as the only file of a model dir it must load through Tokenizer::load
// and pass check_tokenizer, or throw unillm::Error. See docs/fuzzing.md.
#include <cstdint>

#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace unillm;
  if (size > (1 << 20)) return 0;  // the seeds are < 100 KB; big inputs only slow the search
  const fuzz::ScratchDir& dir = fuzz::scratch();
  fuzz::write_bytes(dir.file("tokenizer.model"), fuzz::bytes_of(data, size));
  try {
    auto tok = io::Tokenizer::load(dir.path());
    fuzz::check_tokenizer(*tok);
  } catch (const Error& e) {
    fuzz::expect_input_error(e);
  }
  return 0;
}
