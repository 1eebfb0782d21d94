// Shared by the CLI tests that compare two runs: `unillm train` as one process or under mpirun
// on loopback (bounded, so a hung rank fails the test), each logged line's figures, the number
// after a key in a command's output, and the largest weight difference of two safetensors files.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "io/safetensors.h"
#include "support/expect.h"
#include "support/run_cli.h"
#include "train_log_util.h"

namespace unillm::testing {

// Whether this machine's f32 GEMM sums each element in an order independent of the call's shape
// and thread count: oneDNN's sgemm at the AVX-512 levels does; OpenBLAS's (below AVX-512) does
// not — measured on an AVX2 EPYC, a [T, 172] × [172, 64] product differs in its last bits when
// split over M or N or run on another thread count, for most T. Layouts that split a batch over
// processes (each with its own thread count) then round every GEMM differently: bit-for-bit
// comparisons of two layouts hold only on the former, and their bounds are wider on the latter.
inline bool shape_invariant_gemm() {
  static const bool invariant = [] {
    const CliResult r = run_unillm("env");
    return (r.out + r.err).find("gemm: oneDNN") != std::string::npos;
  }();
  return invariant;
}

// A bound between two layouts' runs, tuned where the GEMM is shape-invariant; 10x where it is not
// (the differences seen there: 1.1e-5 to 4.2e-5 in weights after 6-8 steps, against 1e-5).
inline double layout_tol(double tol) { return shape_invariant_gemm() ? tol : 10 * tol; }

// The runs the parallel-training tests compare: stories260K's SFT example, 8 short steps with an
// evaluation and a checkpoint every 4, as LoRA (kStoriesSft + kStoriesShort) or full fine-tuning.
inline const std::string kStoriesSft = "examples/train_lora/stories260K_lora_sft.yaml";
inline const std::string kStoriesShort =
    " max_steps=8 logging_steps=1 save_steps=4 eval_steps=4 max_samples=64 per_device_train_batch_size=2 --quiet";
inline const std::string kStoriesFull = kStoriesSft + " finetuning_type=full" + kStoriesShort;

// Run from the source dir (the examples' relative paths); np > 1 under mpirun --oversubscribe.
inline CliResult train_processes(int np, const std::string& args) {
  const std::string bin = std::string(UNILLM_BINARY_DIR) + "/unillm train " + args;
  if (np == 1) return run_shell("cd " + source_path("") + " && " + bin);
  return run_shell("cd " + source_path("") + " && OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "
                   "OMPI_MCA_btl=self,vader timeout -k 5 240 mpirun --oversubscribe --bind-to none -np " +
                   std::to_string(np) + " " + bin);
}

// (loss, grad_norm) of each logged step and (eval_loss, -1) of each evaluation, in order.
inline std::vector<std::pair<double, double>> logged_figures(const std::string& dir) {
  std::vector<std::pair<double, double>> out;
  for (const auto& j : log_lines(dir))
    if (j.contains("loss")) out.emplace_back(j["loss"].get<double>(), j["grad_norm"].get<double>());
    else if (j.contains("eval_loss")) out.emplace_back(j["eval_loss"].get<double>(), -1);
  return out;
}

// Two runs' logged figures line by line: losses as logged (4 decimals) and gradient norms within
// grad_rel relative.
inline void expect_runs_close(const std::string& a_dir, const std::string& b_dir, const std::string& what,
                              double grad_rel = 1e-5) {
  grad_rel = layout_tol(grad_rel);
  const auto a = logged_figures(a_dir), b = logged_figures(b_dir);
  ASSERT_EQ(a.size(), b.size()) << what;
  ASSERT_FALSE(a.empty()) << what;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_NEAR(a[i].first, b[i].first, 1e-4 + layout_tol(1e-5) * std::abs(a[i].first)) << what << " line " << i + 1;
    EXPECT_NEAR(a[i].second, b[i].second, grad_rel * std::abs(a[i].second) + 1e-12) << what << " line " << i + 1;
  }
}

// A resumed run's logged figures against the tail of the uninterrupted one's (the same number of
// lines from the end): losses within 1e-4, gradient norms within grad_rel relative.
inline void expect_same_tail(const std::string& whole_dir, const std::string& resumed_dir, size_t lines,
                             const std::string& what, double grad_rel = 1e-5) {
  const auto a = logged_figures(whole_dir), b = logged_figures(resumed_dir);
  ASSERT_EQ(b.size(), lines) << what;
  ASSERT_GE(a.size(), b.size()) << what;
  for (size_t i = 0; i < b.size(); ++i) {
    const auto& w = a[a.size() - b.size() + i];
    EXPECT_NEAR(w.first, b[i].first, 1e-4) << what << " line " << i;
    EXPECT_NEAR(w.second, b[i].second, grad_rel * std::abs(w.second) + 1e-12) << what << " line " << i;
  }
}

// Each (processes, extra arguments, message) run of `unillm train base extra` is refused on every
// process, with the message, and never hangs (timeout's 124).
inline void expect_refused(const std::string& base,
                           const std::vector<std::tuple<int, std::string, std::string>>& bad) {
  for (const auto& [np, extra, message] : bad) {
    auto e = train_processes(np, base + extra);
    EXPECT_NE(e.exit_code, 0) << extra;
    EXPECT_NE(e.exit_code, 124) << extra;
    EXPECT_NE(e.err.find(message), std::string::npos) << extra << "\n" << e.err;
  }
}

