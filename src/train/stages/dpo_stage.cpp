// Stage dpo (LLaMA-Factory's CustomDPOTrainer): pairs in one micro-batch (chosen rows, then
// rejected), sequence log-probs of the policy through the fused lm_head, the reference's without
// gradients, the loss of pref_loss.h with its gradient per sequence seeded into backward.
//
// The reference is the initial policy (reference.h). With LoRA it is the same model with the
// adapters off (PEFT's disable_adapter(), what TRL does without a ref_model): one copy of the base
// weights; the adapters' B starts at zero, so at step 1 the policy equals the reference bit for
// bit. Full and freeze fine-tuning (or ref_model) hold a frozen copy, or precomputed log-probs
// when the memory plan says the copy does not fit (ref_mode).
// A micro-batch's loss is the mean over its pairs; the step's, the mean over its micro-batches
// (LLaMA-Factory's trainers do not pass num_items_in_batch to the loss); a LLaMA-Factory v1 config
// (docs/llamafactory-v1.md) weighs the micro-batches by their scored tokens instead. Dropout is off
// (LLaMA-Factory's disable_dropout). pref_bco_weight keeps BCO's running reward baseline here
// (pref_loss.h's BcoRunning), in checkpoints as bco_running.json.
#include <cmath>
#include <filesystem>

#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "data/pairwise.h"
#include "data/sft.h"
#include "io/json_file.h"
#include "ops/sequence_logprobs.h"
#include "train/stages/logit_mean.h"
#include "train/stages/pref_loss.h"
#include "train/stages/reference.h"
#include "train/stages/stage.h"

namespace unillm::train {
namespace {

// One micro-batch through the policy (and the reference): what the loss and the metrics need.
struct PairForward {
  PrefLossInput in;
  ops::SequenceLogprobs policy;
  double logits_chosen = 0, logits_rejected = 0;
};

class DpoStage : public Stage {
 public:
  explicit DpoStage(const TrainArgs& a) : a_(a) {
    cfg_.loss = pref_loss_from_name(a.pref_loss);
    cfg_.beta = a.pref_beta;
    cfg_.label_smoothing = a.dpo_label_smoothing;
    cfg_.ftx = a.pref_ftx;
    cfg_.simpo_gamma = a.simpo_gamma;
    cfg_.bco_weight = a.pref_bco_weight;
    v1_ = !a.v1_train_dataset.empty();
  }
  std::string name() const override { return "dpo"; }

  StageData load_data(const io::Tokenizer& tok, const std::string& tokenizer_dir) override {
    if (v1_) {  // a LLaMA-Factory v1 config's pairs (data/v1_data.h)
      StageData d = v1_pair_data(a_, tok, tokenizer_dir,
                                 std::string("LLaMA-Factory v1 dpo (pref_loss ") + pref_loss_name(cfg_.loss) +
                                     ", pref_beta " + std::to_string(cfg_.beta) + "), the model's own chat template");
      rows_ = d.train.num_rows();
      return d;
    }
    const data::SftOptions so = preference_data_options(a_, "dpo", tok, tokenizer_dir, &template_);
    StageData d;
    d.pad_id = so.pad_id;
    std::tie(d.train, d.eval) = data::load_pairwise_data(so, tok, *template_);
    rows_ = d.train.num_rows() + d.eval.num_rows();
    d.description = std::string("dpo (pref_loss ") + pref_loss_name(cfg_.loss) + ", pref_beta " +
                    std::to_string(cfg_.beta) + "), template '" + template_->name() + "'";
    return d;
  }

  void adopt_data(const StageData& d) override { rows_ = d.train.num_rows() + d.eval.num_rows(); }

  std::string plan_memory(MemoryPlanInputs& in, int64_t limit) override {
    if (!pref_loss_uses_reference(cfg_.loss)) return "";
    return plan_reference(a_, in, limit, rows_, kind_);
  }

  void prepare(models::CausalLM& model, const PrepareContext& ctx) override {
    if (pref_loss_uses_reference(cfg_.loss)) ref_ = make_reference(kind_, a_, model, ctx);
    if (pref_loss_uses_bco(cfg_) && !ctx.resume_dir.empty()) load_bco(ctx.resume_dir);
    exchange_ = ctx.exchange;
    eval_exchange_ = ctx.eval_exchange;
  }

  void save_extra(const std::string& dir, bool checkpoint) const override {
    if (ref_ && checkpoint) ref_->save(dir);  // a resume needs the table; the final output does not
    if (pref_loss_uses_bco(cfg_) && checkpoint)
      io::write_file_atomic((std::filesystem::path(dir) / kBcoFile).string(), head_state());
  }

