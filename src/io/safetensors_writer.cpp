// Safetensors writers: header building, padding, streaming tensor bytes through an atomic file,
// and HF-style sharding with an index.
#include "io/safetensors_writer.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <regex>
#include <set>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/json_file.h"
#include "io/safetensors.h"

namespace unillm::io {
namespace fs = std::filesystem;

namespace {

Tensor host_contiguous(const Tensor& t) {
  Tensor c = t.device().is_cpu() ? t : t.to(Device{});
  return c.contiguous();
}

void check_names(const std::string& path, const std::vector<std::string>& names) {
  std::set<std::string> seen;
  for (const std::string& name : names) {
    if (name.empty()) UNILLM_THROW(IoError, "[safetensors] ", path, ": a tensor has an empty name");
    if (name == "__metadata__")
      UNILLM_THROW(IoError, "[safetensors] ", path, ": '__metadata__' is reserved, not a tensor name");
    if (!seen.insert(name).second)
      UNILLM_THROW(IoError, "[safetensors] ", path, ": tensor '", name, "' is given twice");
  }
}

void check_tensors(const std::string& path, const NamedTensors& tensors) {
  std::vector<std::string> names;
  for (const auto& [name, t] : tensors) {
    if (!t.defined()) UNILLM_THROW(IoError, "[safetensors] ", path, ": tensor '", name, "' is undefined");
    names.push_back(name);
  }
  check_names(path, names);
}

size_t spec_bytes(const TensorSpec& s) {
  size_t n = dtype_size(s.dtype);
  for (int64_t d : s.shape) n *= static_cast<size_t>(d);
  return n;
}

// The order tensors are laid out in: those whose byte size is a multiple of 64 first, then the
// rest (each group in the given order), so that with the data section starting 64-aligned every
// large tensor does too. A kernel streaming a weight from the mmapped file then reads whole
// cache lines: misaligned by 8 bytes (the old layout), a stories110M int4 bundle decoded 10-15 %
// slower than the same codes in freshly allocated memory.
std::vector<size_t> layout_order(const std::vector<TensorSpec>& specs) {
  std::vector<size_t> order;
  for (int pass = 0; pass < 2; ++pass)
    for (size_t i = 0; i < specs.size(); ++i)
      if ((spec_bytes(specs[i]) % 64 == 0 && spec_bytes(specs[i]) > 0) == (pass == 0)) order.push_back(i);
  return order;
}

std::vector<TensorSpec> specs_of(const NamedTensors& tensors) {
  std::vector<TensorSpec> out;
  for (const auto& [name, t] : tensors) out.push_back({name, t.dtype(), t.shape()});
  return out;
}

std::string build_header(const std::vector<TensorSpec>& specs, const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json h = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json m = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata) m[k] = v;
    h["__metadata__"] = m;
  }
  size_t offset = 0;
  for (size_t i : layout_order(specs)) {
    const TensorSpec& s = specs[i];
    size_t n = spec_bytes(s);
    h[s.name] = {{"dtype", safetensors_dtype_name(s.dtype)},
                 {"shape", s.shape},
                 {"data_offsets", {offset, offset + n}}};
    offset += n;
  }
  std::string s = h.dump();
  s.append((64 - (8 + s.size()) % 64) % 64, ' ');  // the data section starts 64-aligned (after the 8-byte length)
  return s;
}

size_t total_bytes(const NamedTensors& tensors) {
  size_t n = 0;
  for (const auto& nt : tensors) n += nt.second.nbytes();
  return n;
}

// Removes files of an earlier save that the new layout does not contain.
void remove_stale(const fs::path& dir, const std::set<std::string>& keep) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    std::string f = e.path().filename().string();
    if (is_weight_file_name(f) && !keep.count(f)) fs::remove(e.path(), ec);
  }
}

}  // namespace

void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata, const BeforeRead& before_read) {
  check_tensors(path, tensors);
  save_safetensors_streamed(
      path, specs_of(tensors),
      [&tensors, &before_read](size_t i) {
        if (before_read) before_read(tensors[i].second);
        return tensors[i].second;
      },
      metadata);
}

namespace {

// The file of specs: the header, then each tensor's bytes, written by write_tensor(i, writer) in
// the layout order; committed only when all are written.
void write_file(const std::string& path, const std::vector<TensorSpec>& specs,
                const std::map<std::string, std::string>& metadata,
                const std::function<void(size_t, AtomicFileWriter&)>& write_tensor) {
  std::vector<std::string> names;
  for (const TensorSpec& s : specs) names.push_back(s.name);
  check_names(path, names);
  std::string header = build_header(specs, metadata);
  uint64_t hlen = header.size();
  AtomicFileWriter w(path);
  w.write(&hlen, 8);
  w.write(header);
  for (size_t i : layout_order(specs)) write_tensor(i, w);
  w.commit();
}

}  // namespace

