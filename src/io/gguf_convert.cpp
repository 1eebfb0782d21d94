// convert_gguf: GGUF -> Hugging Face directory (the reverse of `unillm export --format gguf`).
#include "io/gguf_convert.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/gguf.h"
#include "io/gguf_model.h"
#include "io/gguf_vocab.h"
#include "io/json_file.h"
#include "io/safetensors.h"
#include "io/safetensors_writer.h"

namespace unillm::io {

namespace {

constexpr double kPi = 3.14159265358979323846;

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

[[noreturn]] void fail(const GgufFile& f, const std::string& what) {
  throw IoError("[gguf] " + f.path() + ": " + what);
}

// The shortest decimal that reads back as the same f32 (GGUF stores eps and theta as f32; the
// config should say 1e-05, not 9.99999974738e-06).
double f32_decimal(double v) {
  char buf[32];
  auto r = std::to_chars(buf, buf + sizeof(buf), static_cast<float>(v));
  return std::strtod(std::string(buf, r.ptr).c_str(), nullptr);
}

struct Hparams {
  std::string arch;
  int64_t n_embd = 0, n_layer = 0, n_ff = 0, n_head = 0, n_head_kv = 0, head_dim = 0, rope_dim = 0;
  int64_t ctx = 0, vocab = 0;
  double eps = 1e-6, theta = 10000.0;
  // Mixture of experts (qwen2moe, qwen3moe): E, k, the expert and shared-expert widths.
  int64_t n_expert = 0, n_expert_used = 0, n_ff_exp = 0, n_ff_shexp = 0;
};

bool is_moe(const std::string& arch) { return arch == "qwen2moe" || arch == "qwen3moe"; }

Hparams read_hparams(const GgufFile& f) {
  Hparams h;
  h.arch = f.get_string("general.architecture");
  if (h.arch != "llama" && h.arch != "qwen2" && h.arch != "qwen3" && !is_moe(h.arch))
    fail(f, "general.architecture '" + h.arch + "' is not supported (llama, qwen2, qwen3, qwen2moe, qwen3moe are)");
  const std::string a = h.arch + ".";
  h.n_embd = f.get_int(a + "embedding_length");
  h.n_layer = f.get_int(a + "block_count");
  h.n_ff = f.get_int(a + "feed_forward_length");
  h.n_head = f.get_int(a + "attention.head_count");
  h.n_head_kv = f.get_int_or(a + "attention.head_count_kv", h.n_head);
  if (h.n_embd <= 0 || h.n_layer <= 0 || h.n_ff <= 0 || h.n_head <= 0 || h.n_head_kv <= 0 ||
      h.n_head % h.n_head_kv != 0)
    fail(f, UNILLM_MSG("implausible hyper-parameters: embedding ", h.n_embd, ", blocks ", h.n_layer,
                       ", feed-forward ", h.n_ff, ", heads ", h.n_head, "/", h.n_head_kv));
  h.head_dim = f.get_int_or(a + "attention.key_length", h.n_embd / h.n_head);
  if (f.get_int_or(a + "attention.value_length", h.head_dim) != h.head_dim)
    fail(f, "attention.key_length and value_length differ; unillm's attention needs them equal");
  h.rope_dim = f.get_int_or(a + "rope.dimension_count", h.head_dim);
  h.ctx = f.get_int_or(a + "context_length", 2048);
  h.eps = f32_decimal(f.get_float(a + "attention.layer_norm_rms_epsilon"));
  h.theta = f32_decimal(f.get_float_or(a + "rope.freq_base", 10000.0));
  const GgufTensorInfo& emb = f.tensor("token_embd.weight");
  if (emb.shape.size() != 2 || emb.shape[1] != h.n_embd)
    fail(f, "token_embd.weight is " + shape_str(emb.shape) + ", expected [vocab, " +
                std::to_string(h.n_embd) + "]");
  h.vocab = emb.shape[0];
  if (is_moe(h.arch)) {  // llama.cpp's defaults where a key is missing
    h.n_expert = f.get_int(a + "expert_count");
    h.n_expert_used = f.get_int(a + "expert_used_count");
    if (h.n_expert < 1 || h.n_expert_used < 1 || h.n_expert_used > h.n_expert)
      fail(f, UNILLM_MSG("implausible experts: ", h.n_expert_used, " of ", h.n_expert, " per token"));
    h.n_ff_exp = f.get_int_or(a + "expert_feed_forward_length", h.n_ff / h.n_expert_used);
    if (h.arch == "qwen2moe") h.n_ff_shexp = f.get_int_or(a + "expert_shared_feed_forward_length", h.n_ff);
  }
  return h;
}

// Llama 3's rope_scaling from llama.cpp's rope_freqs tensor (the per-frequency divisors). The
// blended band is linear in the frequency: smooth = (orig·freq/2π − low) / (high − low); with
// Llama 3's low_freq_factor 1 two blended points give high and orig. The fit must reproduce every
// divisor, else the file's scaling is one unillm cannot express.
ojson llama3_rope_scaling(const GgufFile& f, const Hparams& h) {
  const Tensor t = f.to_f32("rope_freqs.weight");
  const std::vector<float> got = t.to_float_vector();
  if (static_cast<int64_t>(got.size()) != h.rope_dim / 2)
    fail(f, UNILLM_MSG("rope_freqs.weight has ", got.size(), " values, expected ", h.rope_dim / 2));
  double factor = 1.0;
  for (float g : got) factor = std::max(factor, static_cast<double>(g));
  std::vector<std::pair<double, double>> pts;  // (freq, smooth)
  for (size_t i = 0; i < got.size(); ++i) {
    const double fi = got[i], freq = std::pow(h.theta, -2.0 * static_cast<double>(i) /
                                                           static_cast<double>(h.rope_dim));
    if (fi > 1.0 + 1e-6 && fi < factor * (1.0 - 1e-6))
      pts.emplace_back(freq, (factor / fi - 1.0) / (factor - 1.0));
  }
  if (pts.size() < 2)
    fail(f, "rope_freqs.weight: too few blended frequencies to recover llama3 rope_scaling");
  const auto [f0, s0] = pts.front();
  const auto [f1, s1] = pts.back();
  const double A = (s1 - s0) / (f1 - f0), B = s0 - A * f0;
  const double high = 1.0 - 1.0 / B;
  const auto orig = static_cast<int64_t>(std::llround(-A * 2.0 * kPi / B));
  const std::vector<float> want = llama3_rope_factors(h.theta, h.rope_dim, factor, 1.0, high, orig);
  for (size_t i = 0; i < got.size(); ++i)
    if (std::fabs(want[i] - got[i]) > 1e-4 * std::fabs(got[i]))
      fail(f,
           "rope_freqs.weight is not llama3 rope scaling with low_freq_factor 1; cannot express it "
           "in config.json");
  return {{"factor", f32_decimal(factor)},
          {"high_freq_factor", f32_decimal(high)},
          {"low_freq_factor", 1.0},
          {"original_max_position_embeddings", orig},
          {"rope_type", "llama3"}};
}

ojson hf_config(const GgufFile& f, const Hparams& h, const std::string& torch_dtype) {
  const std::string a = h.arch + ".";
  static const std::map<std::string, std::pair<const char*, const char*>> kArch = {
      {"llama", {"LlamaForCausalLM", "llama"}},
      {"qwen2", {"Qwen2ForCausalLM", "qwen2"}},
      {"qwen3", {"Qwen3ForCausalLM", "qwen3"}},
      {"qwen2moe", {"Qwen2MoeForCausalLM", "qwen2_moe"}},
      {"qwen3moe", {"Qwen3MoeForCausalLM", "qwen3_moe"}}};
  ojson rope_scaling = nullptr;
  if (f.has_tensor("rope_freqs.weight")) {
    rope_scaling = llama3_rope_scaling(f, h);
  } else if (f.find(a + "rope.scaling.type")) {
    const std::string type = f.get_string(a + "rope.scaling.type");
    if (type == "linear") {
      rope_scaling = {{"factor", f32_decimal(f.get_float(a + "rope.scaling.factor"))},
                      {"rope_type", "linear"}};
    } else if (type == "yarn") {
      const double factor = f32_decimal(f.get_float(a + "rope.scaling.factor"));
      rope_scaling = {{"factor", factor},
                      {"original_max_position_embeddings",
                       f.get_int_or(a + "rope.scaling.original_context_length", h.ctx)},
                      {"rope_type", "yarn"}};
      // llama.cpp's attn_factor multiplies its own 1 + 0.1·ln(factor); HF's is the product.
      if (f.find(a + "rope.scaling.attn_factor")) {
        const double attn = f32_decimal(f.get_float(a + "rope.scaling.attn_factor"));
        // Rounded through f32 as the key was, so 1.3 written comes back as 1.3.
        if (attn != 1.0)
          rope_scaling["attention_factor"] = f32_decimal(static_cast<float>(attn * (1.0 + 0.1 * std::log(factor))));
      }
    } else if (type != "none") {
      fail(f, "rope.scaling.type '" + type + "' is not supported (linear, yarn, none are)");
    }
  }
  ojson c = {{"architectures", {kArch.at(h.arch).first}}, {"model_type", kArch.at(h.arch).second}};
  c["hidden_size"] = h.n_embd;
  c["intermediate_size"] = h.n_ff;
  c["num_hidden_layers"] = h.n_layer;
  c["num_attention_heads"] = h.n_head;
  c["num_key_value_heads"] = h.n_head_kv;
  c["head_dim"] = h.head_dim;
  if (h.rope_dim != h.head_dim)
    c["partial_rotary_factor"] = static_cast<double>(h.rope_dim) / static_cast<double>(h.head_dim);
  c["vocab_size"] = h.vocab;
  c["max_position_embeddings"] = h.ctx;
  c["rms_norm_eps"] = h.eps;
  c["rope_theta"] = h.theta;
  c["rope_scaling"] = rope_scaling;
  c["tie_word_embeddings"] = !f.has_tensor("output.weight");
  c["attention_bias"] = h.arch == "qwen2" || h.arch == "qwen2moe" || f.has_tensor("blk.0.attn_q.bias");
  if (is_moe(h.arch)) {  // every layer sparse; llama.cpp renormalises the top k for qwen3moe only
    c["num_experts"] = h.n_expert;
    c["num_experts_per_tok"] = h.n_expert_used;
    c["moe_intermediate_size"] = h.n_ff_exp;
    c["norm_topk_prob"] = h.arch == "qwen3moe";
    c["decoder_sparse_step"] = 1;
    c["mlp_only_layers"] = ojson::array();
    if (h.arch == "qwen2moe") c["shared_expert_intermediate_size"] = h.n_ff_shexp;
    c["output_router_logits"] = false;
  }
  c["mlp_bias"] = f.has_tensor("blk.0.ffn_gate.bias");
  const int64_t bos = f.get_int_or("tokenizer.ggml.bos_token_id", -1),
                eos = f.get_int_or("tokenizer.ggml.eos_token_id", -1);
  c["bos_token_id"] = bos >= 0 ? ojson(bos) : ojson(nullptr);
  c["eos_token_id"] = eos >= 0 ? ojson(eos) : ojson(nullptr);
  c["hidden_act"] = "silu";
  if (h.arch != "llama") c["use_sliding_window"] = false;
  c["torch_dtype"] = torch_dtype;
  return c;
}

// One GGUF tensor as the HF tensor: float types copied, block types dequantised, q/k rows of
// the llama architecture back in HF's rotate_half layout.
Tensor hf_tensor(const GgufFile& f, const GgufTensorInfo& t, const Hparams& h) {
  const auto type = static_cast<GgmlType>(t.type);
  Tensor out;
  if (type == GgmlType::kF32 || type == GgmlType::kF16 || type == GgmlType::kBF16) {
    const DType dt = type == GgmlType::kF32   ? DType::f32
                     : type == GgmlType::kF16 ? DType::f16
                                              : DType::bf16;
    out = host_tensor(t.shape, dt);
    std::memcpy(out.raw_data(), f.data(t), t.nbytes);
  } else {
    out = f.to_f32(t.name);  // IoError naming the tensor for unreadable types
  }
  const bool q = t.name.find(".attn_q.") != std::string::npos,
             k = t.name.find(".attn_k.") != std::string::npos;
  if (!(q || k)) return out;
  const int64_t heads = q ? h.n_head : h.n_head_kv;
  if (t.shape[0] != heads * h.head_dim)
    fail(f, UNILLM_MSG("tensor '", t.name, "' has ", t.shape[0], " rows, expected ", heads,
                       " heads × ", h.head_dim));
  if (!gguf_arch_permutes_qk(h.arch)) return out;
  const int64_t rows = t.shape[0];
  const size_t row_bytes = out.nbytes() / static_cast<size_t>(rows);
  const std::string bytes =
      permute_rope_rows(static_cast<const uint8_t*>(out.raw_data()), rows, row_bytes, heads, false);
  std::memcpy(out.raw_data(), bytes.data(), bytes.size());
  return out;
}

void prepare_out_dir(const GgufConvertOptions& o) {
  std::error_code ec;
  if (o.out_dir.empty()) UNILLM_THROW(IoError, "[gguf] no output directory given");
  if (fs::exists(o.out_dir, ec)) {
    if (!fs::is_directory(o.out_dir, ec))
      UNILLM_THROW(IoError, "[gguf] ", o.out_dir, ": exists and is not a directory");
    if (!fs::is_empty(o.out_dir, ec) && !o.overwrite)
      UNILLM_THROW(IoError, "[gguf] ", o.out_dir,
                   ": directory is not empty (pass --force to overwrite)");
  }
  fs::create_directories(o.out_dir, ec);
  if (!fs::is_directory(o.out_dir, ec))
    UNILLM_THROW(IoError, "[gguf] ", o.out_dir, ": cannot create the directory (", ec.message(),
                 ")");
}

std::string dump(const ojson& j) { return j.dump(2) + "\n"; }

}  // namespace

std::vector<std::string> convert_gguf(const GgufConvertOptions& o) {
  auto f = GgufFile::open(o.input);
  const Hparams h = read_hparams(*f);
  std::vector<std::pair<std::string, Tensor>> tensors;
  std::map<uint32_t, int64_t> types;  // ggml type -> tensor count, for the log
  for (const GgufTensorInfo& t : f->tensors()) {
    if (t.name == "rope_freqs.weight") continue;  // becomes rope_scaling in config.json
    int64_t layer = 0;
    std::string proj;
    if (split_gguf_experts_name(t.name, &layer, &proj)) {  // [E, rows, cols]: one HF matrix per expert
      if (t.shape.size() != 3 || t.shape[0] != h.n_expert)
        fail(*f, "tensor '" + t.name + "' is " + shape_str(t.shape) + ", expected [" + std::to_string(h.n_expert) +
                     ", rows, cols]");
      const Tensor all = hf_tensor(*f, t, h);
      for (int64_t e = 0; e < h.n_expert; ++e)
        tensors.emplace_back(UNILLM_MSG("model.layers.", layer, ".mlp.experts.", e, ".", proj, ".weight"),
                             all.slice(0, e, e + 1).view({t.shape[1], t.shape[2]}).contiguous());
      ++types[t.type];
      continue;
    }
    const std::string hf = hf_tensor_name(t.name);
    if (hf.empty())
      fail(*f, "tensor '" + t.name + "' has no Hugging Face name (not a llama/qwen2/qwen3/qwen2moe/qwen3moe tensor)");
    tensors.emplace_back(hf, hf_tensor(*f, t, h));
    ++types[t.type];
  }
  // A half-precision dtype only when every matrix has it (a Q4_0 file's F16 fallbacks do not).
  std::vector<DType> matrix_dtypes;
  for (const auto& [name, t] : tensors)
    if (t.ndim() == 2) matrix_dtypes.push_back(t.dtype());
  const DType matrices = matrix_dtypes.empty() ? DType::f32 : matrix_dtypes.front();
  const bool same = std::all_of(matrix_dtypes.begin(), matrix_dtypes.end(),
                                [&](DType d) { return d == matrices; });
  const std::string torch_dtype = !same || matrices == DType::f32 ? "float32"
                                  : matrices == DType::f16        ? "float16"
                                                                  : "bfloat16";
  const ojson config = hf_config(*f, h, torch_dtype);
  const HfTokenizerFiles tok = hf_tokenizer_from_gguf(*f, h.ctx);
  prepare_out_dir(o);
  const fs::path dir(o.out_dir);
  save_safetensors((dir / "model.safetensors").string(), tensors);
  write_file_atomic((dir / "config.json").string(), dump(config));
  ojson gen = {{"_from_model_config", true},
               {"bos_token_id", config["bos_token_id"]},
               {"eos_token_id", config["eos_token_id"]}};
  write_file_atomic((dir / "generation_config.json").string(), dump(gen));
  write_file_atomic((dir / "tokenizer.json").string(), tok.tokenizer_json);
  write_file_atomic((dir / "tokenizer_config.json").string(), tok.tokenizer_config_json);
  std::string summary;
  for (const auto& [type, n] : types)
    summary += UNILLM_MSG(summary.empty() ? "" : ", ", n, " ", ggml_type_name(type));
  return {UNILLM_MSG("[gguf] ", o.input, ": ", h.arch, ", ", tensors.size(), " tensors (", summary,
                     ")")};
}

}  // namespace unillm::io
