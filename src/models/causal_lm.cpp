// Model registry, weight loading by HF names, and the single-sequence helpers.
#include "models/causal_lm.h"

#include <cmath>
#include <filesystem>
#include <functional>
#include <map>
#include <set>

#include "autograd/grad_mode.h"
#include "core/rng.h"
#include "io/checkpoint.h"
#include "models/inference_bundle.h"
#include "models/passes.h"
#include "models/llama.h"
#include "ops/linear.h"
#include "ops/quant.h"

namespace unillm::models {

Tensor neftune_noise(const TrainBatch& b, int64_t lo, int64_t hi, int64_t hidden) {
  const double mag = b.neftune_alpha / std::sqrt(static_cast<double>(b.input_ids.size(1) * hidden));
  std::vector<float> v(static_cast<size_t>((hi - lo) * hidden));
  for (int64_t r = lo; r < hi; ++r) {
    Rng rng(b.neftune_seed ^ (0x9E3779B97F4A7C15ull * static_cast<uint64_t>(r + 1)));
    float* row = v.data() + (r - lo) * hidden;
    for (int64_t c = 0; c < hidden; ++c) row[c] = static_cast<float>(mag * (2.0 * rng.uniform_double() - 1.0));
  }
  return Tensor::from_vector(v, {hi - lo, hidden});
}

std::shared_ptr<ops::MoeBalance> moe_balance_for(const TrainBatch& b, const ModelConfig& config, double seed) {
  const int64_t rows = b.input_ids.size(0), t = b.input_ids.size(1);
  std::vector<uint8_t> valid(static_cast<size_t>(rows * t), 1);
  if (!b.row_lengths.empty()) {
    UNILLM_CHECK(static_cast<int64_t>(b.row_lengths.size()) == rows, "[moe_balance] row_lengths has ",
                 b.row_lengths.size(), " entries for ", rows, " rows");
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t i = b.row_lengths[static_cast<size_t>(r)]; i < t; ++i) valid[static_cast<size_t>(r * t + i)] = 0;
  }
  return std::make_shared<ops::MoeBalance>(config.num_experts, std::move(valid), seed);
}

namespace fs = std::filesystem;

std::unique_ptr<CausalLM> build_causal_lm(const ModelConfig& config, DType weight_dtype,
                                          Device device, bool lazy) {
  // One registry line per family; all current families share the Llama blocks.
  using Builder = std::function<std::unique_ptr<CausalLM>(const ModelConfig&, nn::ParamPlacement)>;
  static const std::map<std::string, Builder> registry = {
      {"llama", [](auto& c, nn::ParamPlacement p) { return std::make_unique<Llama>(c, p); }},
      {"mistral", [](auto& c, nn::ParamPlacement p) { return std::make_unique<Llama>(c, p); }},
      {"qwen2", [](auto& c, nn::ParamPlacement p) { return std::make_unique<Llama>(c, p); }},
      {"qwen3", [](auto& c, nn::ParamPlacement p) { return std::make_unique<Llama>(c, p); }},
      {"qwen2_moe", [](auto& c, nn::ParamPlacement p) { return std::make_unique<Llama>(c, p); }},
      {"qwen3_moe", [](auto& c, nn::ParamPlacement p) { return std::make_unique<Llama>(c, p); }},
  };
  auto it = registry.find(config.model_type);
  if (it == registry.end()) UNILLM_THROW(ConfigError, "[models] no builder for model_type '", config.model_type, "'");
  return it->second(config, nn::ParamPlacement(weight_dtype, device, lazy));
}