// A short run of `config` (4 steps of 2 accumulated micro-batches, 32 samples, f32) on one process
// and on 2 processes with `layout` (e.g. " pipeline_parallel_degree=2"): losses as logged and
// gradient norms within grad_rel (expect_runs_close). Outputs under dir/name_one, dir/name_layout.
inline void expect_layout_is_one_process(const std::string& dir, const std::string& name, const std::string& config,
                                         const std::string& layout, double grad_rel) {
  const std::string args = config +
                           " max_steps=4 logging_steps=1 save_strategy=no max_samples=32"
                           " gradient_accumulation_steps=2 bf16=false --quiet output_dir=" +
                           dir + "/" + name;
  auto one = train_processes(1, args + "_one");
  ASSERT_EQ(one.exit_code, 0) << one.err;
  auto two = train_processes(2, args + "_layout" + layout);
  ASSERT_EQ(two.exit_code, 0) << two.err;
  expect_runs_close(dir + "/" + name + "_one", dir + "/" + name + "_layout", name, grad_rel);
}

// The number after `key` in text (e.g. "ppl=" in eval's output); NaN when absent.
inline double number_after(const std::string& text, const std::string& key) {
  const size_t at = text.find(key);
  return at == std::string::npos ? std::nan("") : std::stod(text.substr(at + key.size()));
}

// The largest |a − b| / (1 + |b|) over every tensor of two safetensors files with the same names.
inline double max_weight_diff(const std::string& a_path, const std::string& b_path) {
  auto a = io::SafetensorsFile::open(a_path), b = io::SafetensorsFile::open(b_path);
  EXPECT_EQ(a->tensors().size(), b->tensors().size());
  double m = 0;
  for (const auto& info : b->tensors()) {
    const std::vector<float> x = a->tensor(info.name).to_float_vector(), y = b->tensor(info.name).to_float_vector();
    EXPECT_EQ(x.size(), y.size()) << info.name;
    for (size_t i = 0; i < x.size() && i < y.size(); ++i)
      m = std::max(m, std::abs(static_cast<double>(x[i]) - y[i]) / (1 + std::abs(static_cast<double>(y[i]))));
  }
  return m;
}

// Each (tag, processes, checkpoint under dir, extra arguments) copies that checkpoint into a new
// output_dir dir/tag and resumes it with `base + extra`: its log must be the tail of
// dir/whole_tag's (`lines` lines) and its final model.safetensors that run's within 1e-5.
using ResumeLayout = std::tuple<std::string, int, std::string, std::string>;
inline void expect_resumes_under(const std::string& dir, const std::string& base, const std::string& whole_tag,
                                 const std::vector<ResumeLayout>& layouts, size_t lines) {
  for (const auto& [tag, np, ckpt, extra] : layouts) {
    const std::string out = dir + "/" + tag, copy = out + "/" + std::filesystem::path(ckpt).filename().string();
    std::filesystem::create_directories(out);
    std::filesystem::copy(dir + ckpt, copy, std::filesystem::copy_options::recursive);
    auto r = train_processes(np, base + extra + " output_dir=" + out + " resume_from_checkpoint=" + copy);
    ASSERT_EQ(r.exit_code, 0) << tag << "\n" << r.err;
    expect_same_tail(dir + "/" + whole_tag, out, lines, tag);
    EXPECT_LE(max_weight_diff(dir + "/" + whole_tag + "/model.safetensors", out + "/model.safetensors"),
              layout_tol(1e-5))
        << tag;
  }
}

// Two layouts' runs that are the same run: bit for bit (logged figures equal, the listed weight
// files identical) where the GEMM is shape-invariant; elsewhere within layout_tol's bounds — or,
// for a run whose training amplifies last-bit differences (Adam's first updates are ±lr for a
// gradient component near zero, so a rounding that flips its sign moves the weight by lr; seen
// with the DPO examples), its first logged line only: the loss and gradient of the first step,
// before any update.
inline void expect_same_run(const std::string& a_dir, const std::string& b_dir, const std::vector<std::string>& files,
                            const std::string& what, bool amplifies = false) {
  if (shape_invariant_gemm()) {
    EXPECT_EQ(logged_figures(a_dir), logged_figures(b_dir)) << what;
    for (const auto& f : files) EXPECT_TRUE(slurp(a_dir + f) == slurp(b_dir + f)) << what << ": " << f;
    return;
  }
  if (amplifies) {
    const auto a = logged_figures(a_dir), b = logged_figures(b_dir);
    ASSERT_EQ(a.size(), b.size()) << what;
    const size_t first = a[0].second < 0 && a.size() > 1 ? 1 : 0;  // after an evaluation on start
    ASSERT_LT(first, a.size()) << what;
    EXPECT_NEAR(a[first].first, b[first].first, 1e-4) << what;
    EXPECT_NEAR(a[first].second, b[first].second, layout_tol(1e-5) * std::abs(a[first].second)) << what;
    return;
  }
  expect_runs_close(a_dir, b_dir, what);
  for (const auto& f : files) EXPECT_LE(max_weight_diff(a_dir + f, b_dir + f), layout_tol(1e-5)) << what << ": " << f;
}

}  // namespace unillm::testing
