// Stage rm (LLaMA-Factory's PairwiseTrainer over TRL's AutoModelForCausalLMWithValueHead): pairs in
// one micro-batch, the value head (models/value_head.h) on the final hidden state of each row's
// last real token (attention_mask.sum(-1) − 1), the pairwise loss −log σ(r_chosen − r_rejected)
// averaged over the pairs, and eval accuracy = the share of pairs with r_chosen > r_rejected over
// every evaluation pair (LLaMA-Factory's ComputeAccuracy).
//
// The value head trains under every finetuning_type (f32, in the arena after the model), with
// dropout 0.1 on its input in training (TRL's summary_dropout_prob; LoRA dropout stays as
// configured: LLaMA-Factory does not disable dropout for rm). No lm_head runs: full fine-tuning
// freezes an untied lm_head, which would otherwise only take weight decay.
//
// A LLaMA-Factory v1 config (`stage=rm`, its rm_trainer) trains v1's reward model instead: v1's
// pairs (data/v1_data.h), the score head of a token classifier (models::ValueHead kScore: no
// dropout, v1's initialisation on every run but a resumed one, as v1 initialises it after
// loading), the same pairwise loss on each side's last token (v1 scores the last token of each
// half of its concatenated row), each micro-batch's mean weighed by its share of the step's
// scored tokens (v1's base_trainer), and the output written as a *ForTokenClassification model or
// a TOKEN_CLS adapter (saved_head). v1 does not evaluate.
#include <cmath>

#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "data/pairwise.h"
#include "data/sft.h"
#include "models/value_head.h"
#include "ops/gather.h"
#include "train/stages/reward.h"
#include "train/stages/stage.h"

namespace unillm::train {
namespace {

double log_sigmoid(double x) { return x >= 0 ? -std::log1p(std::exp(-x)) : x - std::log1p(std::exp(x)); }

// The pairwise loss of B pairs of scores (chosen rows 0..B−1, rejected B..2B−1) and its gradient.
struct PairLoss {
  double loss = 0;
  int64_t correct = 0;
  std::vector<float> grad;  // d loss / d score, [2B]
};

PairLoss pair_loss(const std::vector<float>& s) {
  const auto b = static_cast<int64_t>(s.size() / 2);
  PairLoss p;
  p.grad.assign(s.size(), 0.0f);
  for (int64_t i = 0; i < b; ++i) {
    const double d = static_cast<double>(s[i]) - static_cast<double>(s[b + i]);
    p.loss -= log_sigmoid(d) / static_cast<double>(b);
    p.correct += d > 0;
    const double g = -std::exp(log_sigmoid(-d)) / static_cast<double>(b);  // −σ(−d) / B
    p.grad[i] = static_cast<float>(g);
    p.grad[b + i] = static_cast<float>(-g);
  }
  return p;
}

class RewardStage : public Stage {
 public:
  explicit RewardStage(const TrainArgs& a) : a_(a), v1_(!a.v1_train_dataset.empty()) {}
  std::string name() const override { return "rm"; }

  StageData load_data(const io::Tokenizer& tok, const std::string& tokenizer_dir) override {
    if (v1_)  // a LLaMA-Factory v1 config's pairs, as its dpo reads them
      return v1_pair_data(a_, tok, tokenizer_dir,
                          "LLaMA-Factory v1 rm (a token classifier's score head), the model's own chat template");
    const data::SftOptions so = preference_data_options(a_, "rm", tok, tokenizer_dir, &template_);
    StageData d;
    d.pad_id = so.pad_id;
    std::tie(d.train, d.eval) = data::load_pairwise_data(so, tok, *template_);
    d.description = "rm (value head), template '" + template_->name() + "'";
    return d;
  }

  // The value head from the resumed checkpoint, else the last adapter's or the model's
  // value_head.safetensors (LLaMA-Factory's load_valuehead_params), else PyTorch's init.
  // v1: its score head from the resumed checkpoint, else initialised as v1 does (also over a
  // model or adapter that has one: v1's run_rm initialises it after loading).
  void prepare(models::CausalLM& model, const PrepareContext& ctx) override {
    Rng rng(static_cast<uint64_t>(a_.seed));
    using Kind = models::ValueHead::Kind;
    head_ = std::make_unique<models::ValueHead>(model.config().hidden_size, rng, model.device(),
                                                v1_ ? Kind::kScore : Kind::kTrl);
    if (v1_) {
      ctx.say(head_->load(ctx.resume_dir) ? "score head: " + ctx.resume_dir
                                          : "score head: initialised N(0, (1 / (10 x hidden))^2), bias 0 (seed " +
                                                std::to_string(a_.seed) + "), as LLaMA-Factory v1's rm");
    } else {
      const std::string source = !ctx.resume_dir.empty()               ? ctx.resume_dir
                                 : !a_.adapter_name_or_path.empty() ? a_.adapter_name_or_path.back()
                                                                    : ctx.model_dir;
      ctx.say(head_->load(source) ? "value head: " + source + "/value_head.safetensors"
                                  : "value head: initialised (seed " + std::to_string(a_.seed) + ")");
    }
    for (auto& p : head_->parameters()) p.tensor->set_requires_grad(true);
    if (!model.config().tie_word_embeddings)
      for (auto& p : model.module().parameters())
        if (p.hf_names.at(0) == "lm_head.weight") p.tensor->set_requires_grad(false);
  }

  // No lm_head runs: the plan counts no cross-entropy buffers.
  std::string plan_memory(MemoryPlanInputs& in, int64_t) override {
    in.lm_head_loss = false;
    return "";
  }

