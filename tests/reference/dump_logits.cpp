// The unillm half of gguf_llama_cpp_check.py (run by it, not by ctest directly):
//   dump_logits MODEL_DIR IDS OUT
// IDS is a comma-separated list of token ids; OUT receives the f32 logits of every position,
// [T, V] row-major, raw little-endian (CausalLM::logits_all: one sequence, no sampling).
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "models/causal_lm.h"
#include "support/expect.h"

int main(int argc, char** argv) {
  using namespace unillm;
  if (argc != 4) {
    std::fprintf(stderr, "usage: dump_logits MODEL_DIR IDS OUT\n");
    return 2;
  }
  try {
    unillm::testing::init_cpu();
    std::vector<int32_t> ids;
    const std::string list = argv[2];
    for (size_t at = 0; at < list.size();) {
      const size_t comma = std::min(list.find(',', at), list.size());
      ids.push_back(static_cast<int32_t>(std::stol(list.substr(at, comma - at))));
      at = comma + 1;
    }
    auto model = models::load_causal_lm(argv[1]);
    const std::vector<float> v = model->logits_all(ids).contiguous().to_float_vector();
    std::ofstream(argv[3], std::ios::binary)
        .write(reinterpret_cast<const char*>(v.data()),
               static_cast<std::streamsize>(v.size() * sizeof(float)));
    std::printf("%zu x %zu\n", ids.size(), v.size() / ids.size());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dump_logits: %s\n", e.what());
    return 1;
  }
  return 0;
}
