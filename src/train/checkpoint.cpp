// Checkpoint write (staging dir + rename), rotation and restore.
#include "train/checkpoint.h"

#include <algorithm>
#include <filesystem>

#include "io/json_file.h"
#include "io/safetensors.h"
#include "io/safetensors_writer.h"
#include "models/save.h"
#include "train/output_dir.h"

namespace unillm::train {

namespace fs = std::filesystem;

namespace {

struct Checkpoint {
  int64_t step = 0;
  fs::path path;
  std::string run_id;  // "" for checkpoints written before runs had ids
};

// The unillm checkpoints of output_dir (checkpoint-N dirs whose trainer_state.json has the
// "unillm" record), by step.
std::vector<Checkpoint> list_checkpoints(const std::string& output_dir) {
  std::vector<Checkpoint> out;
  std::error_code ec;
  if (!fs::is_directory(output_dir, ec)) return out;
  for (auto& e : fs::directory_iterator(output_dir, ec)) {
    std::string n = e.path().filename().string();
    if (!e.is_directory() || n.rfind("checkpoint-", 0) != 0) continue;
    size_t used = 0;
    int64_t step = -1;
    try {
      step = std::stoll(n.substr(11), &used);
    } catch (const std::exception&) {
      continue;
    }
    if (used != n.size() - 11) continue;
    const fs::path state = e.path() / "trainer_state.json";
    if (!fs::exists(state, ec)) continue;
    const auto j = nlohmann::json::parse(io::read_file_bytes(state.string()), nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("unillm") || !j["unillm"].is_object()) continue;
    const auto& u = j["unillm"];
    out.push_back({step, e.path(), u.contains("run_id") && u["run_id"].is_string() ? u["run_id"].get<std::string>() : ""});
  }
  std::sort(out.begin(), out.end(), [](const Checkpoint& a, const Checkpoint& b) { return a.step < b.step; });
  return out;
}

bool is_unillm_checkpoint(const fs::path& dir) {
  for (const auto& c : list_checkpoints(dir.parent_path().string()))
    if (c.path.filename() == dir.filename()) return true;
  return false;
}

// save_total_limit: of this run's checkpoints (same run id: a resumed run continues its
// original's), those HF's rotation removes. Checkpoints of other runs are never counted or removed.
void rotate(const std::string& output_dir, const TrainerState& state, int64_t save_total_limit) {
  std::vector<int64_t> steps;
  int64_t best = -1;
  const std::string best_name = fs::path(state.best_model_checkpoint).filename().string();
  for (const auto& c : list_checkpoints(output_dir)) {
    if (c.run_id != state.run_id) continue;
    steps.push_back(c.step);
    if (c.path.filename().string() == best_name) best = c.step;
  }
  for (int64_t step : checkpoints_to_remove(steps, best, save_total_limit))
    fs::remove_all(fs::path(output_dir) / ("checkpoint-" + std::to_string(step)));
}

nlohmann::json state_json(const TrainerState& s, const Optimizer& opt, const ParamArena& arena) {
  nlohmann::json j;
  j["global_step"] = s.global_step;
  j["epoch"] = s.epoch;
  j["log_history"] = s.log_history;
  put_best(s, j);
  if (s.early_stopping_patience > 0)  // as HF's TrainerState.stateful_callbacks holds it
    j["stateful_callbacks"]["EarlyStoppingCallback"] = {
        {"args", {{"early_stopping_patience", s.early_stopping_patience}, {"early_stopping_threshold", 0.0}}},
        {"attributes", {{"early_stopping_patience_counter", s.early_stopping_counter}}}};
  nlohmann::json u;
  u["loader_epoch"] = s.loader_epoch;
  u["loader_batch"] = s.loader_batch;
  u["optimizer_steps"] = opt.steps();
  u["optimizer"] = opt.kind();
  u["tokens_seen"] = s.tokens_seen;
  u["run_id"] = s.run_id;
  u["settings"] = s.settings;
  u["elapsed_seconds"] = s.elapsed_seconds;
  if (s.plateau.steps > 0)
    u["plateau"] = {{"best", s.plateau.best ? nlohmann::json(*s.plateau.best) : nlohmann::json(nullptr)},
                    {"bad", s.plateau.bad},
                    {"cooldown_counter", s.plateau.cooldown_counter},
                    {"steps", s.plateau.steps},
                    {"scale", s.plateau.scale}};
  if (s.loss_scale > 0) {
    u["loss_scale"] = s.loss_scale;
    u["loss_scale_growth_tracker"] = s.loss_scale_growth_tracker;
  }
  if (s.mod_calls > 0) u["mod_calls"] = s.mod_calls;
  for (auto w : s.rng) u["rng"].push_back(std::to_string(w));  // u64 exactly, as strings
  for (auto& seg : arena.segments()) u["parameters"].push_back(seg.name);
  u["arena_numel"] = arena.numel();
  j["unillm"] = u;
  return j;
}
}  // namespace

void put_best(const TrainerState& s, nlohmann::json& j) {
  j["best_metric"] = s.best_metric ? nlohmann::json(*s.best_metric) : nlohmann::json(nullptr);
  j["best_model_checkpoint"] = s.best_model_checkpoint.empty() ? nlohmann::json(nullptr)
                                                               : nlohmann::json(s.best_model_checkpoint);
}

std::string save_checkpoint(const std::string& output_dir, const ModelWriter& write_model, Optimizer& opt,
                            const TrainerState& state, int64_t save_total_limit,
                            const std::function<void()>& before_commit, bool model_only) {
  const std::string name = "checkpoint-" + std::to_string(state.global_step);
  const fs::path final_dir = fs::path(output_dir) / name;
  std::error_code ec;
  if (fs::exists(final_dir, ec) && !is_unillm_checkpoint(final_dir))
    UNILLM_THROW(IoError, "[checkpoint] ", final_dir.string(),
                 " exists and is not a unillm checkpoint; it is left as it is. Move it away to "
                 "save this step's checkpoint there");
  const std::string tmp = make_staging_dir(output_dir, "tmp-" + name);
  try {
    write_model(tmp);
    if (!model_only) opt.write_state((fs::path(tmp) / "optimizer.safetensors").string());
    // trainer_state.json last: its presence marks a complete checkpoint.
    nlohmann::json sj = state_json(state, opt, opt.arena());
    if (model_only) sj["unillm"]["save_only_model"] = true;
    io::write_file_atomic((fs::path(tmp) / "trainer_state.json").string(), sj.dump(2) + "\n");
    if (before_commit) before_commit();
    // An earlier checkpoint of the same step (a rerun with overwrite_output_dir, or a resume
    // from an older checkpoint) is replaced by the new one.
    fs::remove_all(final_dir);
    fs::rename(tmp, final_dir);
  } catch (const IoError& e) {
    remove_staging_dir(tmp);  // a full disk is not left full
    UNILLM_THROW(IoError, "[checkpoint] ", final_dir.string(), " not saved (", e.what(),
                 "); earlier checkpoints are intact");
  } catch (...) {
    remove_staging_dir(tmp);
    throw;
  }
  rotate(output_dir, state, save_total_limit);
  return final_dir.string();
}

std::vector<int64_t> checkpoints_to_remove(std::vector<int64_t> steps, int64_t best_step,
                                           int64_t limit) {
  if (limit <= 0 || static_cast<int64_t>(steps.size()) <= limit) return {};
  auto best = std::find(steps.begin(), steps.end(), best_step);
  if (best != steps.end() && best + 1 != steps.end()) {
    std::rotate(best, best + 1, steps.end() - 1);  // the best goes just before the newest
    if (limit == 1) limit = 2;
  }
  const auto n = static_cast<int64_t>(steps.size());
  return std::vector<int64_t>(steps.begin(), steps.begin() + std::max<int64_t>(0, n - limit));
}

TrainerState load_checkpoint(const std::string& dir, Optimizer& opt, const ParamArena& arena) {
  const std::string state_path = (fs::path(dir) / "trainer_state.json").string();
  nlohmann::json j = io::read_json_file(state_path);
  TrainerState s;
  try {
    s.global_step = j.at("global_step").get<int64_t>();
    s.epoch = j.at("epoch").get<double>();
    s.log_history = j.at("log_history");
    const auto& u = j.at("unillm");
    if (u.value("save_only_model", false))
      UNILLM_THROW(ConfigError, "[checkpoint] ", dir, " was saved with save_only_model: true (weights only, no "
                   "optimizer state), so training cannot resume from it (as HF); load its weights as a model instead");
    s.loader_epoch = u.at("loader_epoch").get<int64_t>();
    s.loader_batch = u.at("loader_batch").get<int64_t>();
    s.tokens_seen = u.value("tokens_seen", int64_t{0});
    s.run_id = u.value("run_id", std::string());
    if (u.contains("settings")) s.settings = u.at("settings");
    s.elapsed_seconds = u.value("elapsed_seconds", 0.0);
    s.loss_scale = u.value("loss_scale", 0.0);
    s.loss_scale_growth_tracker = u.value("loss_scale_growth_tracker", int64_t{0});
    s.mod_calls = u.value("mod_calls", int64_t{0});
    if (u.contains("plateau")) {
      const auto& p = u.at("plateau");
      if (!p.at("best").is_null()) s.plateau.best = p.at("best").get<double>();
      s.plateau.bad = p.at("bad").get<int64_t>();
      s.plateau.cooldown_counter = p.at("cooldown_counter").get<int64_t>();
      s.plateau.steps = p.at("steps").get<int64_t>();
      s.plateau.scale = p.at("scale").get<double>();
    }
    if (j.contains("best_metric") && !j["best_metric"].is_null())
      s.best_metric = j["best_metric"].get<double>();
    if (j.contains("best_model_checkpoint") && !j["best_model_checkpoint"].is_null())
      s.best_model_checkpoint = j["best_model_checkpoint"].get<std::string>();
    s.early_stopping_counter = j.value("/stateful_callbacks/EarlyStoppingCallback/attributes/early_stopping_patience_counter"_json_pointer, int64_t{0});
    for (size_t i = 0; i < 4; ++i) s.rng[i] = std::stoull(u.at("rng").at(i).get<std::string>());
    if (u.at("arena_numel").get<int64_t>() != arena.numel())
      UNILLM_THROW(IoError, "[checkpoint] ", state_path, ": optimizer state has ", u.at("arena_numel").get<int64_t>(),
                   " trainable elements, this run has ", arena.numel(), " (different model or finetuning_type?)");
    // Checkpoints from before other optimizers existed hold AdamW's state.
    const std::string kind = u.value("optimizer", std::string("adamw"));
    if (kind != opt.kind())
      UNILLM_THROW(ConfigError, "[checkpoint] ", state_path, ": its optimizer state is ", kind, "'s, this run uses ",
                   opt.kind(), "; resume with the same optim (or start a new run in another output_dir)");
    opt.set_steps(u.at("optimizer_steps").get<int64_t>());
  } catch (const nlohmann::json::exception& e) {
    UNILLM_THROW(IoError, "[checkpoint] ", state_path, ": malformed (", e.what(), ")");
  }
  const std::string path = (fs::path(dir) / "optimizer.safetensors").string();
  opt.read_state(*io::SafetensorsFile::open(path), path);  // ZeRO reads its part only
  return s;
}

std::string latest_checkpoint(const std::string& output_dir) {
  auto all = list_checkpoints(output_dir);
  return all.empty() ? "" : all.back().path.string();
}

}  // namespace unillm::train
