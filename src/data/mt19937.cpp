// Mt19937 (mt19937.h), written from the reference description of MT19937: init_genrand's linear
// recurrence, init_by_array's mixing of a key into it, the twist and the tempering.
#include "data/mt19937.h"

namespace unillm::data {

void Mt19937::init_genrand(uint32_t s) {
  mt_[0] = s;
  for (uint32_t i = 1; i < 624; ++i) mt_[i] = 1812433253u * (mt_[i - 1] ^ (mt_[i - 1] >> 30)) + i;
  pos_ = 624;
}

void Mt19937::init_by_array(const std::vector<uint32_t>& key) {
  init_genrand(19650218u);
  uint32_t i = 1, j = 0;
  const auto n = static_cast<uint32_t>(key.size());
  for (uint32_t k = 624 > n ? 624 : n; k > 0; --k) {
    mt_[i] = (mt_[i] ^ ((mt_[i - 1] ^ (mt_[i - 1] >> 30)) * 1664525u)) + key[j] + j;
    if (++i >= 624) {
      mt_[0] = mt_[623];
      i = 1;
    }
    if (++j >= n) j = 0;
  }
  for (uint32_t k = 623; k > 0; --k) {
    mt_[i] = (mt_[i] ^ ((mt_[i - 1] ^ (mt_[i - 1] >> 30)) * 1566083941u)) - i;
    if (++i >= 624) {
      mt_[0] = mt_[623];
      i = 1;
    }
  }
  mt_[0] = 0x80000000u;  // a non-zero initial array is assured
}

void Mt19937::twist() {
  constexpr uint32_t kUpper = 0x80000000u, kLower = 0x7fffffffu, kMatrix = 0x9908b0dfu;
  for (int i = 0; i < 624; ++i) {
    const uint32_t y = (mt_[i] & kUpper) | (mt_[(i + 1) % 624] & kLower);
    mt_[i] = mt_[(i + 397) % 624] ^ (y >> 1) ^ ((y & 1u) ? kMatrix : 0u);
  }
  pos_ = 0;
}

uint32_t Mt19937::next() {
  if (pos_ == 624) twist();
  uint32_t y = mt_[pos_++];
  y ^= y >> 11;
  y ^= (y << 7) & 0x9d2c5680u;
  y ^= (y << 15) & 0xefc60000u;
  return y ^ (y >> 18);
}

}  // namespace unillm::data