namespace {

// "model.layers.3.block.mlp.up_proj.weight" -> "model.layers.3.mlp.up_proj.weight": a routed
// layer's name in the plain checkpoint a mixture-of-depths conversion starts from.
std::string mod_plain_name(const std::string& name) {
  static const std::string kLayers = "model.layers.";
  if (!name.starts_with(kLayers)) return name;
  const size_t dot = name.find('.', kLayers.size());
  if (dot == std::string::npos || name.compare(dot, 7, ".block.") != 0) return name;
  return name.substr(0, dot) + name.substr(dot + 6);
}

// Checkpoint tensors that HF models carry but that are recomputed here.
bool ignorable(const std::string& name) {
  return name.find("rotary_emb.inv_freq") != std::string::npos;
}

DType pick_weight_dtype(const io::CheckpointReader& ckpt, const LoadOptions& o) {
  if (!o.weight_dtype.empty()) {
    DType d = dtype_from_name(o.weight_dtype);
    if (d != DType::f32 && d != DType::bf16 && d != DType::f16)
      UNILLM_THROW(ConfigError, "[models] weight dtype must be f32, bf16 or f16, got ", o.weight_dtype);
    return d;
  }
  DType d = ckpt.info("model.embed_tokens.weight").dtype;
  return (d == DType::bf16 || d == DType::f16) ? d : DType::f32;
}

// For LoadOptions::on_linear_loaded: each (dense) FusedLinear's parameter names, and how many of
// them are still to be read.
struct LinearsPending {
  std::map<std::string, nn::FusedLinear*> owner;  // parameter name -> its linear
  std::map<nn::FusedLinear*, int> left;

  LinearsPending(CausalLM& model, const nn::NamedTensors& named) {
    std::set<std::string> names;
    for (const auto& [n, _] : named) names.insert(n);
    model.module().for_each_module("", [&](const std::string& prefix, nn::Module& m) {
      auto* lin = dynamic_cast<nn::FusedLinear*>(&m);
      if (!lin || lin->is_quantized()) return;
      for (const auto& part : lin->parts())
        for (const char* suffix : {".weight", ".bias"})
          if (const std::string n = prefix + part.name + suffix; names.count(n)) {
            owner[n] = lin;
            ++left[lin];
          }
    });
  }
  // The linear `name` completes, or nullptr.
  nn::FusedLinear* read(const std::string& name) {
    auto it = owner.find(name);
    return it != owner.end() && --left[it->second] == 0 ? it->second : nullptr;
  }
};

// attached: checkpoint names already consumed (a bundle's quantised layers).
void load_weights(CausalLM& model, const io::CheckpointReader& ckpt, const std::string& dir,
                  const std::set<std::string>& attached, const LoadOptions& options) {
  std::map<std::string, bool> used;
  for (auto& n : ckpt.names()) used[n] = attached.count(n) > 0;
  nn::NamedTensors named = model.named_parameters();
  std::optional<LinearsPending> pending;
  if (options.on_linear_loaded) pending.emplace(model, named);
  const bool classifier = model.config().token_classification;
  const ModelConfig& mc = model.config();
  Rng router_rng(mc.mod_seed);  // mixture-of-depths convert: the routers are new (nn.Linear's init)
  for (auto& [name, param] : named) {
    const bool no_head = classifier && name == "lm_head.weight" && !ckpt.has(name);  // left zero
    const bool router = mc.mixture_of_depths && name.find(".router.weight_predictor.") != std::string::npos;
    if (router && mc.mod_convert) {
      Tensor dst = param;
      if (options.before_copy) options.before_copy(dst);
      const double bound = 1.0 / std::sqrt(static_cast<double>(mc.hidden_size));  // U(±1/√fan_in)
      std::vector<float> v(static_cast<size_t>(dst.numel()));
      for (float& e : v) e = static_cast<float>((2.0 * router_rng.uniform_double() - 1.0) * bound);
      dst.copy_from(Tensor::from_vector(v, dst.shape()));
      param = Tensor();
      continue;
    }
    // convert: the plain checkpoint's layer l is the routed layer's "block."
    const std::string from = mc.mod_convert ? mod_plain_name(name) : name;
    if (!no_head) {
      if (router && !ckpt.has(name))
        UNILLM_THROW(IoError, "[models] ", dir, ": tensor '", name, "' missing: config.json names a mixture-of-depths "
                     "model (", mc.architecture, ") but the checkpoint has no routers");
      if (!ckpt.has(from))
        UNILLM_THROW(IoError, "[models] ", dir, ": tensor '", from, "' missing from the checkpoint");
      auto info = ckpt.info(from);
      if (info.shape != param.shape())
        UNILLM_THROW(IoError, "[models] ", dir, ": tensor '", from, "' has shape ", shape_str(info.shape),
                     ", expected ", shape_str(param.shape()), " from config.json");
      if (!is_floating(info.dtype))
        UNILLM_THROW(IoError, "[models] ", dir, ": tensor '", from, "' has dtype ", dtype_name(info.dtype),
                     ", expected a floating type");
    }
    Tensor dst = param;  // a view into the model's (possibly fused) storage
    if (options.before_copy) options.before_copy(dst);
    if (no_head) {
      dst.fill(0.0);
    } else {
      dst.copy_from(ckpt.get(from));
      ckpt.drop_pages(from);  // copied: its file pages need not stay resident
      used[from] = true;
    }
    const Device device = param.device();
    param = Tensor();  // this view would keep a linear's storage alive past its hook
    if (nn::FusedLinear* done = pending ? pending->read(name) : nullptr) {
      options.on_linear_loaded(*done);
      release_cached_memory(device);  // what the hook dropped leaves the process now
    }
  }
  for (auto& [n, u] : used) {
    if (!u && n.find(".router.weight_predictor.") != std::string::npos)
      UNILLM_THROW(IoError, "[models] ", dir, ": checkpoint tensor '", n, "' is a mixture-of-depths router, but "
                   "config.json's architectures (", mc.architecture, ") name a plain model; a model converted "
                   "by the mixture-of-depth package is named *MoDForCausalLM");
    if (!u && !ignorable(n) && !(n == "lm_head.weight" && model.config().tie_word_embeddings) &&
        !(classifier && n.starts_with("score.")))  // the reward-model stage reads the score head
      UNILLM_THROW(IoError, "[models] ", dir, ": checkpoint tensor '", n, "' is not used by a ",
                   model.config().model_type, " model (config.json and weights disagree)");
  }
}

}  // namespace

