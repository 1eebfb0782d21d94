// Evaluation of a training run: eval loss (and token accuracy) over the evaluation set, the best
// checkpoint of metric_for_best_model / load_best_model_at_end (HF semantics), and do_predict over
// the test part of split (run_pretrain.py).
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <tuple>

#include "autograd/grad_mode.h"
#include "dist/gather_strings.h"
#include "train/trainer_run.h"

namespace unillm::train::detail {

namespace fs = std::filesystem;

namespace {

// Positions scored per forward call: the logits of a chunk are [chunk, V] f32, at most 64 MiB.
int64_t logit_chunk(const models::ModelConfig& c) {
  return std::max<int64_t>(1, (int64_t{16} << 20) / std::max<int64_t>(1, c.vocab_size));
}

// (right, scored) of one sequence of n ids (positions: its RoPE positions, null = 0 … n−1),
// chunk positions at a time through one KV cache. Position t predicts label t + 1 while
// t + 1 < label_end (≥ n: the first label after the sequence is still its last position's).
std::pair<int64_t, int64_t> sequence_accuracy(models::CausalLM& model, const int32_t* ids, const int32_t* labels,
                                              const int32_t* positions, int64_t n, int64_t label_end) {
  int64_t right = 0, scored = 0;
  const int64_t chunk = logit_chunk(model.config());
  models::KvCaches cache = models::KvCaches::allocate(model.config(), 1, n, DType::f32, model.device());
  for (int64_t begin = 0; begin < n; begin += chunk) {
    const int64_t end = std::min(n, begin + chunk);
    const std::vector<int32_t> part(ids + begin, ids + end);
    models::ForwardBatch fb = models::single_sequence_batch(part, begin, {0}, n, false);
    if (positions) fb.positions = Tensor::from_ints(std::vector<int32_t>(positions + begin, positions + end), {end - begin});
    Tensor logits = model.forward(fb, cache).to(Device{});  // the host compares them with the labels
    const int64_t V = logits.shape()[1];  // [end - begin, V]
    const float* p = logits.data<float>();
    for (int64_t t = begin; t < end && t + 1 < label_end; ++t) {
      if (labels[t + 1] == data::kIgnoreIndex) continue;
      const float* row = p + (t - begin) * V;
      int64_t best = 0;
      for (int64_t v = 1; v < V; ++v) best = row[v] > row[best] ? v : best;
      right += best == labels[t + 1];
      ++scored;
    }
  }
  return {right, scored};
}

// A mixture-of-depths model routes each layer's top tokens of the batch's padded rows, so its
// accuracy comes from the batch's own forward (what the evaluation loss and HF's
// compute_accuracy read), not from one KV-cached sequence at a time: position t of a row of n
// tokens predicts label t + 1 for t + 1 < n, as below.
std::pair<int64_t, int64_t> routed_accuracy(models::CausalLM& model, const data::Batch& b) {
  const Tensor hidden = model.hidden_states(to_train_batch(b), false);  // [rows · seq_len, C]
  const int64_t chunk = logit_chunk(model.config()), total = b.rows * b.seq_len;
  int64_t right = 0, scored = 0;
  for (int64_t begin = 0; begin < total; begin += chunk) {
    const int64_t end = std::min(total, begin + chunk);
    Tensor logits = model.project_to_vocab(hidden.slice(0, begin, end)).to(Device{});
    const int64_t V = logits.shape()[1];
    const float* p = logits.data<float>();
    for (int64_t i = begin; i < end; ++i) {
      const int64_t r = i / b.seq_len, t = i % b.seq_len;
      if (t + 1 >= b.lengths[static_cast<size_t>(r)]) continue;
      const int32_t label = b.labels[static_cast<size_t>(i + 1)];
      if (label == data::kIgnoreIndex) continue;
      const float* row = p + (i - begin) * V;
      int64_t best = 0;
      for (int64_t v = 1; v < V; ++v) best = row[v] > row[best] ? v : best;
      right += best == label;
      ++scored;
    }
  }
  return {right, scored};
}

// The sequences token accuracy runs, one at a time through its own KV cache: each row of two
// tokens or more, or each of its packed segments when they are kept apart.
struct AccuracySequence {
  const int32_t *ids, *labels, *positions;
  int64_t n, label_end;
};

std::vector<AccuracySequence> accuracy_sequences(const data::Batch& b) {
  std::vector<AccuracySequence> out;
  for (int64_t r = 0; r < b.rows; ++r) {
    const int64_t n = b.lengths[r], at = r * b.seq_len;
    if (n < 2) continue;
    const int32_t* ids = b.input_ids.data() + at;
    const int32_t* labels = b.labels.data() + at;
    const int32_t* positions = b.position_ids.empty() ? nullptr : b.position_ids.data() + at;
    if (b.segment_ids.empty()) {  // one sequence (packing without neat: attention crosses samples)
      out.push_back({ids, labels, positions, n, n});
      continue;
    }
    // Packed samples kept apart (neat_packing, zero_padding): each segment is its own sequence,
    // as the training kernel's block-diagonal attention sees it; its last position still
    // predicts the row's next label (the next sample's first, kIgnoreIndex unless
    // train_on_prompt), as the packed forward scores it.
    const int32_t* seg = b.segment_ids.data() + at;
    for (int64_t s = 0; s < n;) {
      int64_t e = s + 1;
      while (e < n && seg[e] == seg[s]) ++e;
      if (seg[s] != 0) out.push_back({ids + s, labels + s, positions ? positions + s : nullptr, e - s, n - s});
      s = e;
    }
  }
  return out;
}

}  // namespace

std::pair<int64_t, int64_t> token_accuracy_counts(models::CausalLM& model, const data::Batch& b) {
  if (model.config().mixture_of_depths) return routed_accuracy(model, b);
  int64_t right = 0, scored = 0;
  for (const AccuracySequence& q : accuracy_sequences(b)) {
    const auto [r, s] = sequence_accuracy(model, q.ids, q.labels, q.positions, q.n, q.label_end);
    right += r;
    scored += s;
  }
  return {right, scored};
}

int64_t token_accuracy_forwards(const models::ModelConfig& c, const data::Batch& b) {
  if (c.mixture_of_depths) return 1;
  const int64_t chunk = logit_chunk(c);
  int64_t n = 0;
  for (const AccuracySequence& q : accuracy_sequences(b)) n += (q.n + chunk - 1) / chunk;
  return n;
}

void token_accuracy_stand_ins(models::CausalLM& model, int64_t forwards) {
  UNILLM_CHECK(forwards == 0 || !model.config().mixture_of_depths,
               "[train] a mixture-of-depths model's token accuracy runs one forward per batch");
  for (int64_t i = 0; i < forwards; ++i) {
    models::KvCaches cache = models::KvCaches::allocate(model.config(), 1, 1, DType::f32, model.device());
    model.forward(models::single_sequence_batch({0}, 0, {0}, 1, false), cache);
  }
}

bool Run::evaluates_split(bool accuracy) const {
  return (a_.tensor_degree > 1 || a_.context_degree > 1) && a_.pipeline_degree <= 1 && a_.expert_degree <= 1 &&
         !accuracy;
}

bool Run::evaluates_through_pipeline(bool accuracy) const {
  return pipeline_ && !accuracy && stage_->evaluates_from_hidden(*model_) && !expert_parallel() &&
         (!shards_ || shards_->by_owner() || shards_->keeps_whole());
}

bool Run::evaluates_accuracy() const { return stage_->token_loss() && best_metric_target().first == "accuracy"; }

// Several processes split the batches (batch i on process i mod dp); the parts come back to every
// process and are added in batch order, so the result is one process's bit for bit. Under tensor
// or context parallelism (evaluates_split) the processes of a tp group evaluate the same batches with
// training's split forwards, each multiplying its blocks, and the replicas split the batches; the
// loss is then one process's within the rounding of the split sums.
EvalResult Run::evaluate(const data::TokenizedDataset& ds, bool accuracy, int64_t first, int64_t end) {
  autograd::NoGradGuard no_grad;
  const bool split = evaluates_split(accuracy) && model_->tensor_parallel();
  const bool piped = evaluates_through_pipeline(accuracy);
  // Otherwise every process evaluates its batches alone with whole forwards (no tp peer computes
  // the same batch): the model's split switched off for the evaluation, and tensor parallelism's
  // blocks gathered a layer at a time around each forward (token accuracy's forwards are
  // inference's, which never split).
  struct WholeLayers {
    models::CausalLM& m;
    nn::Collective* tp;
    bool sp, vp, ap;
    nn::Collective* mlp;
    ~WholeLayers() { m.set_tensor_parallel(tp, sp, vp, ap, mlp); }
  } whole{*model_, model_->tensor_parallel(), model_->sequence_parallel(), model_->vocab_parallel(),
          model_->attention_only_parallel(), model_->mlp_tensor_parallel()};
  if (!split && !piped) model_->set_tensor_parallel(nullptr);
  // ZeRO-3 and stages holding their own layers: the root unit for the evaluation, each layer
  // gathered around its forward (through the pipeline, every stage runs its own).
  const ParamShards::Root root(piped ? nullptr : shards_.get());
  // A reference copy kept by owner: its foreign layers broadcast around their forwards too.
  std::vector<std::unique_ptr<ParamShards::Root>> frozen_roots;
  for (ParamShards* s : frozen_shards_)
    if (!piped && s->by_owner()) frozen_roots.push_back(std::make_unique<ParamShards::Root>(s));
  evaluating_split_ = split;  // (a stage's evaluation rounds are the tp groups')
  struct Splitting {
    bool& flag;
    ~Splitting() { flag = false; }
  } splitting{evaluating_split_};
  const TpBlocks::PerLayer blocks(split ? nullptr : tp_blocks_.get(), *model_);
  data::LoaderOptions eo = loader_opts_;
  eo.batch_size = a_.per_device_eval_batch_size;
  const int64_t examples = end < 0 ? ds.num_rows() / ds.group : end;
  const int64_t batches = (examples - first + eo.batch_size - 1) / eo.batch_size;
  std::vector<EvalPart> parts(static_cast<size_t>(batches));
  std::vector<std::pair<int64_t, int64_t>> acc(static_cast<size_t>(batches), {0, 0});
  // Dataset order; the rows of an example (a pair) stay in one batch, laid out as the loader's.
  const EvalBatches batch = [&](int64_t i) {
    const int64_t e = first + i * eo.batch_size;
    return data::make_batch(ds, data::group_rows(ds, e, std::min(examples - e, eo.batch_size)), eo);
  };
  if (piped)
    evaluate_through_pipeline(batches, batch, parts, acc);
  else
    evaluate_batches(batches, batch, accuracy, split, parts, acc);
  double loss_sum = 0;
  int64_t items = 0, right = 0, scored = 0;
  std::vector<std::tuple<std::string, double, int64_t>> metrics;
  SumMetrics sums;
  for (size_t i = 0; i < parts.size(); ++i) {
    loss_sum += parts[i].loss_sum;
    items += parts[i].count;
    accumulate_metrics(metrics, parts[i].metrics);
    add_sums(sums, parts[i].sums);
    right += acc[i].first;
    scored += acc[i].second;
  }
  EvalResult res;
  res.loss = items > 0 ? loss_sum / static_cast<double>(items) : 0.0;
  if (!std::isfinite(res.loss))
    UNILLM_THROW(NumericError, "[train] evaluation after step ", state_.global_step,
                 ": the eval loss is ", std::isnan(res.loss) ? "NaN" : "inf",
                 " (NaN/inf weights, or a config value such as rms_norm_eps)");
  if (accuracy)
    res.accuracy = scored > 0 ? static_cast<double>(right) / static_cast<double>(scored) : 0.0;
  for (const auto& [name, sum, count] : metrics) res.metrics.emplace_back(name, sum / static_cast<double>(count));
  for (const auto& [name, v] : stage_->summarize(sums)) {
    if (name == "accuracy")
      res.accuracy = v;  // logged as eval_accuracy, and metric_for_best_model's "accuracy"
    else
      res.metrics.emplace_back(name, v);
  }
  return res;
}

// Each replica's pipeline runs its batches (batch i on replica i mod dp) forward only, the last
// stage computing each one's part from its final hidden states. A pass waits for its sends, so
// passes of 2·pp batches bound the final activations in flight (one [N, C] each, less than a
// training micro-batch keeps per layer) while the stages overlap on all but pp − 1 of a pass's
// slots.
void Run::evaluate_through_pipeline(int64_t batches, const EvalBatches& batch, std::vector<EvalPart>& parts,
                                    std::vector<std::pair<int64_t, int64_t>>& acc) {
  const int64_t W = dp_size(), me = dp_rank();
  std::vector<int64_t> mine;
  for (int64_t i = me; i < batches; i += W) mine.push_back(i);
  const auto pass = static_cast<size_t>(2 * pipeline_->stages());
  for (size_t s = 0; s < mine.size(); s += pass) {
    std::vector<models::TrainBatch> tbs;
    for (size_t k = s; k < std::min(mine.size(), s + pass); ++k) tbs.push_back(to_train_batch(batch(mine[k])));
    pipeline_->forward_only(*model_, tbs, [&](int j, const Tensor& x) {
      parts[static_cast<size_t>(mine[s + static_cast<size_t>(j)])] =
          stage_->eval_from_hidden(*model_, x, tbs[static_cast<size_t>(j)]);
    });
  }
  // The last stage's parts (a tp group's first, or under sequence parallelism each, for its
  // tokens).
  if (world_size() > 1) gather_eval_parts(parts, acc, me, W, pipeline_->holds_loss() && counts_loss());
}

// Each evaluating replica runs its batches (batch i on replica i mod W) with the model's forwards:
// every process alone, or under split forwards each tp group together.
void Run::evaluate_batches(int64_t batches, const EvalBatches& batch, bool accuracy, bool split,
                           std::vector<EvalPart>& parts, std::vector<std::pair<int64_t, int64_t>>& acc) {
  // The evaluating replicas: every process, or under split forwards each tp group (the mesh's
  // fastest axis, so a group's processes are consecutive ranks).
  const int64_t T = split ? model_->tensor_parallel()->size() : 1;
  const int64_t W = world_size() / T, me = world_rank() / T;
  UNILLM_CHECK(!split || world_rank() % T == tp_rank(), "[train] tensor parallelism's group is not the mesh's fastest axis");
  // Under ZeRO-3 (ZeRO-2's units hold their parameters whole: their gathers communicate nothing),
  // tensor parallelism's blocks gathered per layer (TpBlocks::PerLayer) and expert parallelism
  // every forward communicates, so every replica runs as many as the others: token accuracy's
  // forwards (one per sequence and chunk) are topped up to the round's most, which every process
  // counts from the batches (all of them are known to each). A tp group's split forwards
  // communicate within the group, whose processes run the same batches.
  const bool gathers = (shards_ && !shards_->keeps_whole()) || (tp_blocks_ && !split);
  const bool lockstep = W > 1 && (gathers || expert_parallel());
  std::vector<int64_t> round_forwards;  // round r: batches r·W … r·W + W − 1
  if (lockstep && accuracy) {
    round_forwards.assign(static_cast<size_t>((batches + W - 1) / W), 0);
    for (int64_t i = 0; i < batches; ++i) {
      int64_t& m = round_forwards[static_cast<size_t>(i / W)];
      m = std::max(m, token_accuracy_forwards(model_->config(), batch(i)));
    }
  }
  for (int64_t i = me; i < batches; i += W) {
    data::Batch b = batch(i);
    parts[static_cast<size_t>(i)] = stage_->eval_batch(*model_, b);
    if (!accuracy) continue;
    acc[static_cast<size_t>(i)] = token_accuracy_counts(*model_, b);
    if (lockstep)
      token_accuracy_stand_ins(*model_, round_forwards[static_cast<size_t>(i / W)] -
                                            token_accuracy_forwards(model_->config(), b));
  }
  // A replica with one batch fewer sits the last round out (a stage exchanging per round takes
  // part). Where forwards communicate it evaluates the first batch again as a stand-in instead,
  // its result dropped, and runs the round's accuracy forwards as stand-ins.
  if (W > 1 && me >= batches % W && batches % W != 0) {
    if (lockstep) {
      data::Batch b = batch(0);
      stage_->eval_batch(*model_, b, /*stand_in=*/true);
      if (accuracy) token_accuracy_stand_ins(*model_, round_forwards.back());
    } else {
      stage_->idle_round(/*evaluation=*/true);
    }
  }
  // Split forwards: the parts of the processes that count the loss (a group's first, or under
  // sequence parallelism each, for its tokens).
  if (world_size() > 1) gather_eval_parts(parts, acc, me, W, !split || counts_loss());
}

// Every process's evaluated batches (first, first + stride, …) to every process (doubles as JSON
// round-trip exactly). Parts of one batch from several processes (sequence parallelism's shares
// of its tokens) are added in rank order.
void Run::gather_eval_parts(std::vector<EvalPart>& parts, std::vector<std::pair<int64_t, int64_t>>& acc,
                            int64_t first, int64_t stride, bool contributes) {
  nlohmann::json mine = nlohmann::json::array();
  for (size_t i = static_cast<size_t>(first); contributes && i < parts.size(); i += static_cast<size_t>(stride)) {
    if (!std::isfinite(parts[i].loss_sum))  // JSON has no NaN; the error ends every process
      UNILLM_THROW(NumericError, "[train] evaluation after step ", state_.global_step, ": the eval loss of batch ", i,
                   " is ", std::isnan(parts[i].loss_sum) ? "NaN" : "inf",
                   " (NaN/inf weights, or a config value such as rms_norm_eps)");
    nlohmann::json m = nlohmann::json::array(), s = nlohmann::json::array();
    for (const auto& [name, v] : parts[i].metrics) m.push_back({name, v});
    for (const auto& x : parts[i].sums) s.push_back({x.name, x.sum, x.count});
    mine.push_back({i, parts[i].loss_sum, parts[i].count, m, s, acc[i].first, acc[i].second});
  }
  std::vector<EvalPart> all(parts.size());
  std::vector<std::pair<int64_t, int64_t>> all_acc(acc.size(), {0, 0});
  std::vector<bool> seen(parts.size(), false);
  for (const std::string& text : dist::allgather_strings(*h_.dp, mine.dump())) {
    for (const auto& e : nlohmann::json::parse(text)) {
      const auto i = e[0].get<size_t>();
      EvalPart p;
      p.loss_sum = e[1].get<double>();
      p.count = e[2].get<int64_t>();
      for (const auto& m : e[3]) p.metrics.emplace_back(m[0].get<std::string>(), m[1].get<double>());
      for (const auto& x : e[4]) p.sums.push_back({x[0].get<std::string>(), x[1].get<double>(), x[2].get<double>()});
      const std::pair<int64_t, int64_t> a{e[5].get<int64_t>(), e[6].get<int64_t>()};
      if (seen[i]) {  // another share of the batch's tokens: only the token loss is split so
        UNILLM_CHECK(p.metrics.empty() && p.sums.empty() && all[i].metrics.empty() && all[i].sums.empty(),
                     "[train] evaluation batch ", i, " has a stage's metrics from several processes");
        all[i].loss_sum += p.loss_sum;
        all[i].count += p.count;
        all_acc[i].first += a.first;
        all_acc[i].second += a.second;
        continue;
      }
      seen[i] = true;
      all[i] = std::move(p);
      all_acc[i] = a;
    }
  }
  parts = std::move(all);
  acc = std::move(all_acc);
}

nlohmann::json Run::eval_keys(const std::string& prefix, const EvalResult& r) const {
  nlohmann::json j = {{prefix + "_loss", r.loss}};
  if (stage_->token_loss()) j[prefix + "_perplexity"] = std::exp(r.loss);
  if (r.accuracy >= 0) j[prefix + "_accuracy"] = r.accuracy;
  for (const auto& [name, v] : r.metrics) j[prefix + "_" + name] = v;
  return j;
}

void Run::log_eval(const std::string& prefix, const EvalResult& r, double runtime) {
  nlohmann::json j = eval_keys(prefix, r);
  j[prefix + "_runtime"] = runtime;
  j["eval_step"] = state_.global_step;
  nlohmann::json h = j;  // the log history: the figures and the step
  h.erase(prefix + "_perplexity");
  h.erase(prefix + "_runtime");
  h.erase("eval_step");
  h["step"] = state_.global_step;
  std::string figures;
  for (const auto& [name, v] : r.metrics) figures += ", " + name + " " + std::to_string(v);
  if (log_) log_->write(j);
  state_.log_history.push_back(h);
  const std::string which = prefix == "eval" ? "" : " (" + prefix.substr(5) + ")";
  say("eval at step " + std::to_string(state_.global_step) + which + ": loss " + std::to_string(r.loss) +
      (stage_->token_loss() ? ", perplexity " + std::to_string(std::exp(r.loss)) : "") +
      (r.accuracy >= 0 ? ", accuracy " + std::to_string(r.accuracy) : "") + figures);
}

void Run::run_eval() {
  // Token accuracy (pt/sft) runs when it decides the best checkpoint; a stage may report its own.
  const bool accuracy = evaluates_accuracy();
  // Expert parallelism: the loss's forwards are training's, each process's experts serving the
  // group's tokens; token accuracy's are inference's, which run every expert here.
  const ExpertShares::Whole experts(accuracy ? expert_shares_.get() : nullptr);
  if (eval_splits_.empty()) {
    const auto t0 = Clock::now();
    last_eval_ = evaluate(eval_, accuracy);
    log_eval("eval", last_eval_, since(t0));
  }
  for (EvalSplit& split : eval_splits_) {  // HF: one evaluate, and one log entry, per dataset
    const auto t0 = Clock::now();
    split.last = evaluate(eval_, accuracy, split.first, split.end);
    log_eval("eval_" + split.name, split.last, since(t0));
  }
  last_eval_step_ = state_.global_step;
  // HF's EarlyStoppingCallback.on_evaluate: against the best so far (the best is updated after,
  // at the save), a strict improvement resets the count, anything else adds one.
  if (a_.early_stopping_steps && state_.global_step < total_steps_ && !stop_early_) {
    if (const std::optional<double> v = eval_metric()) {
      const auto& best = state_.best_metric;
      state_.early_stopping_counter = beats_best(*v) ? 0 : state_.early_stopping_counter + 1;
      if (state_.early_stopping_counter >= *a_.early_stopping_steps) {
        stop_early_ = true;
        say("early stopping at step " + std::to_string(state_.global_step) + ": " + a_.metric_for_best_model +
            " has not improved on " + std::to_string(*best) + " for " + std::to_string(state_.early_stopping_counter) +
            " evaluations (early_stopping_steps " + std::to_string(*a_.early_stopping_steps) + ")");
      }
    }
  }
}

// HF's _determine_best_metric at a save, here also at the end (the final weights).
void Run::update_best(const std::string& dir) {
  if (a_.metric_for_best_model.empty() || last_eval_step_ != state_.global_step) return;
  const std::optional<double> v = eval_metric();
  if (!v) {
    say("metric_for_best_model " + a_.metric_for_best_model + " was not in this evaluation (no example of its "
        "split); the best checkpoint is unchanged");
    return;
  }
  if (!beats_best(*v)) return;
  state_.best_metric = *v;
  state_.best_model_checkpoint = dir;
}

bool Run::beats_best(double v) const {
  const auto& best = state_.best_metric;
  return !best || (a_.greater_is_better.value_or(false) ? v > *best : v < *best);
}

std::pair<std::string, const Run::EvalSplit*> Run::best_metric_target() const {
  const std::string& m = a_.metric_for_best_model;
  if (eval_splits_.empty()) return {m, nullptr};
  const auto [name, metric] = dataset_metric(m, a_.eval_dataset);  // args_checks.cpp checked it names one
  for (const EvalSplit& s : eval_splits_)
    if (s.name == name) return {metric, &s};
  return {"", nullptr};
}

std::optional<double> Run::eval_metric() {
  const auto [m, split] = best_metric_target();
  const EvalResult& r = split ? split->last : last_eval_;
  if (m.empty() || r.loss < 0) return std::nullopt;
  if (m == "loss") return r.loss;
  if (m == "perplexity") return std::exp(r.loss);
  if (m == "accuracy") return r.accuracy;
  auto it = std::find_if(r.metrics.begin(), r.metrics.end(),  // a stage metric (args_checks.cpp)
                         [&m = m](const auto& e) { return e.first == m; });
  if (it == r.metrics.end()) return std::nullopt;
  return it->second;
}

void Run::load_best_at_end() {
  const std::string& best = state_.best_model_checkpoint;
  if (!a_.load_best_model_at_end || best.empty() || best == a_.output_dir) return;
  if (!fs::exists(fs::path(best) / "trainer_state.json")) {  // HF warns and keeps the final weights
    say("the best checkpoint " + best + " is gone; keeping the final weights");
    return;
  }
  say("loading the best checkpoint " + best + " (eval " + a_.metric_for_best_model + " " +
      std::to_string(*state_.best_metric) + ")");
  opt_.reset();
  tp_blocks_.reset();  // the reloaded model is whole
  expert_shares_.reset();
  shards_.reset();
  arena_.reset();
  model_.reset();
  reloading_best_ = true;  // read whole, not cut as read
  load(best);
  if (eval_enabled_) run_eval();  // the results then describe the weights written
}

// do_predict: the loss over the test part of split, logged as HF's predict metrics (test_*).
void Run::predict() {
  const auto t0 = Clock::now();
  test_loss_ = evaluate(test_, false).loss;
  if (log_) log_->write({{"test_loss", *test_loss_},
               {"test_perplexity", std::exp(*test_loss_)},
               {"test_runtime", since(t0)},
               {"test_step", state_.global_step}});
  say("test (the third part of split, " + std::to_string(test_.num_rows()) + " rows): loss " +
      std::to_string(*test_loss_) + ", perplexity " + std::to_string(std::exp(*test_loss_)));
}

}  // namespace unillm::train::detail
