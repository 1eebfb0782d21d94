// Safetensors reading: a validating header parser (usable on bytes in memory, for the fuzzer) and
// SafetensorsFile, which mmaps a file and hands out zero-copy CPU tensors viewing the mapping.
// Format: u64 little-endian header length N, N bytes of JSON, then the data section.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/tensor.h"

namespace unillm::io {

// One tensor of a safetensors file. data_begin/data_end are byte offsets into the data section
// (the bytes after the 8-byte length and the JSON header), as in the file's "data_offsets".
struct TensorInfo {
  std::string name;
  DType dtype = DType::f32;
  Shape shape;
  size_t data_begin = 0;
  size_t data_end = 0;
  size_t nbytes() const { return data_end - data_begin; }
};

struct SafetensorsHeader {
  size_t header_bytes = 0;  // N: length of the JSON header
  size_t data_offset = 0;   // 8 + N: where the data section starts in the file
  size_t data_bytes = 0;    // file_size - data_offset
  std::vector<TensorInfo> tensors;  // sorted by data_begin (the order of the data in the file)
  std::map<std::string, std::string> metadata;  // "__metadata__"
};

// Safetensors spellings ("F32", "BF16", ...) of the dtypes unillm stores.
const char* safetensors_dtype_name(DType t);

// Parses and validates the header. `bytes` holds the first n bytes of a file of file_size bytes
// (n >= 8 + N is needed; the data itself is not read). Checks: length prefix, header within the
// file, JSON object, known dtypes, shape x dtype size == byte range, offsets within the data
// section, no overlap and no gap, the data section fully covered. Throws IoError
// "[safetensors] PATH: tensor 'x': ..." (PATH = `path`).
SafetensorsHeader parse_safetensors_header(const uint8_t* bytes, size_t n, size_t file_size,
                                           const std::string& path = "<memory>");

class SafetensorsFile {
 public:
  // mmaps PATH (private copy-on-write mapping: writing through a tensor never touches the file)
  // and validates its header. Throws IoError naming PATH.
  static std::shared_ptr<SafetensorsFile> open(const std::string& path);

  const std::string& path() const { return path_; }
  const std::vector<TensorInfo>& tensors() const { return header_.tensors; }
  bool has(const std::string& name) const { return index_.count(name) > 0; }
  // Throws IoError naming the file and the tensor when absent.
  const TensorInfo& info(const std::string& name) const;
  // A CPU tensor viewing the mapping (zero-copy; the mapping stays alive while any tensor does).
  // When the data is not aligned for its dtype, returns an aligned copy instead.
  Tensor tensor(const std::string& name) const;
  // Says the caller has copied the tensor out: the pages wholly inside its bytes leave the
  // process's resident set (madvise DONTNEED; touching them again re-reads the file). Loading a
  // model into its own storage calls this per tensor, so the peak RSS of a load is the model plus
  // one tensor, not the model plus the whole file.
  void drop_pages(const std::string& name) const;
  const std::map<std::string, std::string>& metadata() const { return header_.metadata; }
  size_t file_size() const { return file_size_; }

 private:
  SafetensorsFile() = default;
  std::string path_;
  size_t file_size_ = 0;
  std::shared_ptr<void> mapping_;  // base of the mmap; munmap on last release
  SafetensorsHeader header_;
  std::unordered_map<std::string, size_t> index_;  // name -> position in header_.tensors
};

}  // namespace unillm::io

namespace unillm::io {
// A CPU tensor in 64-byte-aligned host memory that does not go through the backend registry
// (io is used before any backend is registered: converters, fuzzers). Contents uninitialised.
Tensor host_tensor(const Shape& shape, DType dtype);
}  // namespace unillm::io
