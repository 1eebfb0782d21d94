// `unillm export --format gguf --model DIR --output FILE.gguf [--quant_type
// f32|f16|bf16|q8_0|q4_0]`: an HF model dir as the GGUF llama.cpp loads (docs/export.md). The weights
// come from the loaded model's named_parameters(), the HF names save_pretrained writes (q/k/v split
// out of the fused matrix), so the export sees exactly what unillm runs.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>

#include "cli/commands.h"
#include "cli/common.h"
#include "core/error.h"
#include "io/gguf.h"
#include "io/gguf_model.h"
#include "io/gguf_vocab.h"
#include "models/causal_lm.h"
#include "ops/rope.h"

namespace unillm::cli {

namespace {

namespace fs = std::filesystem;

struct OutType {
  const char* flag;
  io::GgmlType type;
  uint32_t file_type;  // general.file_type (llama.cpp's LLAMA_FTYPE_*)
};
constexpr OutType kOutTypes[] = {{"f32", io::GgmlType::kF32, 0},
                                 {"f16", io::GgmlType::kF16, 1},
                                 {"bf16", io::GgmlType::kBF16, 32},
                                 {"q8_0", io::GgmlType::kQ8_0, 7},
                                 {"q4_0", io::GgmlType::kQ4_0, 2}};

const OutType& out_type(const std::string& name) {
  for (const auto& t : kOutTypes)
    if (name == t.flag) return t;
  UNILLM_THROW(ConfigError, "[export] --quant_type '", name,
               "' is not a GGUF type (f32, f16, bf16, q8_0, q4_0)");
}

// What llama.cpp's qwen2moe / qwen3moe graphs fix that HF's config leaves open: every layer
// sparse, qwen3moe renormalising the top-k weights and qwen2moe not, qwen2moe's shared expert
// and square attention. A model outside that would load and compute something else: refused.
void check_moe_for_llama_cpp(const models::ModelConfig& c, const std::string& arch) {
  std::string dense;
  for (int64_t l = 0; l < c.num_layers; ++l)
    if (!c.sparse_layer(l)) dense += (dense.empty() ? "" : ", ") + std::to_string(l);
  if (!dense.empty())
    UNILLM_THROW(ConfigError, "[export] llama.cpp's ", arch, " has a sparse block in every layer; this model's layers ",
                 dense, " are dense (mlp_only_layers / decoder_sparse_step)");
  const bool renorm = arch == "qwen3moe";
  if (c.norm_topk_prob != renorm)
    UNILLM_THROW(ConfigError, "[export] llama.cpp's ", arch, renorm ? " renormalises" : " does not renormalise",
                 " the top-k expert weights; this model has norm_topk_prob ", c.norm_topk_prob ? "true" : "false");
  if (arch == "qwen2moe" && c.shared_expert_intermediate_size == 0)
    UNILLM_THROW(ConfigError, "[export] llama.cpp's qwen2moe needs the shared expert; this model has "
                 "shared_expert_intermediate_size 0");
  if (arch == "qwen2moe" && c.num_heads * c.head_dim != c.hidden_size)
    UNILLM_THROW(ConfigError, "[export] llama.cpp's qwen2moe needs num_attention_heads x head_dim = hidden_size (",
                 c.num_heads, " x ", c.head_dim, " != ", c.hidden_size, ")");
}

io::GgufModelParams model_params(const models::ModelConfig& c, const std::string& name) {
  io::GgufModelParams p;
  p.arch = io::gguf_arch_for_model_type(c.model_type);
  p.name = name;
  p.context_length = c.max_position_embeddings;
  p.embedding_length = c.hidden_size;
  p.block_count = c.num_layers;
  p.feed_forward_length = c.intermediate_size;
  p.head_count = c.num_heads;
  p.head_count_kv = c.num_kv_heads;
  p.head_dim = c.head_dim;
  p.rope_dim = c.rope.rot_dim > 0 ? c.rope.rot_dim : c.head_dim;
  p.vocab_size = c.vocab_size;
  p.rms_eps = c.rms_norm_eps;
  p.rope_theta = c.rope.theta;
  p.rope_scaling = c.rope.scaling_type;
  p.rope_factor = c.rope.factor;
  if (c.rope.scaling_type == "dynamic")
    UNILLM_THROW(ConfigError, "[export] rope_scaling dynamic (NTK) has no llama.cpp equivalent; export the model "
                              "without it (remove rope_scaling from config.json) or use yarn");
  if (c.rope.scaling_type == "yarn") {
    // llama.cpp takes beta_fast/slow as context parameters (32/1) and always rounds the range.
    if (c.rope.beta_fast != 32 || c.rope.beta_slow != 1 || !c.rope.truncate)
      UNILLM_THROW(ConfigError, "[export] yarn with beta_fast ", c.rope.beta_fast, ", beta_slow ", c.rope.beta_slow,
                   c.rope.truncate ? "" : ", truncate false", " cannot be written to a GGUF (llama.cpp uses 32, 1)");
    p.rope_original_context = c.rope.original_max_position;
    const double base_mscale = 1.0 + 0.1 * std::log(c.rope.factor);
    p.rope_attn_factor = ops::rope_attention_factor(c.rope) / base_mscale;
    if (std::fabs(p.rope_attn_factor - 1.0) < 1e-12) p.rope_attn_factor = 1.0;
  }
  if (p.arch == "llama" && p.rope_dim != p.head_dim)
    UNILLM_THROW(ConfigError, "[export] partial rotary (", p.rope_dim, " of ", p.head_dim,
                 " dims) has no llama.cpp layout for the llama architecture");
  if (c.num_experts > 0) {
    check_moe_for_llama_cpp(c, p.arch);
    p.expert_count = c.num_experts;
    p.expert_used_count = c.num_experts_per_tok;
    p.expert_feed_forward_length = c.moe_intermediate_size;
    p.expert_shared_feed_forward_length = c.shared_expert_intermediate_size;
  }
  return p;
}

// llama.cpp applies Llama 3 RoPE scaling through a rope_freqs tensor, not through keys.
io::GgufTensorOut rope_freqs_tensor(const models::ModelConfig& c) {
  const auto& r = c.rope;
  const int64_t dim = r.rot_dim > 0 ? r.rot_dim : c.head_dim;
  std::vector<float> f = io::llama3_rope_factors(r.theta, dim, r.factor, r.low_freq_factor,
                                                 r.high_freq_factor, r.original_max_position);
  io::GgufTensorOut t;
  t.name = "rope_freqs.weight";
  t.shape = {static_cast<int64_t>(f.size())};
  t.type = io::GgmlType::kF32;
  t.bytes = [f]() {
    return std::string(reinterpret_cast<const char*>(f.data()), f.size() * sizeof(float));
  };
  return t;
}

std::string model_name(const std::string& dir) {
  fs::path p = fs::path(dir).lexically_normal();
  if (p.filename().empty()) p = p.parent_path();
  return p.filename().string();
}

}  // namespace

int export_gguf(const std::vector<std::string>& args) {
  std::string format, model_dir, output, quant, outtype;
  ArgParser p("export --format gguf", "Write an HF model dir as a llama.cpp GGUF (docs/export.md).");
  p.option("format", "gguf", &format);
  p.option("model", "HF model dir (llama, mistral, qwen2, qwen3, qwen2_moe, qwen3_moe)", &model_dir);
  p.option("output", "the .gguf file to write", &output);
  p.option("quant_type", "f32 (default), f16, bf16, q8_0 or q4_0; 1-D tensors stay f32", &quant);
  p.option("outtype", "alias of --quant_type (llama.cpp's convert_hf_to_gguf.py name)", &outtype);
  if (!p.parse(args)) return print_help(p);
  p.require("model");
  p.require("output");
  if (p.given("quant_type") && p.given("outtype") && quant != outtype)
    UNILLM_THROW(ConfigError, "[export] --quant_type ", quant, " and --outtype ", outtype,
                 " disagree");
  const OutType& ot = out_type(!quant.empty() ? quant : !outtype.empty() ? outtype : "f32");
  require_model_dir(model_dir);
  if (fs::is_directory(output))
    UNILLM_THROW(ConfigError, "[export] --output ", output, " is a directory; give a file name");
  cpu_register_only();
  refuse_token_classifier(model_dir, "a GGUF export");
  auto model = models::load_causal_lm(model_dir);
  const models::ModelConfig& cfg = model->config();
  if (cfg.mixture_of_depths)  // the routers and routed layers have no llama.cpp form
    UNILLM_THROW(NotImplemented, "[export] ", model_dir, " is a mixture-of-depths model (", cfg.architecture,
                 "); llama.cpp has no routed layers, so it has no GGUF form");
  auto tokenizer = io::Tokenizer::load(model_dir);

  io::GgufMetadata md;
  io::add_gguf_model_params(model_params(cfg, model_name(model_dir)), md);
  md.emplace_back("general.file_type", io::GgufValue::u32(ot.file_type));
  if (ot.type == io::GgmlType::kQ8_0 || ot.type == io::GgmlType::kQ4_0)
    md.emplace_back("general.quantization_version", io::GgufValue::u32(2));
  std::vector<std::string> notes;
  io::GgufVocabOptions vo;
  vo.vocab_size = cfg.vocab_size;
  vo.model_type = cfg.model_type;
  vo.pad_id = cfg.pad_token_id;
  vo.tokenizer_dir = model_dir;
  vo.config_bos_id = cfg.bos_token_id;
  vo.config_eos_id = cfg.eos_token_ids.empty() ? -1 : cfg.eos_token_ids.front();
  io::add_gguf_vocab(*tokenizer, vo, md, &notes);

  io::GgufTensorPlan plan{ot.type, io::gguf_arch_for_model_type(cfg.model_type), cfg.num_heads,
                          cfg.num_kv_heads};
  std::vector<io::GgufTensorOut> tensors;
  if (cfg.rope.scaling_type == "llama3") tensors.push_back(rope_freqs_tensor(cfg));
  // Experts are stacked per layer and projection (io::gguf_experts_from_hf), in expert order.
  std::map<std::pair<int64_t, std::string>, std::map<int64_t, Tensor>> experts;
  for (const auto& [name, t] : model->named_parameters()) {
    int64_t layer = 0, expert = 0;
    std::string proj, note;
    if (io::split_expert_name(name, &layer, &expert, &proj)) {
      experts[{layer, proj}][expert] = t;
      continue;
    }
    tensors.push_back(io::gguf_tensor_from_hf(name, t, plan, &note));
    if (!note.empty()) notes.push_back(note);
  }
  for (const auto& [key, by_index] : experts) {
    std::vector<Tensor> stack;
    for (const auto& [e, t] : by_index) stack.push_back(t);
    std::string note;
    tensors.push_back(io::gguf_experts_from_hf(io::gguf_experts_name(key.first, key.second), stack, plan, &note));
    if (!note.empty()) notes.push_back(note);
  }
  // llama.cpp's qwen2moe requires output.weight (it does not fall back to the embedding).
  if (plan.arch == "qwen2moe" && cfg.tie_word_embeddings)
    for (const auto& [name, t] : model->named_parameters())
      if (name == "model.embed_tokens.weight") {
        io::GgufTensorOut out = io::gguf_tensor_from_hf(name, t, plan, nullptr);
        out.name = "output.weight";
        tensors.push_back(out);
      }
  for (const auto& n : notes) std::fprintf(stderr, "[export] %s\n", n.c_str());
  io::write_gguf(output, md, tensors);
  std::printf("exported %s -> %s (%s, %zu tensors, %s)\n", model_dir.c_str(), output.c_str(),
              plan.arch.c_str(), tensors.size(), ot.flag);
  return 0;
}

}  // namespace unillm::cli
