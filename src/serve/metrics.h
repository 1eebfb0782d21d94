// The server's Prometheus metrics (GET /metrics, text format 0.0.4): request counts by status,
// token counts, latency histograms; the engine gauges come from EngineLoop::stats().
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "serve/engine_loop.h"

namespace unillm::serve {

class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}
  void observe(double v);
  // The histogram's lines for metric `name`.
  std::string text(const std::string& name, const std::string& help) const;

 private:
  std::vector<double> bounds_;
  std::vector<int64_t> counts_;  // per bucket (the last: above every bound)
  double sum_ = 0;
  int64_t count_ = 0;
};

class Metrics {
 public:
  void request_done(int status);
  void tokens(int64_t prompt, int64_t generated);
  void first_token(double seconds);
  void inter_token(double seconds);
  std::string text(const LoopStats& s) const;

 private:
  mutable std::mutex mu_;
  std::map<int, int64_t> by_status_;
  int64_t prompt_tokens_ = 0, generated_tokens_ = 0;
  Histogram ttft_{{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}};
  Histogram itl_{{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5}};
};

}  // namespace unillm::serve