  // BCO's baseline is updated in the last pipeline stage's head; the trainer copies it on.
  bool keeps_head_state() const override { return pref_loss_uses_bco(cfg_); }
  std::string head_state() const override {  // nlohmann writes doubles that read back exactly
    return nlohmann::json{{"mean", bco_.mean}, {"var", bco_.var}, {"count", bco_.count}}.dump();
  }
  void set_head_state(const std::string& text) override { bco_ = bco_from(nlohmann::json::parse(text), "the last stage"); }

  // The mean of the micro-batches' losses; LLaMA-Factory v1's trainer weighs each micro-batch's
  // mean loss by its share of the step's scored tokens instead (base_trainer.fit), so there
  // micro-batch i's loss counts scored_i times (micro_scale) over the step's scored tokens.
  double micro_weight(const std::vector<data::Batch>& group) const override {
    if (group.empty()) return 0.0;
    if (!v1_) return 1.0 / static_cast<double>(group.size());
    int64_t scored = 0;
    for (const auto& b : group) scored += scored_labels(b);
    return scored > 0 ? 1.0 / static_cast<double>(scored) : 0.0;
  }

  MicroResult train_micro(models::CausalLM& model, const data::Batch& b, const MicroOptions& o) override {
    PairForward f = forward(model, b, o.recompute, false);
    update_bco(f.in, o.stand_in);
    PrefLossOutput out = pref_loss(cfg_, f.in);
    MicroResult r;
    const double scale = micro_scale(b);
    r.loss = out.loss * scale;
    r.metrics = metrics(out, f);
    if (!std::isfinite(out.loss) || (o.seed == 0 && !o.backward_always)) return r;  // the trainer stops on a non-finite loss
    std::vector<float> g = policy_grad(out, o.seed * scale);
    const auto n = static_cast<int64_t>(g.size());
    autograd::backward(f.policy.logps, Tensor::from_vector(g, {n}).to(f.policy.logps.dtype()).to(f.policy.logps.device()));
    return r;
  }

  // Pipeline parallelism: the reference's log-probs of the step's micro-batches come from a
  // forward-only pass through the stages (the policy with its adapters off, or the frozen copy,
  // split like the policy) before the step's pipeline; a precomputed table needs no pass. The
  // last stage computes the loss from the policy's hidden states as train_micro does (BCO's
  // baseline exchanged there between the replicas' last stages, round by round as under data
  // parallelism: a replica's k-th micro-batch is the step group's k · dp + its rank; then copied
  // to the other stages, head_state).
  models::TrainBatch pipeline_batch(models::CausalLM&, const data::Batch& b, const Rng&,
                                    const MicroOptions&) const override {
    return to_train_batch(b, a_.shift_attn);
  }
  void pipeline_prepare(models::CausalLM& model, const std::vector<const data::Batch*>& micros,
                        const std::vector<models::TrainBatch>& policy, const PipelinePass& pass) override {
    ref_logps_.assign(micros.size(), {});
    if (!pref_loss_uses_reference(cfg_.loss)) return;
    if (!ref_) ref_ = Reference::adapters_off();  // a stage used without prepare (tests)
    if (ref_->kind() == RefKind::precomputed) {
      for (size_t i = 0; i < micros.size(); ++i) ref_logps_[i] = ref_->logps(model, *micros[i], false);
      return;
    }
    models::CausalLM& ref = ref_->model() ? *ref_->model() : model;
    std::vector<models::TrainBatch> batches = policy;  // no dropout in dpo
    for (auto& tb : batches) {
      if (!ref_->model()) tb.adapters = std::vector<std::string>{};  // the policy with its adapters off
      else tb.shift_attn_ratio = 0;  // a frozen copy attends fully (Reference::logps)
    }
    pass(ref, batches, [&](int i, const Tensor& x) {
      const auto k = static_cast<size_t>(i);
      ref_logps_[k] = ops::sequence_logprobs(x, ref.lm_head_weight(), models::shifted_labels(batches[k].labels),
                                             micros[k]->seq_len)
                          .values;
    });
  }
  PipelineHead pipeline_head(models::CausalLM& model, const Tensor& x, int micro, const data::Batch& b,
                             const models::TrainBatch& tb, const MicroOptions& o) override {
    check_pairs(b);
    PairForward f = from_hidden(model, x, b, tb, ref_logps_.at(static_cast<size_t>(micro)));
    update_bco(f.in);
    PrefLossOutput out = pref_loss(cfg_, f.in);
    PipelineHead h;
    const double scale = micro_scale(b);
    h.result.loss = out.loss * scale;
    h.result.metrics = metrics(out, f);
    h.root = f.policy.logps;
    h.grad = policy_grad(out, scale);
    return h;
  }

