// The settings a checkpoint records so that a resume can tell whether it continues the same
// run. Exact resume needs the same model, data, batch shape and trainable set; a resume with
// other values is refused, naming every key that differs. Optimisation hyper-parameters may be
// changed on purpose (extending max_steps, lowering the learning rate): a warning names them.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "train/args.h"

namespace unillm::train {

// {"must_match": {key: value, ...}, "may_change": {key: value, ...}} of a.
nlohmann::json resume_settings(const TrainArgs& a);

// Compares a checkpoint's recorded settings (empty for checkpoints that predate them: nothing to
// compare) with the run's. Throws ConfigError listing every must_match key that differs, as
// "key: checkpoint value -> this run's value"; returns one warning per may_change key that
// differs. checkpoint names the checkpoint dir in messages.
std::vector<std::string> check_resume_settings(const nlohmann::json& recorded,
                                               const nlohmann::json& current,
                                               const std::string& checkpoint);

}  // namespace unillm::train
