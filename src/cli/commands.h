// The sub-commands; each takes the arguments after its name and returns the exit code.
#pragma once

#include <string>
#include <vector>

#include "cli/args.h"
#include "dist/mpi_group.h"

namespace unillm::cli {

int cmd_generate(const std::vector<std::string>& args);
int cmd_tokenize(const std::vector<std::string>& args);
int cmd_eval(const std::vector<std::string>& args);
int cmd_env(const std::vector<std::string>& args);
int cmd_convert(const std::vector<std::string>& args);
int cmd_init(const std::vector<std::string>& args);
int cmd_train(const std::vector<std::string>& args);
int cmd_export(const std::vector<std::string>& args);
// `unillm export --format gguf ...` (cmd_export_gguf.cpp); cmd_export dispatches to it.
int export_gguf(const std::vector<std::string>& args);
// `unillm export --inference_model ...` (cmd_export_inference.cpp): an inference bundle.
int export_inference_model(const std::vector<std::string>& args);
int cmd_chat(const std::vector<std::string>& args);
int cmd_serve(const std::vector<std::string>& args);
int cmd_api(const std::vector<std::string>& args);  // cmd_serve.cpp
int cmd_preprocess(const std::vector<std::string>& args);
int cmd_expand_layers(const std::vector<std::string>& args);  // expand_layers.cpp
int cmd_launch(const std::vector<std::string>& args);         // cmd_launch.cpp: mpirun wrapper
int cmd_tune(const std::vector<std::string>& args);  // cmd_tune.cpp: layout search over mpirun runs
// A rank's world settings (cmd_launch.cpp): the collective timeout from `flag_timeout` (the
// --dist-timeout value, "" when not given), else UNILLM_DIST_TIMEOUT, else the default; and the
// test-only faults UNILLM_TEST_HANG_RANK / UNILLM_TEST_KILL_RANK. ConfigError on bad values.
dist::WorldOptions dist_world_options(const std::string& flag_timeout, int launch_rank);
// Prints p.help() to stdout and returns 0.
int print_help(const ArgParser& p);

}  // namespace unillm::cli
