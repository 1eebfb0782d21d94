// GGUF v3, llama.cpp's model container: a header (magic "GGUF", version, counts), typed metadata
// key/values, tensor infos (name, dims innermost first, ggml type, offset) and the tensor data,
// each tensor starting at a multiple of general.alignment (default 32). All little-endian.
// This header holds the value model, the reader (mmap, validating) and the streaming writer;
// gguf_quants.h holds the ggml block formats.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "io/gguf_quants.h"

namespace unillm::io {

// GGUF metadata value types (the u32 codes of the file format).
enum class GgufType : uint32_t {
  kU8 = 0,
  kI8 = 1,
  kU16 = 2,
  kI16 = 3,
  kU32 = 4,
  kI32 = 5,
  kF32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kU64 = 10,
  kI64 = 11,
  kF64 = 12,
};
const char* gguf_type_name(GgufType t);

// One metadata value. Scalars use one field by type; arrays (of one scalar type, not nested)
// fill ints (integer and bool elements; u64 kept bit for bit), floats or strings.
struct GgufValue {
  GgufType type = GgufType::kU32;
  GgufType elem = GgufType::kU8;  // kArray: the element type
  int64_t i = 0;                  // integer and bool scalars
  double f = 0;                   // f32/f64 scalars
  std::string s;                  // string scalars
  std::vector<int64_t> ints;
  std::vector<double> floats;
  std::vector<std::string> strings;

  static GgufValue u32(uint32_t v);
  static GgufValue i32(int32_t v);
  static GgufValue u64(uint64_t v);
  static GgufValue f32(float v);
  static GgufValue boolean(bool v);
  static GgufValue string(std::string v);
  static GgufValue strings_array(std::vector<std::string> v);
  static GgufValue f32_array(std::vector<double> v);
  static GgufValue i32_array(std::vector<int64_t> v);
  bool is_integer() const;  // an integer or bool scalar
  bool is_float() const;    // f32/f64 scalar
  size_t array_size() const;
};

using GgufMetadata = std::vector<std::pair<std::string, GgufValue>>;

// One tensor of a file. shape is outermost first ([rows, row_len] for a matrix: the reverse of
// GGUF's ne[]), so it reads like the PyTorch shape of the same weight.
struct GgufTensorInfo {
  std::string name;
  Shape shape;
  uint32_t type = 0;    // the raw ggml type code (may be one unillm cannot decode)
  uint64_t offset = 0;  // from the start of the data section
  uint64_t nbytes = 0;
  int64_t row_len() const { return shape.empty() ? 1 : shape.back(); }
  int64_t numel() const { return shape_numel(shape); }
};

struct GgufHeader {
  uint32_t version = 3;
  uint64_t alignment = 32;
  GgufMetadata metadata;
  std::vector<GgufTensorInfo> tensors;  // file order
  uint64_t data_offset = 0;             // where the data section starts in the file
};

// Parses and validates the header of a file of file_size bytes whose first n bytes are in
// `bytes`: magic, version 2 or 3, lengths within the file, known value types, at most 4 dims,
// a known block size for every tensor type, whole blocks per row, offsets aligned and within
// the file, no overlap. Throws IoError "[gguf] PATH: ..." naming the key or tensor.
GgufHeader parse_gguf_header(const uint8_t* bytes, size_t n, size_t file_size,
                             const std::string& path = "<memory>");

class GgufFile {
 public:
  // mmaps PATH read-only and validates its header. Throws IoError naming PATH.
  static std::shared_ptr<GgufFile> open(const std::string& path);

  const std::string& path() const { return path_; }
  const GgufHeader& header() const { return header_; }
  const std::vector<GgufTensorInfo>& tensors() const { return header_.tensors; }
  const GgufValue* find(const std::string& key) const;  // nullptr when absent
  bool has_tensor(const std::string& name) const { return index_.count(name) > 0; }
  // IoError naming the file and the tensor when absent.
  const GgufTensorInfo& tensor(const std::string& name) const;
  const uint8_t* data(const GgufTensorInfo& t) const;

  // Typed metadata reads; IoError naming the file and key when absent or of another type.
  int64_t get_int(const std::string& key) const;
  double get_float(const std::string& key) const;  // f32/f64 (or an integer)
  const std::string& get_string(const std::string& key) const;
  int64_t get_int_or(const std::string& key, int64_t fallback) const;
  double get_float_or(const std::string& key, double fallback) const;

  // The tensor dequantised to f32, shape as in tensor(name). IoError naming the file and the
  // tensor for a type unillm cannot decode.
  Tensor to_f32(const std::string& name) const;

 private:
  GgufFile() = default;
  std::string path_;
  size_t file_size_ = 0;
  std::shared_ptr<void> mapping_;
  GgufHeader header_;
  std::unordered_map<std::string, size_t> index_;
  std::unordered_map<std::string, size_t> keys_;
};

// A tensor to write: its bytes (already in `type`) are produced on demand, one tensor at a time,
// so writing a large model never holds more than one encoded tensor.
struct GgufTensorOut {
  std::string name;
  Shape shape;  // outermost first, as GgufTensorInfo
  GgmlType type = GgmlType::kF32;
  std::function<std::string()> bytes;
};

// Writes PATH atomically (temp file + rename): header, metadata (general.alignment is added
// when alignment != 32), tensor infos, then the data, each tensor padded to the alignment.
// Throws IoError naming PATH and the tensor on duplicate names, a byte count that disagrees
// with shape × type, or a write failure; PATH is untouched on failure.
void write_gguf(const std::string& path, const GgufMetadata& metadata,
                const std::vector<GgufTensorOut>& tensors, uint32_t alignment = 32);

}  // namespace unillm::io
