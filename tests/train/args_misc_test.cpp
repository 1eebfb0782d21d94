// tokenized_path, gradient_checkpointing_kwargs and pure_bf16 as the config reads them
// (src/train/args_fields_misc.cpp): what is accepted, what is said at start, what is refused.
#include <gtest/gtest.h>

#include "core/error.h"
#include "train/args.h"
#include "args_test_util.h"

namespace unillm::train {
namespace {

const std::string kBase = "model_name_or_path: m\nstage: sft\nfinetuning_type: lora\n";

using testing_args::error_of;
using testing_args::parse;

bool warned(const TrainArgs& a, const std::string& part) {
  for (const auto& w : a.warnings)
    if (w.find(part) != std::string::npos) return true;
  return false;
}

TEST(MiscArgs, PureBf16TrainsAsBf16AndSaysSo) {
  TrainArgs a = parse(kBase + "pure_bf16: true\n");
  EXPECT_TRUE(a.pure_bf16);
  EXPECT_TRUE(a.bf16);
  EXPECT_FALSE(a.fp16);
  EXPECT_TRUE(warned(a, "pure_bf16 trains as bf16: true with f32 trainable weights"));
  TrainArgs b = parse(kBase + "pure_bf16: true\nbf16: true\n");
  EXPECT_TRUE(b.bf16);
  TrainArgs off = parse(kBase + "pure_bf16: false\n");
  EXPECT_FALSE(off.bf16);
  EXPECT_FALSE(warned(off, "pure_bf16"));
  EXPECT_EQ(error_of<ConfigError>(kBase + "pure_bf16: true\nfp16: true\n"),
            "[config] cfg.yaml: pure_bf16 trains in bf16; fp16: true asks for fp16 mixed "
            "precision: set one of them");
  EXPECT_NE(error_of<ConfigError>(kBase + "pure_bf16: yes please\n").find("key 'pure_bf16'"),
            std::string::npos);
}

TEST(MiscArgs, GradientCheckpointingKwargsAcceptsUseReentrantOnly) {
  TrainArgs a = parse(kBase + "gradient_checkpointing_kwargs:\n  use_reentrant: false\n");
  EXPECT_TRUE(warned(a, "use_reentrant has no meaning for unillm's per-layer recompute"));
  TrainArgs j = parse(kBase + "gradient_checkpointing_kwargs: '{\"use_reentrant\": true}'\n");
  EXPECT_TRUE(warned(j, "use_reentrant"));
  TrainArgs n = parse(kBase + "gradient_checkpointing_kwargs: null\n");
  EXPECT_FALSE(warned(n, "use_reentrant"));
  EXPECT_EQ(
      error_of<NotImplemented>(kBase + "gradient_checkpointing_kwargs: {use_reentrant: false, "
                                       "preserve_rng_state: false}\n"),
      "[config] cfg.yaml line 4: key 'gradient_checkpointing_kwargs': entry "
      "'preserve_rng_state' (only use_reentrant is accepted) is not implemented yet");
  EXPECT_NE(error_of<ConfigError>(kBase + "gradient_checkpointing_kwargs: [use_reentrant]\n")
                .find("expected a mapping such as {use_reentrant: false}"),
            std::string::npos);
  EXPECT_NE(error_of<ConfigError>(kBase + "gradient_checkpointing_kwargs: {use_reentrant: maybe}\n")
                .find("gradient_checkpointing_kwargs.use_reentrant"),
            std::string::npos);
}

TEST(MiscArgs, TokenizedPath) {
  EXPECT_EQ(parse(kBase + "tokenized_path: saves/data\n").tokenized_path, "saves/data");
  EXPECT_EQ(parse(kBase + "tokenized_path: null\n").tokenized_path, "");
  EXPECT_NE(error_of<ConfigError>("model_name_or_path: m\nstage: pt\ninput_dir: corpus\n"
                                  "tokenized_path: saves/data\n")
                .find("tokenized_path with input_dir"),
            std::string::npos);
}

}  // namespace
}  // namespace unillm::train
