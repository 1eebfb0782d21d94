// llama2.c legacy checkpoint reading (header validation, exact size check, weights) and the
// weight renaming + RoPE row permutation to Hugging Face Llama names.
#include "io/llama2c.h"

#include <sys/stat.h>

#include <cstring>
#include <fstream>

#include "core/error.h"
#include "io/safetensors.h"

namespace unillm::io {
namespace {

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw IoError("[llama2c] " + path + ": " + what);
}

int64_t file_size_of(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) fail(path, "cannot open (no such file?)");
  if (!S_ISREG(st.st_mode)) fail(path, "not a regular file");
  return static_cast<int64_t>(st.st_size);
}

bool read_raw_header(const std::string& path, int32_t raw[7]) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  in.read(reinterpret_cast<char*>(raw), 28);
  return in.gcount() == 28;
}

Tensor read_f32(std::ifstream& in, const Shape& shape, const std::string& path, const char* what) {
  Tensor t = host_tensor(shape, DType::f32);
  in.read(static_cast<char*>(t.raw_data()), static_cast<std::streamsize>(t.nbytes()));
  if (in.gcount() != static_cast<std::streamsize>(t.nbytes()))
    fail(path, std::string("file ends inside ") + what);
  return t;
}

}  // namespace

int64_t Llama2cConfig::float_count() const {
  const int64_t C = dim, F = hidden_dim, L = n_layers, V = vocab_size, kv = kv_dim();
  int64_t n = V * C;                  // token embedding
  n += L * C;                         // rms_att
  n += L * C * C + 2 * L * kv * C;    // wq, wk, wv
  n += L * C * C;                     // wo
  n += L * C;                         // rms_ffn
  n += 3 * L * F * C;                 // w1, w2, w3
  n += C;                             // rms_final
  n += seq_len * head_size();         // freq_cis_real + freq_cis_imag (seq_len * D/2 each)
  if (!shared_classifier) n += V * C;  // wcls
  return n;
}

std::string Llama2cConfig::str() const {
  return UNILLM_MSG("dim ", dim, ", hidden_dim ", hidden_dim, ", n_layers ", n_layers, ", n_heads ",
                    n_heads, ", n_kv_heads ", n_kv_heads, ", vocab_size ", vocab_size,
                    shared_classifier ? " (shared classifier)" : " (separate classifier)",
                    ", seq_len ", seq_len);
}

Llama2cConfig parse_llama2c_header(const int32_t raw[7], const std::string& path) {
  static const char* kNames[7] = {"dim", "hidden_dim", "n_layers", "n_heads",
                                  "n_kv_heads", "vocab_size", "seq_len"};
  static const int64_t kMax[7] = {1 << 20, 1 << 22, 1 << 10, 1 << 14, 1 << 14, 1 << 22, 1 << 24};
  Llama2cConfig c;
  int64_t v[7];
  for (int i = 0; i < 7; ++i) {
    v[i] = raw[i];
    if (i == 5 && v[i] < 0) {
      v[i] = -v[i];
      c.shared_classifier = false;
    }
    if (v[i] <= 0 || v[i] > kMax[i])
      fail(path, UNILLM_MSG("header ", kNames[i], " = ", raw[i], " is out of range (1..", kMax[i],
                            "); not a llama2.c legacy checkpoint?"));
  }
  c.dim = v[0], c.hidden_dim = v[1], c.n_layers = v[2], c.n_heads = v[3], c.n_kv_heads = v[4];
  c.vocab_size = v[5], c.seq_len = v[6];
  if (c.dim % c.n_heads != 0)
    fail(path, UNILLM_MSG("header dim ", c.dim, " is not a multiple of n_heads ", c.n_heads));
  if (c.n_heads % c.n_kv_heads != 0)
    fail(path, UNILLM_MSG("header n_heads ", c.n_heads, " is not a multiple of n_kv_heads ", c.n_kv_heads));
  if (c.head_size() % 2 != 0)
    fail(path, UNILLM_MSG("head size ", c.head_size(), " (dim / n_heads) must be even for RoPE"));
  return c;
}

Llama2cConfig read_llama2c_header(const std::string& path) {
  int64_t size = file_size_of(path);
  int32_t raw[7];
  if (size < 28 || !read_raw_header(path, raw))
    fail(path, UNILLM_MSG("file is ", size, " bytes, shorter than the 28-byte header"));
  Llama2cConfig c = parse_llama2c_header(raw, path);
  if (size != c.file_bytes())
    fail(path, UNILLM_MSG("file is ", size, " bytes, but its header (", c.str(), ") needs ",
                          c.file_bytes(), " bytes", size < c.file_bytes() ? " (truncated?)" : ""));
  return c;
}

