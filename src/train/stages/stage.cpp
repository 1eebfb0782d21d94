// make_stage and the helpers the stages share.
#include "train/stages/stage.h"

#include <algorithm>

#include "core/error.h"
#include "data/v1_data.h"

namespace unillm::train {

std::unique_ptr<Stage> make_stage(const TrainArgs& args) {
  if (args.stage == "pt" || args.stage == "sft") return make_lm_stage(args);
  if (args.stage == "rm") return make_reward_stage(args);
  if (args.stage == "dpo") return make_dpo_stage(args);
  if (args.stage == "kto") return make_kto_stage(args);
  UNILLM_THROW(NotImplemented, "[train] stage '", args.stage, "' is not implemented yet (pt, sft, rm, dpo and kto are)");
}

void add_sums(SumMetrics& a, const SumMetrics& b) {
  for (const auto& m : b) {
    auto it = std::find_if(a.begin(), a.end(), [&](const SumMetric& e) { return e.name == m.name; });
    if (it == a.end()) {
      a.push_back(m);
    } else {
      it->sum += m.sum;
      it->count += m.count;
    }
  }
}

StageMetrics Stage::summarize(const SumMetrics& sums) const {
  StageMetrics out;
  for (const auto& m : sums) out.emplace_back(m.name, m.count > 0 ? m.sum / m.count : 0.0);
  return out;
}

int32_t pad_id_of(const io::Tokenizer& tok, int32_t eos) {
  for (const char* t : {"<pad>", "<|endoftext|>", "<|finetune_right_pad_id|>"})
    if (auto id = tok.token_to_id(t); id && *id != eos) return *id;
  return eos;
}

data::SftOptions preference_data_options(const TrainArgs& a, const std::string& stage, const io::Tokenizer& tok,
                                         const std::string& tokenizer_dir,
                                         std::unique_ptr<data::ChatTemplate>* tmpl) {
  const auto choice = data::choose_template(a.template_name, tokenizer_dir);
  *tmpl = data::make_chat_template(choice, tok, template_options(a, choice.options));
  data::SftOptions so = sft_options(a);
  so.stage = stage;
  so.pad_id = pad_id_of(tok, (*tmpl)->eos_id());
  return so;
}

StageData v1_pair_data(const TrainArgs& a, const io::Tokenizer& tok, const std::string& tokenizer_dir,
                       std::string description) {
  data::V1DataOptions vo;
  vo.train_dataset = a.v1_train_dataset;
  vo.where = a.config_path + " (train_dataset)";
  vo.cutoff_len = a.cutoff_len;
  vo.seed = a.seed;
  vo.pairs = true;
  StageData d;
  d.train = data::load_v1_pair_data(vo, tok, tokenizer_dir);
  d.pad_id = pad_id_of(tok, tok.eos_id());
  d.description = std::move(description);
  return d;
}

int64_t scored_labels(const data::Batch& b) {
  int64_t n = 0;
  for (int64_t r = 0; r < b.rows; ++r)
    for (int64_t t = 1; t < b.seq_len; ++t) n += b.labels[r * b.seq_len + t] != data::kIgnoreIndex;
  return n;
}

void set_neftune(models::TrainBatch& tb, double alpha, const Rng* micro_rng) {
  if (alpha <= 0) return;
  Rng peek = micro_rng ? *micro_rng : Rng(0);
  tb.neftune_alpha = alpha;
  tb.neftune_seed = peek.next_u64() ^ 0x6e656674756e65ull;  // "neftune"
}

void set_shift_attn(models::TrainBatch& tb, bool on) {
  tb.shift_attn_ratio = on ? 0.25 : 0.0;  // LLaMA-Factory's group_size_ratio
}

models::TrainBatch to_train_batch(const data::Batch& b, bool shift_attn) {
  models::TrainBatch tb;
  set_shift_attn(tb, shift_attn);
  tb.input_ids = Tensor::from_ints(b.input_ids, {b.rows, b.seq_len});
  tb.labels = Tensor::from_ints(b.labels, {b.rows, b.seq_len});
  std::vector<int32_t> pos = b.position_ids;  // packed rows bring their own
  if (pos.empty()) {
    pos.resize(static_cast<size_t>(b.rows * b.seq_len));
    for (int64_t r = 0; r < b.rows; ++r)
      for (int64_t t = 0; t < b.seq_len; ++t) pos[r * b.seq_len + t] = static_cast<int32_t>(t);
  }
  tb.position_ids = Tensor::from_ints(pos, {b.rows, b.seq_len});
  // neat_packing: segment ids keep the packed samples from attending to each other.
  if (!b.segment_ids.empty()) tb.segment_ids = Tensor::from_ints(b.segment_ids, {b.rows, b.seq_len});
  tb.row_lengths = b.lengths;
  return tb;
}

data::Batch trim_padding(const data::Batch& b, int64_t multiple) {
  int64_t longest = 0;
  for (int32_t l : b.lengths) longest = std::max<int64_t>(longest, l);
  const int64_t t = std::min(b.seq_len, (longest + multiple - 1) / multiple * multiple);
  if (t == b.seq_len) return b;
  data::Batch out = b;
  out.seq_len = t;
  auto cut = [&](std::vector<int32_t>& v) {
    if (v.empty()) return;
    std::vector<int32_t> w(static_cast<size_t>(b.rows * t));
    for (int64_t r = 0; r < b.rows; ++r)
      std::copy_n(v.begin() + r * b.seq_len, t, w.begin() + r * t);
    v = std::move(w);
  };
  for (auto* v : {&out.input_ids, &out.labels, &out.position_ids, &out.segment_ids}) cut(*v);
  return out;
}

models::TrainBatch Stage::pipeline_batch(models::CausalLM&, const data::Batch& b, const Rng&,
                                         const MicroOptions&) const {
  return to_train_batch(b);
}

EvalPart Stage::eval_from_hidden(models::CausalLM&, const Tensor&, const models::TrainBatch&) {
  UNILLM_THROW(NotImplemented, "[train] stage ", name(), " cannot evaluate from the pipeline's hidden states");
}

Stage::PipelineHead Stage::pipeline_head(models::CausalLM&, const Tensor&, int, const data::Batch&,
                                         const models::TrainBatch&, const MicroOptions&) {
  UNILLM_THROW(NotImplemented, "[train] stage ", name(), " cannot run as pipeline stages");
}

}  // namespace unillm::train
