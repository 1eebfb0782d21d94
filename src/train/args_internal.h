// Internals shared by args.cpp (loading, key dispatch) and args_fields.cpp (typed setters and
// cross-key checks). Not part of the public API.
#pragma once

#include <yaml-cpp/yaml.h>

#include <set>
#include <string>
#include <vector>

#include "train/args.h"

namespace unillm::train::detail {

// One key's value and where it came from ("cfg.yaml line 3" or "command line").
struct Field {
  std::string key;
  YAML::Node node;
  std::string where;
};

[[noreturn]] void bad_value(const Field& f, const std::string& expected);
bool is_off(const YAML::Node& n);  // null, false, 0, "", "none", an empty list or map

// Sets one implemented key; false when key has no setter (a table/setter mismatch).
bool set_field(TrainArgs& a, const Field& f);
// Cross-key rules and derived values (packing default, eval_steps, do_eval); where names the
// config file.
void finish_args(TrainArgs& a, const std::string& where, const std::set<std::string>& given);

}  // namespace unillm::train::detail
