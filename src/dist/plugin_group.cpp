// ProcessGroup over a plugin's collectives table (see plugin_group.h). A collective on device
// tensors is one table call that queues it on the device's stream, then an event recorded behind
// it: the Work's wait() synchronises that event under the watchdog's deadline.
#include "dist/plugin_group.h"

#include <cstring>
#include <vector>

#include "core/error.h"
#include "dist/gather_strings.h"
#include "dist/watchdog.h"

namespace unillm::dist {
namespace {

// What a group and its sub-groups share: the plugin, the device and its stream, the deadline.
struct Shared {
  PluginCollectives c;
  Device device;
  unillm_stream stream = nullptr;
  Watchdog dog;
  Shared(const PluginCollectives& pc, Device d, double timeout_s)
      : c(pc), device(d), dog(timeout_s) {
    stream = static_cast<unillm_stream>(backend_for(d).stream(d.index));
  }
};

// Throws for a failed table or device call, with the plugin's message.
void check(const Shared& s, unillm_status status, const std::string& what) {
  if (status == UNILLM_OK) return;
  const char* m = s.c.device->last_error ? s.c.device->last_error() : nullptr;
  const std::string why = m && *m ? m : "no message";
  if (status == UNILLM_ERROR_OUT_OF_MEMORY)
    UNILLM_THROW(OutOfMemory, "[dist] ", s.c.name, "'s ", what, ": out of device memory (", why,
                 ")");
  UNILLM_THROW(DeviceError, "[dist] ", s.c.name, "'s ", what, " failed (status ", status,
               "): ", why);
}

bool reducible(DType d) {
  return d == DType::f32 || d == DType::f64 || d == DType::i32 || d == DType::i64;
}

unillm_reduce_op code_of(ReduceOp op) {
  return op == ReduceOp::sum ? UNILLM_REDUCE_SUM : UNILLM_REDUCE_MAX;
}

void check_contiguous(const Tensor& t, const char* what, const char* op) {
  if (!t.defined()) UNILLM_THROW(ShapeError, "[dist] ", op, ": ", what, " is undefined");
  if (!t.is_contiguous())
    UNILLM_THROW(ShapeError, "[dist] ", op, ": ", what, " must be contiguous");
}

void check_reducible(const Tensor& t, const char* op) {
  if (!reducible(t.dtype()))
    UNILLM_THROW(DTypeError, "[dist] ", op, " reduces f32, f64, i32 or i64, not ",
                 dtype_name(t.dtype()));
}

// An event behind a queued collective; the tensors are kept until it has run.
class PluginWork : public Work {
 public:
  PluginWork(std::shared_ptr<Shared> s, std::vector<Tensor> keep, std::string op)
      : s_(std::move(s)), keep_(std::move(keep)), op_(std::move(op)) {
    const int32_t i = s_->device.index;
    check(*s_, s_->c.device->event_create(i, &event_), op_ + " (event_create)");
    const unillm_status st = s_->c.device->event_record(i, event_, s_->stream);
    if (st != UNILLM_OK) {
      s_->c.device->event_destroy(i, event_);
      check(*s_, st, op_ + " (event_record)");
    }
  }
  ~PluginWork() override {
    if (!done_)
      s_->c.device->event_synchronize(s_->device.index, event_);  // a failure cannot be thrown here
    s_->c.device->event_destroy(s_->device.index, event_);
  }
  void wait() override {
    if (done_) return;
    unillm_status st;
    {
      auto armed = s_->dog.arm(op_);
      st = s_->c.device->event_synchronize(s_->device.index, event_);
    }
    done_ = true;
    keep_.clear();
    check(*s_, st, op_ + " (wait)");
  }

 private:
  std::shared_ptr<Shared> s_;
  std::vector<Tensor> keep_;
  std::string op_;
  unillm_event event_ = nullptr;
  bool done_ = false;
};

class PluginGroup : public ProcessGroup {
 public:
  PluginGroup(std::shared_ptr<Shared> s, ProcessGroup& host, std::unique_ptr<ProcessGroup> owned,
              unillm_comm comm)
      : s_(std::move(s)), owned_(std::move(owned)), host_(host), comm_(comm) {}
  ~PluginGroup() override { s_->c.table->comm_destroy(comm_); }
  int rank() const override { return host_.rank(); }
  int size() const override { return host_.size(); }

