// `unillm convert llama2c`: a llama2.c checkpoint + tokenizer.bin → a Hugging Face Llama dir.
// `unillm convert gguf`: a llama.cpp GGUF → a Hugging Face dir.
#include <cstdio>

#include "cli/commands.h"
#include "core/error.h"
#include "cli/common.h"
#include "io/gguf_convert.h"
#include "io/llama2c.h"

namespace unillm::cli {

namespace {
int convert_llama2c_cmd(const std::vector<std::string>& args) {
  io::Llama2cConvertOptions o;
  bool force = false;
  ArgParser p("convert llama2c", "Convert a llama2.c checkpoint and its tokenizer.bin to an HF Llama dir.");
  p.option("checkpoint", "llama2.c checkpoint (.bin)", &o.checkpoint);
  p.option("tokenizer", "llama2.c tokenizer (.bin)", &o.tokenizer);
  p.option("out", "output dir", &o.out_dir);
  p.flag("force", "overwrite a non-empty output dir", &force);
  if (!p.parse(args)) return print_help(p);
  p.require("checkpoint");
  p.require("tokenizer");
  p.require("out");
  o.overwrite = force;
  io::convert_llama2c(o);
  std::printf("wrote %s\n", o.out_dir.c_str());
  return 0;
}

int convert_gguf_cmd(const std::vector<std::string>& args) {
  io::GgufConvertOptions o;
  bool force = false;
  ArgParser p("convert gguf", "Convert a llama.cpp GGUF (llama, qwen2, qwen3) to an HF dir (docs/export.md).");
  p.option("input", "the .gguf file", &o.input);
  p.option("out", "output dir", &o.out_dir);
  p.flag("force", "overwrite a non-empty output dir", &force);
  if (!p.parse(args)) return print_help(p);
  p.require("input");
  p.require("out");
  o.overwrite = force;
  for (const auto& line : io::convert_gguf(o)) std::fprintf(stderr, "%s\n", line.c_str());
  std::printf("wrote %s\n", o.out_dir.c_str());
  return 0;
}
}  // namespace

int cmd_convert(const std::vector<std::string>& args) {
  const std::vector<std::string> rest(args.empty() ? args.end() : args.begin() + 1, args.end());
  if (!args.empty() && args[0] == "llama2c") return convert_llama2c_cmd(rest);
  if (!args.empty() && args[0] == "gguf") return convert_gguf_cmd(rest);
  std::fprintf(stderr,
               "usage: unillm convert llama2c --checkpoint F.bin --tokenizer tok.bin --out DIR\n"
               "       unillm convert gguf --input F.gguf --out DIR\n");
  return 2;
}

}  // namespace unillm::cli
