// Opening a checkpoint directory: single file, sharded index, or a clear refusal.
#include "io/checkpoint.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>

#include "core/error.h"
#include "io/json_file.h"
#include "io/llama2c.h"

namespace unillm::io {
namespace fs = std::filesystem;

namespace {

[[noreturn]] void fail(const std::string& where, const std::string& what) {
  throw IoError("[checkpoint] " + where + ": " + what);
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// torch.save writes a zip archive (PK\3\4); older torch and plain pickles start with 0x80 PROTO.
bool is_pickle_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  unsigned char b[4] = {0, 0, 0, 0};
  in.read(reinterpret_cast<char*>(b), 4);
  if (in.gcount() < 2) return false;
  return (b[0] == 'P' && b[1] == 'K' && b[2] == 3 && b[3] == 4) || b[0] == 0x80;
}

std::string pickle_hint(const std::string& dir, const std::string& file) {
  if (ends_with(file, ".index.json") || file.find("-of-") != std::string::npos)
    return "python3 -c \"from transformers import AutoModelForCausalLM as M; "
           "M.from_pretrained('" + dir + "', torch_dtype='auto').save_pretrained('" + dir +
           "-safetensors', safe_serialization=True)\"";
  std::string src = (fs::path(dir) / file).string();
  std::string dst = (fs::path(dir) / "model.safetensors").string();
  return "python3 -c \"import torch; from safetensors.torch import save_file; "
         "sd = torch.load('" + src + "', map_location='cpu', weights_only=True); "
         "save_file({k: v.contiguous().clone() for k, v in sd.items()}, '" + dst +
         "', metadata={'format': 'pt'})\"";
}

// Explains what DIR holds when it has no safetensors checkpoint, and throws.
[[noreturn]] void refuse(const std::string& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  for (const auto& f : names) {
    bool pickled_name = f == "pytorch_model.bin.index.json" || ends_with(f, ".bin") ||
                        ends_with(f, ".pt") || ends_with(f, ".pth");
    if (!pickled_name) continue;
    fs::path p = fs::path(dir) / f;
    if (ends_with(f, ".index.json") || is_pickle_file(p))
      fail(dir, "holds a pickled PyTorch checkpoint (" + f +
                    "); only safetensors are loaded (unpickling can run arbitrary code) — convert "
                    "it with: " + pickle_hint(dir, f));
    if (looks_like_llama2c_checkpoint(p.string()))
      fail(dir, "holds a llama2.c checkpoint (" + f + "), not a Hugging Face one — convert it with: "
                    "unillm convert llama2c --checkpoint " + p.string() +
                    " --tokenizer TOKENIZER.bin --out OUT_DIR");
  }
  std::string found;
  for (size_t i = 0; i < names.size() && i < 8; ++i) found += (i ? ", " : "") + names[i];
  if (names.size() > 8) found += UNILLM_MSG(", ... (", names.size(), " entries)");
  fail(dir, "no model.safetensors or model.safetensors.index.json" +
                (names.empty() ? std::string(" (the directory is empty)") : " (found: " + found + ")"));
}

}  // namespace

CheckpointReader CheckpointReader::open(const std::string& dir) {
  CheckpointReader r;
  r.dir_ = dir;
  std::error_code ec;
  if (!fs::exists(dir, ec)) fail(dir, "no such file or directory");
  auto add_single = [&](const std::string& path) {
    r.files_.push_back(SafetensorsFile::open(path));
    for (const auto& t : r.files_[0]->tensors()) {
      r.where_[t.name] = 0;
      r.order_.push_back(t.name);
    }
  };
  if (!fs::is_directory(dir, ec)) {
    if (!ends_with(dir, ".safetensors") && is_pickle_file(dir))
      fail(dir, "is a pickled PyTorch checkpoint; only safetensors are loaded — convert it with: " +
                    pickle_hint(fs::path(dir).parent_path().string(), fs::path(dir).filename().string()));
    add_single(dir);
    return r;
  }
  fs::path single = fs::path(dir) / "model.safetensors";
  fs::path index = fs::path(dir) / "model.safetensors.index.json";
  if (fs::exists(single, ec)) {
    add_single(single.string());
    return r;
  }
  if (!fs::exists(index, ec)) refuse(dir);
  const std::string ipath = index.string();
  nlohmann::json j = read_json_file(ipath);
  auto wm = j.find("weight_map");
  if (!j.is_object() || wm == j.end() || !wm->is_object())
    fail(ipath, "\"weight_map\" is missing or not an object");
  std::map<std::string, std::vector<std::string>> by_shard;
  for (auto it = wm->begin(); it != wm->end(); ++it) {
    if (!it->is_string()) fail(ipath, "weight_map['" + it.key() + "'] must be a file name string");
    std::string shard = it->get<std::string>();
    fs::path sp(shard);
    if (shard.empty() || sp.is_absolute() || shard.find("..") != std::string::npos)
      fail(ipath, "weight_map['" + it.key() + "'] = '" + shard + "' is not a file inside the directory");
    by_shard[shard].push_back(it.key());
  }
  for (const auto& [shard, names] : by_shard) {
    fs::path sp = fs::path(dir) / shard;
    if (!fs::exists(sp, ec))
      fail(ipath, UNILLM_MSG("shard '", shard, "' (holding '", names[0], "'",
                             names.size() > 1 ? UNILLM_MSG(" and ", names.size() - 1, " more") : "",
                             ") does not exist in ", dir));
    auto f = SafetensorsFile::open(sp.string());
    for (const auto& n : names)
      if (!f->has(n)) fail(ipath, "maps tensor '" + n + "' to shard '" + shard + "', which does not hold it");
    std::set<std::string> mine(names.begin(), names.end());
    for (const auto& t : f->tensors()) {
      if (!mine.count(t.name)) continue;  // HF ignores tensors the index does not name
      r.where_[t.name] = r.files_.size();
      r.order_.push_back(t.name);
    }
    r.files_.push_back(std::move(f));
  }
  return r;
}

std::vector<std::string> CheckpointReader::names() const { return order_; }

std::vector<std::string> CheckpointReader::files() const {
  std::vector<std::string> out;
  for (const auto& f : files_) out.push_back(f->path());
  return out;
}

const SafetensorsFile& CheckpointReader::file_of(const std::string& name) const {
  auto it = where_.find(name);
  if (it == where_.end())
    fail(dir_, UNILLM_MSG("no tensor '", name, "' in the checkpoint (", order_.size(), " tensors)"));
  return *files_[it->second];
}

TensorInfo CheckpointReader::info(const std::string& name) const { return file_of(name).info(name); }

Tensor CheckpointReader::get(const std::string& name) const { return file_of(name).tensor(name); }
void CheckpointReader::drop_pages(const std::string& name) const { file_of(name).drop_pages(name); }

}  // namespace unillm::io
