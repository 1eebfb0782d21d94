// The engine thread: admit submitted requests, apply cancels and finishes, step (without the
// lock: HTTP threads submit and read stats meanwhile), hand each output to its channel.
#include "serve/engine_loop.h"

#include "core/error.h"

namespace unillm::serve {

int Channel::choice(int64_t id) const {
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] == id) return static_cast<int>(i);
  return -1;
}

EngineLoop::EngineLoop(infer::Engine& engine, int64_t max_waiting)
    : engine_(engine), max_waiting_(max_waiting) {}

EngineLoop::~EngineLoop() { stop(); }

void EngineLoop::start() { thread_ = std::thread([this] { run(); }); }

void EngineLoop::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::shared_ptr<Channel> EngineLoop::submit(std::vector<infer::Request> requests) {
  for (const auto& r : requests) engine_.validate(r);  // constant facts only: safe off-thread
  auto ch = std::make_shared<Channel>();
  ch->open = static_cast<int>(requests.size());
  {
    std::lock_guard<std::mutex> lock(mu_);
    int64_t queued = stats_.waiting;
    for (const auto& in : incoming_) queued += static_cast<int64_t>(in.requests.size());
    if (stopping_ || queued + static_cast<int64_t>(requests.size()) > max_waiting_) return nullptr;
    incoming_.push_back({std::move(requests), ch});
  }
  cv_.notify_all();
  return ch;
}

void EngineLoop::finish(int64_t id, infer::FinishReason reason) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    finishes_.emplace_back(id, reason);
  }
  cv_.notify_all();
}

void EngineLoop::cancel(const std::shared_ptr<Channel>& ch) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    cancels_.push_back(ch);
  }
  cv_.notify_all();
}

LoopStats EngineLoop::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void EngineLoop::publish(const std::vector<infer::StepOutput>& out) {
  for (const infer::StepOutput& o : out) {
    auto it = channels_.find(o.request);
    if (it == channels_.end()) continue;
    std::shared_ptr<Channel> ch = it->second;
    if (o.finished != infer::FinishReason::none) channels_.erase(it);
    {
      std::lock_guard<std::mutex> lock(ch->mu);
      ch->events.push_back(o);
      if (o.finished != infer::FinishReason::none) --ch->open;
    }
    ch->cv.notify_all();
  }
}

namespace {
void fail(Channel& ch, const std::string& what) {
  {
    std::lock_guard<std::mutex> lock(ch.mu);
    ch.error = what;
    ch.open = 0;
  }
  ch.cv.notify_all();
}
}  // namespace

void EngineLoop::run() {
  for (;;) {
    std::deque<Incoming> incoming;
    std::vector<std::shared_ptr<Channel>> cancels;
    std::vector<std::pair<int64_t, infer::FinishReason>> finishes;
    bool stopping;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] {
        return stopping_ || !incoming_.empty() || !cancels_.empty() || !finishes_.empty() ||
               engine_.has_work();
      });
      stopping = stopping_;
      incoming.swap(incoming_);
      cancels.swap(cancels_);
      finishes.swap(finishes_);
    }
    // Only this thread touches the engine and channels_ from here on.
    for (Incoming& in : incoming) {
      std::vector<int64_t> ids;
      try {  // n choices of one prompt: the engine forks them from the first (shared blocks)
        ids = engine_.add_requests(std::move(in.requests));
      } catch (const std::exception& e) {  // validated in submit(): should not happen
        fail(*in.channel, e.what());
        continue;
      }
      {
        std::lock_guard<std::mutex> lock(in.channel->mu);
        in.channel->ids = ids;
      }
      for (int64_t id : ids) channels_[id] = in.channel;
    }
    for (const auto& ch : cancels)
      for (int64_t id : ch->ids)
        if (channels_.count(id)) engine_.finish(id, infer::FinishReason::abort);
    for (const auto& [id, reason] : finishes)
      if (channels_.count(id)) engine_.finish(id, reason);
    if (stopping)
      for (const auto& [id, ch] : channels_) engine_.finish(id, infer::FinishReason::abort);
    std::vector<infer::StepOutput> out;
    try {
      out = engine_.step();
    } catch (const std::exception& e) {  // non-finite logits: end every open request with it
      for (const auto& [id, ch] : channels_) engine_.finish(id, infer::FinishReason::abort);
      std::map<int64_t, std::shared_ptr<Channel>> open;
      open.swap(channels_);
      for (const auto& [id, ch] : open) fail(*ch, e.what());
      try {
        (void)engine_.step();  // drains the abort reports
      } catch (...) {
      }
    }
    publish(out);
    std::lock_guard<std::mutex> lock(mu_);
    const auto& b = engine_.blocks();
    stats_.running = engine_.num_running();
    stats_.waiting = engine_.num_waiting();
    stats_.num_blocks = b.num_blocks();
    stats_.blocks_used = b.used();
    stats_.blocks_cached = b.cached();
    stats_.blocks_free = b.available();
    stats_.prefix_lookups = b.lookups();
    stats_.prefix_hits = b.hits();
    stats_.preemptions = engine_.stats().preemptions;
    if (stopping && channels_.empty() && !engine_.has_work() && incoming_.empty()) return;
  }
}

}  // namespace unillm::serve
