// Safetensors header validation and the mmap-backed reader (zero-copy CPU tensors).
#include "io/safetensors.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <new>
#include <set>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/mapped_file.h"

namespace unillm::io {

static_assert(std::endian::native == std::endian::little, "safetensors readers assume little endian");

namespace {

using nlohmann::json;

constexpr size_t kMaxHeaderBytes = size_t{100} << 20;  // the reference implementation's limit
constexpr uint64_t kMaxElements = uint64_t{1} << 56;

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw IoError("[safetensors] " + path + ": " + what);
}

[[noreturn]] void fail_tensor(const std::string& path, const std::string& name,
                              const std::string& what) {
  fail(path, "tensor '" + name + "': " + what);
}

std::string range_str(size_t a, size_t b) { return UNILLM_MSG("[", a, ", ", b, ")"); }

bool parse_dtype(const std::string& s, DType* out) {
  static const std::pair<const char*, DType> kNames[] = {
      {"F32", DType::f32}, {"F64", DType::f64}, {"BF16", DType::bf16},
      {"F16", DType::f16}, {"I32", DType::i32}, {"I64", DType::i64},
      // Quantised weights of an inference bundle (ops/quant.h): int8 codes, and packed 4-bit
      // codes stored as plain bytes.
      {"I8", DType::i8}, {"U8", DType::u4x2}};
  for (const auto& [n, t] : kNames) {
    if (s == n) {
      *out = t;
      return true;
    }
  }
  return false;
}

Shape parse_shape(const json& j, const std::string& path, const std::string& name,
                  uint64_t* numel) {
  if (!j.is_array()) fail_tensor(path, name, "\"shape\" must be an array of non-negative integers");
  Shape shape;
  uint64_t n = 1;
  for (const auto& d : j) {
    if (!d.is_number_unsigned())
      fail_tensor(path, name, "\"shape\" must be an array of non-negative integers, got " + j.dump());
    uint64_t v = d.get<uint64_t>();
    if (v > kMaxElements || (v != 0 && n > kMaxElements / v))
      fail_tensor(path, name, "shape " + j.dump() + " has too many elements");
    n *= v;
    shape.push_back(static_cast<int64_t>(v));
  }
  *numel = n;
  return shape;
}

TensorInfo parse_entry(const std::string& name, const json& e, const std::string& path) {
  if (!e.is_object()) fail_tensor(path, name, "entry must be an object, got " + std::string(e.type_name()));
  auto dt = e.find("dtype");
  auto sh = e.find("shape");
  auto off = e.find("data_offsets");
  if (dt == e.end() || !dt->is_string()) fail_tensor(path, name, "missing string \"dtype\"");
  if (sh == e.end()) fail_tensor(path, name, "missing \"shape\"");
  if (off == e.end()) fail_tensor(path, name, "missing \"data_offsets\"");
  TensorInfo ti;
  ti.name = name;
  const std::string ds = dt->get<std::string>();
  if (!parse_dtype(ds, &ti.dtype))
    fail_tensor(path, name, "unsupported dtype '" + ds + "' (unillm reads F32, F64, BF16, F16, I32, I64, I8, U8)");
  uint64_t numel = 0;
  ti.shape = parse_shape(*sh, path, name, &numel);
  if (!off->is_array() || off->size() != 2 || !(*off)[0].is_number_unsigned() ||
      !(*off)[1].is_number_unsigned())
    fail_tensor(path, name, "\"data_offsets\" must be [begin, end] (non-negative integers), got " + off->dump());
  uint64_t b = (*off)[0].get<uint64_t>(), en = (*off)[1].get<uint64_t>();
  if (b > en) fail_tensor(path, name, "data offsets " + range_str(b, en) + " are reversed");
  ti.data_begin = b;
  ti.data_end = en;
  uint64_t want = numel * dtype_size(ti.dtype);
  if (en - b != want)
    fail_tensor(path, name, UNILLM_MSG("shape ", shape_str(ti.shape), " x ", ds, " (",
                                       dtype_size(ti.dtype), " bytes) = ", want,
                                       " bytes, but data offsets ", range_str(b, en), " hold ",
                                       en - b, " bytes"));
  return ti;
}

std::map<std::string, std::string> parse_metadata(const json& m, const std::string& path) {
  if (!m.is_object()) fail(path, "\"__metadata__\" must be an object of strings");
  std::map<std::string, std::string> out;
  for (auto it = m.begin(); it != m.end(); ++it) {
    if (!it->is_string())
      fail(path, "\"__metadata__\" value of '" + it.key() + "' must be a string, got " + it->dump());
    out[it.key()] = it->get<std::string>();
  }
  return out;
}

// Tensors sorted by offset must tile the data section exactly: no overlap, no gap, no tail.
void check_coverage(std::vector<TensorInfo>& ts, size_t data_bytes, const std::string& path) {
  std::stable_sort(ts.begin(), ts.end(), [](const TensorInfo& a, const TensorInfo& b) {
    return a.data_begin != b.data_begin ? a.data_begin < b.data_begin : a.data_end < b.data_end;
  });
  for (const auto& t : ts) {
    if (t.data_end > data_bytes)
      fail_tensor(path, t.name, UNILLM_MSG("data offsets ", range_str(t.data_begin, t.data_end),
                                           " exceed the data section (", data_bytes, " bytes)"));
  }
  size_t covered = 0;
  const TensorInfo* prev = nullptr;
  for (const auto& t : ts) {
    if (t.data_begin < covered)
      fail_tensor(path, t.name, "data offsets " + range_str(t.data_begin, t.data_end) +
                                    " overlap tensor '" + prev->name + "' " +
                                    range_str(prev->data_begin, prev->data_end));
    if (t.data_begin > covered)
      fail(path, "bytes " + range_str(covered, t.data_begin) +
                     " of the data section belong to no tensor (gap before tensor '" + t.name + "')");
    covered = t.data_end;
    prev = &t;
  }
  if (covered != data_bytes)
    fail(path, UNILLM_MSG("bytes ", range_str(covered, data_bytes),
                          " of the data section belong to no tensor (tensors cover ", covered,
                          " of ", data_bytes, " bytes)"));
}

json parse_json_header(const uint8_t* p, size_t n, const std::string& path) {
  std::set<std::string> seen;
  std::string dup;
  json::parser_callback_t cb = [&](int depth, json::parse_event_t ev, json& parsed) {
    if (ev == json::parse_event_t::key && depth == 1 && dup.empty() &&
        !seen.insert(parsed.get<std::string>()).second)
      dup = parsed.get<std::string>();
    return true;
  };
  json j;
  try {
    j = json::parse(p, p + n, cb);
  } catch (const json::exception& e) {
    std::string what = e.what();
    auto colon = what.rfind(": ");
    if (colon != std::string::npos) what = what.substr(colon + 2);
    fail(path, "header is not valid JSON: " + what);
  }
  if (!dup.empty()) fail(path, "tensor '" + dup + "' appears twice in the header");
  if (!j.is_object()) fail(path, "header must be a JSON object, got " + std::string(j.type_name()));
  return j;
}

}  // namespace

