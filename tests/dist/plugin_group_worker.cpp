// Run by tests/dist/plugin_group_test.cpp. Under `mpirun -np N`: dist::PluginGroup over the
// reference plugin's collectives (ABI 1.1, over MPI), every collective on device tensors checked
// against closed forms (rank r contributes known numbers), and the host group it is built on
// counted, so a device tensor that slipped through host staging shows; a hung peer. Under
// `mpirun -np 1`: the ABI checks of a 1.0 host, a 1.0 plugin and refused tables. Without mpirun:
// the collectives outside an MPI job.
// Prints "ok" lines and exits 0, or "FAIL" lines and exits 1.
//   plugin_group_worker collectives PLUGIN.so
//   plugin_group_worker hang PLUGIN.so            (2 ranks; exits by the watchdog)
//   plugin_group_worker abi PLUGIN.so PLUGIN_V0.so
//   plugin_group_worker no-mpi PLUGIN.so
#include <dlfcn.h>

#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "backends/cpu/register.h"
#include "backends/plugin/plugin_backend.h"
#include "backends/plugin/plugin_loader.h"
#include "core/error.h"
#include "dist/counting_group.h"
#include "dist/mpi_group.h"
#include "dist/plugin_group.h"

using namespace unillm;

namespace {

int failures = 0;

void check(bool ok, const std::string& what, int rank = 0) {
  if (!ok) {
    std::printf("FAIL rank %d: %s\n", rank, what.c_str());
    ++failures;
  }
}

// Rank r's value at element i: distinct per (rank, element) and exact in f32.
float value(int r, int64_t i) { return static_cast<float>(r * 1000 + (i % 977)) * 0.5f; }

std::vector<float> host_floats(const Tensor& t) { return t.to(Device{}).to_float_vector(); }

// Loads the plugin and returns its backend (throws when it does not load).
plugin::PluginBackend& load(const std::string& file, const std::string& kind_name) {
  const plugin::LoadReport rep = plugin::load_plugins(file);
  if (!rep.failures.empty()) UNILLM_THROW(DeviceError, rep.failures[0]);
  DeviceKind kind;
  if (!find_device_kind(kind_name, &kind)) UNILLM_THROW(DeviceError, "no device kind ", kind_name);
  return dynamic_cast<plugin::PluginBackend&>(*find_backend(kind));
}

void reductions(dist::ProcessGroup& g, Device dev) {
  const int r = g.rank(), p = g.size();
  for (int64_t n : {1, 7, 1000, 300001}) {  // odd sizes: nothing assumes divisibility
    std::vector<float> v(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = value(r, i);
    Tensor t = Tensor::from_vector(v, {n}).to(dev);
    g.allreduce(t);
    const std::vector<float> got = host_floats(t);
    bool ok = true;
    for (int64_t i = 0; i < n; ++i) {
      float want = 0;
      for (int q = 0; q < p; ++q) want += value(q, i);
      ok = ok && got[static_cast<size_t>(i)] == want;
    }
    check(ok, "allreduce sum f32 n=" + std::to_string(n), r);
  }
  Tensor m =
      Tensor::from_vector(std::vector<float>{static_cast<float>(r), -static_cast<float>(r)}, {2})
          .to(dev);
  g.allreduce(m, dist::ReduceOp::max);
  check(host_floats(m) == std::vector<float>{static_cast<float>(p - 1), 0.0f}, "allreduce max", r);
  Tensor l = Tensor::empty({3}, DType::i64);
  for (int i = 0; i < 3; ++i) l.data<int64_t>()[i] = (int64_t{1} << 40) + r + i;
  Tensor ld = l.to(dev);
  g.allreduce(ld);
  l = ld.to(Device{});
  bool ok = true;
  for (int i = 0; i < 3; ++i)
    ok = ok && l.data<int64_t>()[i] == p * ((int64_t{1} << 40) + i) + p * (p - 1) / 2;
  check(ok, "allreduce i64", r);
  Tensor d = Tensor::empty({2}, DType::f64);
  d.data<double>()[0] = 0.1 * (r + 1);
  d.data<double>()[1] = -1.0 * r;
  Tensor dd = d.to(dev);
  g.allreduce(dd, dist::ReduceOp::max);
  d = dd.to(Device{});
  check(d.data<double>()[0] == 0.1 * p && d.data<double>()[1] == 0, "allreduce max f64", r);
  const int64_t n = 5;  // reduce_scatter: block q of the sum lands on rank q
  std::vector<float> v(static_cast<size_t>(n * p));
  for (int64_t i = 0; i < n * p; ++i) v[static_cast<size_t>(i)] = value(r, i);
  Tensor in = Tensor::from_vector(v, {n * p}).to(dev), out = Tensor::zeros({n}, DType::f32, dev);
  g.reduce_scatter(in, out);
  const std::vector<float> got = host_floats(out);
  ok = true;
  for (int64_t i = 0; i < n; ++i) {
    float want = 0;
    for (int q = 0; q < p; ++q) want += value(q, r * n + i);
    ok = ok && got[static_cast<size_t>(i)] == want;
  }
  check(ok, "reduce_scatter", r);
}

void movements(dist::ProcessGroup& g, Device dev) {
  const int r = g.rank(), p = g.size();
  {  // allgather of bf16 patterns (moved, not reduced)
    const int64_t n = 3;
    Tensor in = Tensor::empty({n}, DType::bf16);
    for (int64_t i = 0; i < n; ++i) in.data<uint16_t>()[i] = static_cast<uint16_t>(r * 100 + i);
    Tensor din = in.to(dev), dout = Tensor::zeros({n * p}, DType::bf16, dev);
    g.allgather(din, dout);
    Tensor out = dout.to(Device{});
    bool ok = true;
    for (int q = 0; q < p; ++q)
      for (int64_t i = 0; i < n; ++i) ok = ok && out.data<uint16_t>()[q * n + i] == q * 100 + i;
    check(ok, "allgather bf16", r);
  }
  {  // async: two allreduces in flight, waited in reverse order
    Tensor a = Tensor::from_vector(std::vector<float>{1.0f}, {1}).to(dev);
    Tensor b = Tensor::from_vector(std::vector<float>{2.0f}, {1}).to(dev);
    auto wa = g.allreduce_async(a, dist::ReduceOp::sum);
    auto wb = g.allreduce_async(b, dist::ReduceOp::sum);
    wb->wait();
    wa->wait();
    check(host_floats(a)[0] == p && host_floats(b)[0] == 2 * p, "two async allreduces", r);
  }
  {  // broadcast from the last rank
    Tensor t = Tensor::from_vector(std::vector<float>{static_cast<float>(r), 7.0f}, {2}).to(dev);
    g.broadcast(t, p - 1);
    check(host_floats(t) == std::vector<float>{static_cast<float>(p - 1), 7.0f}, "broadcast", r);
  }
  if (p >= 2) {  // a ring of send/recv: evens send first, so nothing deadlocks
    Tensor out = Tensor::from_vector(std::vector<float>{static_cast<float>(r), 0.25f}, {2}).to(dev);
    Tensor in = Tensor::zeros({2}, DType::f32, dev);
    const int next = (r + 1) % p, prev = (r + p - 1) % p;
    if (r % 2 == 0) {
      g.send(out, next, 11);
      g.recv(in, prev, 11);
    } else {
      g.recv(in, prev, 11);
      g.send(out, next, 11);
    }
    check(host_floats(in) == std::vector<float>{static_cast<float>(prev), 0.25f}, "send/recv ring",
          r);
  }
}

void refusals(dist::ProcessGroup& g, Device dev) {
  const int r = g.rank(), p = g.size();
  bool threw = false;
  try {
    Tensor bf = Tensor::zeros({2}, DType::bf16, dev);
    g.allreduce(bf);
  } catch (const DTypeError&) {
    threw = true;
  }
  check(threw, "allreduce of bf16 refused", r);
  threw = false;
  try {
    Tensor in = Tensor::zeros({3}, DType::f32, dev), out = Tensor::zeros({2}, DType::f32, dev);
    g.reduce_scatter(in, out);
  } catch (const ShapeError&) {
    threw = true;
  }
  check(threw || p == 1, "reduce_scatter size mismatch refused", r);
}

void collectives(const std::string& file) {
  cpu::register_cpu_backend();
  dist::ProcessGroup& world = dist::world();
  plugin::PluginBackend& b = load(file, "ref");
  const int r = world.rank();
  const Device dev{b.kind(), r % b.device_count()};  // both device indices take part
  dist::CountingGroup host(world);
  auto g =
      dist::make_plugin_group(host, {b.name(), b.device_interface(), b.collectives()}, {dev, 60});
  check(g->rank() == r && g->size() == world.size(), "rank and size", r);
  const int64_t setup_calls = host.stats().calls;  // the id's broadcast, the outcomes' allgathers
  reductions(*g, dev);
  movements(*g, dev);
  refusals(*g, dev);
  check(host.stats().calls == setup_calls,
        "device tensors went through host MPI (" +
            std::to_string(host.stats().calls - setup_calls) + " calls)",
        r);
  Tensor cpu_t =
      Tensor::from_vector(std::vector<float>{1.0f}, {1});  // a host tensor goes to host MPI
  g->allreduce(cpu_t);
  check(cpu_t.data<float>()[0] == world.size() && host.stats().calls == setup_calls + 1,
        "host tensor via host", r);
  {  // sub-groups (odd and even ranks): a communicator that only its members join
    auto sub = g->split(r % 2, r);
    check(sub->size() == (world.size() + 1 - r % 2) / 2 && sub->rank() == r / 2, "split shape", r);
    Tensor t = Tensor::from_vector(std::vector<float>{static_cast<float>(r)}, {1}).to(dev);
    sub->allreduce(t);
    float want = 0;
    for (int q = r % 2; q < world.size(); q += 2) want += static_cast<float>(q);
    check(host_floats(t)[0] == want, "split allreduce", r);
    movements(*sub, dev);
  }
  g->barrier();
}

// Rank 1 never joins the allreduce: rank 0's wait in the plugin ends by the watchdog's deadline
// (2 s), which names the operation and exits the process.
void hang(const std::string& file) {
  cpu::register_cpu_backend();
  dist::ProcessGroup& world = dist::world();
  plugin::PluginBackend& b = load(file, "ref");
  const Device dev{b.kind(), 0};
  auto g =
      dist::make_plugin_group(world, {b.name(), b.device_interface(), b.collectives()}, {dev, 2});
  if (world.rank() == 1) std::this_thread::sleep_for(std::chrono::seconds(60));
  Tensor t = Tensor::zeros({4}, DType::f32, dev);
  g->allreduce(t);
  check(false, "the allreduce returned without its peer", world.rank());
}

// A 1.0 host passes a struct that ends before `collectives`: the plugin must not write past it;
// a 1.0 plugin leaves the zeroed field NULL, and the loader takes it with no collectives.
void abi(const std::string& file, const std::string& v0_file) {
  for (const std::string& f : {file, v0_file}) {
    void* lib = ::dlopen(f.c_str(), RTLD_NOW | RTLD_LOCAL);
    check(lib != nullptr, "dlopen " + f);
    if (!lib) continue;
    auto init = reinterpret_cast<unillm_plugin_init_fn>(::dlsym(lib, UNILLM_PLUGIN_INIT_SYMBOL));
    std::vector<unsigned char> buf(sizeof(unillm_plugin),
                                   0xA5);  // 0xA5: the bytes past an old struct
    auto* p = reinterpret_cast<unillm_plugin*>(buf.data());
    const size_t old_size = offsetof(unillm_plugin, collectives);
    std::memset(buf.data(), 0, old_size);
    p->size = old_size;
    check(init(UNILLM_PLUGIN_ABI_MAJOR, 0, p) == UNILLM_OK, "init under a 1.0 host: " + f);
    bool untouched = true;
    for (size_t i = old_size; i < buf.size(); ++i) untouched = untouched && buf[i] == 0xA5;
    check(untouched, "the plugin wrote past a 1.0 host's struct: " + f);
  }
  cpu::register_cpu_backend();
  plugin::PluginBackend& ref = load(file, "ref");
  plugin::PluginBackend& v0 = load(v0_file, "ref_v0");
  check(ref.collectives() != nullptr, "ref has collectives");
  check(v0.collectives() == nullptr, "ref_v0 (ABI 1.0) has none");
  {  // tables the loader refuses, with the reason
    unillm_plugin pl{};
    unillm_collectives_v1 t = *ref.collectives();
    pl.collectives = &t;
    std::string why;
    check(plugin::usable_collectives(pl, &why) == &t && why.empty(), "a whole table is usable");
    t.size = offsetof(unillm_collectives_v1, recv);
    check(!plugin::usable_collectives(pl, &why) && why.find("has size") != std::string::npos,
          "short table: " + why);
    t = *ref.collectives();
    t.unique_id_size = UNILLM_UNIQUE_ID_MAX + 1;
    check(!plugin::usable_collectives(pl, &why) && why.find("unique_id_size") != std::string::npos,
          "id size: " + why);
    t = *ref.collectives();
    t.allgather = nullptr;
    check(!plugin::usable_collectives(pl, &why) && why.find("NULL function") != std::string::npos,
          "NULL: " + why);
  }
  const plugin::LoadReport again =
      plugin::load_plugins(v0_file);  // the kind is taken now: a report
  check(again.loaded.empty() && !again.failures.empty(), "a second ref_v0 refused");
  bool threw = false;
  try {
    dist::make_plugin_group(dist::world(), {v0.name(), v0.device_interface(), v0.collectives()},
                            {Device{v0.kind(), 0}, 0});
  } catch (const DeviceError& e) {
    threw = std::string(e.what()).find("ref_v0 has no collectives table") != std::string::npos;
  }
  check(threw, "a plugin group over ref_v0 refused");
}

// Outside an MPI job the table is harmless: UNSUPPORTED with a message, nothing crashes.
void no_mpi(const std::string& file) {
  cpu::register_cpu_backend();
  plugin::PluginBackend& b = load(file, "ref");
  const unillm_collectives_v1& t = *b.collectives();
  std::vector<char> id(t.unique_id_size, 0);
  check(t.get_unique_id(id.data()) == UNILLM_ERROR_UNSUPPORTED, "get_unique_id outside MPI");
  unillm_comm c = nullptr;
  check(t.comm_init(0, id.data(), 0, 1, &c) == UNILLM_ERROR_UNSUPPORTED && c == nullptr,
        "comm_init outside MPI");
  const std::string msg = b.device_interface()->last_error();
  check(msg.find("mpirun") != std::string::npos, "message names mpirun: " + msg);
  std::printf("said: %s\n", msg.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  const std::string what = argc > 2 ? argv[1] : "";
  try {
    if (what == "collectives") {
      collectives(argv[2]);
    } else if (what == "abi" && argc == 4) {
      abi(argv[2], argv[3]);
    } else if (what == "hang") {
      hang(argv[2]);
    } else if (what == "no-mpi") {
      no_mpi(argv[2]);
    } else {
      std::fprintf(
          stderr,
          "usage: plugin_group_worker collectives|hang|no-mpi PLUGIN.so | abi PLUGIN.so V0.so\n");
      return 2;
    }
    const int rank = dist::mpi_started() ? dist::world().rank() : 0;
    if (failures == 0) std::printf("ok rank %d: %s\n", rank, what.c_str());
    return failures == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "plugin_group_worker: %s\n", e.what());
    dist::abort_world(3);
    return 3;
  }
}
