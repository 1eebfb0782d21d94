// `unillm convert gguf`: a llama.cpp GGUF (llama / qwen2 / qwen3 architectures) -> a Hugging
// Face directory: config.json, model.safetensors, tokenizer.json, tokenizer_config.json,
// generation_config.json. Everything is read and validated before the first file is written.
#pragma once

#include <string>
#include <vector>

namespace unillm::io {

struct GgufConvertOptions {
  std::string input;       // the .gguf file
  std::string out_dir;     // created; must be absent or empty unless overwrite
  bool overwrite = false;  // write into a non-empty out_dir (our files are replaced)
};

// Tensors keep their float type (F32, F16, BF16: bytes copied as they are); block-quantised ones
// (Q8_0, Q4_0, Q4_K, Q5_K, Q6_K) are dequantised to f32. The q/k rows of the "llama"
// architecture go back from GGUF's rotary layout to HF's. Returns lines worth logging. Throws
// IoError naming the file and the key or tensor (an unknown tensor name, a type unillm cannot
// read, a shape that disagrees with the hyper-parameters).
std::vector<std::string> convert_gguf(const GgufConvertOptions& o);

}  // namespace unillm::io
