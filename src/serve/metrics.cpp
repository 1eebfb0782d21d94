// Prometheus text exposition of the server's counters, gauges and histograms.
#include "serve/metrics.h"

#include <sstream>

namespace unillm::serve {

void Histogram::observe(double v) {
  size_t i = 0;
  while (i < bounds_.size() && v > bounds_[i]) ++i;
  ++counts_[i];
  sum_ += v;
  ++count_;
}

std::string Histogram::text(const std::string& name, const std::string& help) const {
  std::ostringstream o;
  o << "# HELP " << name << " " << help << "\n# TYPE " << name << " histogram\n";
  int64_t cum = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cum += counts_[i];
    o << name << "_bucket{le=\"" << bounds_[i] << "\"} " << cum << "\n";
  }
  o << name << "_bucket{le=\"+Inf\"} " << count_ << "\n";
  o << name << "_sum " << sum_ << "\n" << name << "_count " << count_ << "\n";
  return o.str();
}

void Metrics::request_done(int status) {
  std::lock_guard<std::mutex> lock(mu_);
  ++by_status_[status];
}

void Metrics::tokens(int64_t prompt, int64_t generated) {
  std::lock_guard<std::mutex> lock(mu_);
  prompt_tokens_ += prompt;
  generated_tokens_ += generated;
}

void Metrics::first_token(double s) {
  std::lock_guard<std::mutex> lock(mu_);
  ttft_.observe(s);
}

void Metrics::inter_token(double s) {
  std::lock_guard<std::mutex> lock(mu_);
  itl_.observe(s);
}

std::string Metrics::text(const LoopStats& s) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::ostringstream o;
  auto gauge = [&](const char* name, const char* help, double v) {
    o << "# HELP " << name << " " << help << "\n# TYPE " << name << " gauge\n" << name << " " << v << "\n";
  };
  auto counter = [&](const char* name, const char* help, int64_t v) {
    o << "# HELP " << name << " " << help << "\n# TYPE " << name << " counter\n" << name << " " << v << "\n";
  };
  o << "# HELP unillm_requests_total HTTP requests answered, by status.\n# TYPE unillm_requests_total counter\n";
  for (const auto& [status, n] : by_status_) o << "unillm_requests_total{status=\"" << status << "\"} " << n << "\n";
  counter("unillm_prompt_tokens_total", "Prompt tokens of finished requests.", prompt_tokens_);
  counter("unillm_generation_tokens_total", "Generated tokens of finished requests.", generated_tokens_);
  gauge("unillm_num_requests_running", "Sequences in the engine's running set.", static_cast<double>(s.running));
  gauge("unillm_num_requests_waiting", "Sequences waiting for admission.", static_cast<double>(s.waiting));
  o << "# HELP unillm_kv_blocks KV cache blocks by state (used: held by a sequence; cached: "
       "hashed for prefix reuse, held or not; free: available, evictable cached ones included).\n"
       "# TYPE unillm_kv_blocks gauge\n"
    << "unillm_kv_blocks{state=\"used\"} " << s.blocks_used << "\n"
    << "unillm_kv_blocks{state=\"free\"} " << s.blocks_free << "\n"
    << "unillm_kv_blocks{state=\"cached\"} " << s.blocks_cached << "\n"
    << "unillm_kv_blocks{state=\"total\"} " << s.num_blocks << "\n";
  counter("unillm_prefix_cache_queries_total", "Full prompt blocks looked up in the prefix cache.", s.prefix_lookups);
  counter("unillm_prefix_cache_hits_total", "Full prompt blocks found in the prefix cache.", s.prefix_hits);
  gauge("unillm_prefix_cache_hit_rate", "Hits over queries since start (0 before any query).",
        s.prefix_lookups ? static_cast<double>(s.prefix_hits) / static_cast<double>(s.prefix_lookups) : 0.0);
  counter("unillm_preemptions_total", "Sequences preempted (recomputed later) for lack of blocks.", s.preemptions);
  o << ttft_.text("unillm_time_to_first_token_seconds", "From request arrival to its first token.");
  o << itl_.text("unillm_inter_token_latency_seconds", "Between consecutive tokens of a request.");
  return o.str();
}

}  // namespace unillm::serve
