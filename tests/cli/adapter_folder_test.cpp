// adapter_folder (LLaMA-Factory's ModelArguments; PEFT's from_pretrained subfolder): every
// adapter path is read from its subfolder, in train, export and chat alike.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "pt_run_util.h"

namespace unillm {
namespace {

namespace fs = std::filesystem;
using testing::pt_config;
using testing::run_unillm;
using testing::source_path;
using testing::train_losses;

TEST(AdapterFolder, AdaptersAreReadFromTheSubfolder) {
  const std::string dir = testing::temp_dir("adapter_folder");
  const std::string lora = "finetuning_type: lora\nlora_rank: 8\nlearning_rate: 0.01\n";
  const auto trained = run_unillm("train " + pt_config(dir, "lora", lora) + " max_steps=6 --quiet");
  ASSERT_EQ(trained.exit_code, 0) << trained.err;
  fs::create_directories(dir + "/hub/sub");  // a repository holding its adapter in a subfolder
  for (const char* f : {"adapter_model.safetensors", "adapter_config.json"})
    fs::copy_file(dir + "/lora/" + f, dir + "/hub/sub/" + f);

  auto merge = [&](const std::string& name, const std::string& adapter) {
    std::ofstream(dir + "/" + name + ".yaml") << "model_name_or_path: " << source_path("assets/stories260K") << "\n"
                                              << adapter << "finetuning_type: lora\nexport_dir: " << dir << "/" << name
                                              << "\n";
    return run_unillm("export " + dir + "/" + name + ".yaml");
  };
  const auto direct = merge("direct", "adapter_name_or_path: " + dir + "/lora\n");
  ASSERT_EQ(direct.exit_code, 0) << direct.err;
  const auto sub = merge("sub", "adapter_name_or_path: " + dir + "/hub\nadapter_folder: sub\n");
  ASSERT_EQ(sub.exit_code, 0) << sub.err;
  EXPECT_EQ(testing::slurp(dir + "/direct/model.safetensors"), testing::slurp(dir + "/sub/model.safetensors"));

  // Training on from the adapter: the same losses as from its own directory.
  const auto a = run_unillm("train " + pt_config(dir, "on_direct", lora + "adapter_name_or_path: " + dir + "/lora\n") +
                            " max_steps=3 --quiet");
  ASSERT_EQ(a.exit_code, 0) << a.err;
  const auto b = run_unillm("train " +
                            pt_config(dir, "on_sub", lora + "adapter_name_or_path: " + dir + "/hub\nadapter_folder: sub\n") +
                            " max_steps=3 --quiet");
  ASSERT_EQ(b.exit_code, 0) << b.err;
  ASSERT_EQ(train_losses(dir + "/on_direct").size(), 3u);
  EXPECT_EQ(train_losses(dir + "/on_direct"), train_losses(dir + "/on_sub"));

  const auto missing = merge("missing", "adapter_name_or_path: " + dir + "/hub\nadapter_folder: nope\n");
  EXPECT_NE(missing.exit_code, 0);
  EXPECT_NE(missing.err.find(dir + "/hub/nope"), std::string::npos) << missing.err;
}

}  // namespace
}  // namespace unillm
