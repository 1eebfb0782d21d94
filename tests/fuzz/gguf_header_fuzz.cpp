// Fuzz target for the GGUF header parser (src/io/gguf_reader.cpp, `unillm convert gguf`): any
// bytes, as a whole file, either parse into a header whose tensors lie aligned, inside the file
// and without overlap (after an aligned data section, when there are tensors), or throw
// unillm::Error. See docs/fuzzing.md.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <utility>
#include <vector>

#include "core/error.h"
#include "io/gguf.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const auto h = unillm::io::parse_gguf_header(data, size, size, "<fuzz>");
    if (h.alignment == 0) std::abort();
    if (h.tensors.empty()) return 0;  // no data section: the file may end right after the metadata
    if (h.data_offset > size || h.data_offset % h.alignment != 0) std::abort();
    std::vector<std::pair<uint64_t, uint64_t>> spans;
    for (const auto& t : h.tensors) {
      if (t.offset % h.alignment != 0 || t.nbytes > size - h.data_offset ||
          t.offset > size - h.data_offset - t.nbytes)
        std::abort();
      spans.emplace_back(t.offset, t.offset + t.nbytes);
    }
    std::sort(spans.begin(), spans.end());
    for (size_t i = 1; i < spans.size(); ++i)
      if (spans[i].first < spans[i - 1].second) std::abort();
  } catch (const unillm::Error&) {
  }
  return 0;
}
