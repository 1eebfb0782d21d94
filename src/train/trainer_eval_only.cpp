// do_train: false — HF's and LLaMA-Factory's evaluation / prediction of the loaded model (with
// its adapters) without training: `trainer.evaluate()` on the evaluation set (val_size or
// eval_dataset) and do_predict's test loss, their metrics logged and written as HF's save_metrics
// does (eval_results.json, test_results.json, all_results.json); no step, no weights written.
// bf16_full_eval / fp16_full_eval cast the model first, as HF's evaluation loop does outside
// training.
#include <cmath>
#include <filesystem>

#include "train/finetune.h"
#include "train/trainer_log.h"
#include "train/trainer_run.h"

namespace unillm::train::detail {

namespace fs = std::filesystem;

TrainResult Run::evaluate_only() {
  if (a_.do_eval && eval_.num_rows() == 0)
    UNILLM_THROW(ConfigError, "[train] ", a_.config_path, ": do_eval without do_train evaluates the evaluation set, "
                 "and there is none (set val_size or eval_dataset)");
  if (a_.bf16_full_eval || a_.fp16_full_eval) {
    const DType d = a_.bf16_full_eval ? DType::bf16 : DType::f16;
    cast_base_matrices(*model_, d);
    say(std::string(a_.bf16_full_eval ? "bf16" : "fp16") + "_full_eval: the model's matrices are held in " +
        dtype_name(d) + " for evaluation (f32 arithmetic; adapters and norms stay f32)");
  }
  if (writer()) log_ = std::make_unique<TrainerLog>(a_.output_dir, 0);
  eval_enabled_ = a_.do_eval;
  if (eval_enabled_) run_eval();
  if (loss_predict()) predict();
  TrainResult r;
  r.final_eval_loss = last_eval_.loss;
  r.test_loss = test_loss_.value_or(-1);
  r.output_dir = a_.output_dir;
  if (writer()) {
    nlohmann::json all = nlohmann::json::object();
    nlohmann::json ev = nlohmann::json::object();  // one evaluation, or one per dataset
    if (last_eval_.loss >= 0) ev.update(eval_keys("eval", last_eval_));
    for (const EvalSplit& split : eval_splits_)
      if (split.last.loss >= 0) ev.update(eval_keys("eval_" + split.name, split.last));
    if (!ev.empty()) {
      write_json((fs::path(a_.output_dir) / "eval_results.json").string(), ev);
      all.update(ev);
    }
    if (test_loss_) {
      const nlohmann::json te = {{"test_loss", *test_loss_}, {"test_perplexity", std::exp(*test_loss_)}};
      write_json((fs::path(a_.output_dir) / "test_results.json").string(), te);
      all.update(te);
    }
    write_json((fs::path(a_.output_dir) / "all_results.json").string(), all);
  }
  dp_barrier();
  return r;
}

}  // namespace unillm::train::detail
