// Shared by the stage tests: rows of token ids as a padded training batch — id 0 after a row's
// first position is right padding (never scored), the first `prompt` positions of every row are
// unscored, the rest are their own labels (the loss shifts them); group 2 lays out pairs as the
// loader does (member 0 of each example, then member 1).
#pragma once

#include <cstdint>
#include <vector>

#include "data/batch_loader.h"

namespace unillm::testing {

inline data::Batch padded_rows(const std::vector<std::vector<int32_t>>& ids, int64_t prompt, int64_t group = 1) {
  data::Batch b;
  b.rows = static_cast<int64_t>(ids.size());
  b.seq_len = static_cast<int64_t>(ids.at(0).size());
  b.group = group;
  for (int64_t r = 0; r < b.rows; ++r) {
    int32_t len = 0;
    for (int64_t t = 0; t < b.seq_len; ++t) {
      const int32_t id = ids[r][t];
      const bool pad = t > 0 && id == 0;
      b.input_ids.push_back(id);
      b.labels.push_back(pad || t < prompt ? -100 : id);
      len += !pad;
    }
    b.lengths.push_back(len);
    b.row_indices.push_back(r);
  }
  return b;
}

}  // namespace unillm::testing
