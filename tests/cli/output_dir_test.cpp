// What `unillm train` may do to output_dir: overwrite_output_dir never deletes, the dirs a run
// reads are refused as output_dir, save_total_limit rotates only the run's own checkpoints.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "support/expect.h"
#include "support/run_cli.h"

namespace unillm {
namespace {

namespace fs = std::filesystem;
using testing::run_unillm;
using testing::run_unillm_in;
using testing::slurp;
using testing::source_path;

// A copy of the bundled model under dir/model (a test may point output_dir at it).
std::string model_copy(const std::string& dir) {
  fs::copy(source_path("assets/stories260K"), dir + "/model", fs::copy_options::recursive);
  return dir + "/model";
}

// A short full fine-tuning pt config: 6 steps of tinyshakespeare; save_steps 100, so the only
// checkpoint is the final step's (HF's rule) unless extra asks for more.
std::string config(const std::string& dir, const std::string& model, const std::string& out,
                   const std::string& extra = "") {
  const std::string path = dir + "/cfg.yaml";
  std::string defaults;  // the keys extra does not set
  for (const char* kv : {"finetuning_type: full", "save_steps: 100"})
    if (extra.find(std::string(kv).substr(0, std::string(kv).find(':') + 1)) == std::string::npos)
      defaults += std::string(kv) + "\n";
  std::ofstream(path) << "model_name_or_path: " << model << "\nstage: pt\ndo_train: true\n" << defaults
                      << "dataset: tinyshakespeare\ndataset_dir: " << source_path("data") << "\n"
                      << "cutoff_len: 32\nmax_samples: 200\nper_device_train_batch_size: 2\n"
                      << "max_steps: 6\nlogging_steps: 1\nlearning_rate: 1.0e-3\n"
                      << "output_dir: " << out << "\n" << extra;
  return path;
}

void expect_refused(const testing::CliResult& r, const std::string& needle) {
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find(needle), std::string::npos) << "missing '" << needle << "' in: " << r.err;
}

// Every file of the bundled model is still there, byte for byte.
void expect_model_intact(const std::string& model) {
  for (const auto& e : fs::directory_iterator(source_path("assets/stories260K"))) {
    const fs::path copy = fs::path(model) / e.path().filename();
    ASSERT_TRUE(fs::exists(copy)) << copy;
    EXPECT_EQ(slurp(copy.string()), slurp(e.path().string())) << copy;
  }
}

TEST(OutputDir, OverwriteKeepsUnrelatedFiles) {
  const std::string dir = testing::temp_dir("outkeep");
  const std::string model = model_copy(dir);
  fs::create_directories(dir + "/out/notes");
  std::ofstream(dir + "/out/keep.txt") << "mine";
  std::ofstream(dir + "/out/notes/a.txt") << "also mine";
  auto r = run_unillm("train " + config(dir, model, dir + "/out", "overwrite_output_dir: true\n") + " --quiet");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(slurp(dir + "/out/keep.txt"), "mine");
  EXPECT_EQ(slurp(dir + "/out/notes/a.txt"), "also mine");
  EXPECT_TRUE(fs::exists(dir + "/out/model.safetensors"));
  for (const auto& e : fs::directory_iterator(dir + "/out"))  // no staging dir is left behind
    EXPECT_EQ(e.path().filename().string().find(".unillm-"), std::string::npos) << e.path();
  // Without the flag the same dir is refused, and the refusal says nothing is deleted.
  expect_refused(run_unillm("train " + config(dir, model, dir + "/out")), "nothing in it is deleted");
}

TEST(OutputDir, TheModelDirOrAnAncestorIsRefused) {
  const std::string dir = testing::temp_dir("outmodel");
  const std::string model = model_copy(dir);
  std::ofstream(dir + "/data.txt") << "the user's data";
  for (const std::string& out : {model, dir, model + "/"}) {
    auto r = run_unillm("train " + config(dir, model, out, "overwrite_output_dir: true\n"));
    expect_refused(r, "model_name_or_path");
    expect_model_intact(model);
  }
  // output_dir: . from the dir holding the model (the working directory).
  config(dir, "model", ".", "overwrite_output_dir: true\n");
  auto r = run_unillm_in(dir, "train cfg.yaml");
  expect_refused(r, "output_dir '.' contains the model_name_or_path dir");
  expect_model_intact(model);
  EXPECT_EQ(slurp(dir + "/data.txt"), "the user's data");
  EXPECT_TRUE(fs::exists(dir + "/cfg.yaml"));
}

TEST(OutputDir, AnAdapterDirIsRefused) {
  const std::string dir = testing::temp_dir("outadapter");
  const std::string model = model_copy(dir);
  auto lora = run_unillm("train " + config(dir, model, dir + "/adapter", "finetuning_type: lora\n") + " --quiet");
  ASSERT_EQ(lora.exit_code, 0) << lora.err;
  const std::string adapter = slurp(dir + "/adapter/adapter_model.safetensors");
  auto r = run_unillm("train " +
                      config(dir, model, dir + "/adapter",
                             "finetuning_type: lora\noverwrite_output_dir: true\nadapter_name_or_path: " +
                                 dir + "/adapter\n"));
  expect_refused(r, "adapter_name_or_path");
  EXPECT_EQ(slurp(dir + "/adapter/adapter_model.safetensors"), adapter);
  // export: the merged model may not be written over the base model or the adapter.
  for (const std::string& out : {model, dir + "/adapter", dir}) {
    std::ofstream(dir + "/export.yaml", std::ios::trunc)
        << "model_name_or_path: " << model << "\nadapter_name_or_path: " << dir << "/adapter\n"
        << "finetuning_type: lora\nexport_dir: " << out << "\n";
    expect_refused(run_unillm("export " + dir + "/export.yaml"), "export_dir '" + out + "'");
  }
  expect_model_intact(model);
  EXPECT_EQ(slurp(dir + "/adapter/adapter_model.safetensors"), adapter);
}

TEST(OutputDir, AKillDuringTheFinalSaveLeavesTheEarlierOutput) {
  const std::string dir = testing::temp_dir("outkillfinal");
  const std::string model = model_copy(dir);
  auto first = run_unillm("train " + config(dir, model, dir + "/out") + " --quiet");
  ASSERT_EQ(first.exit_code, 0) << first.err;
  std::map<std::string, std::string> before;
  for (const auto& e : fs::directory_iterator(dir + "/out"))
    if (e.path().filename() != "trainer_log.jsonl") before[e.path().filename()] = slurp(e.path());
  auto killed = run_unillm("train " + config(dir, model, dir + "/out", "overwrite_output_dir: true\n") +
                           " learning_rate=5.0e-3 --quiet --kill-during-final-save");
  EXPECT_EQ(killed.exit_code, 128 + 9) << killed.err;
  for (const auto& [name, bytes] : before) EXPECT_EQ(slurp(dir + "/out/" + name), bytes) << name;
  // The next run removes the killed run's staging dir and writes its own output.
  auto again = run_unillm("train " + config(dir, model, dir + "/out", "overwrite_output_dir: true\n") +
                          " learning_rate=5.0e-3 --quiet");
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_NE(slurp(dir + "/out/model.safetensors"), before["model.safetensors"]);
  for (const auto& e : fs::directory_iterator(dir + "/out"))
    EXPECT_EQ(e.path().filename().string().find(".unillm-"), std::string::npos) << e.path();
}

TEST(OutputDir, AFileIsRefused) {
  const std::string dir = testing::temp_dir("outfile");
  const std::string model = model_copy(dir);
  std::ofstream(dir + "/out") << "a file the user keeps";
  auto r = run_unillm("train " + config(dir, model, dir + "/out", "overwrite_output_dir: true\n"));
  expect_refused(r, "is a file, not a directory");
  EXPECT_EQ(r.err.find("not empty"), std::string::npos) << r.err;
  EXPECT_EQ(slurp(dir + "/out"), "a file the user keeps");
}

// HF's DefaultFlowCallback saves the last step whenever there is a save strategy (issue 18: unillm
// once wrote only output_dir then): checkpoint-6 holds the final weights and resumes as done.
TEST(OutputDir, FinalStepIsACheckpointUnlessSaveStrategyNo) {
  const std::string dir = testing::temp_dir("outfinal");
  const std::string model = model_copy(dir);
  auto r = run_unillm("train " + config(dir, model, dir + "/out") + " --quiet");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_TRUE(fs::exists(dir + "/out/checkpoint-6/trainer_state.json"));
  EXPECT_FALSE(fs::exists(dir + "/out/checkpoint-5"));
  EXPECT_EQ(slurp(dir + "/out/checkpoint-6/model.safetensors"), slurp(dir + "/out/model.safetensors"));
  auto no = run_unillm("train " + config(dir, model, dir + "/no", "save_strategy: \"no\"\n") + " --quiet");
  ASSERT_EQ(no.exit_code, 0) << no.err;
  EXPECT_TRUE(fs::exists(dir + "/no/model.safetensors"));
  for (const auto& e : fs::directory_iterator(dir + "/no"))
    EXPECT_NE(e.path().filename().string().rfind("checkpoint-", 0), 0u) << e.path();
}

// HF's save_only_model (LLaMA-Factory's ascend examples set it): checkpoints hold the weights
// only, and resuming from one is refused with the reason, as HF refuses it.
TEST(OutputDir, SaveOnlyModelCheckpointsHaveNoOptimizerState) {
  const std::string dir = testing::temp_dir("outonly");
  const std::string model = model_copy(dir);
  auto r = run_unillm("train " + config(dir, model, dir + "/out", "save_steps: 3\nsave_only_model: true\n") + " --quiet");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(fs::exists(dir + "/out/checkpoint-3/model.safetensors"));
  EXPECT_FALSE(fs::exists(dir + "/out/checkpoint-3/optimizer.safetensors"));
  auto resume = run_unillm("train " + dir + "/cfg.yaml resume_from_checkpoint=" + dir + "/out/checkpoint-3 --quiet");
  expect_refused(resume, "was saved with save_only_model: true");
}

TEST(OutputDir, RotationKeepsAnEarlierRunsCheckpoints) {
  const std::string dir = testing::temp_dir("outrotate");
  const std::string model = model_copy(dir);
  auto first = run_unillm("train " + config(dir, model, dir + "/out", "save_steps: 5\n") + " --quiet");
  ASSERT_EQ(first.exit_code, 0) << first.err;
  ASSERT_TRUE(fs::exists(dir + "/out/checkpoint-5/trainer_state.json"));
  const std::string earlier_last = slurp(dir + "/out/checkpoint-6/model.safetensors");  // the final step
  const std::string earlier = slurp(dir + "/out/checkpoint-5/model.safetensors");
  // A second run into the same dir: its own checkpoints 1..4 (4: the final step, saved as HF's
  // DefaultFlowCallback does) rotate down to the newest two; the first run's checkpoint-5 and -6
  // are neither counted nor removed (HF would sort them among them).
  auto second = run_unillm("train " +
                           config(dir, model, dir + "/out",
                                  "overwrite_output_dir: true\nsave_steps: 1\nsave_total_limit: 2\n") +
                           " max_steps=4 --quiet");
  ASSERT_EQ(second.exit_code, 0) << second.err;
  EXPECT_FALSE(fs::exists(dir + "/out/checkpoint-1"));
  EXPECT_FALSE(fs::exists(dir + "/out/checkpoint-2"));
  EXPECT_TRUE(fs::exists(dir + "/out/checkpoint-3/trainer_state.json"));
  EXPECT_TRUE(fs::exists(dir + "/out/checkpoint-4/trainer_state.json"));
  EXPECT_EQ(slurp(dir + "/out/checkpoint-5/model.safetensors"), earlier);
  EXPECT_EQ(slurp(dir + "/out/checkpoint-6/model.safetensors"), earlier_last);
  // A checkpoint-N dir unillm did not write is never replaced.
  fs::create_directories(dir + "/out2/checkpoint-2");
  std::ofstream(dir + "/out2/checkpoint-2/notes.txt") << "not a checkpoint";
  auto third = run_unillm("train " +
                          config(dir, model, dir + "/out2", "overwrite_output_dir: true\nsave_steps: 2\n"));
  expect_refused(third, "checkpoint-2 exists and is not a unillm checkpoint");
  EXPECT_EQ(slurp(dir + "/out2/checkpoint-2/notes.txt"), "not a checkpoint");
}

}  // namespace
}  // namespace unillm
