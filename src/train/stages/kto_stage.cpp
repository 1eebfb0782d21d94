// Stage kto (LLaMA-Factory's CustomKTOTrainer): each example is a target row (prompt + its
// response, desirable or not: kto_tag) and a KL row (the prompt with the response of another
// example of its preprocessing batch: data/feedback.h); a micro-batch holds target rows 0..B−1,
// then KL rows B..2B−1, and the examples' tags. The policy's target log-probs carry gradients; its
// KL log-probs run without them (LLaMA-Factory's torch.no_grad), as the reference's (reference.h).
// The loss and its per-sequence gradient are kto_loss.h's; its figures are summed over the
// logging interval and logged as LLaMA-Factory's log() divides them (Σsum / Σcount per split,
// rewards/margins, kl summed). Dropout is off (disable_dropout).
#include <cmath>

#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "data/feedback.h"
#include "data/sft.h"
#include "ops/sequence_logprobs.h"
#include "train/stages/kto_loss.h"
#include "train/stages/logit_mean.h"
#include "train/stages/reference.h"
#include "train/stages/stage.h"

namespace unillm::train {
namespace {

// Rows [begin, end) of b as a batch of their own (pairs are never packed: no positions/segments).
data::Batch rows_of(const data::Batch& b, int64_t begin, int64_t end) {
  data::Batch out;
  out.rows = end - begin;
  out.seq_len = b.seq_len;
  const auto t = static_cast<size_t>(b.seq_len);
  out.input_ids.assign(b.input_ids.begin() + begin * t, b.input_ids.begin() + end * t);
  out.labels.assign(b.labels.begin() + begin * t, b.labels.begin() + end * t);
  out.lengths.assign(b.lengths.begin() + begin, b.lengths.begin() + end);
  out.row_indices.assign(b.row_indices.begin() + begin, b.row_indices.begin() + end);
  return out;
}

struct KtoForward {
  KtoLossInput in;
  ops::SequenceLogprobs policy;  // target rows, with gradients
  SumMetrics logits;             // logits/chosen|rejected: Σ of mean logits over real positions
};

class KtoStage : public Stage {
 public:
  explicit KtoStage(const TrainArgs& a) : a_(a) {
    cfg_.beta = a.pref_beta;
    cfg_.desirable_weight = a.kto_chosen_weight;
    cfg_.undesirable_weight = a.kto_rejected_weight;
    cfg_.ftx = a.pref_ftx;
  }
  std::string name() const override { return "kto"; }

  StageData load_data(const io::Tokenizer& tok, const std::string& tokenizer_dir) override {
    const data::SftOptions so = preference_data_options(a_, "kto", tok, tokenizer_dir, &template_);
    StageData d;
    d.pad_id = so.pad_id;
    std::tie(d.train, d.eval) = data::load_feedback_data(so, tok, *template_);
    rows_ = d.train.num_rows() + d.eval.num_rows();
    const std::string warning = data::feedback_balance_warning(d.train);
    d.description = "kto (pref_beta " + std::to_string(cfg_.beta) + "), template '" + template_->name() + "'" +
                    (warning.empty() ? "" : "; warning: " + warning);
    return d;
  }

  void adopt_data(const StageData& d) override { rows_ = d.train.num_rows() + d.eval.num_rows(); }

  std::string plan_memory(MemoryPlanInputs& in, int64_t limit) override {
    return plan_reference(a_, in, limit, rows_, kind_);
  }
  void prepare(models::CausalLM& model, const PrepareContext& ctx) override {
    ref_ = make_reference(kind_, a_, model, ctx);
  }
  void save_extra(const std::string& dir, bool checkpoint) const override {
    if (ref_ && checkpoint) ref_->save(dir);
  }

  double micro_weight(const std::vector<data::Batch>& group) const override {
    return group.empty() ? 0.0 : 1.0 / static_cast<double>(group.size());
  }

  MicroResult train_micro(models::CausalLM& model, const data::Batch& b, const MicroOptions& o) override {
    KtoForward f = forward(model, b, o.recompute, false);
    const KtoLossOutput out = kto_loss(cfg_, f.in);
    MicroResult r;
    r.loss = out.loss;
    r.sums = sums(out, f);
    if (!std::isfinite(out.loss) || (o.seed == 0 && !o.backward_always)) return r;
    std::vector<float> g(out.d_policy.size());
    for (size_t i = 0; i < g.size(); ++i) g[i] = static_cast<float>(out.d_policy[i] * o.seed);
    const auto n = static_cast<int64_t>(g.size());
    autograd::backward(f.policy.logps, Tensor::from_vector(g, {n}).to(f.policy.logps.dtype()).to(f.policy.logps.device()));
    return r;
  }

