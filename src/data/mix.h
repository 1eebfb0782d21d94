// LLaMA-Factory's mix_strategy over the datasets of `dataset` (or `eval_dataset`), each read in
// full (max_samples applies per dataset) before they are merged, as its merge_dataset does:
//   concat            the datasets one after another;
//   interleave_under  HF datasets' interleave_datasets without probabilities, stopping at the
//                     first exhausted: example i of every dataset in turn, for i < the shortest
//                     length (sizes 3, 4, 5 → 0, 3, 7, 1, 4, 8, 2, 5, 9 as global indices);
//   interleave_over   ... "all_exhausted": for i < the longest length, example i mod length of
//                     every dataset (→ 0, 3, 7, 1, 4, 8, 2, 5, 9, 0, 6, 10, 1, 3, 11).
// (interleave_probs, HF's random interleaving through numpy's generator, is not implemented.)
#pragma once

#include <algorithm>
#include <string>
#include <vector>

namespace unillm::data {

template <typename T>
std::vector<T> mix_datasets(std::vector<std::vector<T>>&& parts, const std::string& strategy) {
  std::vector<T> out;
  if (strategy == "concat" || parts.size() < 2) {
    for (auto& p : parts)
      for (auto& e : p) out.push_back(std::move(e));
    return out;
  }
  const bool over = strategy == "interleave_over";
  size_t shortest = parts[0].size(), longest = 0;
  for (const auto& p : parts) shortest = std::min(shortest, p.size()), longest = std::max(longest, p.size());
  const size_t rounds = over ? longest : shortest;
  for (size_t i = 0; i < rounds; ++i)
    for (const auto& p : parts)
      if (!p.empty()) out.push_back(p[i % p.size()]);  // (an empty dataset has nothing to repeat)
  return out;
}

}  // namespace unillm::data
