// convert_llama2c: llama2.c checkpoint (+ tokenizer.bin) -> Hugging Face Llama directory.
// Everything is read and validated before the first file is written.
#include <filesystem>

#include "core/error.h"
#include "io/json_file.h"
#include "io/llama2c.h"
#include "io/llama2c_tokenizer.h"
#include "io/safetensors_writer.h"

namespace unillm::io {
namespace fs = std::filesystem;

namespace {

using ojson = nlohmann::ordered_json;

ojson hf_config(const Llama2cConfig& c) {
  return {{"architectures", {"LlamaForCausalLM"}},
          {"model_type", "llama"},
          {"hidden_size", c.dim},
          {"intermediate_size", c.hidden_dim},
          {"num_hidden_layers", c.n_layers},
          {"num_attention_heads", c.n_heads},
          {"num_key_value_heads", c.n_kv_heads},
          {"head_dim", c.head_size()},
          {"vocab_size", c.vocab_size},
          {"max_position_embeddings", c.seq_len},
          {"rms_norm_eps", 1e-5},
          {"rope_theta", 10000.0},
          {"rope_scaling", nullptr},
          {"tie_word_embeddings", c.shared_classifier},
          {"bos_token_id", 1},
          {"eos_token_id", 2},
          {"hidden_act", "silu"},
          {"attention_bias", false},
          {"mlp_bias", false},
          {"attention_dropout", 0.0},
          {"initializer_range", 0.02},
          {"pretraining_tp", 1},
          {"use_cache", true},
          {"torch_dtype", "float32"}};
}

void prepare_out_dir(const Llama2cConvertOptions& o) {
  std::error_code ec;
  if (o.out_dir.empty()) UNILLM_THROW(IoError, "[llama2c] no output directory given");
  if (fs::exists(o.out_dir, ec)) {
    if (!fs::is_directory(o.out_dir, ec))
      UNILLM_THROW(IoError, "[llama2c] ", o.out_dir, ": exists and is not a directory");
    if (!fs::is_empty(o.out_dir, ec) && !o.overwrite)
      UNILLM_THROW(IoError, "[llama2c] ", o.out_dir, ": directory is not empty (pass --force to overwrite)");
  }
  fs::create_directories(o.out_dir, ec);
  if (!fs::is_directory(o.out_dir, ec))
    UNILLM_THROW(IoError, "[llama2c] ", o.out_dir, ": cannot create the directory (", ec.message(), ")");
}

std::string dump(const ojson& j) { return j.dump(2) + "\n"; }

}  // namespace

void convert_llama2c(const Llama2cConvertOptions& o) {
  Llama2cWeights w = read_llama2c_checkpoint(o.checkpoint);
  const Llama2cConfig& c = w.config;
  ojson tokenizer;
  if (!o.tokenizer.empty()) {
    Llama2cTokenizer tok = read_llama2c_tokenizer(o.tokenizer, c.vocab_size);
    tokenizer = llama2c_tokenizer_json(tok, o.tokenizer);
  }
  auto tensors = llama2c_to_hf_tensors(w);
  prepare_out_dir(o);
  const fs::path dir(o.out_dir);
  save_safetensors((dir / "model.safetensors").string(), tensors);
  write_file_atomic((dir / "config.json").string(), dump(hf_config(c)));
  write_file_atomic((dir / "generation_config.json").string(),
                    dump({{"_from_model_config", true}, {"bos_token_id", 1}, {"eos_token_id", 2}}));
  if (!o.tokenizer.empty()) {
    write_file_atomic((dir / "tokenizer.json").string(), dump(tokenizer));
    write_file_atomic((dir / "tokenizer_config.json").string(), dump(llama_tokenizer_config_json(c.seq_len)));
    write_file_atomic((dir / "special_tokens_map.json").string(),
                      dump({{"bos_token", "<s>"}, {"eos_token", "</s>"}, {"unk_token", "<unk>"}}));
  }
}

}  // namespace unillm::io
