// GGUF reading: the validating header parser (works on bytes in memory, for tests and fuzzers)
// and GgufFile (mmap, typed metadata lookups, dequantisation to f32).

#include <algorithm>
#include <cstring>
#include <limits>
#include <unordered_set>

#include "core/error.h"
#include "io/gguf.h"
#include "io/mapped_file.h"
#include "io/safetensors.h"  // host_tensor

namespace unillm::io {

namespace {

// Caps that keep a corrupt count from allocating without bound before the bytes run out.
constexpr uint64_t kMaxString = uint64_t{1} << 30;
constexpr int kMaxDims = 4;

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw IoError("[gguf] " + path + ": " + what);
}

// A bounds-checked little-endian cursor over the header bytes.
class Cursor {
 public:
  Cursor(const uint8_t* p, size_t n, size_t file_size, const std::string& path)
      : p_(p), n_(n), file_size_(file_size), path_(path) {}
  size_t pos() const { return pos_; }
  void need(uint64_t bytes, const std::string& what) {
    if (bytes > n_ - pos_) {
      if (n_ < file_size_ && bytes <= file_size_ - pos_)
        fail(path_, "header is larger than the bytes given");
      fail(path_, UNILLM_MSG("file ends inside ", what, " (at byte ", pos_, " of ", file_size_,
                             "); truncated?"));
    }
  }
  template <typename T>
  T read(const std::string& what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, p_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::string string(const std::string& what) {
    const auto len = read<uint64_t>(what);
    if (len > kMaxString) fail(path_, UNILLM_MSG(what, ": string length ", len, " is implausible"));
    need(len, what);
    std::string s(reinterpret_cast<const char*>(p_ + pos_), static_cast<size_t>(len));
    pos_ += static_cast<size_t>(len);
    return s;
  }

 private:
  const uint8_t* p_;
  size_t n_, file_size_, pos_ = 0;
  const std::string& path_;
};

size_t scalar_size(GgufType t) {
  switch (t) {
    case GgufType::kU8:
    case GgufType::kI8:
    case GgufType::kBool:
      return 1;
    case GgufType::kU16:
    case GgufType::kI16:
      return 2;
    case GgufType::kU32:
    case GgufType::kI32:
    case GgufType::kF32:
      return 4;
    case GgufType::kU64:
    case GgufType::kI64:
    case GgufType::kF64:
      return 8;
    default:
      return 0;  // string, array
  }
}

// Reads one scalar of type t into v (integers into v.i, floats into v.f, strings into v.s).
void read_scalar(Cursor& c, GgufType t, GgufValue& v, const std::string& what) {
  switch (t) {
    case GgufType::kU8:
      v.i = c.read<uint8_t>(what);
      break;
    case GgufType::kI8:
      v.i = c.read<int8_t>(what);
      break;
    case GgufType::kU16:
      v.i = c.read<uint16_t>(what);
      break;
    case GgufType::kI16:
      v.i = c.read<int16_t>(what);
      break;
    case GgufType::kU32:
      v.i = c.read<uint32_t>(what);
      break;
    case GgufType::kI32:
      v.i = c.read<int32_t>(what);
      break;
    case GgufType::kU64:
      v.i = static_cast<int64_t>(c.read<uint64_t>(what));
      break;
    case GgufType::kI64:
      v.i = c.read<int64_t>(what);
      break;
    case GgufType::kBool:
      v.i = c.read<uint8_t>(what) != 0;
      break;
    case GgufType::kF32:
      v.f = c.read<float>(what);
      break;
    case GgufType::kF64:
      v.f = c.read<double>(what);
      break;
    case GgufType::kString:
      v.s = c.string(what);
      break;
    default:
      break;
  }
}

GgufValue read_value(Cursor& c, uint32_t raw, const std::string& key, const std::string& path) {
  if (raw > static_cast<uint32_t>(GgufType::kF64))
    fail(path, UNILLM_MSG("key '", key, "': unknown value type ", raw));
  GgufValue v;
  v.type = static_cast<GgufType>(raw);
  const std::string what = "the value of '" + key + "'";
  if (v.type != GgufType::kArray) {
    read_scalar(c, v.type, v, what);
    return v;
  }
  const auto elem = c.read<uint32_t>(what);
  if (elem > static_cast<uint32_t>(GgufType::kF64) ||
      elem == static_cast<uint32_t>(GgufType::kArray))
    fail(path, UNILLM_MSG("key '", key, "': array element type ", elem, " is not supported"));
  v.elem = static_cast<GgufType>(elem);
  const auto count = c.read<uint64_t>(what);
  // Every element takes at least one byte (a string at least 8): a count beyond the remaining
  // file is corrupt, and checking it first keeps reserve() bounded.
  const size_t min_size = v.elem == GgufType::kString ? 8 : scalar_size(v.elem);
  if (count > kMaxString)
    fail(path, UNILLM_MSG("key '", key, "': array of ", count, " elements is implausible"));
  c.need(count * min_size, what);
  GgufValue e;
  for (uint64_t k = 0; k < count; ++k) {
    read_scalar(c, v.elem, e, what);
    if (v.elem == GgufType::kString)
      v.strings.push_back(std::move(e.s));
    else if (v.elem == GgufType::kF32 || v.elem == GgufType::kF64)
      v.floats.push_back(e.f);
    else
      v.ints.push_back(e.i);
  }
  return v;
}

GgufTensorInfo read_tensor_info(Cursor& c, size_t index, const std::string& path) {
  GgufTensorInfo t;
  t.name = c.string(UNILLM_MSG("the name of tensor ", index));
  const std::string what = "the info of tensor '" + t.name + "'";
  const auto n_dims = c.read<uint32_t>(what);
  if (n_dims < 1 || n_dims > kMaxDims)
    fail(path, UNILLM_MSG("tensor '", t.name, "': ", n_dims, " dimensions (expected 1..4)"));
  t.shape.assign(n_dims, 0);
  uint64_t numel = 1;
  for (uint32_t d = 0; d < n_dims; ++d) {
    const auto ne = c.read<uint64_t>(what);
    if (ne == 0 || ne > (uint64_t{1} << 40) || numel > (uint64_t{1} << 42) / ne)
      fail(path, UNILLM_MSG("tensor '", t.name, "': dimension ", d, " of ", ne, " is implausible"));
    numel *= ne;
    t.shape[n_dims - 1 - d] = static_cast<int64_t>(ne);  // GGUF lists ne[0] (innermost) first
  }
  t.type = c.read<uint32_t>(what);
  t.offset = c.read<uint64_t>(what);
  const GgmlTypeInfo* ti = ggml_type_info(t.type);
  if (ti == nullptr) fail(path, UNILLM_MSG("tensor '", t.name, "': unknown ggml type ", t.type));
  if (t.row_len() % ti->block != 0)
    fail(path, UNILLM_MSG("tensor '", t.name, "': rows of ", t.row_len(),
                          " elements are not whole ", ti->name, " blocks of ", ti->block));
  t.nbytes = numel / static_cast<uint64_t>(ti->block) * ti->block_bytes;
  return t;
}

// Offsets aligned, tensors inside the data section and not overlapping.
void check_layout(const GgufHeader& h, size_t file_size, const std::string& path) {
  const uint64_t data_bytes = file_size - h.data_offset;
  std::vector<std::pair<uint64_t, const GgufTensorInfo*>> spans;
  for (const auto& t : h.tensors) {
    if (t.offset % h.alignment != 0)
      fail(path, UNILLM_MSG("tensor '", t.name, "': offset ", t.offset,
                            " is not a multiple of the alignment ", h.alignment));
    if (t.offset > data_bytes || t.nbytes > data_bytes - t.offset)
      fail(path,
           UNILLM_MSG("tensor '", t.name, "': its ", t.nbytes, " bytes at offset ", t.offset,
                      " run past the end of the file (", data_bytes, " data bytes); truncated?"));
    spans.emplace_back(t.offset, &t);
  }
  std::sort(spans.begin(), spans.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  for (size_t k = 1; k < spans.size(); ++k)
    if (spans[k - 1].first + spans[k - 1].second->nbytes > spans[k].first)
      fail(path, UNILLM_MSG("tensors '", spans[k - 1].second->name, "' and '",
                            spans[k].second->name, "' overlap"));
}

}  // namespace

GgufHeader parse_gguf_header(const uint8_t* bytes, size_t n, size_t file_size,
                             const std::string& path) {
  if (file_size < 24)
    fail(path, UNILLM_MSG("file is ", file_size, " bytes, shorter than a GGUF header"));
  Cursor c(bytes, std::min(n, file_size), file_size, path);
  if (c.read<uint32_t>("the magic") != 0x46554747u)  // "GGUF" little-endian
    fail(path, "not a GGUF file (magic is not \"GGUF\")");
  GgufHeader h;
  h.version = c.read<uint32_t>("the version");
  if (h.version != 2 && h.version != 3)
    fail(path, UNILLM_MSG("GGUF version ", h.version, " is not supported (2 and 3 are)"));
  const auto n_tensors = c.read<uint64_t>("the tensor count");
  const auto n_kv = c.read<uint64_t>("the metadata count");
  if (n_tensors > file_size / 8 || n_kv > file_size / 8)
    fail(path,
         UNILLM_MSG("counts of ", n_tensors, " tensors and ", n_kv, " keys do not fit the file"));
  std::unordered_set<std::string> keys;
  for (uint64_t k = 0; k < n_kv; ++k) {
    std::string key = c.string(UNILLM_MSG("the name of key ", k));
    if (!keys.insert(key).second) fail(path, "key '" + key + "' appears twice");
    const auto type = c.read<uint32_t>("the type of '" + key + "'");
    GgufValue v = read_value(c, type, key, path);
    if (key == "general.alignment") {
      if (!v.is_integer() || v.i <= 0 || (v.i & (v.i - 1)) != 0)
        fail(path, "general.alignment must be a power of two");
      h.alignment = static_cast<uint64_t>(v.i);
    }
    h.metadata.emplace_back(std::move(key), std::move(v));
  }
  std::unordered_set<std::string> names;
  for (uint64_t k = 0; k < n_tensors; ++k) {
    h.tensors.push_back(read_tensor_info(c, static_cast<size_t>(k), path));
    if (!names.insert(h.tensors.back().name).second)
      fail(path, "tensor '" + h.tensors.back().name + "' appears twice");
  }
  h.data_offset = (c.pos() + h.alignment - 1) / h.alignment * h.alignment;
  if (h.data_offset > file_size && !h.tensors.empty())
    fail(path, "file ends before the tensor data; truncated?");
  h.data_offset = std::min<uint64_t>(h.data_offset, file_size);
  check_layout(h, file_size, path);
  return h;
}

std::shared_ptr<GgufFile> GgufFile::open(const std::string& path) {
  MappedFile m = map_file(path, "[gguf]");
  const size_t size = m.size;
  std::shared_ptr<GgufFile> f(new GgufFile());
  f->path_ = path;
  f->file_size_ = size;
  f->mapping_ = std::move(m.data);
  f->header_ = parse_gguf_header(static_cast<const uint8_t*>(f->mapping_.get()), size, size, path);
  for (size_t i = 0; i < f->header_.tensors.size(); ++i) f->index_[f->header_.tensors[i].name] = i;
  for (size_t i = 0; i < f->header_.metadata.size(); ++i)
    f->keys_[f->header_.metadata[i].first] = i;
  return f;
}

const GgufValue* GgufFile::find(const std::string& key) const {
  auto it = keys_.find(key);
  return it == keys_.end() ? nullptr : &header_.metadata[it->second].second;
}

const GgufTensorInfo& GgufFile::tensor(const std::string& name) const {
  auto it = index_.find(name);
  if (it == index_.end()) fail(path_, "no tensor '" + name + "'");
  return header_.tensors[it->second];
}

const uint8_t* GgufFile::data(const GgufTensorInfo& t) const {
  return static_cast<const uint8_t*>(mapping_.get()) + header_.data_offset + t.offset;
}

int64_t GgufFile::get_int(const std::string& key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) fail(path_, "key '" + key + "' is missing");
  if (!v->is_integer())
    fail(path_,
         UNILLM_MSG("key '", key, "' is ", gguf_type_name(v->type), ", expected an integer"));
  return v->i;
}

double GgufFile::get_float(const std::string& key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) fail(path_, "key '" + key + "' is missing");
  if (v->is_float()) return v->f;
  if (v->is_integer()) return static_cast<double>(v->i);
  fail(path_, UNILLM_MSG("key '", key, "' is ", gguf_type_name(v->type), ", expected a number"));
}

