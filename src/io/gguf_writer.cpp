// GGUF writing (streamed through AtomicFileWriter, one encoded tensor in memory at a time) and
// the GgufValue constructors.
#include <algorithm>
#include <cstring>
#include <unordered_set>

#include "core/error.h"
#include "io/gguf.h"
#include "io/json_file.h"

namespace unillm::io {

const char* gguf_type_name(GgufType t) {
  static const char* const kNames[] = {"u8",   "i8",     "u16",   "i16", "u32", "i32", "f32",
                                       "bool", "string", "array", "u64", "i64", "f64"};
  const auto i = static_cast<uint32_t>(t);
  return i < sizeof(kNames) / sizeof(kNames[0]) ? kNames[i] : "unknown";
}

GgufValue GgufValue::u32(uint32_t v) {
  GgufValue g;
  g.type = GgufType::kU32;
  g.i = v;
  return g;
}
GgufValue GgufValue::i32(int32_t v) {
  GgufValue g;
  g.type = GgufType::kI32;
  g.i = v;
  return g;
}
GgufValue GgufValue::u64(uint64_t v) {
  GgufValue g;
  g.type = GgufType::kU64;
  g.i = static_cast<int64_t>(v);
  return g;
}
GgufValue GgufValue::f32(float v) {
  GgufValue g;
  g.type = GgufType::kF32;
  g.f = v;
  return g;
}
GgufValue GgufValue::boolean(bool v) {
  GgufValue g;
  g.type = GgufType::kBool;
  g.i = v;
  return g;
}
GgufValue GgufValue::string(std::string v) {
  GgufValue g;
  g.type = GgufType::kString;
  g.s = std::move(v);
  return g;
}
GgufValue GgufValue::strings_array(std::vector<std::string> v) {
  GgufValue g;
  g.type = GgufType::kArray;
  g.elem = GgufType::kString;
  g.strings = std::move(v);
  return g;
}
GgufValue GgufValue::f32_array(std::vector<double> v) {
  GgufValue g;
  g.type = GgufType::kArray;
  g.elem = GgufType::kF32;
  g.floats = std::move(v);
  return g;
}
GgufValue GgufValue::i32_array(std::vector<int64_t> v) {
  GgufValue g;
  g.type = GgufType::kArray;
  g.elem = GgufType::kI32;
  g.ints = std::move(v);
  return g;
}

bool GgufValue::is_integer() const {
  switch (type) {
    case GgufType::kU8:
    case GgufType::kI8:
    case GgufType::kU16:
    case GgufType::kI16:
    case GgufType::kU32:
    case GgufType::kI32:
    case GgufType::kU64:
    case GgufType::kI64:
    case GgufType::kBool:
      return true;
    default:
      return false;
  }
}

bool GgufValue::is_float() const { return type == GgufType::kF32 || type == GgufType::kF64; }

size_t GgufValue::array_size() const {
  if (type != GgufType::kArray) return 0;
  return elem == GgufType::kString                            ? strings.size()
         : (elem == GgufType::kF32 || elem == GgufType::kF64) ? floats.size()
                                                              : ints.size();
}

namespace {

// Little-endian serialisation into a byte string (the header is built in memory: it is small
// next to the tensors, even with a 150k-token vocabulary).
class Bytes {
 public:
  template <typename T>
  void put(T v) {
    char b[sizeof(T)];
    std::memcpy(b, &v, sizeof(T));
    s_.append(b, sizeof(T));
  }
  void str(const std::string& v) {
    put<uint64_t>(v.size());
    s_ += v;
  }
  void pad_to(uint64_t alignment) {
    s_.append((alignment - s_.size() % alignment) % alignment, '\0');
  }
  std::string& bytes() { return s_; }

