// The sub-commands; each takes the arguments after its name and returns the exit code.
#pragma once

#include <string>
#include <vector>

#include "cli/args.h"

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
// Prints p.help() to stdout and returns 0.
int print_help(const ArgParser& p);

}  // namespace unillm::cli