  EvalPart eval_batch(models::CausalLM& model, const data::Batch& b, bool stand_in) override {
    autograd::NoGradGuard no_grad;
    PairForward f = forward(model, b, false, true);
    update_bco(f.in, stand_in, true);  // LLaMA-Factory's evaluation moves the baseline too
    PrefLossOutput out = pref_loss(cfg_, f.in);
    const auto pairs = static_cast<int64_t>(f.in.policy_chosen.size());
    // HF's evaluation loop weights each batch's mean loss by its size (pairs here).
    return {out.loss * static_cast<double>(pairs), pairs, metrics(out, f), {}};
  }

  std::vector<std::string> plot_keys() const override { return {"loss", "eval_loss", "rewards/accuracies"}; }

 private:
  static constexpr const char* kBcoFile = "bco_running.json";

  // BCO's baseline: updated with this batch's mean reward before the loss reads it (bco_loss).
  // Under data parallelism every process applies the round's rewards in rank order (the order one
  // process would run the micro-batches in), each loss reading the baseline right after its own,
  // so dp processes keep one baseline and train as one process with gradient_accumulation × dp.
  void update_bco(PrefLossInput& in, bool stand_in = false, bool evaluation = false) {
    if (!pref_loss_uses_bco(cfg_)) return;
    const double mine = bco_batch_reward(cfg_, in);
    const auto& exchange = evaluation ? eval_exchange_ : exchange_;
    if (!exchange) {
      bco_.update(mine);
      in.bco_delta = bco_.mean;
      return;
    }
    const PrepareContext::Round round = exchange(stand_in ? std::nullopt : std::optional<double>(mine));
    for (size_t r = 0; r < round.values.size(); ++r) {
      if (!round.values[r]) continue;
      bco_.update(*round.values[r]);
      if (static_cast<int64_t>(r) == round.mine) in.bco_delta = bco_.mean;
    }
    if (stand_in) in.bco_delta = bco_.mean;  // (its result is dropped)
  }

  void idle_round(bool evaluation) override {
    const auto& exchange = evaluation ? eval_exchange_ : exchange_;
    if (!pref_loss_uses_bco(cfg_) || !exchange) return;
    for (const auto& v : exchange(std::nullopt).values)
      if (v) bco_.update(*v);
  }

  void load_bco(const std::string& dir) {
    const std::string path = (std::filesystem::path(dir) / kBcoFile).string();
    if (!std::filesystem::exists(path))
      UNILLM_THROW(ConfigError, "[dpo] ", dir, " has no ", kBcoFile,
                   ": it was not written by a run with pref_bco_weight, so BCO's running baseline cannot resume");
    bco_ = bco_from(io::read_json_file(path), path);
  }

  static BcoRunning bco_from(const nlohmann::json& j, const std::string& source) {
    try {
      return {j.at("mean").get<double>(), j.at("var").get<double>(), j.at("count").get<double>()};
    } catch (const nlohmann::json::exception& e) {
      UNILLM_THROW(IoError, "[dpo] BCO's running baseline from ", source, ": ", e.what());
    }
  }

  // A micro-batch's loss and gradient multiplier: 1, or under v1 its scored tokens (micro_weight).
  double micro_scale(const data::Batch& b) const { return v1_ ? static_cast<double>(scored_labels(b)) : 1.0; }

  static void check_pairs(const data::Batch& b) {
    if (b.group != 2 || b.rows % 2 != 0)
      UNILLM_THROW(ShapeError, "[dpo] a micro-batch of ", b.rows, " rows is not chosen/rejected pairs");
  }

  PairForward forward(models::CausalLM& model, const data::Batch& b, bool recompute, bool eval) {
    check_pairs(b);
    // dropout_rng stays null: no dropout; S²-Attn in training forwards only
    models::TrainBatch tb = to_train_batch(b, a_.shift_attn && !eval);
    std::vector<double> r;
    if (pref_loss_uses_reference(cfg_.loss)) {
      // Before the policy's forward, so its transients are gone when the policy's activations exist.
      if (!ref_) ref_ = Reference::adapters_off();  // a stage used without prepare (tests)
      r = ref_->logps(model, b, eval, a_.shift_attn);
    }
    return from_hidden(model, model.hidden_states(tb, recompute), b, tb, r);
  }

