// Checkpoint write (temp dir + rename) and restore.
#include "train/checkpoint.h"

#include <algorithm>
#include <filesystem>

#include "io/json_file.h"
#include "io/safetensors.h"
#include "io/safetensors_writer.h"
#include "models/save.h"

namespace unillm::train {

namespace fs = std::filesystem;

namespace {
constexpr const char* kTmpPrefix = "tmp-checkpoint-";

std::vector<std::pair<int64_t, fs::path>> list_checkpoints(const std::string& output_dir) {
  std::vector<std::pair<int64_t, fs::path>> out;
  if (!fs::is_directory(output_dir)) return out;
  for (auto& e : fs::directory_iterator(output_dir)) {
    std::string n = e.path().filename().string();
    if (!e.is_directory() || n.rfind("checkpoint-", 0) != 0) continue;
    try {
      size_t used = 0;
      int64_t step = std::stoll(n.substr(11), &used);
      if (used == n.size() - 11 && fs::exists(e.path() / "trainer_state.json")) out.emplace_back(step, e.path());
    } catch (const std::exception&) {
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

nlohmann::json state_json(const TrainerState& s, const AdamW& opt, const ParamArena& arena) {
  nlohmann::json j;
  j["global_step"] = s.global_step;
  j["epoch"] = s.epoch;
  j["log_history"] = s.log_history;
  put_best(s, j);
  nlohmann::json u;
  u["loader_epoch"] = s.loader_epoch;
  u["loader_batch"] = s.loader_batch;
  u["optimizer_steps"] = opt.steps();
  u["tokens_seen"] = s.tokens_seen;
  u["elapsed_seconds"] = s.elapsed_seconds;
  if (s.loss_scale > 0) {
    u["loss_scale"] = s.loss_scale;
    u["loss_scale_growth_tracker"] = s.loss_scale_growth_tracker;
  }
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

void remove_partial_checkpoints(const std::string& output_dir) {
  if (!fs::is_directory(output_dir)) return;
  for (auto& e : fs::directory_iterator(output_dir))
    if (e.path().filename().string().rfind(kTmpPrefix, 0) == 0) fs::remove_all(e.path());
}

std::string save_checkpoint(const std::string& output_dir, const ModelWriter& write_model, AdamW& opt,
                            const TrainerState& state, int64_t save_total_limit,
                            const std::function<void()>& before_commit) {
  const std::string name = "checkpoint-" + std::to_string(state.global_step);
  fs::path tmp = fs::path(output_dir) / (kTmpPrefix + std::to_string(state.global_step));
  fs::path final_dir = fs::path(output_dir) / name;
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  write_model(tmp.string());
  io::save_safetensors((tmp / "optimizer.safetensors").string(),
                       {{"exp_avg", opt.exp_avg()}, {"exp_avg_sq", opt.exp_avg_sq()}});
  // trainer_state.json last: its presence marks a complete checkpoint.
  io::write_file_atomic((tmp / "trainer_state.json").string(), state_json(state, opt, opt.arena()).dump(2) + "\n");
  if (before_commit) before_commit();
  fs::remove_all(final_dir);
  fs::rename(tmp, final_dir);
  const auto all = list_checkpoints(output_dir);
  std::vector<int64_t> steps;
  int64_t best = -1;
  const std::string best_name = fs::path(state.best_model_checkpoint).filename().string();
  for (const auto& [step, path] : all) {
    steps.push_back(step);
    if (path.filename().string() == best_name) best = step;
  }
  for (int64_t step : checkpoints_to_remove(steps, best, save_total_limit))
    fs::remove_all(fs::path(output_dir) / ("checkpoint-" + std::to_string(step)));
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

TrainerState load_checkpoint(const std::string& dir, AdamW& opt, const ParamArena& arena) {
  const std::string state_path = (fs::path(dir) / "trainer_state.json").string();
  nlohmann::json j = io::read_json_file(state_path);
  TrainerState s;
  try {
    s.global_step = j.at("global_step").get<int64_t>();
    s.epoch = j.at("epoch").get<double>();
    s.log_history = j.at("log_history");
    const auto& u = j.at("unillm");
    s.loader_epoch = u.at("loader_epoch").get<int64_t>();
    s.loader_batch = u.at("loader_batch").get<int64_t>();
    s.tokens_seen = u.value("tokens_seen", int64_t{0});
    s.elapsed_seconds = u.value("elapsed_seconds", 0.0);
    s.loss_scale = u.value("loss_scale", 0.0);
    s.loss_scale_growth_tracker = u.value("loss_scale_growth_tracker", int64_t{0});
    if (j.contains("best_metric") && !j["best_metric"].is_null())
      s.best_metric = j["best_metric"].get<double>();
    if (j.contains("best_model_checkpoint") && !j["best_model_checkpoint"].is_null())
      s.best_model_checkpoint = j["best_model_checkpoint"].get<std::string>();
    for (size_t i = 0; i < 4; ++i) s.rng[i] = std::stoull(u.at("rng").at(i).get<std::string>());
    if (u.at("arena_numel").get<int64_t>() != arena.numel())
      UNILLM_THROW(IoError, "[checkpoint] ", state_path, ": optimizer state has ", u.at("arena_numel").get<int64_t>(),
                   " trainable elements, this run has ", arena.numel(), " (different model or finetuning_type?)");
    opt.set_steps(u.at("optimizer_steps").get<int64_t>());
  } catch (const nlohmann::json::exception& e) {
    UNILLM_THROW(IoError, "[checkpoint] ", state_path, ": malformed (", e.what(), ")");
  }
  auto f = io::SafetensorsFile::open((fs::path(dir) / "optimizer.safetensors").string());
  for (auto [name, dst] : {std::pair<const char*, Tensor*>{"exp_avg", &opt.exp_avg()}, {"exp_avg_sq", &opt.exp_avg_sq()}}) {
    if (!f->has(name)) UNILLM_THROW(IoError, "[checkpoint] ", dir, "/optimizer.safetensors: '", name, "' missing");
    Tensor t = f->tensor(name);
    if (t.shape() != dst->shape() || t.dtype() != DType::f32)
      UNILLM_THROW(IoError, "[checkpoint] ", dir, "/optimizer.safetensors: '", name, "' has shape ", shape_str(t.shape()),
                   ", expected ", shape_str(dst->shape()));
    dst->copy_from(t);
  }
  return s;
}

std::string latest_checkpoint(const std::string& output_dir) {
  auto all = list_checkpoints(output_dir);
  return all.empty() ? "" : all.back().second.string();
}

}  // namespace unillm::train
