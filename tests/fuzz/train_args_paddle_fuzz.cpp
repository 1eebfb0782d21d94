// Fuzz target for PaddleNLP JSON train arguments (train::parse_paddle_args, src/train/args_paddle):
// a JSON file [+ "#--overrides" lines] must give TrainArgs passing check_train_args or throw
// unillm::Error. See docs/fuzzing.md.
#include <cstdint>

#include "train_args_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace unillm;
  if (size > (1 << 16)) return 0;  // real files are < 4 KB
  fuzz::ArgsInput in = fuzz::split_args_input(fuzz::bytes_of(data, size));
  try {
    fuzz::check_train_args(train::parse_paddle_args(in.text, "fuzz.json", in.overrides));
  } catch (const Error& e) {
    fuzz::expect_input_error(e);
  }
  return 0;
}