  std::unique_ptr<Work> allreduce_async(Tensor& t, ReduceOp op) override {
    if (!on_device(t)) return host_.allreduce_async(t, op);
    check_contiguous(t, "tensor", "allreduce");
    check_reducible(t, "allreduce");
    const std::string what = describe("allreduce", t);
    issue(what, [&] {
      return s_->c.table->allreduce(comm_, s_->stream, t.raw_data(), t.raw_data(), n(t),
                                    dtype_code(t.dtype()), code_of(op));
    });
    return work({t}, what);
  }

  std::unique_ptr<Work> reduce_scatter_async(const Tensor& in, Tensor& out, ReduceOp op) override {
    if (!on_device(in) || !on_device(out)) return host_.reduce_scatter_async(in, out, op);
    check_contiguous(in, "input", "reduce_scatter");
    check_contiguous(out, "output", "reduce_scatter");
    check_reducible(in, "reduce_scatter");
    if (in.dtype() != out.dtype() || in.numel() != out.numel() * size())
      UNILLM_THROW(ShapeError, "[dist] reduce_scatter: input of ", in.numel(), " ",
                   dtype_name(in.dtype()), " elements must be ", size(), " ranks × the output's ",
                   out.numel(), " ", dtype_name(out.dtype()));
    const std::string what = describe("reduce_scatter", in);
    issue(what, [&] {
      return s_->c.table->reduce_scatter(comm_, s_->stream, in.raw_data(), out.raw_data(), n(out),
                                         dtype_code(in.dtype()), code_of(op));
    });
    return work({in, out}, what);
  }

  std::unique_ptr<Work> allgather_async(const Tensor& in, Tensor& out) override {
    if (!on_device(in) || !on_device(out)) return host_.allgather_async(in, out);
    check_contiguous(in, "input", "allgather");
    check_contiguous(out, "output", "allgather");
    if (in.dtype() != out.dtype() || out.numel() != in.numel() * size())
      UNILLM_THROW(ShapeError, "[dist] allgather: output of ", out.numel(), " ",
                   dtype_name(out.dtype()), " elements must be ", size(), " ranks × the input's ",
                   in.numel(), " ", dtype_name(in.dtype()));
    const std::string what = describe("allgather", in);
    issue(what, [&] {
      return s_->c.table->allgather(comm_, s_->stream, in.raw_data(), out.raw_data(), n(in),
                                    dtype_code(in.dtype()));
    });
    return work({in, out}, what);
  }

  void broadcast(Tensor& t, int root) override {
    if (!on_device(t)) return host_.broadcast(t, root);
    check_contiguous(t, "tensor", "broadcast");
    check_rank(root, "broadcast");
    const std::string what = describe("broadcast", t) + " from rank " + std::to_string(root);
    issue(what, [&] {
      return s_->c.table->broadcast(comm_, s_->stream, t.raw_data(), n(t), dtype_code(t.dtype()),
                                    root);
    });
    work({t}, what)->wait();
  }

  void send(const Tensor& t, int dst, int tag) override { send_async(t, dst, tag)->wait(); }

  std::unique_ptr<Work> send_async(const Tensor& t, int dst, int tag) override {
    if (!on_device(t)) return host_.send_async(t, dst, tag);
    check_contiguous(t, "tensor", "send");
    check_peer(dst, "send");
    const std::string what =
        describe("send", t) + " to rank " + std::to_string(dst) + " tag " + std::to_string(tag);
    issue(what, [&] {
      return s_->c.table->send(comm_, s_->stream, t.raw_data(), n(t), dtype_code(t.dtype()), dst);
    });
    return work({t}, what);  // queued on the stream; the Work waits for it
  }

  void recv(Tensor& t, int src, int tag) override {
    if (!on_device(t)) return host_.recv(t, src, tag);
    check_contiguous(t, "tensor", "recv");
    check_peer(src, "recv");
    const std::string what =
        describe("recv", t) + " from rank " + std::to_string(src) + " tag " + std::to_string(tag);
    issue(what, [&] {
      return s_->c.table->recv(comm_, s_->stream, t.raw_data(), n(t), dtype_code(t.dtype()), src);
    });
    work({t}, what)->wait();
  }

  void barrier() override { host_.barrier(); }

  std::unique_ptr<ProcessGroup> split(int color, int key) override {
    std::unique_ptr<ProcessGroup> sub = host_.split(color, key);
    ProcessGroup& h = *sub;
    return join(s_, h, std::move(sub));
  }

  // Collective over host: joins a communicator of the plugin (see make_plugin_group).
  static std::unique_ptr<ProcessGroup> join(std::shared_ptr<Shared> s, ProcessGroup& host,
                                            std::unique_ptr<ProcessGroup> owned);

