// The optimizer step, checkpoints, logging and results of a training run.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <tuple>

#include "autograd/engine.h"
#include "dist/gather_strings.h"
#include "dist/process_group.h"
#include "autograd/grad_mode.h"
#include "models/save.h"
#include "nn/low_precision_saves.h"
#include "train/finetune.h"
#include "train/output_dir.h"
#include "train/plot.h"
#include "train/trainer_run.h"
#include "train/zero.h"

namespace unillm::train::detail {

namespace fs = std::filesystem;

int64_t real_tokens(const data::Batch& b) {
  int64_t n = 0;
  for (auto l : b.lengths) n += l;
  return n;
}

void accumulate_metrics(std::vector<std::tuple<std::string, double, int64_t>>& acc, const StageMetrics& m) {
  for (const auto& [key, v] : m) {
    const std::string& name = key;  // clang 14 cannot capture a structured binding
    auto it = std::find_if(acc.begin(), acc.end(), [&](const auto& e) { return std::get<0>(e) == name; });
    if (it == acc.end()) {
      acc.emplace_back(name, v, 1);
    } else {
      std::get<1>(*it) += v;
      ++std::get<2>(*it);
    }
  }
}

int64_t Run::world_size() const { return h_.dp ? h_.dp->size() : 1; }
int64_t Run::world_rank() const { return h_.dp ? h_.dp->rank() : 0; }
int64_t Run::dp_size() const { return model_mesh_ ? model_mesh_->shape().dp : world_size(); }
int64_t Run::dp_rank() const { return model_mesh_ ? model_mesh_->coord().dp : world_rank(); }
void Run::dp_barrier() {
  if (world_size() > 1) h_.dp->barrier();
}

void Run::merge_interval_metrics() {
  if (world_size() == 1) return;
  nlohmann::json mine = {{"m", nlohmann::json::array()}, {"s", nlohmann::json::array()}};
  for (const auto& [name, sum, count] : interval_metrics_) mine["m"].push_back({name, sum, count});
  for (const auto& s : interval_sums_) mine["s"].push_back({s.name, s.sum, s.count});
  interval_metrics_.clear();
  interval_sums_.clear();
  for (const std::string& text : dist::allgather_strings(*h_.dp, mine.dump())) {
    const nlohmann::json j = nlohmann::json::parse(text);
    for (const auto& e : j["m"]) {
      const std::string name = e[0].get<std::string>();
      auto it = std::find_if(interval_metrics_.begin(), interval_metrics_.end(),
                             [&](const auto& x) { return std::get<0>(x) == name; });
      if (it == interval_metrics_.end()) {
        interval_metrics_.emplace_back(name, e[1].get<double>(), e[2].get<int64_t>());
      } else {
        std::get<1>(*it) += e[1].get<double>();
        std::get<2>(*it) += e[2].get<int64_t>();
      }
    }
    SumMetrics s;
    for (const auto& e : j["s"]) s.push_back({e[0].get<std::string>(), e[1].get<double>(), e[2].get<double>()});
    add_sums(interval_sums_, s);
  }
}

double Run::train_step() {
  const auto t0 = Clock::now();
  // Every process reads the step's whole group (the order one process would train with
  // gradient_accumulation_steps × dp) and trains micro-batches dp_rank, dp_rank + dp, …: the
  // loss weights come from the whole group, and the summed gradients are that process's.
  const int64_t dp = dp_size(), me = dp_rank();
  std::vector<data::Batch> group;
  const int64_t left = loader_->batches_per_epoch() - loader_->state().batch_index;
  for (int64_t i = 0; i < std::min<int64_t>(a_.gradient_accumulation_steps * dp, left); ++i)
    group.push_back(loader_->next());
  int64_t tokens = 0;
  for (auto& b : group) tokens += real_tokens(b);
  // The step's loss is Σ weight · (micro-batch loss): token-weighted for pt/sft, the mean of the
  // micro-batches for the preference stages.
  const double weight = stage_->micro_weight(group);
  double loss_sum = 0, aux_sum = 0;
  {
    // Mixed precision: the activations saved for backward are kept in bf16/f16.
    std::optional<nn::LowPrecisionSaves> low_saves;
    if (const DType low = low_precision_dtype(a_); low != DType::f32) low_saves.emplace(low);
    MicroOptions mo;
    // fp16 scales the loss gradient (and so every gradient) by the loss scale.
    mo.seed = (scaler_ ? scaler_->scale : 1.0) * weight;
    mo.aux_seed = scaler_ ? scaler_->scale : 1.0;
    mo.recompute = !a_.disable_gradient_checkpointing;
    // Dropout: each micro-batch of the step draws from its own generator, seeded from one draw of
    // the run's (checkpointed) generator and the micro-batch's place in the step's group, so a
    // micro-batch gets the same masks whichever process trains it.
    const uint64_t step_seed = rng_.next_u64();
    Rng micro_rng;
    mo.rng = &micro_rng;
    if (pipeline_) std::tie(loss_sum, aux_sum) = pipeline_micros(group, mo, step_seed);
    int64_t last = -1;  // this process's last micro-batch: its backward completes the gradients
    for (size_t i = 0; i < group.size(); ++i)
      if (static_cast<int64_t>(i) % dp == me) last = static_cast<int64_t>(i);
    // In the epoch's last group a process may have a micro-batch fewer than others (below).
    const auto mine = static_cast<int64_t>(group.size() / dp) + (me < static_cast<int64_t>(group.size() % dp) ? 1 : 0);
    const auto most = static_cast<int64_t>((group.size() + dp - 1) / dp);
    for (size_t i = 0; i < group.size() && !pipeline_; ++i) {
      if (static_cast<int64_t>(i) % dp != me) continue;
      // Such a process sits out a round after its last micro-batch, where a stage may exchange
      // (BCO): it starts its buckets at the end instead, keeping every process's collectives in
      // one order.
      if (buckets_ && static_cast<int64_t>(i) == last && mine == most) buckets_->arm();
      micro_rng.reseed(step_seed + 0x9E3779B97F4A7C15ull * (i + 1));
      if (shards_) shards_->begin_micro(/*stand_in=*/false, stage_->model_token_loss());
      MicroResult r = stage_->train_micro(*model_, group[i], mo);
      if (shards_) shards_->end_micro();
      // Checked on the reduced loss: a NaN or inf here would train every weight into NaN.
      if (!std::isfinite(r.loss)) stop_non_finite("the loss", r.loss);
      if (!counts_loss()) continue;  // a tensor-parallel peer's copy of rank 0's loss and metrics
      loss_sum += r.loss;
      aux_sum += r.aux_loss;
      accumulate_metrics(interval_metrics_, r.metrics);
      add_sums(interval_sums_, r.sums);
    }
    if (!counts_loss()) loss_sum = 0, aux_sum = 0;
    // ZeRO-3: every process gathers and reduces each unit once per micro-batch, so one with fewer
    // micro-batches in the epoch's last group runs the group's first again as a stand-in whose
    // reductions contribute zeros (the same collectives, nothing added) and drops its result.
    // Otherwise such a process sits the round out (a stage exchanging per round takes part).
    for (int64_t k = mine; !pipeline_ && k < most; ++k) {
      if (expert_parallel()) {
        // Under expert parallelism its experts still run on the group's tokens: the stand-in's
        // loss is seeded with zero, and the gradients its experts get from the others are kept.
        micro_rng.reseed(step_seed);
        if (shards_) shards_->begin_micro(/*stand_in=*/false, stage_->model_token_loss());
        stage_->train_micro(*model_, group[0], mo.expert_stand_in());
        if (shards_) shards_->end_micro();
        continue;
      }
      if (!shards_) {
        stage_->idle_round(/*evaluation=*/false);
        continue;
      }
      micro_rng.reseed(step_seed);
      shards_->begin_micro(/*stand_in=*/true, stage_->model_token_loss());
      MicroOptions stand_in = mo;
      stand_in.stand_in = true;
      stage_->train_micro(*model_, group[0], stand_in);
      shards_->end_micro();
    }
  }
  // Tensor parallelism: the whole-computed parameters' gradients once, from tp rank 0 (with
  // buckets, each bucket drops its range just before its allreduce starts).
  if (!buckets_) drop_replicated_grads(0, arena_->numel());
  // ZeRO: the gradients this process holds complete after the reduction are its range's (stage 2).
  auto* zero = dynamic_cast<ZeroOptimizer*>(opt_.get());
  // The step's loss and gradients over every process (before the checks that read them): data
  // parallel replicas' sums, and under pipeline parallelism each stage's layers' (the others' are
  // zero where a process does not run them).
  if (world_size() > 1) {
    // Buckets first: some were started during the last backward, and every process must issue
    // its collectives in the same order (a process without a micro-batch this step started none).
    if (buckets_) buckets_->finish();
    Tensor l = Tensor::empty({2}, DType::f64);
    l.data<double>()[0] = loss_sum;
    l.data<double>()[1] = aux_sum;
    h_.dp->allreduce(l);
    loss_sum = l.data<double>()[0];
    aux_sum = l.data<double>()[1];
    if (zero) {
      if (shards_) shards_->before_reduce();  // stages owning their layers: the tied embedding's two parts
      zero->reduce_gradients(buckets_ != nullptr);
    } else if (!buckets_) {
      Tensor g = arena_->grad_tensor();
      h_.dp->allreduce(g);
    }
  }
  const double loss = loss_sum * weight + aux_sum;
  bool finite = !scaler_ || scaler_->unscale(zero ? zero->reduced() : *arena_);
  if (zero && scaler_) finite = zero->all_ranks(finite);  // every process skips the step, or none
  opt_->prepare_grads();  // BAdam's ratio mode cuts each gradient to its mask before clipping
  const double grad_norm = zero ? zero->clip_grad_norm(a_.max_grad_norm) : clip_grad_norm(*arena_, a_.max_grad_norm);
  // fp16's scaler skips a step whose gradients overflowed (the scale backs off); otherwise a
  // non-finite gradient norm would make the update NaN.
  if (!scaler_ && !std::isfinite(grad_norm)) stop_non_finite("the gradient norm", grad_norm);
  if (finite) {
    if (shards_) shards_->before_step();  // ZeRO-2's units: the shard's copy of this process's pieces
    opt_->step(scheduled_lr(sched_, a_.learning_rate, state_.global_step));
    if (shards_) shards_->after_step();  // … all-gathered into the whole parameters
  }
  if (scaler_) {  // an overflowing step is skipped (GradScaler), the schedule still advances
    if (!finite) say("step " + std::to_string(state_.global_step + 1) + ": gradients overflowed; skipped, loss scale " +
                     std::to_string(scaler_->scale) + " -> " + std::to_string(scaler_->scale * scaler_->backoff_factor));
    scaler_->update(!finite);
    state_.loss_scale = scaler_->scale;
    state_.loss_scale_growth_tracker = scaler_->growth_tracker;
  }
  state_.mod_calls = model_->mod_calls();
  arena_->zero_grads();
  if (zero) zero->zero_grads();  // stage 3's shard (the whole arena's storage is released)
  ++state_.global_step;
  const auto st = loader_->state();
  state_.loader_epoch = st.epoch;
  state_.loader_batch = st.batch_index;
  state_.epoch = static_cast<double>(st.epoch) + static_cast<double>(st.batch_index) / loader_->batches_per_epoch();
  state_.tokens_seen += tokens;
  interval_loss_ += loss;
  interval_tokens_ += tokens;
  interval_seconds_ += since(t0);
  ++interval_steps_;
  const double lr = scheduled_lr(sched_, a_.learning_rate, state_.global_step);  // the next step's
  // logging_strategy epoch (HF's on_epoch_end): the step that consumed an epoch's last batch.
  bool log_now = a_.logging_strategy == "epoch" ? st.batch_index == 0
                                                      : log_every_ > 0 && state_.global_step % log_every_ == 0;
  if (a_.logging_first_step && state_.global_step == 1 && a_.logging_strategy != "no") log_now = true;  // HF
  if (log_now) log_step(loss, grad_norm, lr);
  if (h_.progress) {
    ProgressInfo p;
    p.step = state_.global_step;
    p.total_steps = total_steps_;
    p.loss = loss;
    p.lr = lr;
    p.grad_norm = grad_norm;
    p.tokens_per_s = static_cast<double>(tokens) / std::max(since(t0), 1e-9);
    p.epoch = state_.epoch;
    p.elapsed_s = since(start_);
    p.remaining_s = p.elapsed_s / std::max<int64_t>(state_.global_step, 1) * (total_steps_ - state_.global_step);
    p.memory_bytes = std::max(run_alloc_peak_, backend_for(a_.device).allocator(a_.device.index).peak_bytes());
    h_.progress(p);
  }
  return loss;
}

// Data parallelism and ZeRO stage 1 over every process (which sums the whole arena as plain data
// parallelism does; stage 2 reduces ranges, and pipeline stages reduce their layers at different
// times): the gradient sum in buckets started while backward runs.
void Run::setup_grad_buckets() {
  const auto* zero = dynamic_cast<ZeroOptimizer*>(opt_.get());
  if (world_size() == 1 || pipeline_ || (zero && !zero->buckets_reduce())) return;
  buckets_ = std::make_unique<GradBuckets>(*arena_, *h_.dp, a_.ddp_bucket_cap_mb * 1048576.0);
  if (!tp_replicated_.empty() && !counts_loss())
    buckets_->set_before_start([this](int64_t lo, int64_t hi) { drop_replicated_grads(lo, hi); });
  model_->set_layer_backward_hook([this](int64_t layer) { buckets_->layer_done(layer); });
  say("gradients summed in " + buckets_->describe() + ", each started as backward leaves its layers");
}

// Stops the run at the step being computed: nothing of this step reached the weights.
void Run::stop_non_finite(const std::string& what, double value) const {
  const std::string step = std::to_string(state_.global_step + 1);
  UNILLM_THROW(NumericError, "[train] step ", step, ": ", what, " is ",
               std::isnan(value) ? "NaN" : value > 0 ? "inf" : "-inf",
               "; stopping before the update. Nothing is saved; ",
               last_checkpoint_.empty() ? "no checkpoint was written"
                                        : "the last good checkpoint is " + last_checkpoint_,
               ". Causes: NaN/inf weights in the model, a learning_rate too high for this model, "
               "or a config value such as rms_norm_eps");
}

// Weights are checked before every save (a pass at save time only): a learning rate that
// overflows the update gives inf/NaN weights whose loss is still finite at this step.
void Run::check_weights_finite(const std::string& dir) const {
  if (shards_ ? shards_->all_finite() : arena_->all_finite()) return;
  UNILLM_THROW(NumericError, "[train] step ", state_.global_step,
               ": the trained weights hold NaN or inf after the optimizer step (learning_rate ",
               a_.learning_rate, " too high?); ", dir, " is not written. ",
               last_checkpoint_.empty() ? "No checkpoint was written"
                                        : "The last good checkpoint is " + last_checkpoint_);
}

void Run::log_step(double loss, double grad_norm, double lr) {
  (void)loss;
  const double elapsed = since(start_);
  nlohmann::json j;
  j["current_steps"] = state_.global_step;
  j["total_steps"] = total_steps_;
  j["loss"] = std::round(interval_loss_ / std::max<int64_t>(interval_steps_, 1) * 1e4) / 1e4;
  j["lr"] = lr;
  j["epoch"] = std::round(state_.epoch * 100) / 100;
  j["percentage"] = std::round(10000.0 * state_.global_step / total_steps_) / 100;
  j["elapsed_time"] = format_duration(elapsed);
  j["remaining_time"] = format_duration(elapsed / state_.global_step * (total_steps_ - state_.global_step));
  j["step"] = state_.global_step;
  j["grad_norm"] = grad_norm;
  j["tokens_per_s"] = std::round(interval_tokens_ / std::max(interval_seconds_, 1e-9) * 10) / 10;
  nlohmann::json h = {{"step", state_.global_step}, {"epoch", j["epoch"]}, {"loss", j["loss"]},
                      {"learning_rate", lr}, {"grad_norm", grad_norm}};
  merge_interval_metrics();
  for (const auto& [name, sum, count] : interval_metrics_) j[name] = h[name] = sum / static_cast<double>(count);
  for (const auto& [name, v] : stage_->summarize(interval_sums_)) j[name] = h[name] = v;
  if (log_) log_->write(j);
  state_.log_history.push_back(h);
  interval_metrics_.clear();
  interval_sums_.clear();
  interval_loss_ = interval_seconds_ = 0;
  interval_steps_ = interval_tokens_ = 0;
}

// Evaluation and saving after a step: every eval_steps / save_steps, or at each epoch's end
// (HF's epoch strategies: the step that consumed the epoch's last batch). The last step is always
// evaluated, and is a checkpoint whenever save_strategy is not "no" (HF's DefaultFlowCallback:
// "save the model at the end if we have a save strategy"; not PaddleNLP's, see save_final_step);
// finish() writes output_dir too. save_strategy best (HF): a checkpoint exactly at the
// evaluations that beat the best metric so far (the first one does), none at the end otherwise.
void Run::maybe_eval_and_save() {
  const int64_t step = state_.global_step;
  const bool last = step == total_steps_;
  const bool epoch_end = loader_->state().batch_index == 0;
  // eval_delay (HF's DefaultFlowCallback): periodic evaluations wait until that step or epoch.
  const bool delayed = eval_by_epoch_ ? static_cast<double>(loader_->state().epoch) < a_.eval_delay
                                      : static_cast<double>(step) < a_.eval_delay;
  const bool evaluate =
      eval_enabled_ && (last || (!delayed && (eval_by_epoch_ ? epoch_end : step % eval_every_ == 0)));
  if (evaluate) run_eval();
  if (evaluate && sched_.type == "reduce_lr_on_plateau") step_plateau();
  bool save = false;
  if (a_.save_strategy == "best") {  // HF: a checkpoint at each evaluation that sets a new best
    const std::optional<double> v = evaluate ? eval_metric() : std::nullopt;
    save = v && beats_best(*v);
  } else {
    const bool periodic = save_by_epoch_ ? epoch_end : save_every_ > 0 && step % save_every_ == 0;
    save = periodic || (last && a_.save_final_step && a_.save_strategy != "no");
  }
  if (save) save_now();
  if (last && !save) update_best(a_.output_dir);  // the final weights compete as HF's last checkpoint
  if (h_.after_step) h_.after_step(step);
}

// What save_trained writes for an adapter run is the adapter (and trainable modules_to_save);
// it reads frozen weights only for a grown vocabulary's embedding (saved in full) and PiSSA's
// conversion.
// ZeRO-3's parameters while the model is written: an adapter dir of trainable tensors only gathers
// only the trainable buffers; a full model is written a unit at a time; anything else (an adapter
// run that also writes base weights: a grown vocabulary, PiSSA's conversion) gathers every unit.
Run::SaveScope::SaveScope(Run& run) {
  // Tensor parallelism's blocks of frozen weights and expert parallelism's others' experts, where
  // they are written (not an adapter's trainable-only dir).
  // A model dir (freeze tuning's) is written a weight at a time, its blocks gathered as it comes
  // to them by the writer's tp group (the others are not asked); an adapter dir that holds
  // frozen weights (PiSSA's conversion, a grown vocabulary) is not read through before_read.
  if (run.tp_blocks_ && !run.checkpoint_is_trainable_only()) {
    if (run.streams_blocks_on_save()) {
      const dist::MeshCoord& c = run.model_mesh_->coord();
      if (c.pp == 0 && c.dp == 0 && c.sharding == 0)  // world rank 0's
        streamed_blocks_.emplace(run.tp_blocks_.get(), run.model_mesh_->tp(), run.writer());
    } else {
      blocks_.emplace(run.tp_blocks_.get());
    }
  }
  if (run.expert_shares_ && !run.checkpoint_is_trainable_only()) experts_.emplace(run.expert_shares_.get());
  ParamShards* s = run.shards_.get();
  if (!s) return;
  if (run.a_.adapter_tuning())
    whole_.emplace(s, run.checkpoint_is_trainable_only());
  else if (run.in_writer_group())  // the writer's sharding group serves its unit-at-a-time gathers
    streamed_.emplace(s, run.writer());
}

io::BeforeRead Run::SaveScope::before_read() {
  if (streamed_blocks_) {
    TpBlocks::Streamed* st = &*streamed_blocks_;
    return [st](const Tensor& t) { st->read(t); };
  }
  if (!streamed_) return {};
  ParamShards::Streamed* st = &*streamed_;
  return [st](const Tensor& t) { st->read(t); };
}

bool Run::checkpoint_is_trainable_only() const {
  return a_.adapter_tuning() && !a_.pissa_convert &&
         model_->config().vocab_size == models::load_model_config(model_dir_ + "/config.json").vocab_size;
}

bool Run::jit_stop_requested() {
  if (!a_.enable_jit_checkpoint || !h_.stop_requested) return false;
  if (world_size() == 1) return h_.stop_requested();
  Tensor flag = Tensor::empty({1}, DType::i32);
  flag.data<int32_t>()[0] = h_.stop_requested() ? 1 : 0;
  h_.dp->allreduce(flag, dist::ReduceOp::max);  // a signal reaches processes at different times
  return flag.data<int32_t>()[0] != 0;
}

TrainResult Run::jit_checkpoint() {
  if (last_saved_step_ != state_.global_step) save_now();
  say(UNILLM_MSG("enable_jit_checkpoint: SIGTERM received; step ", state_.global_step, " is saved in ",
                 last_checkpoint_, "; stopping (resume with resume_from_checkpoint: true)"));
  TrainResult r;
  r.steps = state_.global_step;
  r.output_dir = a_.output_dir;
  r.interrupted = true;
  return r;
}

// HF's _evaluate steps a ReduceLROnPlateau scheduler with eval_<metric_for_best_model> after each
// evaluation during training (not eval_on_start's, nor one after training).
void Run::step_plateau() {
  const std::optional<double> v = eval_metric();
  if (!v)
    UNILLM_THROW(ConfigError, "[train] reduce_lr_on_plateau steps with metric_for_best_model '",
                 a_.metric_for_best_model, "', which this evaluation does not report");
  const double before = sched_.plateau_scale * a_.learning_rate;
  if (plateau_step(sched_.plateau, state_.plateau, *v, a_.learning_rate))
    say(UNILLM_MSG("reduce_lr_on_plateau: ", a_.metric_for_best_model, " has not improved for more than ",
                   sched_.plateau.patience, " evaluations; learning rate ", before, " -> ",
                   state_.plateau.scale * a_.learning_rate));
  sched_.plateau_scale = state_.plateau.scale;
}

void Run::save_now() {
  last_saved_step_ = state_.global_step;
  const std::string name =
      (fs::path(a_.output_dir) / ("checkpoint-" + std::to_string(state_.global_step))).string();
  check_weights_finite(name);
  update_best(
      (fs::path(a_.output_dir) / ("checkpoint-" + std::to_string(state_.global_step))).string());
  state_.rng = rng_.state();
  state_.elapsed_seconds = since(start_);
  std::function<void()> before;
  if (h_.before_checkpoint_commit)
    before = [this] { h_.before_checkpoint_commit(state_.global_step); };
  auto write = [this](const std::string& dir) {
    SaveScope scope(*this);
    save_trained(*model_, a_, dir, model_dir_, tokenizer_dir_, scope.before_read(), stage_->saved_head());
    stage_->save_extra(dir, true);
  };
  if (!writer()) {  // rank 0 writes; the others wait until the checkpoint is complete
    { const SaveScope serve(*this); }  // ZeRO-3: the writer's gathers
    if (!a_.save_only_model) opt_->send_state();  // ZeRO: this rank's part to the writer
    last_checkpoint_ = name;
    dp_barrier();
    return;
  }
  auto dir =
      save_checkpoint(a_.output_dir, write, *opt_, state_, a_.save_total_limit.value_or(0), before, a_.save_only_model);
  last_checkpoint_ = dir;
  say("saved " + dir);
  dp_barrier();
}

// The final output is written into a staging dir and moved into output_dir only when complete,
// so a failure (a full disk) leaves output_dir as it was, without a half-written model.
TrainResult Run::finish(double train_loss_sum, int64_t steps_this_run) {
  const double runtime = since(start_);
  load_best_at_end();
  check_weights_finite(a_.output_dir);
  if (loss_predict()) predict();
  state_.rng = rng_.state();
  state_.elapsed_seconds = runtime;
  TrainResult r;
  r.steps = state_.global_step;
  r.train_loss = steps_this_run > 0 ? train_loss_sum / static_cast<double>(steps_this_run) : 0.0;
  r.final_eval_loss = last_eval_.loss;
  r.test_loss = test_loss_.value_or(-1);
  r.output_dir = a_.output_dir;
  if (!writer()) {  // rank 0 writes output_dir
    { const SaveScope serve(*this); }  // ZeRO-3: the writer's gathers
    dp_barrier();
    return r;
  }
  const std::string staging = make_staging_dir(a_.output_dir, "tmp-output");
  std::vector<std::string> plots;
  try {
    {
      SaveScope scope(*this);
      save_trained(*model_, a_, staging, model_dir_, tokenizer_dir_, scope.before_read(), stage_->saved_head());
      stage_->save_extra(staging, false);
    }
    write_results(staging, r, runtime);
    if (a_.plot_loss)  // LLaMA-Factory plots loss and eval_loss from the log history
      plots = plot_loss(staging, state_.log_history, stage_->plot_keys(), a_.output_dir);
    if (h_.before_output_commit) h_.before_output_commit();
  } catch (const IoError& e) {
    remove_staging_dir(staging);
    UNILLM_THROW(IoError, "[train] the final output was not written (", e.what(), "); ",
                 a_.output_dir, " holds what it held before",
                 last_checkpoint_.empty() ? "" : " and the last checkpoint " + last_checkpoint_);
  } catch (...) {
    remove_staging_dir(staging);
    throw;
  }
  commit_staging(staging, a_.output_dir);
  dp_barrier();
  for (const auto& f : plots) say("plotted " + (fs::path(a_.output_dir) / fs::path(f).filename()).string());
  return r;
}

// trainer_state.json, train_results.json, eval_results.json / test_results.json when evaluated,
// and all_results.json holding all of them (HF's save_metrics / save_state).
void Run::write_results(const std::string& dir, const TrainResult& r, double runtime) {
  const fs::path out(dir);
  nlohmann::json ts = {{"global_step", state_.global_step}, {"max_steps", total_steps_}, {"epoch", state_.epoch},
                       {"log_history", state_.log_history}, {"logging_steps", log_every_}, {"save_steps", save_every_},
                       {"train_batch_size", a_.per_device_train_batch_size}};
  put_best(state_, ts);
  write_json((out / "trainer_state.json").string(), ts);
  nlohmann::json tr = {{"epoch", state_.epoch}, {"train_loss", r.train_loss}, {"train_runtime", runtime},
                       {"train_tokens", state_.tokens_seen},
                       {"train_steps_per_second", state_.global_step / std::max(runtime, 1e-9)}};
  write_json((out / "train_results.json").string(), tr);
  nlohmann::json all = tr;
  // The last evaluation, or each dataset's (eval_on_each_dataset: eval_<name>_loss, ...).
  std::vector<std::pair<std::string, const EvalResult*>> evals;
  if (last_eval_.loss >= 0) evals.emplace_back("eval", &last_eval_);
  for (const EvalSplit& split : eval_splits_)
    if (split.last.loss >= 0) evals.emplace_back("eval_" + split.name, &split.last);
  if (!evals.empty()) {
    nlohmann::json ev = {{"epoch", state_.epoch}};
    for (const auto& [prefix, e] : evals) ev.update(eval_keys(prefix, *e));
    write_json((out / "eval_results.json").string(), ev);
    all.update(ev);
  }
  if (test_loss_) {
    nlohmann::json te = {{"test_loss", *test_loss_}, {"test_perplexity", std::exp(*test_loss_)}};
    write_json((out / "test_results.json").string(), te);
    all.update(te);
  }
  write_json((out / "all_results.json").string(), all);
}

}  // namespace unillm::train::detail
