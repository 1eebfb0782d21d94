// `unillm preprocess`: tokenise text files once into a memory-mappable token corpus that
// `input_dir: PREFIX` trains from (PaddleNLP's create_pretraining_data.py + run_pretrain.py flow).
#include <chrono>
#include <cstdio>

#include "cli/commands.h"
#include "cli/common.h"
#include "core/error.h"
#include "data/corpus_build.h"
#include "train/args.h"

namespace unillm::cli {

int cmd_preprocess(const std::vector<std::string>& args) {
  std::string model, output, json_key = "text";
  std::vector<std::string> inputs;
  RuntimeOptions runtime;
  bool quiet = false;
  ArgParser p("preprocess",
              "Tokenise documents (.txt: one per line; .jsonl: one JSON object per line) into\n"
              "PREFIX.bin + PREFIX.idx for training with `input_dir: PREFIX` (docs/corpora.md).\n"
              "Streams the input: the corpus never has to fit in memory.");
  p.option("model", "model or tokenizer dir (or a hub id in the local HF cache)", &model);
  p.repeated("input", "a .txt or .jsonl file (repeat for several, concatenated in order)", &inputs);
  p.option("output", "output PREFIX (writes PREFIX.bin and PREFIX.idx)", &output);
  p.option("json-key", "the text key of .jsonl records (default: text)", &json_key);
  p.option("threads", "tokeniser threads (default: cores in the affinity mask)", &runtime.threads);
  p.flag("quiet", "no progress lines", &quiet);
  if (!p.parse(args)) return print_help(p);
  p.require("model");
  p.require("input");
  p.require("output");
  setup_runtime(runtime);
  auto tok = io::Tokenizer::load(train::resolve_model_path(model, hf_cache_root()));
  data::CorpusBuildOptions o;
  o.inputs = inputs;
  o.output_prefix = output;
  o.json_key = json_key;
  const auto t0 = std::chrono::steady_clock::now();
  auto seconds = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  if (!quiet)
    o.progress = [&](int64_t docs, int64_t tokens, int64_t bytes) {
      std::fprintf(stderr, "[preprocess] %lld documents, %lld tokens, %.1f MB read, %.1f s\n",
                   static_cast<long long>(docs), static_cast<long long>(tokens), bytes / 1048576.0,
                   seconds());
    };
  data::CorpusBuildStats s = data::build_token_corpus(o, *tok);
  std::printf(
      "wrote %s.bin and %s.idx: %lld documents, %lld tokens (%s), %.1f MB of text in %.1f s\n",
      output.c_str(), output.c_str(), static_cast<long long>(s.meta.num_docs),
      static_cast<long long>(s.meta.num_tokens),
      s.meta.dtype == data::TokenDType::kU16 ? "uint16" : "int32", s.input_bytes / 1048576.0,
      seconds());
  return 0;
}

}  // namespace unillm::cli
