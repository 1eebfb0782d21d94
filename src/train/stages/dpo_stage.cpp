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
// (LLaMA-Factory's trainers do not pass num_items_in_batch to the loss). Dropout is off
// (LLaMA-Factory's disable_dropout).
#include <chrono>
#include <cmath>

#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "data/pairwise.h"
#include "data/sft.h"
#include "models/adapter.h"
#include "ops/linear.h"
#include "ops/sequence_logprobs.h"
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
  }
  std::string name() const override { return "dpo"; }

  StageData load_data(const io::Tokenizer& tok, const std::string& tokenizer_dir) override {
    auto choice = data::choose_template(a_.template_name, tokenizer_dir);
    template_ = data::ChatTemplate::by_name(choice.name, tok, choice.options);
    data::SftOptions so = sft_options(a_);
    so.stage = "dpo";
    StageData d;
    d.pad_id = so.pad_id = pad_id_of(tok, template_->eos_id());
    std::tie(d.train, d.eval) = data::load_pairwise_data(so, tok, *template_);
    rows_ = d.train.num_rows() + d.eval.num_rows();
    d.description = std::string("dpo (pref_loss ") + pref_loss_name(cfg_.loss) + ", pref_beta " +
                    std::to_string(cfg_.beta) + "), template '" + template_->name() + "'";
    return d;
  }

  // The reference's kind: LoRA without ref_model switches the adapters off; otherwise a frozen copy
  // when it fits (ref_mode auto), or as ref_mode forces.
  std::string plan_memory(MemoryPlanInputs& in, int64_t limit) override {
    kind_ = RefKind::adapters_off;
    if (!pref_loss_uses_reference(cfg_.loss)) return "";
    const bool adapters_off = a_.finetuning_type == "lora" && a_.ref_model.empty();
    if (adapters_off && a_.ref_mode != "precompute") return "";
    MemoryPlanInputs copy = in, table = in;
    copy.reference_weights = in.params.base;  // the copy has the policy's shape
    copy.reference_weight_bytes = in.frozen_weight_bytes;
    table.reference_logps_rows = rows_;
    const bool fits = limit <= 0 || train::plan_memory(copy).peak <= limit;
    kind_ = a_.ref_mode == "model" || (a_.ref_mode == "auto" && fits) ? RefKind::copy : RefKind::precomputed;
    in = kind_ == RefKind::copy ? copy : table;
    if (kind_ == RefKind::copy && a_.ref_mode == "model" && !fits)
      return "ref_mode: precompute keeps 8 bytes per row instead of the reference copy (" +
             format_bytes(copy.reference_weights * copy.reference_weight_bytes) + ")";
    return "";
  }

  void prepare(models::CausalLM& model, const PrepareContext& ctx) override {
    if (kind_ == RefKind::adapters_off) {
      ref_ = Reference::adapters_off();
      return;
    }
    if (kind_ == RefKind::precomputed && !ctx.resume_dir.empty()) {
      ref_ = Reference::load(ctx.resume_dir, *ctx.train, *ctx.eval);
      ctx.say("reference: precomputed log-probs from " + ctx.resume_dir);
      return;
    }
    // The initial policy: the policy itself before step 1 when it is the reference's source (full
    // or freeze from model_name_or_path, LoRA at its initial adapter), else a loaded copy.
    const bool policy_is_initial = a_.ref_model.empty() && ctx.resume_dir.empty();
    std::unique_ptr<models::CausalLM> loaded;
    if (kind_ == RefKind::copy || !policy_is_initial) loaded = load_reference(ctx);
    if (kind_ == RefKind::copy) {
      ref_ = Reference::copy(std::move(loaded));
    } else {
      const auto t0 = std::chrono::steady_clock::now();
      ref_ = Reference::precompute(loaded ? *loaded : model, *ctx.train, *ctx.eval, ctx.loader,
                                   std::max<int64_t>(1, a_.per_device_eval_batch_size));
      ctx.say(UNILLM_MSG("reference: log-probs of ", ctx.train->num_rows() + ctx.eval->num_rows(),
                         " rows precomputed in ",
                         std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), " s"));
    }
    ctx.say(std::string("reference: ") + ref_kind_name(ref_->kind()));
  }

  void save_extra(const std::string& dir, bool checkpoint) const override {
    if (ref_ && checkpoint) ref_->save(dir);  // a resume needs the table; the final output does not
  }

  double micro_weight(const std::vector<data::Batch>& group) const override {
    return group.empty() ? 0.0 : 1.0 / static_cast<double>(group.size());
  }

  MicroResult train_micro(models::CausalLM& model, const data::Batch& b, const MicroOptions& o) override {
    PairForward f = forward(model, b, o.recompute, false);
    PrefLossOutput out = pref_loss(cfg_, f.in);
    MicroResult r;
    r.loss = out.loss;
    r.metrics = metrics(out, f);
    if (!std::isfinite(out.loss) || o.seed == 0) return r;  // the trainer stops on a non-finite loss
    const int64_t pairs = static_cast<int64_t>(out.d_policy_chosen.size());
    std::vector<float> g(static_cast<size_t>(2 * pairs));
    for (int64_t i = 0; i < pairs; ++i) {
      g[i] = static_cast<float>(out.d_policy_chosen[i] * o.seed);
      g[pairs + i] = static_cast<float>(out.d_policy_rejected[i] * o.seed);
    }
    autograd::backward(f.policy.logps, Tensor::from_vector(g, {2 * pairs}).to(f.policy.logps.dtype()).to(f.policy.logps.device()));
    return r;
  }

  EvalPart eval_batch(models::CausalLM& model, const data::Batch& b) override {
    autograd::NoGradGuard no_grad;
    PairForward f = forward(model, b, false, true);
    PrefLossOutput out = pref_loss(cfg_, f.in);
    const auto pairs = static_cast<int64_t>(f.in.policy_chosen.size());
    // HF's evaluation loop weights each batch's mean loss by its size (pairs here).
    return {out.loss * static_cast<double>(pairs), pairs, metrics(out, f)};
  }

  std::vector<std::string> plot_keys() const override { return {"loss", "eval_loss", "rewards/accuracies"}; }

 private:
  PairForward forward(models::CausalLM& model, const data::Batch& b, bool recompute, bool eval) {
    if (b.group != 2 || b.rows % 2 != 0)
      UNILLM_THROW(ShapeError, "[dpo] a micro-batch of ", b.rows, " rows is not chosen/rejected pairs");
    const int64_t pairs = b.rows / 2, t = b.seq_len;
    models::TrainBatch tb = to_train_batch(b);  // dropout_rng stays null: no dropout
    const Tensor labels = models::shifted_labels(tb.labels);
    const Tensor& w = model.lm_head_weight();
    PairForward f;
    if (pref_loss_uses_reference(cfg_.loss)) {
      // Before the policy's forward, so its transients are gone when the policy's activations exist.
      if (!ref_) ref_ = Reference::adapters_off();  // a stage used without prepare (tests)
      const std::vector<double> r = ref_->logps(model, b, eval);
      f.in.reference_chosen.assign(r.begin(), r.begin() + pairs);
      f.in.reference_rejected.assign(r.begin() + pairs, r.end());
    }
    const Tensor x = model.hidden_states(tb, recompute);
    f.policy = ops::sequence_logprobs(x, w, labels, t);
    const auto& v = f.policy.values;
    f.in.policy_chosen.assign(v.begin(), v.begin() + pairs);
    f.in.policy_rejected.assign(v.begin() + pairs, v.end());
    for (int64_t i = 0; i < 2 * pairs; ++i)
      (i < pairs ? f.in.chosen_len : f.in.rejected_len).push_back(static_cast<double>(f.policy.tokens[i]));
    logit_means(x, w, b, f);
    return f;
  }

  // The mean logit over the chosen (rejected) rows' real positions: x_i·(Σ_v w_v)/V per position,
  // one dot per row instead of [tokens × V] logits.
  void logit_means(const Tensor& x, const Tensor& w, const data::Batch& b, PairForward& f) {
    autograd::NoGradGuard no_grad;
    if (!w_mean_.defined() || w.requires_grad()) {  // a frozen lm_head's mean is computed once
      const Tensor host = w.to(Device{}).contiguous();  // no copy on the CPU: W can be large
      const int64_t v = host.size(0), c = host.size(1);
      std::vector<double> sum(static_cast<size_t>(c), 0.0);
      for (int64_t j = 0; j < v; ++j)
        for (int64_t p = 0; p < c; ++p) sum[p] += load_scalar(host.raw_data(), host.dtype(), j * c + p);
      std::vector<float> mean(sum.size());
      for (size_t p = 0; p < sum.size(); ++p) mean[p] = static_cast<float>(sum[p] / static_cast<double>(v));
      w_mean_ = Tensor::from_vector(mean, {1, c}).to(x.dtype()).to(x.device());
    }
    const Tensor per_pos = ops::linear(x.detach(), w_mean_).to(Device{}).to(DType::f64);  // [N, 1]
    const double* p = per_pos.data<double>();
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

  // A reference copy: the initial policy's source (model_name_or_path, or ref_model with
  // ref_model_adapters merged), frozen weights in the run's frozen dtype.
  std::unique_ptr<models::CausalLM> load_reference(const PrepareContext& ctx) const {
    const std::string dir = a_.ref_model.empty() ? ctx.model_dir : resolve_model_path(a_.ref_model, ctx.hf_cache_root);
    ctx.say("reference: loading " + dir + (a_.ref_model_adapters.empty() ? "" : " with ref_model_adapters merged"));
    auto m = models::load_causal_lm(dir, ctx.frozen_load);
    for (size_t i = 0; i < a_.ref_model_adapters.size(); ++i) {
      const std::string name = "ref" + std::to_string(i);
      models::load_adapter(*m, a_.ref_model_adapters[i], name);
      models::merge_adapter(*m, name);
    }
    return m;
  }

  const TrainArgs& a_;
  PrefLossConfig cfg_;
  RefKind kind_ = RefKind::adapters_off;
  std::unique_ptr<Reference> ref_;
  int64_t rows_ = 0;  // train + eval rows (a precomputed table's size)
  std::unique_ptr<data::ChatTemplate> template_;
  Tensor w_mean_;  // [1, C]: the lm_head's mean row
};

}  // namespace

std::unique_ptr<Stage> make_dpo_stage(const TrainArgs& args) { return std::make_unique<DpoStage>(args); }

}  // namespace unillm::train
