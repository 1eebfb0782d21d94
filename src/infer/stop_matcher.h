// Stop strings over streamed text: text is released only once it cannot be the start of a
// stop string, and generation ends at the first full match (the stop string is not emitted).
#pragma once

#include <string>
#include <vector>

namespace unillm::infer {

class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {}
  // Appends text; returns what is safe to emit now. stopped() turns true on a match.
  std::string push(const std::string& text);
  // Whatever is still held back (call at the end when no stop matched).
  std::string flush();
  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stops_;
  std::string pending_;
  bool stopped_ = false;
};

}  // namespace unillm::infer
