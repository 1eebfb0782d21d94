// Fuzz target for LLaMA-Factory YAML train arguments (train::parse_train_args, src/train/args*):
// a YAML file [+ "#--overrides" lines] must give TrainArgs passing check_train_args or throw
// unillm::Error. See docs/fuzzing.md.
#include <cstdint>

#include "train_args_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace unillm;
  if (size > (1 << 16)) return 0;  // real files are < 4 KB; yaml-cpp is slow on huge inputs
  fuzz::ArgsInput in = fuzz::split_args_input(fuzz::bytes_of(data, size));
  try {
    fuzz::check_train_args(train::parse_train_args(in.text, "fuzz.yaml", in.overrides));
  } catch (const Error& e) {
    fuzz::expect_input_error(e);
  }
  return 0;
}
