// Counter-free, serialisable RNG (xoshiro256**, seeded through splitmix64). Its whole state is
// four words, so checkpoints can save and restore it for exact resume.
#pragma once

#include <array>
#include <cstdint>

namespace unillm {

class Rng {
 public:
  explicit Rng(uint64_t seed = 42) { reseed(seed); }
  void reseed(uint64_t seed);
  uint64_t next_u64();
  // Uniform in [0, 1) with 24 random bits (float) or 53 (double).
  float uniform_float() { return static_cast<float>(next_u64() >> 40) * 0x1.0p-24f; }
  double uniform_double() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }
  // Standard normal (Box-Muller, no cached second value so the state stays four words).
  double normal();
  std::array<uint64_t, 4> state() const { return s_; }
  void set_state(const std::array<uint64_t, 4>& s) { s_ = s; }

 private:
  std::array<uint64_t, 4> s_{};
};

}  // namespace unillm
