// `unillm chat CONFIG.yaml` / `unillm export CONFIG.yaml`: LLaMA-Factory's inference and export
// YAML read through train's key table (issue 18: chat took no YAML; export accepted template
// names train refused; one error per run).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "support/expect.h"
#include "support/run_cli.h"

namespace unillm {
namespace {

namespace fs = std::filesystem;
using testing::run_unillm;
using testing::run_unillm_in;
using testing::source_path;

bool has(const std::string& text, const std::string& needle) { return text.find(needle) != std::string::npos; }

// A LoRA adapter from three steps of the bundled SFT example (paths relative to the source tree).
std::string train_adapter(const std::string& dir) {
  auto r = run_unillm_in(source_path(""), "train examples/train_lora/stories260K_lora_sft.yaml output_dir=" + dir +
                                              "/a max_steps=3 eval_strategy=no val_size=0 eval_on_start=false "
                                              "plot_loss=false --quiet");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return dir + "/a";
}

TEST(InferenceConfig, ChatYamlRunsAsTheSameFlags) {
  const std::string dir = testing::temp_dir("chatyaml");
  const std::string model = source_path("assets/stories260K");
  const std::string adapter = train_adapter(dir);
  std::ofstream(dir + "/in.txt") << "Tell me a story.\nAnd then?\n";
  std::ofstream(dir + "/chat.yaml") << "model_name_or_path: " << model << "\nadapter_name_or_path: " << adapter
                                    << "\ntemplate: alpaca\ninfer_backend: huggingface\ntrust_remote_code: true\n"
                                    << "do_sample: false\nmax_new_tokens: 12\n";
  auto yaml = run_unillm("chat " + dir + "/chat.yaml --threads 1", dir + "/in.txt");
  auto flags = run_unillm("chat --model " + model + " --adapter " + adapter +
                              " --template alpaca --temperature 0 --max-new-tokens 12 --threads 1",
                          dir + "/in.txt");
  ASSERT_EQ(yaml.exit_code, 0) << yaml.err;
  ASSERT_EQ(flags.exit_code, 0) << flags.err;
  EXPECT_EQ(yaml.out, flags.out);
  EXPECT_TRUE(has(yaml.out, "Assistant: ")) << yaml.out;
  EXPECT_TRUE(has(yaml.err, "key 'trust_remote_code' is accepted and ignored")) << yaml.err;
  // key=value overrides after the file, as `train`.
  auto shorter = run_unillm("chat " + dir + "/chat.yaml max_new_tokens=3 --threads 1", dir + "/in.txt");
  auto shorter_flags = run_unillm("chat --model " + model + " --adapter " + adapter +
                                      " --template alpaca --temperature 0 --max-new-tokens 3 --threads 1",
                                  dir + "/in.txt");
  ASSERT_EQ(shorter.exit_code, 0) << shorter.err;
  EXPECT_EQ(shorter.out, shorter_flags.out);
  EXPECT_NE(shorter.out, yaml.out);
  // The bundled example (LLaMA-Factory's examples/inference/qwen3_lora_sft.yaml with paths changed).
  auto example = testing::run_shell("cd " + testing::shell_quote(source_path("")) + " && " + UNILLM_BINARY_DIR +
                                    "/unillm chat examples/inference/stories260K_lora_sft.yaml adapter_name_or_path=" +
                                    adapter + " do_sample=false max_new_tokens=12 --threads 1 < " +
                                    testing::shell_quote(dir + "/in.txt"));
  ASSERT_EQ(example.exit_code, 0) << example.err;
  EXPECT_EQ(example.out, yaml.out);
}

TEST(InferenceConfig, ChatYamlReportsEveryProblemAtOnce) {
  const std::string dir = testing::temp_dir("chatyamlbad");
  std::ofstream(dir + "/chat.yaml") << "model_name_or_path: " << source_path("assets/stories260K")
                                    << "\ntemplate: nope\nnum_beams: 4\nuse_mca: true\ntemprature: 0.3\n";
  auto r = run_unillm("chat " + dir + "/chat.yaml");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(has(r.err, "chat.yaml: 4 problems")) << r.err;
  EXPECT_TRUE(has(r.err, "chat.yaml line 2: key 'template': expected a template name unillm has")) << r.err;
  EXPECT_TRUE(has(r.err, "chat.yaml line 3: key 'num_beams': num_beams > 1 (beam search")) << r.err;
  EXPECT_TRUE(has(r.err, "chat.yaml line 4: key 'use_mca' is not implemented yet")) << r.err;
  EXPECT_TRUE(has(r.err, "chat.yaml line 5: unknown key 'temprature' (did you mean 'temperature'?)")) << r.err;
  // A training key in a chat config is accepted and said to be unused, never silently dropped.
  std::ofstream(dir + "/warn.yaml") << "model_name_or_path: " << source_path("assets/stories260K")
                                    << "\ntemplate: alpaca\nlearning_rate: 1.0e-4\nmax_new_tokens: 2\n";
  auto w = run_unillm("chat " + dir + "/warn.yaml --threads 1", "/dev/null");
  EXPECT_EQ(w.exit_code, 0) << w.err;
  EXPECT_TRUE(has(w.err, "warn.yaml line 3: key 'learning_rate' is not used by `unillm chat`; ignored")) << w.err;
}

// export reads the same table with the same rules as train (issue 18: it once accepted template
// names train refused and ignored keys without a word).
TEST(InferenceConfig, ExportClassifiesKeysAsTrainDoes) {
  const std::string dir = testing::temp_dir("exportkeys");
  const std::string model = source_path("assets/stories260K");
  std::ofstream(dir + "/bad.yaml") << "model_name_or_path: " << model << "\ntemplate: qwen9\nexport_dir: "
                                   << dir << "/out\nuse_mca: true\n";
  auto bad = run_unillm("export " + dir + "/bad.yaml");
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_TRUE(has(bad.err, "bad.yaml: 2 problems")) << bad.err;
  EXPECT_TRUE(has(bad.err, "bad.yaml line 2: key 'template': expected a template name unillm has")) << bad.err;
  EXPECT_FALSE(fs::exists(dir + "/out"));
  // The same template line in a train config gets the same words.
  std::ofstream(dir + "/train.yaml") << "model_name_or_path: " << model << "\ntemplate: qwen9\n";
  auto train = run_unillm("train " + dir + "/train.yaml");
  EXPECT_EQ(train.exit_code, 1);
  EXPECT_TRUE(has(train.err, "train.yaml line 2: key 'template': expected a template name unillm has")) << train.err;
  std::ofstream(dir + "/ok.yaml") << "model_name_or_path: " << model << "\ntemplate: alpaca\nexport_dir: " << dir
                                  << "/out\nlearning_rate: 1.0e-4\n";
  auto ok = run_unillm("export " + dir + "/ok.yaml");
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_TRUE(has(ok.err, "ok.yaml line 4: key 'learning_rate' is not used by `unillm export`; ignored")) << ok.err;
  EXPECT_FALSE(has(ok.err, "nothing to do")) << ok.err;
  EXPECT_TRUE(fs::exists(dir + "/out/model.safetensors"));
  // As LLaMA-Factory's export: the template as the Jinja chat_template and an Ollama Modelfile;
  // chat then finds the template from the exported Jinja alone.
  EXPECT_TRUE(has(testing::slurp(dir + "/out/tokenizer_config.json"), "\"chat_template\": \"{% set system_message")) ;
  EXPECT_TRUE(has(testing::slurp(dir + "/out/Modelfile"), "### Instruction:\n{{ .Content }}")) << testing::slurp(dir + "/out/Modelfile");
  std::ofstream(dir + "/in.txt") << "Tell me a story.\n";
  auto own = run_unillm("chat --model " + dir + "/out --temperature 0 --max-new-tokens 8", dir + "/in.txt");
  auto named = run_unillm("chat --model " + dir + "/out --template alpaca --temperature 0 --max-new-tokens 8", dir + "/in.txt");
  ASSERT_EQ(own.exit_code, 0) << own.err;
  EXPECT_TRUE(has(own.err, "chat template 'alpaca' (from the model's chat_template)")) << own.err;
  EXPECT_EQ(own.out, named.out);
}

}  // namespace
}  // namespace unillm
