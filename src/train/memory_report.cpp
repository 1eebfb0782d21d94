// The memory plan as text, the advice that makes a refused run fit, and the process / system
// memory figures it is compared with (Linux /proc and cgroup v2 files).
#include <cctype>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "train/memory_plan.h"

namespace unillm::train {

std::string format_bytes(int64_t bytes) {
  char buf[64];
  const double mib = static_cast<double>(bytes) / (1024.0 * 1024.0);
  if (mib >= 1024.0)
    std::snprintf(buf, sizeof buf, "%.2f GiB", mib / 1024.0);
  else
    std::snprintf(buf, sizeof buf, "%.0f MiB", mib);
  return buf;
}

std::string format_plan(const MemoryPlan& p) {
  std::ostringstream o;
  auto row = [&](const char* name, int64_t v, const char* note = "") {
    char buf[160];
    std::snprintf(buf, sizeof buf, "\n  %-26s %10s%s", name, format_bytes(v).c_str(), note);
    o << buf;
  };
  o << "memory plan (one micro-batch):";
  row("weights", p.weights);
  if (p.frozen_weights_f32 > 0) {  // QLoRA: the quantised base against its f32 size
    char note[96];
    std::snprintf(note, sizeof note, "  (%lld bytes, %.3f of f32's %lld)", static_cast<long long>(p.frozen_weights),
                  static_cast<double>(p.frozen_weights) / static_cast<double>(p.frozen_weights_f32),
                  static_cast<long long>(p.frozen_weights_f32));
    row("  of which frozen (QLoRA)", p.frozen_weights, note);
  }
  row("gradients", p.gradients);
  row("optimizer state", p.optimizer);
  if (p.reference > 0) row("reference (copy / log-probs)", p.reference);
  row("activations, recompute on", p.activations_recompute, p.recompute ? "  <- this run" : "");
  row("activations, recompute off", p.activations_no_recompute, p.recompute ? "" : "  <- this run");
  row("loss (CE buffers, lm_head dW)", p.loss_transient);
  row("one layer's backward", p.backward_transient);
  if (p.eval_transient > 0) row("evaluation forward", p.eval_transient);
  row("process baseline + BLAS", p.baseline + p.runtime);
  row("allocator cache (<= 1/8)", p.allocator_cache);
  row("loading peak", p.load_peak);
  row("expected peak", p.peak);
  return o.str();
}

namespace {

struct Knob {
  std::string what;  // "per_device_train_batch_size: 2, gradient_accumulation_steps: 8"
  MemoryPlanInputs in;
};

// Candidate changes in the order a user would reach for them; each keeps the effective batch
// (rows × gradient_accumulation_steps) where it changes the micro-batch.
std::vector<Knob> knobs(const MemoryPlanInputs& base, const TrainArgs& a) {
  std::vector<Knob> k;
  MemoryPlanInputs in = base;
  // A smaller evaluation batch changes no training figure.
  for (int64_t b = base.eval_rows / std::max<int64_t>(1, base.eval_group) / 2; b >= 1; b /= 2) {
    MemoryPlanInputs r = base;
    r.eval_rows = b * base.eval_group;
    k.push_back({"per_device_eval_batch_size: " + std::to_string(b), r});
  }
  if (!in.recompute) {
    in.recompute = true;
    k.push_back({"disable_gradient_checkpointing: false (recompute on)", in});
  }
  for (int64_t rows = in.rows / 2; rows >= 1; rows /= 2) {
    MemoryPlanInputs r = in;
    r.rows = rows;
    const int64_t accum = a.gradient_accumulation_steps * ((in.rows + rows - 1) / rows);
    k.push_back({"per_device_train_batch_size: " + std::to_string(rows) +
                     " with gradient_accumulation_steps: " + std::to_string(accum),
                 r});
  }
  in.rows = 1;
  for (int64_t t = in.seq_len / 2; t >= 16; t /= 2) {
    MemoryPlanInputs r = in;
    r.seq_len = t;
    k.push_back({"per_device_train_batch_size: 1 and cutoff_len: " + std::to_string(t), r});
  }
  if (a.finetuning_type != "lora") {
    MemoryPlanInputs r = base;
    TrainArgs la = a;
    la.finetuning_type = "lora";
    r.params = summarize_params(base.model, la);
    k.push_back({"finetuning_type: lora (lora_rank " + std::to_string(a.lora_rank) + ")", r});
  }
  if (!a.bf16 && !a.fp16) {
    MemoryPlanInputs r = base;
    r.act_bytes = 2;
    r.frozen_weight_bytes = 2;
    k.push_back({"bf16: true", r});
  }
  return k;
}

}  // namespace

std::string memory_fit_advice(const MemoryPlanInputs& in, const TrainArgs& a, int64_t limit) {
  for (const auto& k : knobs(in, a)) {
    const int64_t peak = plan_memory(k.in).peak;
    if (peak <= limit) return "set " + k.what + " (expected peak " + format_bytes(peak) + ")";
  }
  return "";
}

namespace {

// The value of "Key:   123 kB" in a /proc file, in bytes; -1 when absent.
int64_t proc_kb(const std::string& path, const std::string& key) {
  std::ifstream f(path);
  std::string line;
  while (std::getline(f, line))
    if (line.rfind(key + ":", 0) == 0) return std::stoll(line.substr(key.size() + 1)) * 1024;
  return -1;
}

int64_t read_number(const std::string& path) {
  std::ifstream f(path);
  std::string s;
  if (!(f >> s) || s == "max" || s.empty() || !std::isdigit(static_cast<unsigned char>(s[0]))) return -1;
  return std::stoll(s);
}

}  // namespace

ProcessMemory read_process_memory() {
  ProcessMemory m;
  m.rss = std::max<int64_t>(0, proc_kb("/proc/self/status", "VmRSS"));
  m.peak_rss = std::max<int64_t>(0, proc_kb("/proc/self/status", "VmHWM"));
  return m;
}

int64_t available_memory_bytes() {
  int64_t avail = proc_kb("/proc/meminfo", "MemAvailable");
  const int64_t max = read_number("/sys/fs/cgroup/memory.max");
  if (max > 0) {
    const int64_t cur = std::max<int64_t>(0, read_number("/sys/fs/cgroup/memory.current"));
    const int64_t left = std::max<int64_t>(0, max - cur);
    avail = avail < 0 ? left : std::min(avail, left);
  }
  return std::max<int64_t>(0, avail);
}

int64_t parse_memory_size(const std::string& s, const std::string& what) {
  size_t pos = 0;
  double v = 0;
  try {
    v = std::stod(s, &pos);
  } catch (const std::exception&) {
    pos = 0;
  }
  std::string unit = s.substr(pos);
  for (auto& ch : unit) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  double mult = -1;
  if (unit.empty() || unit == "B") mult = 1;
  if (unit == "K" || unit == "KB" || unit == "KIB") mult = 1024.0;
  if (unit == "M" || unit == "MB" || unit == "MIB") mult = 1024.0 * 1024;
  if (unit == "G" || unit == "GB" || unit == "GIB") mult = 1024.0 * 1024 * 1024;
  if (unit == "T" || unit == "TB" || unit == "TIB") mult = 1024.0 * 1024 * 1024 * 1024;
  if (pos == 0 || mult < 0 || !(v >= 0))
    UNILLM_THROW(ConfigError, "[train] ", what, " is '", s, "', expected a size such as 2G, 1536M or 800MiB");
  return static_cast<int64_t>(v * mult);
}

}  // namespace unillm::train
