// Fuzz target for the safetensors header parser (src/io/safetensors.cpp): any bytes, as a whole
// file, must parse into a header whose tensors tile the data section exactly, or throw
// unillm::Error. See docs/fuzzing.md.
#include <cstdint>
#include <cstdlib>

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