 private:
  bool on_device(const Tensor& t) const { return t.defined() && t.device() == s_->device; }
  static size_t n(const Tensor& t) { return static_cast<size_t>(t.numel()); }
  void check_rank(int r, const char* op) const {
    if (r < 0 || r >= size())
      UNILLM_THROW(ShapeError, "[dist] ", op, ": rank ", r, " is not in a group of ", size());
  }
  void check_peer(int r, const char* op) const {
    check_rank(r, op);
    if (r == rank()) UNILLM_THROW(ShapeError, "[dist] ", op, ": rank ", r, " is this process");
  }
  // What errors and the watchdog name: "allreduce of 1000 f32 (group of 2)".
  std::string describe(const char* op, const Tensor& t) const {
    return std::string(op) + " of " + std::to_string(t.numel()) + " " + dtype_name(t.dtype()) +
           " (group of " + std::to_string(size()) + ")";
  }
  // One table call, under the deadline too: a plugin may block in it (the reference plugin runs
  // its MPI call there), not only in the wait.
  template <typename F>
  void issue(const std::string& what, F&& call) {
    unillm_status st;
    {
      auto armed = s_->dog.arm(s_->c.name + "'s " + what);
      st = call();
    }
    check(*s_, st, what);
  }
  std::unique_ptr<Work> work(std::vector<Tensor> keep, const std::string& what) {
    return std::make_unique<PluginWork>(s_, std::move(keep), s_->c.name + "'s " + what);
  }

  std::shared_ptr<Shared> s_;
  std::unique_ptr<ProcessGroup>
      owned_;  // a split's host group (declared before host_ refers to it)
  ProcessGroup& host_;
  unillm_comm comm_;
};

std::unique_ptr<ProcessGroup> PluginGroup::join(std::shared_ptr<Shared> s, ProcessGroup& host,
                                                std::unique_ptr<ProcessGroup> owned) {
  const unillm_collectives_v1& t = *s->c.table;
  // Rank 0's id, with a leading byte that says whether it could make one (so no rank waits for
  // an id that will never come).
  Tensor id = Tensor::zeros({static_cast<int64_t>(1 + t.unique_id_size)}, DType::i8);
  auto* bytes = static_cast<char*>(id.raw_data());
  std::string error;
  if (host.rank() == 0) {
    if (t.get_unique_id(bytes + 1) == UNILLM_OK)
      bytes[0] = 1;
    else
      error = UNILLM_MSG("get_unique_id: ",
                         s->c.device->last_error ? s->c.device->last_error() : "no message");
  }
  host.broadcast(id, 0);
  unillm_comm comm = nullptr;
  if (bytes[0] != 1 && error.empty()) error = "rank 0 could not make a unique id";
  if (error.empty()) {
    unillm_status st;
    {
      auto armed =
          s->dog.arm(s->c.name + "'s comm_init (group of " + std::to_string(host.size()) + ")");
      st = t.comm_init(s->device.index, bytes + 1, host.rank(), host.size(), &comm);
    }
    if (st != UNILLM_OK)
      error = UNILLM_MSG("comm_init (status ", st,
                         "): ", s->c.device->last_error ? s->c.device->last_error() : "no message");
  }
  // Every rank learns every rank's outcome, so all of them go on, or all throw alike.
  const std::vector<std::string> outcomes = allgather_strings(host, error);
  for (size_t r = 0; r < outcomes.size(); ++r) {
    if (outcomes[r].empty()) continue;
    if (comm) t.comm_destroy(comm);
    UNILLM_THROW(DeviceError, "[dist] ", s->c.name, "'s collectives: rank ", r, " of ", host.size(),
                 " could not join: ", outcomes[r]);
  }
  return std::make_unique<PluginGroup>(std::move(s), host, std::move(owned), comm);
}

}  // namespace

std::unique_ptr<ProcessGroup> make_plugin_group(ProcessGroup& host,
                                                const PluginCollectives& collectives,
                                                const PluginGroupOptions& options) {
  if (!collectives.device || !collectives.table)
    UNILLM_THROW(DeviceError, "[dist] ", collectives.name, " has no collectives table");
  if (options.device.is_cpu())
    UNILLM_THROW(DeviceError, "[dist] plugin collectives need a plugin device, not the CPU");
  auto shared = std::make_shared<Shared>(collectives, options.device,
                                         host.size() > 1 ? options.timeout_s : 0);
  shared->dog.set_rank(host.rank());
  return PluginGroup::join(std::move(shared), host, nullptr);
}

}  // namespace unillm::dist