std::unique_ptr<CausalLM> load_causal_lm(const std::string& dir, const LoadOptions& options) {
  if (!fs::is_directory(dir)) UNILLM_THROW(IoError, "[models] ", dir, ": not a directory");
  ModelConfig config = load_model_config((fs::path(dir) / "config.json").string());
  if (options.adjust_config) options.adjust_config(config);
  auto ckpt = io::CheckpointReader::open(dir);
  auto model = build_causal_lm(config, pick_weight_dtype(ckpt, options), options.device, options.lazy);
  if (options.on_built) options.on_built(*model);
  // An inference bundle: its quantised layers take their codes from the checkpoint as they are.
  std::set<std::string> attached;
  const auto plan = read_inference_plan(dir);
  if (plan) attached = attach_quantized_weights(*model, ckpt, *plan, dir);
  load_weights(*model, ckpt, dir, attached, options);
  if (plan) {  // and its fusions (quantize_weights is done: the codes came from the checkpoint)
    PassPlan fusions = *plan;
    std::erase(fusions.passes, "quantize_weights");
    run_passes(*model, fusions, [](const std::string&) {});
  }
  return model;
}

std::unique_ptr<CausalLM> build_for_load(const std::string& dir, const LoadOptions& options) {
  if (!fs::is_directory(dir)) UNILLM_THROW(IoError, "[models] ", dir, ": not a directory");
  if (read_inference_plan(dir))
    UNILLM_THROW(ConfigError, "[models] ", dir, ": an inference bundle loads whole (load_causal_lm), not in two steps");
  ModelConfig config = load_model_config((fs::path(dir) / "config.json").string());
  if (options.adjust_config) options.adjust_config(config);
  const auto ckpt = io::CheckpointReader::open(dir);
  return build_causal_lm(config, pick_weight_dtype(ckpt, options), options.device, options.lazy);
}

void read_weights(CausalLM& model, const std::string& dir, const LoadOptions& options) {
  load_weights(model, io::CheckpointReader::open(dir), dir, {}, options);
}