 private:
  std::string s_;
};

void put_scalar(Bytes& b, GgufType t, int64_t i, double f, const std::string& s) {
  switch (t) {
    case GgufType::kU8:
      b.put(static_cast<uint8_t>(i));
      break;
    case GgufType::kI8:
      b.put(static_cast<int8_t>(i));
      break;
    case GgufType::kU16:
      b.put(static_cast<uint16_t>(i));
      break;
    case GgufType::kI16:
      b.put(static_cast<int16_t>(i));
      break;
    case GgufType::kU32:
      b.put(static_cast<uint32_t>(i));
      break;
    case GgufType::kI32:
      b.put(static_cast<int32_t>(i));
      break;
    case GgufType::kU64:
      b.put(static_cast<uint64_t>(i));
      break;
    case GgufType::kI64:
      b.put(i);
      break;
    case GgufType::kBool:
      b.put(static_cast<uint8_t>(i != 0));
      break;
    case GgufType::kF32:
      b.put(static_cast<float>(f));
      break;
    case GgufType::kF64:
      b.put(f);
      break;
    case GgufType::kString:
      b.str(s);
      break;
    case GgufType::kArray:
      UNILLM_THROW(IoError, "[gguf] nested arrays are not supported");
  }
}

void put_value(Bytes& b, const GgufValue& v) {
  b.put(static_cast<uint32_t>(v.type));
  if (v.type != GgufType::kArray) return put_scalar(b, v.type, v.i, v.f, v.s);
  b.put(static_cast<uint32_t>(v.elem));
  b.put<uint64_t>(v.array_size());
  static const std::string kEmpty;
  for (size_t k = 0; k < v.array_size(); ++k) {
    if (v.elem == GgufType::kString)
      put_scalar(b, v.elem, 0, 0, v.strings[k]);
    else if (v.elem == GgufType::kF32 || v.elem == GgufType::kF64)
      put_scalar(b, v.elem, 0, v.floats[k], kEmpty);
    else
      put_scalar(b, v.elem, v.ints[k], 0, kEmpty);
  }
}

size_t tensor_bytes(const GgufTensorOut& t, const std::string& path) {
  if (t.shape.empty() || t.shape.size() > 4)
    UNILLM_THROW(IoError, "[gguf] ", path, ": tensor '", t.name, "' has ", t.shape.size(),
                 " dimensions (expected 1..4)");
  const int64_t row = t.shape.back();
  try {
    return ggml_row_bytes(t.type, row) * static_cast<size_t>(shape_numel(t.shape) / row);
  } catch (const IoError& e) {
    UNILLM_THROW(IoError, "[gguf] ", path, ": tensor '", t.name, "': ", e.what());
  }
}

}  // namespace

void write_gguf(const std::string& path, const GgufMetadata& metadata,
                const std::vector<GgufTensorOut>& tensors, uint32_t alignment) {
  if (alignment == 0 || (alignment & (alignment - 1)) != 0)
    UNILLM_THROW(IoError, "[gguf] ", path, ": alignment ", alignment, " is not a power of two");
  GgufMetadata md = metadata;
  bool has_alignment = false;
  for (const auto& [k, v] : md) has_alignment |= k == "general.alignment";
  if (alignment != 32 && !has_alignment)
    md.emplace_back("general.alignment", GgufValue::u32(alignment));
  Bytes h;
  h.put<uint32_t>(0x46554747u);  // "GGUF"
  h.put<uint32_t>(3);
  h.put<uint64_t>(tensors.size());
  h.put<uint64_t>(md.size());
  for (const auto& [key, value] : md) {
    h.str(key);
    put_value(h, value);
  }
  std::unordered_set<std::string> names;
  std::vector<size_t> sizes;
  uint64_t offset = 0;
  for (const auto& t : tensors) {
    if (!names.insert(t.name).second)
      UNILLM_THROW(IoError, "[gguf] ", path, ": tensor '", t.name, "' given twice");
    sizes.push_back(tensor_bytes(t, path));
    h.str(t.name);
    h.put<uint32_t>(static_cast<uint32_t>(t.shape.size()));
    for (size_t d = t.shape.size(); d-- > 0;) h.put<uint64_t>(static_cast<uint64_t>(t.shape[d]));
    h.put<uint32_t>(static_cast<uint32_t>(t.type));
    h.put<uint64_t>(offset);
    offset += (sizes.back() + alignment - 1) / alignment * alignment;
  }
  h.pad_to(alignment);
  AtomicFileWriter out(path);
  out.write(h.bytes());
  static const char kZeros[256] = {};
  for (size_t k = 0; k < tensors.size(); ++k) {
    const std::string data = tensors[k].bytes();
    if (data.size() != sizes[k])
      UNILLM_THROW(IoError, "[gguf] ", path, ": tensor '", tensors[k].name, "' gave ", data.size(),
                   " bytes, expected ", sizes[k], " (", shape_str(tensors[k].shape), " ",
                   ggml_type_name(static_cast<uint32_t>(tensors[k].type)), ")");
    out.write(data);
    for (size_t pad = (alignment - data.size() % alignment) % alignment; pad > 0;) {
      const size_t n = std::min(pad, sizeof(kZeros));
      out.write(kZeros, n);
      pad -= n;
    }
  }
  out.commit();
}

}  // namespace unillm::io
