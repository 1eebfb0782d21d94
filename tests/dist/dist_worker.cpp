// Run by tests/dist/process_group_test.cpp under `mpirun -np N`: every collective of
// dist::ProcessGroup (and the mesh's groups) against values each rank computes on its own —
// rank r contributes known numbers, so every result has a closed form. Prints "ok" lines and exits
// 0, or "FAIL" lines and exits 1.
//   dist_worker collectives
//   dist_worker mesh TP PP SHARDING
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "backends/cpu/register.h"
#include "core/error.h"
#include "dist/mesh.h"
#include "dist/mpi_group.h"

using namespace unillm;

namespace {

int failures = 0;

void check(bool ok, const std::string& what, int rank) {
  if (!ok) {
    std::printf("FAIL rank %d: %s\n", rank, what.c_str());
    ++failures;
  }
}

// Rank r's value at element i: distinct per (rank, element) and exact in f32.
float value(int r, int64_t i) { return static_cast<float>(r * 1000 + (i % 977)) * 0.5f; }

void collectives(dist::ProcessGroup& g) {
  const int r = g.rank(), p = g.size();
  for (int64_t n : {1, 7, 1000, 300001}) {  // odd sizes: nothing assumes divisibility
    Tensor t = Tensor::empty({n}, DType::f32);
    for (int64_t i = 0; i < n; ++i) t.data<float>()[i] = value(r, i);
    g.allreduce(t);
    bool ok = true;
    for (int64_t i = 0; i < n; ++i) {
      float want = 0;
      for (int q = 0; q < p; ++q) want += value(q, i);
      ok = ok && t.data<float>()[i] == want;
    }
    check(ok, "allreduce sum f32 n=" + std::to_string(n), r);
    Tensor m = Tensor::from_vector(std::vector<float>{static_cast<float>(r), -static_cast<float>(r)}, {2});
    g.allreduce(m, dist::ReduceOp::max);
    check(m.data<float>()[0] == p - 1 && m.data<float>()[1] == 0, "allreduce max", r);
  }
  {  // i64 (token counts)
    Tensor t = Tensor::empty({3}, DType::i64);
    for (int i = 0; i < 3; ++i) t.data<int64_t>()[i] = (int64_t{1} << 40) + r + i;
    g.allreduce(t);
    bool ok = true;
    for (int i = 0; i < 3; ++i) ok = ok && t.data<int64_t>()[i] == p * ((int64_t{1} << 40) + i) + p * (p - 1) / 2;
    check(ok, "allreduce i64", r);
  }
  {  // reduce_scatter: block q of the sum lands on rank q
    const int64_t n = 5;
    Tensor in = Tensor::empty({n * p}, DType::f32), out = Tensor::empty({n}, DType::f32);
    for (int64_t i = 0; i < n * p; ++i) in.data<float>()[i] = value(r, i);
    g.reduce_scatter(in, out);
    bool ok = true;
    for (int64_t i = 0; i < n; ++i) {
      float want = 0;
      for (int q = 0; q < p; ++q) want += value(q, r * n + i);
      ok = ok && out.data<float>()[i] == want;
    }
    check(ok, "reduce_scatter", r);
  }
  {  // allgather of bf16 patterns (moved, not reduced)
    const int64_t n = 3;
    Tensor in = Tensor::empty({n}, DType::bf16), out = Tensor::empty({n * p}, DType::bf16);
    for (int64_t i = 0; i < n; ++i) in.data<uint16_t>()[i] = static_cast<uint16_t>(r * 100 + i);
    g.allgather(in, out);
    bool ok = true;
    for (int q = 0; q < p; ++q)
      for (int64_t i = 0; i < n; ++i) ok = ok && out.data<uint16_t>()[q * n + i] == q * 100 + i;
    check(ok, "allgather bf16", r);
  }
  {  // async: two allreduces in flight at once, waited in reverse order
    Tensor a = Tensor::from_vector(std::vector<float>{1.0f}, {1}), b = Tensor::from_vector(std::vector<float>{2.0f}, {1});
    auto wa = g.allreduce_async(a, dist::ReduceOp::sum);
    auto wb = g.allreduce_async(b, dist::ReduceOp::sum);
    wb->wait();
    wa->wait();
    check(a.data<float>()[0] == p && b.data<float>()[0] == 2 * p, "two async allreduces", r);
  }
  {  // broadcast from the last rank
    Tensor t = Tensor::from_vector(std::vector<float>{static_cast<float>(r), 7.0f}, {2});
    g.broadcast(t, p - 1);
    check(t.data<float>()[0] == p - 1 && t.data<float>()[1] == 7, "broadcast", r);
  }
  if (p >= 2) {  // a ring of send/recv: each rank sends to the next (evens first, so no deadlock)
    Tensor out = Tensor::from_vector(std::vector<float>{static_cast<float>(r), 0.25f}, {2});
    Tensor in = Tensor::zeros({2}, DType::f32);
    const int next = (r + 1) % p, prev = (r + p - 1) % p;
    if (r % 2 == 0) {
      g.send(out, next, 11);
      g.recv(in, prev, 11);
    } else {
      g.recv(in, prev, 11);
      g.send(out, next, 11);
    }
    check(in.data<float>()[0] == prev && in.data<float>()[1] == 0.25f, "send/recv ring", r);
    // Every rank sends before it receives, 4 MiB each (past any eager limit, where blocking sends
    // would wait for each other): send_async returns at once.
    const int64_t n = 1 << 20;
    Tensor big = Tensor::from_vector(std::vector<float>(static_cast<size_t>(n), static_cast<float>(r)), {n});
    auto w = g.send_async(big, next, 12);
    Tensor got = Tensor::zeros({n}, DType::f32);
    g.recv(got, prev, 12);
    w->wait();
    check(got.data<float>()[0] == prev && got.data<float>()[n - 1] == prev, "send_async ring", r);
  }
  {  // refused shapes and dtypes are errors, not MPI crashes
    Tensor bf = Tensor::zeros({2}, DType::bf16);
    bool threw = false;
    try {
      g.allreduce(bf);
    } catch (const DTypeError&) {
      threw = true;
    }
    check(threw, "allreduce of bf16 refused", r);
    threw = false;
    Tensor in = Tensor::zeros({3}, DType::f32), out = Tensor::zeros({2}, DType::f32);
    try {
      g.reduce_scatter(in, out);
    } catch (const ShapeError&) {
      threw = true;
    }
    check(threw || p == 1, "reduce_scatter size mismatch refused", r);
  }
  g.barrier();
}

void mesh(dist::ProcessGroup& world, int tp, int pp, int sharding) {
  const dist::MeshShape shape = dist::mesh_shape(world.size(), tp, pp, sharding);
  dist::DeviceMesh m(world, shape);
  const dist::MeshCoord c = m.coord();
  const int r = world.rank();
  check(dist::rank_of(shape, c) == r, "rank_of(coord_of(rank))", r);
  struct G {
    const char* name;
    dist::ProcessGroup* g;
    int size, index;
  };
  for (const G& e : {G{"tp", &m.tp(), shape.tp, c.tp}, G{"sharding", &m.sharding(), shape.sharding, c.sharding},
                     G{"dp", &m.dp(), shape.dp, c.dp}, G{"pp", &m.pp(), shape.pp, c.pp}}) {
    check(e.g->size() == e.size, std::string(e.name) + " group size", r);
    check(e.g->rank() == e.index, std::string(e.name) + " group rank", r);
    // Gathering the world ranks of a group gives exactly the ranks that differ only along it.
    Tensor mine = Tensor::from_vector(std::vector<float>{static_cast<float>(r)}, {1});
    Tensor all = Tensor::empty({e.size}, DType::f32);
    e.g->allgather(mine, all);
    bool ok = true;
    for (int k = 0; k < e.size; ++k) {
      dist::MeshCoord want = c;
      if (std::string(e.name) == "tp") want.tp = k;
      if (std::string(e.name) == "sharding") want.sharding = k;
      if (std::string(e.name) == "dp") want.dp = k;
      if (std::string(e.name) == "pp") want.pp = k;
      ok = ok && all.data<float>()[k] == dist::rank_of(shape, want);
    }
    check(ok, std::string(e.name) + " group members", r);
  }
}

}  // namespace

int main(int argc, char** argv) {
  try {
    cpu::register_cpu_backend();  // host tensors
    dist::ProcessGroup& g = dist::world();
    const std::string what = argc > 1 ? argv[1] : "";
    if (what == "collectives") {
      collectives(g);
    } else if (what == "mesh" && argc == 5) {
      mesh(g, std::atoi(argv[2]), std::atoi(argv[3]), std::atoi(argv[4]));
    } else {
      std::fprintf(stderr, "usage: dist_worker collectives | mesh TP PP SHARDING\n");
      return 2;
    }
    if (failures == 0) std::printf("ok rank %d of %d: %s\n", g.rank(), g.size(), what.c_str());
    return failures == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dist_worker: %s\n", e.what());
    dist::abort_world(3);
    return 3;
  }
}