const char* safetensors_dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "F32";
    case DType::f64: return "F64";
    case DType::bf16: return "BF16";
    case DType::f16: return "F16";
    case DType::i32: return "I32";
    case DType::i64: return "I64";
    case DType::i8: return "I8";
    case DType::u4x2: return "U8";
  }
  return "?";
}

SafetensorsHeader parse_safetensors_header(const uint8_t* bytes, size_t n, size_t file_size,
                                           const std::string& path) {
  if (file_size < 8)
    fail(path, UNILLM_MSG("file is ", file_size, " bytes, shorter than the 8-byte header length"));
  if (n < 8) fail(path, "need the first 8 bytes to read the header length");
  uint64_t hlen = 0;
  std::memcpy(&hlen, bytes, 8);
  if (hlen > file_size - 8)
    fail(path, UNILLM_MSG("header length ", hlen, " exceeds the file (", file_size, " bytes)"));
  if (hlen > kMaxHeaderBytes)
    fail(path, UNILLM_MSG("header length ", hlen, " exceeds the limit of ", kMaxHeaderBytes, " bytes"));
  if (n < 8 + hlen) fail(path, UNILLM_MSG("need ", 8 + hlen, " bytes to read the header, got ", n));
  SafetensorsHeader h;
  h.header_bytes = hlen;
  h.data_offset = 8 + hlen;
  h.data_bytes = file_size - h.data_offset;
  json j = parse_json_header(bytes + 8, hlen, path);
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.key() == "__metadata__") {
      h.metadata = parse_metadata(*it, path);
    } else {
      h.tensors.push_back(parse_entry(it.key(), *it, path));
    }
  }
  check_coverage(h.tensors, h.data_bytes, path);
  return h;
}

Tensor host_tensor(const Shape& shape, DType dtype) {
  size_t bytes = static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype);
  constexpr std::align_val_t kAlign{64};
  void* p = ::operator new(std::max<size_t>(bytes, 1), kAlign);
  std::shared_ptr<void> owner(p, [](void* q) { ::operator delete(q, kAlign); });
  return Tensor::from_blob(p, shape, dtype, std::move(owner));
}

std::shared_ptr<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  // Writable (private): writes through a tensor go to copy-on-write pages, never to the file.
  MappedFile m = map_file(path, "[safetensors]", /*writable=*/true);
  if (m.size < 8) parse_safetensors_header(nullptr, 0, m.size, path);  // the "shorter than 8 bytes" error
  std::shared_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = path;
  f->file_size_ = m.size;
  f->mapping_ = std::move(m.data);
  f->header_ = parse_safetensors_header(static_cast<const uint8_t*>(f->mapping_.get()), m.size, m.size, path);
  for (size_t i = 0; i < f->header_.tensors.size(); ++i) f->index_[f->header_.tensors[i].name] = i;
  return f;
}

const TensorInfo& SafetensorsFile::info(const std::string& name) const {
  auto it = index_.find(name);
  if (it == index_.end())
    fail(path_, UNILLM_MSG("no tensor '", name, "' (the file holds ", header_.tensors.size(), " tensors)"));
  return header_.tensors[it->second];
}

Tensor SafetensorsFile::tensor(const std::string& name) const {
  const TensorInfo& ti = info(name);
  char* p = static_cast<char*>(mapping_.get()) + header_.data_offset + ti.data_begin;
  if (reinterpret_cast<uintptr_t>(p) % dtype_size(ti.dtype) == 0)
    return Tensor::from_blob(p, ti.shape, ti.dtype, mapping_);
  // safetensors only pads the header to 8 bytes when the writer chose to; copy misaligned data.
  Tensor t = host_tensor(ti.shape, ti.dtype);
  if (ti.nbytes() > 0) std::memcpy(t.raw_data(), p, ti.nbytes());
  return t;
}

void SafetensorsFile::drop_pages(const std::string& name) const {
  const TensorInfo& ti = info(name);
  const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto begin = reinterpret_cast<uintptr_t>(mapping_.get()) + header_.data_offset + ti.data_begin;
  const uintptr_t first = (begin + page - 1) / page * page, last = (begin + ti.nbytes()) / page * page;
  if (last > first) ::madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED);
}

}  // namespace unillm::io