  // The policy's part of a micro-batch from its final hidden states x, beside the reference's
  // log-probs r of its rows (empty without a reference).
  PairForward from_hidden(models::CausalLM& model, const Tensor& x, const data::Batch& b,
                          const models::TrainBatch& tb, const std::vector<double>& r) {
    const int64_t pairs = b.rows / 2, t = b.seq_len;
    const Tensor labels = models::shifted_labels(tb.labels);
    const Tensor& w = model.lm_head_weight();
    PairForward f;
    if (!r.empty()) {
      f.in.reference_chosen.assign(r.begin(), r.begin() + pairs);
      f.in.reference_rejected.assign(r.begin() + pairs, r.end());
    }
    f.policy = ops::sequence_logprobs(x, w, labels, t, 0, a_.ld_alpha ? ld_weights(labels, pairs, t, *a_.ld_alpha)
                                                                       : std::vector<double>{});
    const auto& v = f.policy.values;
    f.in.policy_chosen.assign(v.begin(), v.begin() + pairs);
    f.in.policy_rejected.assign(v.begin() + pairs, v.end());
    for (int64_t i = 0; i < 2 * pairs; ++i)
      (i < pairs ? f.in.chosen_len : f.in.rejected_len).push_back(static_cast<double>(f.policy.tokens[i]));
    logit_means(x, w, b, f);
    return f;
  }

  // d loss / d (policy log-probs of the chosen rows, then the rejected) × seed.
  static std::vector<float> policy_grad(const PrefLossOutput& out, double seed) {
    const auto pairs = static_cast<int64_t>(out.d_policy_chosen.size());
    std::vector<float> g(static_cast<size_t>(2 * pairs));
    for (int64_t i = 0; i < pairs; ++i) {
      g[i] = static_cast<float>(out.d_policy_chosen[i] * seed);
      g[pairs + i] = static_cast<float>(out.d_policy_rejected[i] * seed);
    }
    return g;
  }

  // LD-DPO's token weights (LLaMA-Factory's get_batch_logps with ld_alpha): 1 from a row's first
  // scored position up to the length of the pair's shorter response, ld_alpha after it.
  static std::vector<double> ld_weights(const Tensor& shifted, int64_t pairs, int64_t t, double alpha) {
    const int32_t* l = shifted.data<int32_t>();
    const int64_t rows = 2 * pairs;
    std::vector<int64_t> start(rows, 0), len(rows, 0);
    for (int64_t r = 0; r < rows; ++r) {
      bool seen = false;
      for (int64_t i = 0; i < t; ++i) {
        if (l[r * t + i] == ops::kIgnoreIndex) continue;
        if (!seen) start[r] = i, seen = true;
        ++len[r];
      }
    }
    std::vector<double> w(static_cast<size_t>(rows * t));
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t pub = start[r] + std::min(len[r % pairs], len[r % pairs + pairs]);
      for (int64_t i = 0; i < t; ++i) w[r * t + i] = i < pub ? 1.0 : alpha;
    }
    return w;
  }

  // The mean logit over the chosen (rejected) rows' real positions.
  void logit_means(const Tensor& x, const Tensor& w, const data::Batch& b, PairForward& f) {
    const std::vector<double> p = logit_means_.per_position(x, w);
    const int64_t pairs = b.rows / 2;
    double sum[2] = {0, 0}, count[2] = {0, 0};
    for (int64_t r = 0; r < b.rows; ++r)
      for (int64_t t = 0; t < b.lengths[r]; ++t) {
        sum[r >= pairs] += p[r * b.seq_len + t];
        ++count[r >= pairs];
      }
    f.logits_chosen = count[0] > 0 ? sum[0] / count[0] : 0.0;
    f.logits_rejected = count[1] > 0 ? sum[1] / count[1] : 0.0;
  }

  // pref_loss's metrics with logits/chosen|rejected after logps/rejected (LLaMA-Factory's order).
  static StageMetrics metrics(const PrefLossOutput& out, const PairForward& f) {
    StageMetrics m;
    for (const auto& e : out.metrics) {
      m.push_back(e);
      if (e.first == "logps/rejected") {
        m.emplace_back("logits/chosen", f.logits_chosen);
        m.emplace_back("logits/rejected", f.logits_rejected);
      }
    }
    return m;
  }

  const TrainArgs& a_;
  PrefLossConfig cfg_;
  RefKind kind_ = RefKind::adapters_off;
  std::unique_ptr<Reference> ref_;
  BcoRunning bco_;
  PrepareContext::Exchange exchange_, eval_exchange_;
  int64_t rows_ = 0;  // train + eval rows (a precomputed table's size)
  std::unique_ptr<data::ChatTemplate> template_;
  bool v1_ = false;  // a LLaMA-Factory v1 config (`stage=dpo`)
  LogitMeans logit_means_;
  std::vector<std::vector<double>> ref_logps_;  // pipeline parallelism: the step's, by micro-batch
};

}  // namespace

std::unique_ptr<Stage> make_dpo_stage(const TrainArgs& args) { return std::make_unique<DpoStage>(args); }

}  // namespace unillm::train
