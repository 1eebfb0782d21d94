// Writing and reading inference bundles: the plan file, and the quantised layers' tensors.
#include "models/inference_bundle.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/json_file.h"
#include "io/safetensors_writer.h"
#include "models/calibration.h"
#include "models/save.h"
#include "nn/linear.h"

namespace unillm::models {

namespace fs = std::filesystem;
using nlohmann::ordered_json;

namespace {

constexpr const char* kFormat = "unillm-inference";
constexpr int kVersion = 1;

ordered_json plan_json(const PassPlan& plan, DType dense) {
  ordered_json passes = ordered_json::array();
  for (const auto& name : plan.passes) {
    ordered_json p = {{"name", name}};
    if (name == "quantize_weights") {
      p["quant_type"] = ops::quant_type_name(plan.quantize.type);
      if (plan.quantize.type == ops::QuantType::int4) {
        p["group_size"] = plan.quantize.group;
        p["symmetric"] = plan.quantize.symmetric;
      }
      p["scale_dtype"] = dtype_name(plan.quantize.scales());
      p["keep_f32"] = plan.quantize.keep_lm_head ? ordered_json::array({"lm_head", "embed"}) : ordered_json::array({"embed"});
      if (!plan.quantize.keep_lm_head) p["lm_head"] = plan.quantize.lm_head == ops::QuantType::int4 ? "int4" : "int8";
      // Informational: the codes are in the checkpoint, a load does not calibrate again.
      p["method"] = plan.quantize.hessians ? "gptq" : "round_to_nearest";
      if (plan.quantize.hessians) p["calibration"] = plan.quantize.hessians->source;
      if (plan.quantize.hessians && plan.quantize.act_order) p["act_order"] = true;
    }
    passes.push_back(p);
  }
  return {{"format", kFormat}, {"version", kVersion}, {"dtype", dtype_name(dense)}, {"passes", passes}};
}

template <typename... Parts>
[[noreturn]] void bad_plan(const std::string& path, const Parts&... what) {
  UNILLM_THROW(ConfigError, "[bundle] ", path, ": ", what...);
}

}  // namespace

std::string fused_name(const std::string& prefix, const nn::FusedLinear& linear) {
  std::string name = prefix;
  for (size_t i = 0; i < linear.parts().size(); ++i) name += (i ? "+" : "") + linear.parts()[i].name;
  return name;
}

void save_inference_bundle(const CausalLM& model, const PassPlan& plan, const std::string& out_dir,
                           const BundleOptions& o) {
  fs::create_directories(out_dir);
  nlohmann::ordered_json cfg = nlohmann::ordered_json::parse(model.config().raw_json);
  cfg["torch_dtype"] = o.dense_dtype == DType::bf16 ? "bfloat16" : o.dense_dtype == DType::f16 ? "float16" : "float32";
  io::NamedTensors tensors;
  // Dense parameters under their HF names (matrices in the bundle's dtype, norms and biases f32),
  // then each quantised layer's codes, scales and mins.
  for (auto& [name, t] : model.named_parameters())
    tensors.emplace_back(name, t.ndim() == 2 && t.dtype() != o.dense_dtype ? t.to(o.dense_dtype) : t);
  auto& mod = const_cast<CausalLM&>(model).module();
  mod.for_each_module("", [&](const std::string& prefix, nn::Module& m) {
    auto* lin = dynamic_cast<nn::FusedLinear*>(&m);
    if (!lin || !lin->is_quantized()) return;
    const ops::QuantizedWeight& q = lin->quantized();
    const std::string base = fused_name(prefix, *lin);
    tensors.emplace_back(base + ".qweight", q.data);
    tensors.emplace_back(base + ".scales", q.scales);
    if (q.mins.defined()) tensors.emplace_back(base + ".mins", q.mins);
  });
  if (const ops::QuantizedWeight& h = model.lm_head_quantized(); h.defined()) {
    tensors.emplace_back("lm_head.qweight", h.data);
    tensors.emplace_back("lm_head.scales", h.scales);
    if (h.mins.defined()) tensors.emplace_back("lm_head.mins", h.mins);
  }
  io::save_sharded(out_dir, tensors, o.max_shard_bytes);
  io::write_file_atomic((fs::path(out_dir) / "config.json").string(), cfg.dump(2) + "\n");
  if (!o.source_dir.empty()) {
    copy_tokenizer_files(o.source_dir, out_dir);
    const fs::path g = fs::path(o.source_dir) / "generation_config.json";
    if (fs::exists(g))
      io::write_file_atomic((fs::path(out_dir) / "generation_config.json").string(), io::read_file_bytes(g.string()));
  }
  // Last: a directory with a plan file is a complete bundle.
  io::write_file_atomic((fs::path(out_dir) / kPlanFile).string(), plan_json(plan, o.dense_dtype).dump(2) + "\n");
}

std::optional<PassPlan> read_inference_plan(const std::string& dir) {
  const fs::path path = fs::path(dir) / kPlanFile;
  if (!fs::exists(path)) return std::nullopt;
  const std::string p = path.string();
  std::ifstream in(p);
  const ordered_json j = ordered_json::parse(in, nullptr, false);
  if (j.is_discarded() || !j.is_object()) bad_plan(p, "not a JSON object");
  if (j.value("format", "") != kFormat) bad_plan(p, "'format' must be \"", kFormat, "\"");
  if (!j.contains("version") || !j["version"].is_number_integer() || j["version"].get<int>() < 1 ||
      j["version"].get<int>() > kVersion)
    bad_plan(p, "'version' must be 1 (this unillm reads version ", kVersion, ")");
  if (!j.contains("passes") || !j["passes"].is_array()) bad_plan(p, "'passes' must be a list");
  PassPlan plan;
  const auto& known = known_passes();
  for (size_t i = 0; i < j["passes"].size(); ++i) {
    const ordered_json& s = j["passes"][i];
    const std::string at = "passes[" + std::to_string(i) + "]";
    if (!s.is_object() || !s.contains("name") || !s["name"].is_string()) bad_plan(p, at, " needs a 'name'");
    const std::string name = s["name"].get<std::string>();
    if (std::find(known.begin(), known.end(), name) == known.end())
      bad_plan(p, at, " names an unknown pass '", name, "'");
    if (name == "quantize_weights") {
      if (!s.contains("quant_type") || !s["quant_type"].is_string()) bad_plan(p, at, " needs 'quant_type'");
      try {
        plan.quantize.type = ops::quant_type_from_name(s["quant_type"].get<std::string>());
      } catch (const ConfigError& e) {
        bad_plan(p, at, ": ", e.what());
      }
      if (plan.quantize.type == ops::QuantType::int4) {
        if (!s.contains("group_size") || !s["group_size"].is_number_integer() || s["group_size"].get<int64_t>() <= 0)
          bad_plan(p, at, " needs a positive 'group_size'");
        plan.quantize.group = s["group_size"].get<int64_t>();
        plan.quantize.symmetric = s.value("symmetric", false);
      }
      // Bundles before f16 scales have no 'scale_dtype': theirs are f32.
      const ordered_json sd = s.value("scale_dtype", ordered_json("f32"));
      if (!sd.is_string() || (sd != "f32" && sd != "f16")) bad_plan(p, at, ": 'scale_dtype' must be \"f16\" or \"f32\"");
      plan.quantize.scale_dtype = sd == "f16" ? DType::f16 : DType::f32;
      if (s.contains("keep_f32") && s["keep_f32"].is_array())
        for (const auto& k : s["keep_f32"]) plan.quantize.keep_lm_head = plan.quantize.keep_lm_head || k == "lm_head";
      // Bundles before --lm-head-quant have no 'lm_head': theirs is int8.
      const ordered_json lh = s.value("lm_head", ordered_json("int8"));
      if (lh == "int4" && plan.quantize.type == ops::QuantType::int4)
        plan.quantize.lm_head = ops::QuantType::int4;
      else if (lh != "int8")
        bad_plan(p, at, ": 'lm_head' must be \"int8\", or \"int4\" with quant_type int4");
    }
    plan.passes.push_back(name);
  }
  return plan;
}

std::set<std::string> attach_quantized_weights(CausalLM& model, const io::CheckpointReader& ckpt,
                                               const PassPlan& plan, const std::string& dir) {
  std::set<std::string> used;
  if (std::find(plan.passes.begin(), plan.passes.end(), "quantize_weights") == plan.passes.end()) return used;
  const QuantizeOptions& qo = plan.quantize;
  int64_t layers = 0;
  model.module().for_each_module("", [&](const std::string& prefix, nn::Module& m) {
    auto* lin = dynamic_cast<nn::FusedLinear*>(&m);
    if (!lin) return;
    const std::string base = fused_name(prefix, *lin);
    if (!ckpt.has(base + ".qweight")) return;
    ops::QuantizedWeight q;
    q.type = qo.type;
    q.symmetric = qo.type == ops::QuantType::int8 || qo.symmetric;
    q.n = lin->out_features();
    q.k = lin->in_features();
    q.group = qo.type == ops::QuantType::int8 ? q.k : qo.group;
    const Device device = model.device();
    auto get = [&](const std::string& name) {
      used.insert(name);
      return ckpt.get(name).to(device);  // the mmapped tensor itself on the CPU
    };
    q.data = get(base + ".qweight");
    q.scales = get(base + ".scales");
    if (ckpt.has(base + ".mins")) q.mins = get(base + ".mins");
    q.check(dir + ": " + base);
    if (q.scales.dtype() != qo.scales())
      UNILLM_THROW(IoError, "[bundle] ", dir, ": ", base, ".scales is ", dtype_name(q.scales.dtype()),
                   " but inference_plan.json says scale_dtype ", dtype_name(qo.scales()));
    lin->set_quantized(std::move(q));
    ++layers;
  });
  if (layers == 0)
    UNILLM_THROW(IoError, "[bundle] ", dir, ": the plan quantises weights but the checkpoint holds no '.qweight' tensor");
  if (ckpt.has("lm_head.qweight")) {  // int8 (one scale per vocabulary row), or the layers' int4
    ops::QuantizedWeight h;
    h.type = qo.lm_head;
    h.n = model.config().vocab_size;
    h.k = model.config().hidden_size;
    const bool int4 = qo.lm_head == ops::QuantType::int4;
    h.group = int4 ? qo.group : h.k;
    h.symmetric = !int4 || qo.symmetric;
    for (const char* part : {"lm_head.qweight", "lm_head.scales"}) used.insert(part);
    h.data = ckpt.get("lm_head.qweight").to(model.device());
    h.scales = ckpt.get("lm_head.scales").to(model.device());
    if (ckpt.has("lm_head.mins")) {
      used.insert("lm_head.mins");
      h.mins = ckpt.get("lm_head.mins").to(model.device());
    }
    h.check(dir + ": lm_head");
    model.set_lm_head_quantized(std::move(h));
  } else if (!qo.keep_lm_head) {
    UNILLM_THROW(IoError, "[bundle] ", dir, ": the plan quantises the lm_head but 'lm_head.qweight' is missing");
  }
  return used;
}

}  // namespace unillm::models
