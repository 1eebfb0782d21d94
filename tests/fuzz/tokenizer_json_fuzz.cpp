// Fuzz target for tokenizer.json loading: any bytes, taken as a tokenizer.json, must either load
// (and then encode/decode a fixed mixed-script string without crashing, the decode being valid
// UTF-8) or throw unillm::Error; any other exception, crash or sanitizer report is a bug. With
// clang it is a libFuzzer target; with UNILLM_FUZZ_DRIVER defined (g++ builds) main() replays the
// files/directories given on the command line (seed corpus tests/fuzz/corpus/tokenizer_json/).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/tokenizer.h"

namespace {

bool valid_utf8(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    unsigned char b = static_cast<unsigned char>(s[i]);
    int n = b < 0x80 ? 1 : b >= 0xF5 ? 0 : b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : b >= 0xC2 ? 2 : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (int k = 1; k < n; ++k)
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    i += n;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string kText =
      "Hello world! <s> <|im_end|> \xE4\xBD\xA0\xE5\xA5\xBD \xF0\x9F\x99\x82 caf\x65\xCC\x81 \n\n  "
      "x";
  try {
    auto tok = unillm::io::Tokenizer::from_tokenizer_json(
        std::string(reinterpret_cast<const char*>(data), size), "<fuzz>/tokenizer.json");
    for (bool parse_special : {false, true}) {
      std::vector<int32_t> ids = tok->encode(kText, {.parse_special = parse_special});
      for (int32_t id : ids)
        if (id < 0 || id >= tok->vocab_size()) std::abort();
      std::string text = tok->decode(ids);
      if (!valid_utf8(text)) std::abort();
      unillm::io::StreamDecoder stream(*tok);
      std::string joined;
      for (int32_t id : ids) joined += stream.push(id);
      joined += stream.finish();
      if (joined != text) std::abort();
    }
  } catch (const unillm::Error&) {
  }
  return 0;
}

#ifdef UNILLM_FUZZ_DRIVER
namespace fs = std::filesystem;

int main(int argc, char** argv) {
  std::vector<fs::path> inputs;
  for (int i = 1; i < argc; ++i) {
    if (fs::is_directory(argv[i])) {
      for (const auto& e : fs::directory_iterator(argv[i]))
        if (e.is_regular_file()) inputs.push_back(e.path());
    } else {
      inputs.emplace_back(argv[i]);
    }
  }
  std::sort(inputs.begin(), inputs.end());
  for (const auto& p : inputs) {
    std::ifstream in(p, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  }
  std::printf("tokenizer_json_fuzz: replayed %zu inputs\n", inputs.size());
  return inputs.empty() ? 1 : 0;
}
#endif
