// Fuzz target for a tokenizer's Hugging Face side files (src/io/tokenizer_config.cpp): the first
// byte picks tokenizer_config / generation_config / special_tokens_map / added_tokens .json, loaded
// beside a small tokenizer.json; it must pass check_tokenizer or throw unillm::Error.
#include <unistd.h>

#include <cstdint>
#include <cstring>

#include "fuzz_support.h"

namespace {

const char* const kFiles[4] = {"tokenizer_config.json", "generation_config.json",
                               "special_tokens_map.json", "added_tokens.json"};

// The first input byte: 'c', 'g', 's', 'a' as in kFiles; any other byte: its value mod 4.
int file_index(uint8_t selector) {
  const char* kLetters = "cgsa";
  const char* hit = selector ? std::strchr(kLetters, selector) : nullptr;
  return hit ? static_cast<int>(hit - kLetters) : selector % 4;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace unillm;
  if (size < 1 || size > (1 << 16)) return 0;  // real side files are < 20 KB
  const fuzz::ScratchDir& dir = fuzz::scratch();
  static const bool tokenizer_written = [&] {
    fuzz::write_bytes(dir.file("tokenizer.json"), fuzz::tiny_tokenizer_json());
    return true;
  }();
  (void)tokenizer_written;
  const int chosen = file_index(data[0]);
  for (int i = 0; i < 4; ++i)
    if (i != chosen) ::unlink(dir.file(kFiles[i]).c_str());
  fuzz::write_bytes(dir.file(kFiles[chosen]), fuzz::bytes_of(data + 1, size - 1));
  try {
    auto tok = io::Tokenizer::load(dir.path());
    fuzz::check_tokenizer(*tok);
  } catch (const Error& e) {
    fuzz::expect_input_error(e);
  }
  return 0;
}
