// Pieces shared by the sub-commands: runtime set-up (threads, device) and tokenizer/model
// loading with the rules of the CLI contract.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "cli/args.h"
#include "core/device.h"
#include "io/tokenizer.h"
#include "models/causal_lm.h"

namespace unillm::cli {

struct RuntimeOptions {
  std::string device = "cpu";
  int64_t threads = 0;  // 0: cores in the affinity mask
};

void add_runtime_options(ArgParser& p, RuntimeOptions& o);
// Registers backends, sets the thread count, resolves the device (throws when unavailable).
Device setup_runtime(const RuntimeOptions& o);
// Registers the CPU backend with default threads (commands that do no heavy compute).
void cpu_register_only();

// "1,2,3" → ids; throws ConfigError naming the flag on a bad entry.
std::vector<int32_t> parse_id_list(const std::string& text, const std::string& flag);
std::string ids_json(const std::vector<int32_t>& ids);
std::string read_text_file(const std::string& path);
// The Hugging Face hub cache as huggingface_hub resolves it ($HF_HUB_CACHE, $HF_HOME/hub,
// ~/.cache/huggingface/hub).
std::string hf_cache_root();

// The model of dir with the PEFT LoRA adapters of adapter_dirs loaded and all of them active
// (named adapter0, adapter1, … in the order given).
std::unique_ptr<models::CausalLM> load_model(const std::string& dir,
                                             const std::vector<std::string>& adapter_dirs);

}  // namespace unillm::cli