  // Pipeline parallelism: the policy's pipelined forward runs the target rows; before it, two
  // forward-only passes through the stages give the reference's log-probs of every row (the policy
  // with its adapters off, or the frozen copy; a precomputed table needs none) and the policy's of
  // the KL rows, as train_micro computes them.
  models::TrainBatch pipeline_batch(models::CausalLM&, const data::Batch& b, const Rng&,
                                    const MicroOptions&) const override {
    check_rows(b);
    models::TrainBatch tb = to_train_batch(part(b, false));
    set_shift_attn(tb, a_.shift_attn);
    return tb;
  }
  void pipeline_prepare(models::CausalLM& model, const std::vector<const data::Batch*>& micros,
                        const std::vector<models::TrainBatch>&, const PipelinePass& pass) override {
    if (!ref_) ref_ = Reference::adapters_off();  // a stage used without prepare (tests)
    ref_logps_.assign(micros.size(), {});
    policy_kl_.assign(micros.size(), {});
    // The log-probs of each pass's batches, appended to out[micro-batch] (the reference's target
    // rows, then its KL rows, when they run apart).
    auto logps = [&](std::vector<std::vector<double>>& out, const models::CausalLM& m,
                     const std::vector<models::TrainBatch>& batches) {
      return [&out, &m, &batches](int i, const Tensor& x) {
        const auto k = static_cast<size_t>(i);
        const std::vector<double> v = ops::sequence_logprobs(x, m.lm_head_weight(),
                                                             models::shifted_labels(batches[k].labels),
                                                             batches[k].labels.size(1))
                                          .values;
        out[k].insert(out[k].end(), v.begin(), v.end());
      };
    };
    if (ref_->kind() == RefKind::precomputed) {
      for (size_t i = 0; i < micros.size(); ++i) ref_logps_[i] = ref_->logps(model, *micros[i], false);
    } else {
      models::CausalLM& ref = ref_->model() ? *ref_->model() : model;
      // As forward(): every row in one pass, or under shift_attn the target rows, then the KL rows.
      auto ref_batch = [&](const data::Batch& rows) {
        models::TrainBatch tb = to_train_batch(rows);
        if (!ref_->model()) {
          tb.adapters = std::vector<std::string>{};  // the policy with its adapters off
          set_shift_attn(tb, a_.shift_attn);
        }
        return tb;
      };
      std::vector<std::vector<models::TrainBatch>> passes(a_.shift_attn ? 2 : 1);
      for (const data::Batch* b : micros) {
        if (a_.shift_attn) {
          passes[0].push_back(ref_batch(part(*b, false)));
          passes[1].push_back(ref_batch(part(*b, true)));
        } else {
          passes[0].push_back(ref_batch(*b));
        }
      }
      for (const auto& batches : passes) pass(ref, batches, logps(ref_logps_, ref, batches));
    }
    std::vector<models::TrainBatch> kl;
    for (const data::Batch* b : micros) {
      kl.push_back(to_train_batch(part(*b, true)));
      set_shift_attn(kl.back(), a_.shift_attn);
    }
    pass(model, kl, logps(policy_kl_, model, kl));
  }
  PipelineHead pipeline_head(models::CausalLM& model, const Tensor& x, int micro, const data::Batch& b,
                             const models::TrainBatch& tb, const MicroOptions&) override {
    const auto k = static_cast<size_t>(micro);
    KtoForward f = from_hidden(model, x, part(b, false), b.tags, tb, ref_logps_.at(k), policy_kl_.at(k));
    const KtoLossOutput out = kto_loss(cfg_, f.in);
    PipelineHead h;
    h.result.loss = out.loss;
    h.result.sums = sums(out, f);
    h.root = f.policy.logps;
    for (double d : out.d_policy) h.grad.push_back(static_cast<float>(d));
    return h;
  }

  EvalPart eval_batch(models::CausalLM& model, const data::Batch& b, bool) override {
    autograd::NoGradGuard no_grad;
    KtoForward f = forward(model, b, false, true);
    const KtoLossOutput out = kto_loss(cfg_, f.in);
    const auto n = static_cast<int64_t>(f.in.policy.size());
    return {out.loss * static_cast<double>(n), n, {}, sums(out, f)};
  }

  // LLaMA-Factory's CustomKTOTrainer.log: per split Σsum / Σcount, rewards/margins, kl summed.
  StageMetrics summarize(const SumMetrics& s) const override {
    std::vector<KtoRatioMetric> ratios;
    double kl = 0;
    for (const auto& m : s) {
      if (m.name == "kl")
        kl = m.sum;
      else
        ratios.push_back({m.name, m.sum, m.count});
    }
    return kto_log_metrics(ratios, kl);
  }

  std::vector<std::string> plot_keys() const override { return {"loss", "eval_loss", "rewards/chosen"}; }