void save_safetensors_streamed(const std::string& path, const std::vector<TensorSpec>& specs,
                               const std::function<Tensor(size_t)>& fill,
                               const std::map<std::string, std::string>& metadata) {
  write_file(path, specs, metadata, [&](size_t i, AtomicFileWriter& w) {
    Tensor c = host_contiguous(fill(i));
    if (c.dtype() != specs[i].dtype || c.shape() != specs[i].shape)
      UNILLM_THROW(IoError, "[safetensors] ", path, ": tensor '", specs[i].name, "' was filled as ",
                   dtype_name(c.dtype()), " ", shape_str(c.shape()), ", its header says ",
                   dtype_name(specs[i].dtype), " ", shape_str(specs[i].shape));
    if (c.nbytes() > 0) w.write(c.raw_data(), c.nbytes());
  });
}

void save_safetensors_parts(const std::string& path, const std::vector<TensorSpec>& specs, int64_t part_elements,
                            const std::function<Tensor(size_t, int64_t, int64_t)>& fill_part,
                            const std::map<std::string, std::string>& metadata) {
  if (part_elements <= 0) UNILLM_THROW(IoError, "[safetensors] ", path, ": part_elements must be > 0");
  write_file(path, specs, metadata, [&](size_t i, AtomicFileWriter& w) {
    const auto numel = static_cast<int64_t>(spec_bytes(specs[i]) / dtype_size(specs[i].dtype));
    for (int64_t lo = 0; lo < numel; lo += part_elements) {
      const int64_t hi = std::min(numel, lo + part_elements);
      Tensor c = host_contiguous(fill_part(i, lo, hi));
      if (c.dtype() != specs[i].dtype || c.numel() != hi - lo)
        UNILLM_THROW(IoError, "[safetensors] ", path, ": elements [", lo, ", ", hi, ") of tensor '", specs[i].name,
                     "' were filled as ", dtype_name(c.dtype()), " ", shape_str(c.shape()), ", expected ",
                     dtype_name(specs[i].dtype), " [", hi - lo, "]");
      w.write(c.raw_data(), c.nbytes());
    }
  });
}

bool is_weight_file_name(const std::string& f) {
  static const std::regex kShard(R"(model-\d{5}-of-\d{5}\.safetensors)");
  return f == "model.safetensors" || f == "model.safetensors.index.json" || std::regex_match(f, kShard);
}

std::string shard_file_name(size_t index, size_t count) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "model-%05zu-of-%05zu.safetensors", index, count);
  return buf;
}

void save_sharded(const std::string& dir, const NamedTensors& tensors, size_t max_shard_bytes,
                  const BeforeRead& before_read) {
  if (max_shard_bytes == 0) UNILLM_THROW(IoError, "[safetensors] ", dir, ": max_shard_bytes must be > 0");
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (!fs::is_directory(dir)) UNILLM_THROW(IoError, "[safetensors] ", dir, ": cannot create the directory");
  check_tensors(dir, tensors);
  size_t total = total_bytes(tensors);
  if (total <= max_shard_bytes) {
    save_safetensors((fs::path(dir) / "model.safetensors").string(), tensors, {{"format", "pt"}}, before_read);
    remove_stale(dir, {"model.safetensors"});
    return;
  }
  std::vector<NamedTensors> shards(1);
  size_t cur = 0;
  for (const auto& nt : tensors) {
    size_t n = nt.second.nbytes();
    if (!shards.back().empty() && cur + n > max_shard_bytes) {
      shards.emplace_back();
      cur = 0;
    }
    shards.back().push_back(nt);
    cur += n;
  }
  std::set<std::string> keep = {"model.safetensors.index.json"};
  nlohmann::json weight_map = nlohmann::json::object();
  for (size_t i = 0; i < shards.size(); ++i) {
    std::string file = shard_file_name(i + 1, shards.size());
    save_safetensors((fs::path(dir) / file).string(), shards[i], {{"format", "pt"}}, before_read);
    keep.insert(file);
    for (const auto& nt : shards[i]) weight_map[nt.first] = file;
  }
  // A stale single file would win over the index (HF prefers model.safetensors): drop it first.
  fs::remove(fs::path(dir) / "model.safetensors", ec);
  nlohmann::json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
  write_file_atomic((fs::path(dir) / "model.safetensors.index.json").string(), index.dump(2) + "\n");
  remove_stale(dir, keep);
}

}  // namespace unillm::io
