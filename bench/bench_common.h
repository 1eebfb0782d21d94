// What the Google Benchmark binaries under bench/ share: random inputs, and start-up (their own
// flags, taken off argv before Google Benchmark reads the rest).
#pragma once

#include <benchmark/benchmark.h>

#include <cstdlib>
#include <cstring>
#include <vector>

#include "backends/cpu/register.h"
#include "core/parallel.h"
#include "core/rng.h"
#include "core/tensor.h"

// A tensor of N(0, sd²) samples (drawn in f32, then stored as dtype), the same for the same seed.
inline unillm::Tensor random_tensor(const unillm::Shape& shape, uint64_t seed, double sd = 1.0,
                                    unillm::DType dtype = unillm::DType::f32) {
  unillm::Rng rng(seed);
  std::vector<float> v(static_cast<size_t>(unillm::shape_numel(shape)));
  for (auto& e : v) e = static_cast<float>(rng.normal() * sd);
  return unillm::Tensor::from_vector(v, shape, dtype);
}

// Takes "--name=" off argv; returns its value or nullptr.
inline const char* take_flag(int& argc, char** argv, const char* name) {
  const size_t len = std::strlen(name);
  for (int i = 1; i < argc; ++i)
    if (std::strncmp(argv[i], name, len) == 0) {
      const char* v = argv[i] + len;
      for (int j = i; j + 1 < argc; ++j) argv[j] = argv[j + 1];
      --argc;
      return v;
    }
  return nullptr;
}

// --threads=N (default: the affinity cores), then the CPU backend at the detected ISA level.
inline void start_cpu(int& argc, char** argv) {
  const char* t = take_flag(argc, argv, "--threads=");
  unillm::cpu::register_cpu_backend();
  unillm::cpu::set_num_threads(t ? std::atoi(t) : 0);
}

// Google Benchmark's flags and the registered benchmarks; the exit status.
inline int run_benchmarks(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
