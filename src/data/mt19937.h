// MT19937 (Matsumoto & Nishimura): the 624-word state, its twist and output tempering, shared by
// numpy's legacy generator (num_samples.h, seeded by init_genrand) and CPython's `random`
// (python_random.h, seeded by init_by_array), which LLaMA-Factory's loaders draw from.
#pragma once

#include <cstdint>
#include <vector>

namespace unillm::data {

class Mt19937 {
 public:
  void init_genrand(uint32_t s);
  void init_by_array(const std::vector<uint32_t>& key);
  uint32_t next();  // genrand_int32: the next tempered output

 private:
  uint32_t mt_[624] = {};
  int pos_ = 624;
  void twist();
};

}  // namespace unillm::data
