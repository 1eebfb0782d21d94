// Fuzz target for llama2.c legacy checkpoints (src/io/llama2c.cpp): a .bin must read into tensors
// shaped by its header (and rename to HF tensors) or throw unillm::Error, as
// looks_like_llama2c_checkpoint predicts. See docs/fuzzing.md.
#include <cstdint>

#include "fuzz_support.h"
#include "io/llama2c.h"

namespace {

using namespace unillm;

void check_weights(const io::Llama2cWeights& w, size_t file_size) {
  const io::Llama2cConfig& c = w.config;
  const int64_t C = c.dim, F = c.hidden_dim, L = c.n_layers, V = c.vocab_size, kv = c.kv_dim();
  fuzz::require(C > 0 && F > 0 && L > 0 && V > 0 && kv > 0 && c.seq_len > 0, "positive sizes");
  fuzz::require(c.file_bytes() == static_cast<int64_t>(file_size), "file size matches the header");
  fuzz::require(w.token_embedding.shape() == Shape{V, C}, "token_embedding [V, C]");
  fuzz::require(w.wk.shape() == Shape{L, kv, C}, "wk [L, Hkv*D, C]");
  fuzz::require(w.w2.shape() == Shape{L, C, F}, "w2 [L, C, F]");
  fuzz::require(w.rms_final.shape() == Shape{C}, "rms_final [C]");
  fuzz::require(c.shared_classifier != w.wcls.defined(), "wcls present iff not shared");
  auto hf = io::llama2c_to_hf_tensors(w);
  fuzz::require(static_cast<int64_t>(hf.size()) == 9 * L + 2 + (c.shared_classifier ? 0 : 1),
                "HF tensor count");
  fuzz::require(hf[1].second.shape() == Shape{C, C}, "q_proj [C, C]");
  fuzz::require(hf[2].second.shape() == Shape{kv, C}, "k_proj [Hkv*D, C]");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > (4 << 20)) return 0;  // reading is linear; the seeds are < 100 KB
  const std::string path = fuzz::scratch().file("model.bin");
  fuzz::write_bytes(path, fuzz::bytes_of(data, size));
  const bool looks = io::looks_like_llama2c_checkpoint(path);
  try {
    io::Llama2cWeights w = io::read_llama2c_checkpoint(path);
    fuzz::require(looks, "a readable checkpoint looks like one");
    check_weights(w, size);
  } catch (const Error& e) {
    fuzz::expect_input_error(e);
    fuzz::require(!looks, "a checkpoint that looks valid reads");
  }
  return 0;
}
