// LLaMA-Factory's `plot_loss` (extras/ploting.py): for each metric key of the run's log history,
// output_dir/training_<key>.png with the raw curve (alpha 0.4) and LLaMA-Factory's smoothed curve
// in matplotlib's default blue, titled "training <key> of <output_dir>", 640 x 480 px
// (matplotlib's 6.4 x 4.8 in at 100 dpi). Drawn with cairo.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace unillm::train {

// LLaMA-Factory's smooth(): an exponential moving average whose weight grows with the series
// length, weight = 1.8 * (sigmoid(0.05 * n) - 0.5), starting from the first value.
std::vector<double> smooth_curve(const std::vector<double>& values);

struct Curve {
  std::vector<double> steps, values;
  std::string title, xlabel = "step", ylabel;
};

// Writes the figure as PNG to path (atomically). Throws IoError naming path when it cannot.
void plot_curve(const Curve& c, const std::string& path);

// For each key with at least one entry in log_history (HF trainer_state.json layout: objects with
// "step" and the metric), writes output_dir/training_<key>.png (with '/' in key replaced by '_').
// Returns the files written; keys without data are skipped (as LLaMA-Factory warns and skips).
// The titles name title_dir (default: output_dir; the trainer writes into a staging dir).
std::vector<std::string> plot_loss(const std::string& output_dir, const nlohmann::json& log_history,
                                   const std::vector<std::string>& keys,
                                   const std::string& title_dir = "");

}  // namespace unillm::train