ForwardBatch single_sequence_batch(const std::vector<int32_t>& ids, int64_t past,
                                   const std::vector<int32_t>& block_table, int64_t block_size,
                                   bool last_only) {
  const auto t = static_cast<int64_t>(ids.size());
  ForwardBatch b;
  b.ids = Tensor::from_ints(ids, {t});
  std::vector<int32_t> pos(t), slots(t);
  for (int64_t i = 0; i < t; ++i) {
    int64_t p = past + i;
    pos[i] = static_cast<int32_t>(p);
    slots[i] = static_cast<int32_t>(block_table.at(p / block_size) * block_size + p % block_size);
  }
  b.positions = Tensor::from_ints(pos, {t});
  b.slot_mapping = Tensor::from_ints(slots, {t});
  b.attn.block_table = Tensor::from_ints(block_table, {1, static_cast<int64_t>(block_table.size())});
  b.attn.q_start = Tensor::from_ints({0, static_cast<int32_t>(t)}, {2});
  b.attn.kv_len = Tensor::from_ints({static_cast<int32_t>(past + t)}, {1});
  if (last_only) b.logit_rows = Tensor::from_ints({static_cast<int32_t>(t - 1)}, {1});
  return b;
}

Tensor CausalLM::hidden_states(const TrainBatch&, bool) {
  UNILLM_THROW(NotImplemented, "[models] this model has no hidden-state forward");
}

Tensor CausalLM::hidden_states_range(const TrainBatch&, const Tensor&, int64_t, int64_t, bool) {
  UNILLM_THROW(NotImplemented, "[models] this model cannot run as pipeline stages");
}

Tensor shifted_labels(const Tensor& labels) {
  const int64_t b = labels.size(0), t = labels.size(1);
  Tensor src = labels.contiguous();
  Tensor out = Tensor::empty({b * t}, DType::i32);
  const int32_t* l = src.data<int32_t>();
  int32_t* o = out.data<int32_t>();
  for (int64_t r = 0; r < b; ++r)
    for (int64_t i = 0; i < t; ++i) o[r * t + i] = i + 1 < t ? l[r * t + i + 1] : -100;
  return out;
}

const Tensor& CausalLM::lm_head_weight() const {
  UNILLM_THROW(NotImplemented, "[models] this model has no lm_head weight to quantise");
}

void CausalLM::set_lm_head_quantized(ops::QuantizedWeight) {
  UNILLM_THROW(NotImplemented, "[models] this model cannot take a quantised lm_head");
}

const ops::QuantizedWeight& CausalLM::lm_head_quantized() const {
  static const ops::QuantizedWeight none;
  return none;
}

Tensor CausalLM::project_to_vocab(const Tensor& hidden) {
  if (lm_head_quantized().defined()) return ops::linear_q(hidden, lm_head_quantized());
  return ops::linear(hidden, lm_head_weight());
}

Tensor CausalLM::logits_all(const std::vector<int32_t>& ids) {
  UNILLM_CHECK(!ids.empty(), "[models] logits_all of an empty sequence");
  auto t = static_cast<int64_t>(ids.size());
  if (config().mixture_of_depths) {
    autograd::NoGradGuard no_grad;  // an evaluation forward: the routed layers' counter stays
    std::vector<int32_t> pos(ids.size());
    for (size_t i = 0; i < pos.size(); ++i) pos[i] = static_cast<int32_t>(i);
    TrainBatch b;
    b.input_ids = Tensor::from_ints(ids, {1, t});
    b.labels = b.input_ids;
    b.position_ids = Tensor::from_ints(pos, {1, t});
    return project_to_vocab(hidden_states(b, false));
  }
  KvCaches caches = KvCaches::allocate(config(), 1, t, DType::f32, device());  // one block
  return forward(single_sequence_batch(ids, 0, {0}, t, false), caches);
}

Tensor CausalLM::loss_labels(const TrainBatch& batch) const { return shifted_labels(batch.labels); }

void CausalLM::set_expert_parallel(nn::Collective* group) {
  if (group && group->size() > 1)
    UNILLM_THROW(NotImplemented, "[model] expert parallelism is not implemented for this model");
}

void CausalLM::set_tensor_parallel(nn::Collective* group, bool sequence_parallel, bool vocab_parallel,
                                   bool attention_only, nn::Collective* mlp_group) {
  (void)sequence_parallel;
  (void)vocab_parallel;
  (void)attention_only;
  (void)mlp_group;
  if (group && group->size() > 1)
    UNILLM_THROW(NotImplemented, "[model] tensor parallelism is not implemented for this model");
  tp_ = nullptr;
}

}  // namespace unillm::models
