// random_interleave: HF datasets 2.14's _interleave_map_style_datasets with probabilities.
#include "data/mix.h"

namespace unillm::data {

std::vector<int64_t> random_interleave(const std::vector<int64_t>& lengths, const std::vector<double>& p,
                                       uint64_t seed, bool over) {
  const size_t n = lengths.size();
  NumpyGenerator rng(seed);
  NumpyChoice choose(rng, p, "interleave_probs");
  for (size_t d = 0; d < n; ++d)
    if (over && (lengths[d] == 0 || p[d] == 0))
      UNILLM_THROW(ConfigError, "[data] interleave_over with interleave_probs: dataset ", d + 1, " of ", n,
                   lengths[d] == 0 ? " is empty" : " has probability 0",
                   ", so it is never used up and the mix would not end");
  std::vector<int64_t> offsets(n, 0), current(n, 0), out;
  for (size_t d = 1; d < n; ++d) offsets[d] = offsets[d - 1] + lengths[d - 1];
  std::vector<bool> used_up(n, false);
  int64_t total = 0;
  for (int64_t l : lengths) total += l;
  // A bound far beyond any mix HF would finish in reasonable time (a tiny probability under
  // interleave_over): an error instead of a hang.
  const int64_t limit = std::max<int64_t>(int64_t{1} << 26, 1000 * total);
  for (;;) {
    const bool stop = over ? std::all_of(used_up.begin(), used_up.end(), [](bool b) { return b; })
                           : std::any_of(used_up.begin(), used_up.end(), [](bool b) { return b; });
    if (stop) break;
    const auto d = static_cast<size_t>(choose.next());
    if (lengths[d] == 0) {  // interleave_under: HF indexes past it; nothing to take, so it ends here
      used_up[d] = true;
      continue;
    }
    out.push_back(offsets[d] + current[d]);
    if (++current[d] >= lengths[d]) {
      used_up[d] = true;
      current[d] = 0;
    }
    if (static_cast<int64_t>(out.size()) > limit)
      UNILLM_THROW(ConfigError, "[data] interleave_probs: the mix passed ", limit,
                   " examples without ending (a dataset with a tiny probability under interleave_over)");
  }
  return out;
}

}  // namespace unillm::data