  std::vector<nn::Module*> extra_modules() override { return {head_.get()}; }
  bool prepare_changes_trainables() const override { return true; }

  void save_extra(const std::string& dir, bool) const override {
    if (head_) head_->save(dir);
  }

  nn::NamedTensors saved_head() const override { return v1_ && head_ ? head_->tensors() : nn::NamedTensors{}; }

  // The mean of the micro-batches' losses; v1 weighs each micro-batch's mean by its share of the
  // step's scored tokens instead (micro_scale), as for its dpo.
  double micro_weight(const std::vector<data::Batch>& group) const override {
    if (group.empty()) return 0.0;
    if (!v1_) return 1.0 / static_cast<double>(group.size());
    int64_t scored = 0;
    for (const auto& b : group) scored += scored_labels(b);
    return scored > 0 ? 1.0 / static_cast<double>(scored) : 0.0;
  }

  MicroResult train_micro(models::CausalLM& model, const data::Batch& b, const MicroOptions& o) override {
    const Tensor scores = score(model, b, o.recompute, o.rng, a_.shift_attn);
    const std::vector<float> s = scores.to(Device{}).contiguous().to_float_vector();
    PairLoss p = pair_loss(s);
    const double scale = micro_scale(b);
    MicroResult r;
    r.loss = p.loss * scale;
    if (!std::isfinite(p.loss) || (o.seed == 0 && !o.backward_always)) return r;
    for (auto& g : p.grad) g = static_cast<float>(g * o.seed * scale);
    autograd::backward(scores, Tensor::from_vector(p.grad, {b.rows}).to(scores.device()));
    return r;
  }

  // Pipeline parallelism: the value head on the last stage's hidden states, its dropout drawing
  // from the micro-batch's generator after the stage's layers (as one process's after the model's:
  // each stage's layers draw the same one seed for LoRA dropout from a freshly seeded generator).
  models::TrainBatch pipeline_batch(models::CausalLM&, const data::Batch& b, const Rng&,
                                    const MicroOptions&) const override {
    return to_train_batch(b, a_.shift_attn);
  }
  PipelineHead pipeline_head(models::CausalLM&, const Tensor& x, int, const data::Batch& b,
                             const models::TrainBatch& tb, const MicroOptions&) override {
    if (!head_) UNILLM_THROW(ConfigError, "[rm] the value head is not prepared");
    const Tensor scores = reward_scores_from_hidden(*head_, x, b, tb.dropout_rng);
    PairLoss p = pair_loss(scores.to(Device{}).contiguous().to_float_vector());
    const double scale = micro_scale(b);
    for (auto& g : p.grad) g = static_cast<float>(g * scale);
    PipelineHead h;
    h.result.loss = p.loss * scale;
    h.root = scores;
    h.grad = std::move(p.grad);
    return h;
  }

  EvalPart eval_batch(models::CausalLM& model, const data::Batch& b, bool) override {
    autograd::NoGradGuard no_grad;
    const PairLoss p = pair_loss(score(model, b, false, nullptr, false).to(Device{}).contiguous().to_float_vector());
    const int64_t pairs = b.rows / 2;
    EvalPart e;
    e.loss_sum = p.loss * static_cast<double>(pairs);
    e.count = pairs;
    e.sums = {{"accuracy", static_cast<double>(p.correct), static_cast<double>(pairs)}};
    return e;
  }

  std::vector<std::string> plot_keys() const override { return {"loss", "eval_loss", "eval_accuracy"}; }

 private:
  Tensor score(models::CausalLM& model, const data::Batch& b, bool recompute, Rng* rng, bool shift_attn) {
    if (!head_) UNILLM_THROW(ConfigError, "[rm] the value head is not prepared");
    return reward_scores(model, *head_, b, recompute, rng, shift_attn);
  }

  // A micro-batch's loss and gradient multiplier: 1, or under v1 its scored tokens (micro_weight).
  double micro_scale(const data::Batch& b) const { return v1_ ? static_cast<double>(scored_labels(b)) : 1.0; }

  const TrainArgs& a_;
  const bool v1_;  // a LLaMA-Factory v1 config (`stage=rm`)
  std::unique_ptr<data::ChatTemplate> template_;
  std::unique_ptr<models::ValueHead> head_;
};

}  // namespace

Tensor reward_scores(models::CausalLM& model, const models::ValueHead& head, const data::Batch& b, bool recompute,
                     Rng* rng, bool shift_attn) {
  models::TrainBatch tb = to_train_batch(b);
  tb.dropout_rng = rng;  // LoRA dropout as configured
  set_shift_attn(tb, shift_attn);
  return reward_scores_from_hidden(head, model.hidden_states(tb, recompute), b, rng);
}

Tensor reward_scores_from_hidden(const models::ValueHead& head, const Tensor& x, const data::Batch& b, Rng* rng) {
  if (b.group != 2 || b.rows % 2 != 0)
    UNILLM_THROW(ShapeError, "[rm] a batch of ", b.rows, " rows is not chosen/rejected pairs");
  std::vector<int32_t> last(static_cast<size_t>(b.rows));
  for (int64_t r = 0; r < b.rows; ++r) last[r] = static_cast<int32_t>(r * b.seq_len + b.lengths[r] - 1);
  const Tensor h = ops::gather_rows(x, Tensor::from_ints(last, {b.rows}));
  return head.forward(h, rng ? head.train_keep_prob() : 1.0, rng);
}

std::unique_ptr<Stage> make_reward_stage(const TrainArgs& args) { return std::make_unique<RewardStage>(args); }

}  // namespace unillm::train
