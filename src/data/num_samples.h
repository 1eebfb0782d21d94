// LLaMA-Factory's per-dataset `num_samples` (dataset_info.json): after Hugging Face's set_seed,
// which seeds numpy's global RandomState with `seed`, its loader takes
// np.random.permutation(rows)[:num_samples] of each dataset as it loads it (train datasets in
// order, then eval datasets), and when num_samples exceeds the rows, appends
// np.random.choice(rows, num_samples - rows) (draws with replacement). The same draws, from the
// same generator, pick the same rows here; tests/data_layer/num_samples_test.cpp checks them
// against numpy 1.24 and LLaMA-Factory 0.9.2's loader.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "data/dataset_info.h"
#include "data/error.h"
#include "data/mt19937.h"
#include "data/record_reader.h"

namespace unillm::data {

// numpy's legacy RandomState as far as this uses it: MT19937 seeded by np.random.seed(int)
// (init_genrand), its 32-bit outputs, and the bounded integers of legacy shuffle and randint
// (masked rejection: the smallest all-ones mask covering the bound, redrawn until within it).
class NumpyRandomState {
 public:
  // numpy takes seeds in [0, 2^32 - 1] (transformers.set_seed fails on others); a seed outside
  // is refused with ConfigError at the first draw, so runs that never draw keep any seed.
  explicit NumpyRandomState(uint64_t seed);
  uint32_t next_uint32();
  // A uniform integer in [0, max] (numpy's random_interval; max < 2^32 here).
  uint32_t interval(uint32_t max);
  // np.random.permutation(n): arange(n) shuffled by Fisher-Yates from the last element down.
  std::vector<int64_t> permutation(int64_t n);

 private:
  Mt19937 mt_;
  uint64_t seed_;
};

// The rows LLaMA-Factory keeps of a dataset of `rows` rows for num_samples (≥ 1), in its order
// (rows may repeat when num_samples > rows). rows ≥ 1.
std::vector<int64_t> sample_rows(int64_t rows, int64_t num_samples, NumpyRandomState& rng);

// How a reader reads a dataset: with num_samples every row (max_samples counts the sampled rows).
inline ReadOptions read_all_rows_if_sampled(const DatasetAttr& attr, const ReadOptions& opts) {
  ReadOptions o = opts;
  if (attr.num_samples) o.max_samples.reset();
  return o;
}

// num_samples over what a reader read from every row of the dataset: items[i] came from row
// item_rows[i] (empty and skipped rows have no item). Leaves the sampled items in LLaMA-Factory's
// order, then the first max_samples rows of them; rows becomes the sampled row count.
template <typename T>
void apply_num_samples(const DatasetAttr& attr, const ReadOptions& opts, std::vector<T>& items,
                       const std::vector<int64_t>& item_rows, int64_t& rows) {
  if (!attr.num_samples) return;
  UNILLM_CHECK(opts.sampling != nullptr, "num_samples needs the load's generator (ReadOptions::sampling)");
  UNILLM_CHECK(items.size() == item_rows.size(), "apply_num_samples: one row per item");
  if (rows == 0)
    throw DataError(UNILLM_MSG("[data] dataset '", attr.name, "': no rows to draw num_samples from"));
  std::vector<int64_t> picks = sample_rows(rows, *attr.num_samples, *opts.sampling);
  if (opts.max_samples && *opts.max_samples < static_cast<int64_t>(picks.size()))
    picks.resize(static_cast<size_t>(*opts.max_samples));
  std::vector<int64_t> item_of(static_cast<size_t>(rows), -1);
  for (size_t i = 0; i < item_rows.size(); ++i) item_of[static_cast<size_t>(item_rows[i])] = static_cast<int64_t>(i);
  std::vector<T> out;
  for (int64_t r : picks)
    if (item_of[static_cast<size_t>(r)] >= 0) out.push_back(items[static_cast<size_t>(item_of[static_cast<size_t>(r)])]);
  items = std::move(out);
  rows = static_cast<int64_t>(picks.size());
}

}  // namespace unillm::data
