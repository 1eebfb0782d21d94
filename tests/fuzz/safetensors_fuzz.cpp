// Fuzz target for the safetensors header parser: any bytes, taken as a whole file, must either
// parse into a header whose tensors tile the data section exactly, or throw unillm::Error; any
// other exception, crash or sanitizer report is a bug. With clang it is a libFuzzer target; with
// UNILLM_FUZZ_DRIVER defined (g++ builds) main() replays the files/directories given on the command
// line (the seed corpus tests/fuzz/corpus/safetensors/: small valid and corrupt files).
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
#include "io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    auto h = unillm::io::parse_safetensors_header(data, size, size, "<fuzz>");
    size_t covered = 0;
    for (const auto& t : h.tensors) {
      size_t want = static_cast<size_t>(unillm::shape_numel(t.shape)) * unillm::dtype_size(t.dtype);
      if (t.data_begin != covered || t.data_end - t.data_begin != want) std::abort();
      covered = t.data_end;
    }
    if (covered != h.data_bytes || h.data_offset + h.data_bytes != size) std::abort();
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
  std::printf("replayed %zu inputs\n", inputs.size());
  return inputs.empty() ? 1 : 0;  // an empty corpus means the test is not testing anything
}
#endif