bool looks_like_llama2c_checkpoint(const std::string& path) {
  try {
    read_llama2c_header(path);
    return true;
  } catch (const Error&) {
    return false;
  }
}

Llama2cWeights read_llama2c_checkpoint(const std::string& path) {
  Llama2cWeights w;
  w.config = read_llama2c_header(path);
  const Llama2cConfig& c = w.config;
  const int64_t C = c.dim, F = c.hidden_dim, L = c.n_layers, V = c.vocab_size, kv = c.kv_dim();
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, "cannot open");
  in.seekg(28);
  w.token_embedding = read_f32(in, {V, C}, path, "token_embedding_table");
  w.rms_att = read_f32(in, {L, C}, path, "rms_att_weight");
  w.wq = read_f32(in, {L, C, C}, path, "wq");
  w.wk = read_f32(in, {L, kv, C}, path, "wk");
  w.wv = read_f32(in, {L, kv, C}, path, "wv");
  w.wo = read_f32(in, {L, C, C}, path, "wo");
  w.rms_ffn = read_f32(in, {L, C}, path, "rms_ffn_weight");
  w.w1 = read_f32(in, {L, F, C}, path, "w1");
  w.w2 = read_f32(in, {L, C, F}, path, "w2");
  w.w3 = read_f32(in, {L, F, C}, path, "w3");
  w.rms_final = read_f32(in, {C}, path, "rms_final_weight");
  // The legacy RoPE tables (freq_cis_real/imag) are recomputed from rope_theta; skip them.
  in.seekg(c.seq_len * c.head_size() * 4, std::ios::cur);
  if (!c.shared_classifier) w.wcls = read_f32(in, {V, C}, path, "wcls");
  return w;
}

Tensor permute_rope_rows(const Tensor& w, int64_t n_heads) {
  UNILLM_CHECK(w.ndim() == 2 && w.dtype() == DType::f32, "[llama2c] permute_rope_rows wants f32 [R, C]");
  const int64_t R = w.size(0), C = w.size(1);
  UNILLM_CHECK(n_heads > 0 && R % n_heads == 0 && (R / n_heads) % 2 == 0,
               "[llama2c] permute_rope_rows: ", R, " rows do not split into ", n_heads, " even heads");
  const int64_t D = R / n_heads, half = D / 2;
  Tensor src = w.contiguous();
  Tensor out = host_tensor({R, C}, DType::f32);
  const float* s = src.data<float>();
  float* d = out.data<float>();
  for (int64_t h = 0; h < n_heads; ++h)
    for (int64_t i = 0; i < half; ++i)
      for (int64_t pair = 0; pair < 2; ++pair)
        std::memcpy(d + (h * D + pair * half + i) * C, s + (h * D + 2 * i + pair) * C, C * sizeof(float));
  return out;
}

std::vector<std::pair<std::string, Tensor>> llama2c_to_hf_tensors(const Llama2cWeights& w) {
  const Llama2cConfig& c = w.config;
  std::vector<std::pair<std::string, Tensor>> out;
  out.emplace_back("model.embed_tokens.weight", w.token_embedding);
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const std::string p = UNILLM_MSG("model.layers.", l, ".");
    const int i = static_cast<int>(l);
    out.emplace_back(p + "self_attn.q_proj.weight", permute_rope_rows(w.wq.select(0, i), c.n_heads));
    out.emplace_back(p + "self_attn.k_proj.weight", permute_rope_rows(w.wk.select(0, i), c.n_kv_heads));
    out.emplace_back(p + "self_attn.v_proj.weight", w.wv.select(0, i));
    out.emplace_back(p + "self_attn.o_proj.weight", w.wo.select(0, i));
    out.emplace_back(p + "mlp.gate_proj.weight", w.w1.select(0, i));
    out.emplace_back(p + "mlp.up_proj.weight", w.w3.select(0, i));
    out.emplace_back(p + "mlp.down_proj.weight", w.w2.select(0, i));
    out.emplace_back(p + "input_layernorm.weight", w.rms_att.select(0, i));
    out.emplace_back(p + "post_attention_layernorm.weight", w.rms_ffn.select(0, i));
  }
  out.emplace_back("model.norm.weight", w.rms_final);
  if (!c.shared_classifier) out.emplace_back("lm_head.weight", w.wcls);
  return out;
}

}  // namespace unillm::io
