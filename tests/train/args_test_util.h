// Shared by the train-argument tests: a YAML config parsed as `unillm train cfg.yaml` parses it,
// and the message of the error it throws ("no error" when it parses).
#pragma once

#include <string>

#include "core/error.h"
#include "train/args.h"

namespace unillm::train::testing_args {

inline TrainArgs parse(const std::string& yaml) { return parse_train_args(yaml, "cfg.yaml", {}); }

template <typename E = ConfigError>
std::string error_of(const std::string& yaml) {
  try {
    parse(yaml);
  } catch (const E& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace unillm::train::testing_args
