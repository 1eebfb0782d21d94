// Sub-command dispatch and the error edge: library errors become one line and exit code 1.
#include "cli/app.h"

#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "core/error.h"
#include "dist/mpi_group.h"

namespace unillm::cli {

namespace {
struct Command {
  const char* name;
  int (*fn)(const std::vector<std::string>&);
  const char* summary;
};

const Command kCommands[] = {
    {"generate", cmd_generate, "generate text from a model"},
    {"tokenize", cmd_tokenize, "print token ids of a text"},
    {"eval", cmd_eval, "eval ppl: perplexity of a text file"},
    {"convert", cmd_convert, "convert llama2c | gguf: llama2.c checkpoint or GGUF -> HF dir"},
    {"preprocess", cmd_preprocess, "tokenise text into a token corpus (input_dir)"},
    {"train", cmd_train, "train from a LLaMA-Factory-style YAML config"},
    {"launch", cmd_launch, "run a command as N processes under mpirun (launch --nproc 2 -- train cfg.yaml)"},
    {"tune", cmd_tune, "time the parallel layouts that fit N processes; write the fastest config"},
    {"expand-layers", cmd_expand_layers, "LLaMA-Pro: add identity-initialised layers to a model"},
    {"export", cmd_export, "merge LoRA adapters into the base model and save an HF dir; --format gguf"},
    {"chat", cmd_chat, "interactive chat through a chat template; chat CONFIG.yaml as LLaMA-Factory"},
    {"serve", cmd_serve, "serve a model over an OpenAI-compatible HTTP API"},
    {"api", cmd_api, "serve LLaMA-Factory's inference YAML (llamafactory-cli api cfg.yaml)"},
    {"init", cmd_init, "randomly initialised model from a config.json"},
    {"env", cmd_env, "describe this build and machine"},
};

int usage(FILE* out) {
  std::fprintf(out, "usage: unillm <command> [options]   (unillm <command> --help for details)\n\ncommands:\n");
  for (auto& c : kCommands) std::fprintf(out, "  %-10s %s\n", c.name, c.summary);
  return out == stdout ? 0 : 2;
}
}  // namespace

int print_help(const ArgParser& p) {
  std::fputs(p.help().c_str(), stdout);
  return 0;
}

int run(int argc, char** argv) {
  if (argc < 2) return usage(stderr);
  std::string name = argv[1];
  if (name == "--help" || name == "-h" || name == "help") return usage(stdout);
  if (name == "--version") {
    std::printf("unillm %s\n", UNILLM_VERSION);
    return 0;
  }
  std::vector<std::string> args(argv + 2, argv + argc);
  try {
    for (auto& c : kCommands)
      if (name == c.name) return c.fn(args);
    std::vector<std::string> names;
    for (auto& c : kCommands) names.push_back(c.name);
    std::string guess = did_you_mean(name, names);
    std::fprintf(stderr, "unillm: error: unknown command '%s'%s\n", name.c_str(),
                 guess.empty() ? "" : (" (did you mean '" + guess + "'?)").c_str());
    return 2;
  } catch (const Error& e) {
    std::fprintf(stderr, "unillm: error: %s\n", e.what());
    dist::abort_world(1);  // one of several processes: end them all rather than leave them waiting
    return 1;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "unillm: error: out of memory\n");
    dist::abort_world(1);
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "unillm: error: %s\n", e.what());
    dist::abort_world(1);
    return 1;
  }
}

}  // namespace unillm::cli
