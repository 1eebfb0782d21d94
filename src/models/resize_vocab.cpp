// Vocabulary resizing: LLaMA-Factory's resize_embedding_layer (noise_init, desc_init), and
// untying a tied lm_head for PEFT's modules_to_save. Llama::set_vocab_weights lives here, beside
// its one user.
#include "models/resize_vocab.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "models/llama.h"

namespace unillm::models {

namespace {

bool named(const nn::ParamRef& p, const std::string& name) {
  return p.adapter.empty() &&
         std::find(p.hf_names.begin(), p.hf_names.end(), name) != p.hf_names.end();
}

Tensor host_f32(const Tensor& t) { return t.to(Device{}).to(DType::f32).contiguous(); }

// rows [V, C] grown to `rows`, the new rows normal(0, std) (transformers' _init_weights).
std::vector<float> grow(const Tensor& w, int64_t rows, double std, Rng& rng) {
  const Tensor h = host_f32(w);
  const int64_t v = h.size(0), c = h.size(1);
  std::vector<float> out(static_cast<size_t>(rows * c));
  std::copy_n(h.data<float>(), v * c, out.begin());
  for (size_t i = static_cast<size_t>(v * c); i < out.size(); ++i)
    out[i] = static_cast<float>(rng.normal() * std);
  return out;
}

// LLaMA-Factory's _noisy_mean_initialization: rows `ids` = mean of the other rows + noise.
void noisy_mean(std::vector<float>& w, int64_t c, const std::vector<int32_t>& ids, bool noise,
                Rng& rng) {
  const int64_t v = static_cast<int64_t>(w.size()) / c;
  std::vector<uint8_t> is_new(static_cast<size_t>(v), 0);
  for (int32_t id : ids) is_new[static_cast<size_t>(id)] = 1;
  std::vector<double> mean(static_cast<size_t>(c), 0.0);
  int64_t n = 0;
  for (int64_t r = 0; r < v; ++r) {
    if (is_new[static_cast<size_t>(r)]) continue;
    for (int64_t j = 0; j < c; ++j)
      mean[static_cast<size_t>(j)] += w[static_cast<size_t>(r * c + j)];
    ++n;
  }
  for (auto& m : mean) m /= static_cast<double>(std::max<int64_t>(n, 1));
  const double std = 1.0 / std::sqrt(static_cast<double>(c));
  for (int32_t id : ids)
    for (int64_t j = 0; j < c; ++j)
      w[static_cast<size_t>(id * c + j)] =
          static_cast<float>(mean[static_cast<size_t>(j)] + (noise ? rng.normal() * std : 0.0));
}

// Mean of rows `ids` of w [V, c] (doubles, so a sum of many rows loses nothing).
std::vector<double> mean_of(const std::vector<float>& w, int64_t c,
                            const std::vector<int32_t>& ids) {
  std::vector<double> m(static_cast<size_t>(c), 0.0);
  for (int32_t id : ids)
    for (int64_t j = 0; j < c; ++j) m[static_cast<size_t>(j)] += w[static_cast<size_t>(id * c + j)];
  for (auto& x : m) x /= static_cast<double>(std::max<size_t>(ids.size(), 1));
  return m;
}

// LLaMA-Factory's _description_based_initialization of one matrix w (rows `src` are read for the
// description means: the embedding, also when w is the lm_head).
void describe_rows(std::vector<float>& w, const std::vector<float>& src, int64_t c,
                   const ResizeVocabOptions& o, const std::vector<int32_t>& new_ids, Rng& rng) {
  const int64_t v = static_cast<int64_t>(w.size()) / c;
  std::vector<uint8_t> is_new(static_cast<size_t>(v), 0);
  for (int32_t id : new_ids) is_new[static_cast<size_t>(id)] = 1;
  std::vector<int32_t> others;
  for (int64_t r = 0; r < v; ++r)
    if (!is_new[static_cast<size_t>(r)]) others.push_back(static_cast<int32_t>(r));
  const std::vector<double> fallback = mean_of(w, c, others);
  const double std = 1.0 / std::sqrt(static_cast<double>(c));
  for (const DescribedToken& d : o.described) {
    std::vector<int32_t> valid;
    for (int32_t t : d.description_ids)
      if (t >= 0 && t < v && !is_new[static_cast<size_t>(t)]) valid.push_back(t);
    const std::vector<double> base = valid.empty() ? fallback : mean_of(src, c, valid);
    for (int64_t j = 0; j < c; ++j)
      w[static_cast<size_t>(d.id * c + j)] =
          static_cast<float>(base[static_cast<size_t>(j)] + (o.noise ? rng.normal() * std : 0.0));
  }
}

Tensor like(const std::vector<float>& w, int64_t rows, const Tensor& proto) {
  return Tensor::from_vector(w, {rows, proto.size(1)}).to(proto.dtype()).to(proto.device());
}

}  // namespace

void CausalLM::set_vocab_weights(Tensor, Tensor) {
  UNILLM_THROW(NotImplemented, "[models] this model cannot resize its vocabulary");
}

void Llama::set_vocab_weights(Tensor embed, Tensor lm_head) {
  UNILLM_CHECK(embed.ndim() == 2 && embed.size(1) == c_.hidden_size, "[llama] embedding of shape ",
               shape_str(embed.shape()), ", expected [V, ", c_.hidden_size, "]");
  UNILLM_CHECK(lm_head.defined() || c_.tie_word_embeddings,
               "[llama] an untied model needs the lm_head with the embedding");
  if (lm_head_q_.defined())
    UNILLM_THROW(NotImplemented, "[llama] cannot resize a model with a quantised lm_head");
  if (lm_head.defined())
    UNILLM_CHECK(lm_head.shape() == embed.shape(), "[llama] lm_head of shape ",
                 shape_str(lm_head.shape()), ", expected ", shape_str(embed.shape()));
  embed_ = std::move(embed);
  if (lm_head.defined()) {
    const bool was_tied = c_.tie_word_embeddings;
    lm_head_ = std::move(lm_head);
    if (was_tied) register_parameter("lm_head.weight", &lm_head_);
    c_.tie_word_embeddings = false;
  }
  c_.vocab_size = embed_.size(0);
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(c_.raw_json);
  j["vocab_size"] = c_.vocab_size;
  j["tie_word_embeddings"] = c_.tie_word_embeddings;
  c_.raw_json = j.dump(2);
}

ResizeVocabResult resize_token_embeddings(CausalLM& model, const ResizeVocabOptions& o, Rng& rng) {
  const ModelConfig& c = model.config();
  const bool tied = c.tie_word_embeddings;
  Tensor embed, head;
  for (auto& p : model.module().parameters()) {
    if (named(p, "model.embed_tokens.weight")) embed = *p.tensor;
    if (named(p, "lm_head.weight")) head = *p.tensor;
  }
  UNILLM_CHECK(embed.defined(), "[resize_vocab] the model has no model.embed_tokens.weight");
  ResizeVocabResult r;
  r.old_rows = embed.size(0);
  const bool grows = o.tokenizer_size > r.old_rows;
  r.new_rows = grows ? (o.tokenizer_size + 63) / 64 * 64 : r.old_rows;
  for (int32_t id : o.new_token_ids)
    if (id >= 0 && id < r.new_rows) r.initialised.push_back(id);  // as _resolve_new_token_ids
  std::sort(r.initialised.begin(), r.initialised.end());
  r.initialised.erase(std::unique(r.initialised.begin(), r.initialised.end()), r.initialised.end());
  if (r.initialised.empty())  // LLaMA-Factory's tail fallback: every grown row
    for (auto id = static_cast<int32_t>(r.old_rows); id < r.new_rows; ++id)
      r.initialised.push_back(id);
  if (r.initialised.empty()) return r;
  const int64_t cdim = embed.size(1);
  std::vector<float> e = grow(embed, r.new_rows, c.initializer_range, rng);
  std::vector<float> h;
  if (!tied) h = grow(head, r.new_rows, c.initializer_range, rng);
  if (o.described.empty()) {
    noisy_mean(e, cdim, r.initialised, o.noise, rng);
    if (!tied) noisy_mean(h, cdim, r.initialised, o.noise, rng);
  } else {
    const std::vector<int32_t> new_ids = r.initialised;
    r.initialised.clear();
    for (const DescribedToken& d : o.described) {
      UNILLM_CHECK(d.id >= 0 && d.id < r.new_rows, "[resize_vocab] described token id ", d.id,
                   " outside the ", r.new_rows, " rows");
      r.initialised.push_back(d.id);
    }
    const std::vector<float> e0 = e;  // the description rows are read before any is written
    describe_rows(e, e0, cdim, o, new_ids, rng);
    if (!tied) describe_rows(h, e0, cdim, o, new_ids, rng);
  }
  model.set_vocab_weights(like(e, r.new_rows, embed), tied ? Tensor() : like(h, r.new_rows, head));
  return r;
}

void untie_embeddings(CausalLM& model) {
  if (!model.config().tie_word_embeddings) return;
  for (auto& p : model.module().parameters())
    if (named(p, "model.embed_tokens.weight")) {
      Tensor e = *p.tensor;
      model.set_vocab_weights(e, e.clone());
      return;
    }
  UNILLM_THROW(ConfigError, "[resize_vocab] the model has no model.embed_tokens.weight to untie");
}

}  // namespace unillm::models