 private:
  static void check_rows(const data::Batch& b) {
    if (b.group != 2 || b.rows % 2 != 0 || static_cast<int64_t>(b.tags.size()) * 2 != b.rows)
      UNILLM_THROW(ShapeError, "[kto] a micro-batch of ", b.rows, " rows and ", b.tags.size(),
                   " tags is not target/KL rows of tagged examples");
  }

  KtoForward forward(models::CausalLM& model, const data::Batch& b, bool recompute, bool eval) {
    check_rows(b);
    const bool shift = a_.shift_attn && !eval;  // S²-Attn in training forwards only
    // The reference first (its transients are gone before the policy's activations exist).
    if (!ref_) ref_ = Reference::adapters_off();  // a stage used without prepare (tests)
    std::vector<double> ref;
    if (a_.shift_attn) {  // the target rows and the KL rows as LLaMA-Factory pads them: apart
      ref = ref_->logps(model, part(b, false), eval, shift);
      const std::vector<double> kl = ref_->logps(model, part(b, true), eval, shift);
      ref.insert(ref.end(), kl.begin(), kl.end());
    } else {
      ref = ref_->logps(model, b, eval);
    }
    std::vector<double> policy_kl = row_logps(model, part(b, true), std::nullopt, shift);  // no gradient
    const data::Batch target = part(b, false);
    models::TrainBatch tb = to_train_batch(target);  // dropout_rng stays null: no dropout
    set_shift_attn(tb, shift);
    return from_hidden(model, model.hidden_states(tb, recompute), target, b.tags, tb, ref, std::move(policy_kl));
  }

  // The target rows (kl: the KL rows) of b. Under shift_attn each part's padding is cut to its own
  // longest row rounded up to 8, as LLaMA-Factory's KTO collator pads the two apart (to a multiple
  // of 8): S²-Attn's groups are a quarter of the padded length. Otherwise the padding stays (it
  // changes nothing a causal forward computes).
  data::Batch part(const data::Batch& b, bool kl) const {
    const int64_t n = b.rows / 2;
    data::Batch p = kl ? rows_of(b, n, 2 * n) : rows_of(b, 0, n);
    return a_.shift_attn ? trim_padding(p, kShiftAttnMultiple) : p;
  }

  // The policy's target rows from their final hidden states x (tb: those rows), beside the
  // reference's log-probs of every row of b and the policy's of the KL rows.
  KtoForward from_hidden(models::CausalLM& model, const Tensor& x, const data::Batch& target,
                         const std::vector<uint8_t>& tags, const models::TrainBatch& tb, const std::vector<double>& ref,
                         std::vector<double> policy_kl) {
    const int64_t n = target.rows;
    KtoForward f;
    f.in.reference.assign(ref.begin(), ref.begin() + n);
    f.in.reference_kl.assign(ref.begin() + n, ref.end());
    f.in.policy_kl = std::move(policy_kl);
    f.policy = ops::sequence_logprobs(x, model.lm_head_weight(), models::shifted_labels(tb.labels), target.seq_len);
    f.in.policy = f.policy.values;
    for (int64_t i = 0; i < n; ++i) f.in.length.push_back(static_cast<double>(f.policy.tokens[i]));
    f.in.desirable = tags;
    // logits/<split>: the mean logit over each split's real positions (docs/preference.md).
    const std::vector<double> p = logit_means_.per_position(x, model.lm_head_weight());
    SumMetric chosen{"logits/chosen", 0, 0}, rejected{"logits/rejected", 0, 0};
    for (int64_t r = 0; r < n; ++r) {
      SumMetric& m = tags[r] ? chosen : rejected;
      for (int64_t t = 0; t < target.lengths[r]; ++t) m.sum += p[r * target.seq_len + t];
      m.count += target.lengths[r];
    }
    for (const SumMetric* m : {&chosen, &rejected})
      if (m->count > 0) f.logits.push_back(*m);
    return f;
  }

  static SumMetrics sums(const KtoLossOutput& out, const KtoForward& f) {
    SumMetrics s;
    for (const auto& m : out.metrics) s.push_back({m.key, m.sum, m.count});
    for (const auto& m : f.logits) s.push_back(m);
    s.push_back({"kl", out.kl, 1});
    return s;
  }

  const TrainArgs& a_;
  KtoLossConfig cfg_;
  RefKind kind_ = RefKind::adapters_off;
  std::unique_ptr<Reference> ref_;
  std::unique_ptr<data::ChatTemplate> template_;
  LogitMeans logit_means_;
  int64_t rows_ = 0;
  // Pipeline parallelism: the step's reference log-probs (every row) and the policy's of the KL
  // rows, by micro-batch.
  std::vector<std::vector<double>> ref_logps_, policy_kl_;
};

}  // namespace

std::unique_ptr<Stage> make_kto_stage(const TrainArgs& args) { return std::make_unique<KtoStage>(args); }

}  // namespace unillm::train
