// LLaMA-Factory's mix_strategy over the datasets of `dataset` (or `eval_dataset`), each read in
// full (max_samples applies per dataset) before they are merged, as its merge_dataset does:
//   concat            the datasets one after another;
//   interleave_under  HF datasets' interleave_datasets without probabilities, stopping at the
//                     first exhausted: example i of every dataset in turn, for i < the shortest
//                     length (sizes 3, 4, 5 → 0, 3, 7, 1, 4, 8, 2, 5, 9 as global indices);
//   interleave_over   ... "all_exhausted": for i < the longest length, example i mod length of
//                     every dataset (→ 0, 3, 7, 1, 4, 8, 2, 5, 9, 0, 6, 10, 1, 3, 11).
// With probabilities (LLaMA-Factory's interleave_probs) the interleave strategies follow HF
// datasets 2.14's random interleaving instead: numpy's default_rng(seed) picks the dataset of each
// next example (Generator.choice with p, data/numpy_random.h), which gives that dataset's next
// example (wrapping round once it is used up); the mix stops when a dataset is used up
// (interleave_under) or when every one has been (interleave_over), checked before each pick.
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/numpy_random.h"

namespace unillm::data {

// The global indices (dataset d's example i is offset_d + i) HF's interleave_datasets picks with
// probabilities p and this seed. ConfigError for probabilities numpy refuses, or for
// interleave_over with a dataset that can never be picked or is empty (HF would loop forever).
std::vector<int64_t> random_interleave(const std::vector<int64_t>& lengths, const std::vector<double>& p,
                                       uint64_t seed, bool over);

template <typename T>
std::vector<T> mix_datasets(std::vector<std::vector<T>>&& parts, const std::string& strategy,
                            const std::vector<double>& probs = {}, uint64_t seed = 0) {
  std::vector<T> out;
  if (strategy == "concat" || (parts.size() < 2 && probs.empty())) {
    for (auto& p : parts)
      for (auto& e : p) out.push_back(std::move(e));
    return out;
  }
  const bool over = strategy == "interleave_over";
  if (!probs.empty()) {
    if (probs.size() != parts.size())
      UNILLM_THROW(ConfigError, "[data] interleave_probs has ", probs.size(), " entries for ", parts.size(),
                   " datasets (LLaMA-Factory: the length of dataset and interleave probs should be identical)");
    std::vector<int64_t> lengths;
    std::vector<const T*> flat;
    for (const auto& p : parts) {
      lengths.push_back(static_cast<int64_t>(p.size()));
      for (const auto& e : p) flat.push_back(&e);
    }
    for (int64_t i : random_interleave(lengths, probs, seed, over)) out.push_back(*flat[static_cast<size_t>(i)]);
    return out;
  }
  size_t shortest = parts[0].size(), longest = 0;
  for (const auto& p : parts) shortest = std::min(shortest, p.size()), longest = std::max(longest, p.size());
  const size_t rounds = over ? longest : shortest;
  for (size_t i = 0; i < rounds; ++i)
    for (const auto& p : parts)
      if (!p.empty()) out.push_back(p[i % p.size()]);  // (an empty dataset has nothing to repeat)
  return out;
}

}  // namespace unillm::data
