// `unillm expand-layers`: LLaMA-Pro's block expansion (LLaMA-Factory's scripts/llama_pro.py).
// After the last layer of each of N equal groups comes a copy of it whose o_proj and down_proj
// are zero, so the attention and MLP add nothing to the residual stream and the expanded model
// computes exactly what the original did; freeze tuning with use_llama_pro then trains the copies.
// Works on the checkpoint's tensors as stored (any dtype, zero-copy for the copied ones).
#include <cctype>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "core/error.h"
#include "io/checkpoint.h"
#include "io/json_file.h"
#include "io/safetensors_writer.h"
#include "models/save.h"

namespace unillm::cli {

namespace {

namespace fs = std::filesystem;

// A tensor name split around its layer index: prefix "model.layers.", index, rest
// ".mlp.up_proj.weight".
struct LayerName {
  std::string prefix, rest;
  int64_t index = -1;  // -1: outside every layer
};

LayerName split_layer_name(const std::string& n) {
  for (size_t pos = n.rfind("layers."); pos != std::string::npos;
       pos = pos == 0 ? std::string::npos : n.rfind("layers.", pos - 1)) {
    if (pos > 0 && n[pos - 1] != '.') continue;
    size_t j = pos + 7;
    while (j < n.size() && std::isdigit(static_cast<unsigned char>(n[j]))) ++j;
    if (j > pos + 7 && j < n.size() && n[j] == '.' && j - pos - 7 < 10)
      return {n.substr(0, pos + 7), n.substr(j), std::stoll(n.substr(pos + 7, j - pos - 7))};
  }
  return {};
}

struct ExpandOptions {
  std::string model, output;
  int64_t num_expand = 0;
  bool force = false;
};

Tensor zeros_like_host(const Tensor& t) {
  Tensor z = io::host_tensor(t.shape(), t.dtype());
  std::memset(z.raw_data(), 0, z.nbytes());
  return z;
}

// config.json with num_hidden_layers (and a per-layer layer_types list) expanded.
nlohmann::ordered_json expanded_config(const std::string& path, int64_t num_expand,
                                       int64_t* layers) {
  nlohmann::ordered_json cfg = io::read_ordered_json_file(path);
  if (!cfg.contains("num_hidden_layers") || !cfg["num_hidden_layers"].is_number_integer() ||
      cfg["num_hidden_layers"].get<int64_t>() <= 0)
    UNILLM_THROW(ConfigError, "[expand-layers] ", path, ": no positive integer num_hidden_layers");
  const int64_t L = cfg["num_hidden_layers"].get<int64_t>();
  if (L % num_expand != 0)  // scripts/llama_pro.py's rule
    UNILLM_THROW(ConfigError, "[expand-layers] `num_layers` ", L,
                 " should be divisible by `num_expand` ", num_expand, " (", path, ")");
  cfg["num_hidden_layers"] = L + num_expand;
  const int64_t split = L / num_expand;
  if (cfg.contains("layer_types") && cfg["layer_types"].is_array() &&
      static_cast<int64_t>(cfg["layer_types"].size()) == L) {
    nlohmann::ordered_json types = nlohmann::ordered_json::array();
    for (int64_t i = 0; i < L; ++i) {
      types.push_back(cfg["layer_types"][static_cast<size_t>(i)]);
      if ((i + 1) % split == 0) types.push_back(cfg["layer_types"][static_cast<size_t>(i)]);
    }
    cfg["layer_types"] = types;
  }
  *layers = L;
  return cfg;
}

// The expanded model's tensors: layers in order, each group's last followed by its copy, then
// the tensors outside the layers (scripts/llama_pro.py's order).
io::NamedTensors expanded_tensors(const io::CheckpointReader& r, int64_t L, int64_t num_expand) {
  std::vector<std::vector<std::pair<LayerName, std::string>>> by_layer(static_cast<size_t>(L));
  std::vector<std::string> others;
  for (const auto& name : r.names()) {
    LayerName ln = split_layer_name(name);
    if (ln.index < 0) {
      others.push_back(name);
      continue;
    }
    if (ln.index >= L)
      UNILLM_THROW(IoError, "[expand-layers] ", r.dir(), ": tensor ", name, " names layer ",
                   ln.index, " but config.json has num_hidden_layers ", L);
    by_layer[static_cast<size_t>(ln.index)].push_back({ln, name});
  }
  const int64_t split = L / num_expand;
  io::NamedTensors out;
  int64_t next = 0;
  for (int64_t i = 0; i < L; ++i) {
    const auto& tensors = by_layer[static_cast<size_t>(i)];
    if (tensors.empty())
      UNILLM_THROW(IoError, "[expand-layers] ", r.dir(), ": no tensor of layer ", i);
    for (const auto& [ln, name] : tensors)
      out.push_back({ln.prefix + std::to_string(next) + ln.rest, r.get(name)});
    ++next;
    if ((i + 1) % split != 0) continue;
    for (const auto& [ln, name] : tensors) {
      const bool zero =
          name.find("o_proj") != std::string::npos || name.find("down_proj") != std::string::npos;
      const Tensor t = r.get(name);
      out.push_back({ln.prefix + std::to_string(next) + ln.rest, zero ? zeros_like_host(t) : t});
    }
    std::printf("layer %lld: a copy of layer %lld with o_proj and down_proj zeroed\n",
                static_cast<long long>(next), static_cast<long long>(i));
    ++next;
  }
  for (const auto& name : others) out.push_back({name, r.get(name)});
  return out;
}

void expand_layers(const ExpandOptions& o) {
  if (o.num_expand <= 0)
    UNILLM_THROW(ConfigError, "[expand-layers] --num-expand must be positive, not ", o.num_expand);
  std::error_code ec;
  if (fs::exists(o.output) && fs::equivalent(o.output, o.model, ec))
    UNILLM_THROW(ConfigError, "[expand-layers] --output is the model dir ", o.model,
                 "; give a new dir");
  if (fs::exists(o.output) && !fs::is_empty(o.output, ec) && !o.force)
    UNILLM_THROW(IoError, "[expand-layers] ", o.output,
                 ": directory is not empty (pass --force to overwrite)");
  int64_t L = 0;
  const auto cfg = expanded_config((fs::path(o.model) / "config.json").string(), o.num_expand, &L);
  const io::CheckpointReader reader = io::CheckpointReader::open(o.model);
  const io::NamedTensors tensors = expanded_tensors(reader, L, o.num_expand);
  fs::create_directories(o.output);
  io::save_sharded(o.output, tensors, size_t{5} << 30);  // HF's default shard size, as the script
  io::write_file_atomic((fs::path(o.output) / "config.json").string(), cfg.dump(2) + "\n");
  models::copy_tokenizer_files(o.model, o.output);
  const fs::path gen = fs::path(o.model) / "generation_config.json";
  if (fs::exists(gen))
    io::write_file_atomic((fs::path(o.output) / "generation_config.json").string(),
                          io::read_file_bytes(gen.string()));
  std::printf("expanded %lld layers to %lld in %s\n", static_cast<long long>(L),
              static_cast<long long>(L + o.num_expand), o.output.c_str());
  std::printf(
      "fine-tune it with:\n  model_name_or_path: %s\n  finetuning_type: freeze\n"
      "  freeze_trainable_layers: %lld\n  use_llama_pro: true\n",
      o.output.c_str(), static_cast<long long>(o.num_expand));
}

}  // namespace

int cmd_expand_layers(const std::vector<std::string>& args) {
  ExpandOptions o;
  ArgParser p("expand-layers",
              "LLaMA-Pro block expansion (LLaMA-Factory's scripts/llama_pro.py): after each of "
              "--num-expand equal groups of layers, a copy of the group's last layer with o_proj "
              "and down_proj zeroed (the model's outputs are unchanged); train it with "
              "finetuning_type: freeze, use_llama_pro: true.");
  p.option("model", "the Hugging Face model dir to expand", &o.model);
  p.option("output", "the new model dir", &o.output);
  p.option("num-expand", "layers to add (divides num_hidden_layers)", &o.num_expand);
  p.flag("force", "overwrite a non-empty output dir", &o.force);
  if (!p.parse(args)) return print_help(p);
  p.require("model");
  p.require("output");
  p.require("num-expand");
  expand_layers(o);
  return 0;
}

}  // namespace unillm::cli