const std::string& GgufFile::get_string(const std::string& key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) fail(path_, "key '" + key + "' is missing");
  if (v->type != GgufType::kString)
    fail(path_, UNILLM_MSG("key '", key, "' is ", gguf_type_name(v->type), ", expected a string"));
  return v->s;
}

int64_t GgufFile::get_int_or(const std::string& key, int64_t fallback) const {
  return find(key) ? get_int(key) : fallback;
}

double GgufFile::get_float_or(const std::string& key, double fallback) const {
  return find(key) ? get_float(key) : fallback;
}

Tensor GgufFile::to_f32(const std::string& name) const {
  const GgufTensorInfo& t = tensor(name);
  const GgmlTypeInfo* ti = ggml_type_info(t.type);
  if (!ti->readable)
    fail(
        path_,
        UNILLM_MSG(
            "tensor '", name, "' has type ", ti->name,
            ", which unillm cannot read (readable: F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K)"));
  Tensor out = host_tensor(t.shape, DType::f32);
  const int64_t row = t.row_len(), rows = t.numel() / row;
  const size_t row_bytes = ggml_row_bytes(static_cast<GgmlType>(t.type), row);
  const uint8_t* src = data(t);
  float* dst = out.data<float>();
  for (int64_t r = 0; r < rows; ++r)
    dequantize_row(t.type, src + r * row_bytes, dst + r * row, row);
  return out;
}

}  // namespace unillm::io
