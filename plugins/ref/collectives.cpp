// The reference device's collectives (unillm_collectives_v1, ABI 1.1) over MPI. Its device memory
// is host memory behind the pool's read-write view, so MPI reads and writes it directly. Each
// operation synchronises the stream (the work queued before it has run), then runs the MPI call
// on the calling thread, the host thread that initialised MPI (the host asks for
// MPI_THREAD_FUNNELED, so the stream workers may not call MPI): when the call returns, the result
// is in place for the work queued after it. A real device would queue the transfer on the stream.
#include <mpi.h>

#include <climits>
#include <cstring>
#include <random>
#include <vector>

#include "device.h"

namespace unillm_ref {

namespace {

// The unique id: who gathers the communicator (its world rank), a random token that every
// member must present, and the tag of the bootstrap messages.
struct UniqueId {
  char magic[16];
  int32_t root_world_rank;
  int32_t tag;
  uint64_t token;
};
constexpr char kMagic[16] = "unillm-ref-comm";
constexpr int kTagBase = 17000, kTagSpan = 8000;  // under 32767, the least MPI_TAG_UB allowed

struct RefComm {
  MPI_Comm comm = MPI_COMM_NULL;
  int32_t device = 0, rank = 0, size = 1;
};

RefComm& comm_of(unillm_comm c) { return *reinterpret_cast<RefComm*>(c); }

// MPI can be used here: initialised by the host, not finalised, and this is a thread allowed to
// call it.
unillm_status check_mpi(const char* who) {
  int on = 0, done = 0;
  MPI_Initialized(&on);
  MPI_Finalized(&done);
  if (!on || done)
    return fail(UNILLM_ERROR_UNSUPPORTED,
                std::string(who) +
                    ": the reference plugin's collectives run over MPI, and this process "
                    "has not initialised it (start it under mpirun)");
  int level = 0, main_thread = 0;
  MPI_Query_thread(&level);
  MPI_Is_thread_main(&main_thread);
  if (!main_thread && level < MPI_THREAD_SERIALIZED)
    return fail(UNILLM_ERROR_UNSUPPORTED,
                std::string(who) + ": called from a thread MPI was not initialised for");
  return UNILLM_OK;
}

bool element_type(unillm_dtype d, MPI_Datatype* out) {
  switch (d) {
    case UNILLM_DTYPE_F32:
      *out = MPI_FLOAT;
      return true;
    case UNILLM_DTYPE_F64:
      *out = MPI_DOUBLE;
      return true;
    case UNILLM_DTYPE_I32:
      *out = MPI_INT32_T;
      return true;
    case UNILLM_DTYPE_I64:
      *out = MPI_INT64_T;
      return true;
    case UNILLM_DTYPE_BF16:
    case UNILLM_DTYPE_F16:
      *out = MPI_UINT16_T;
      return true;  // moved as bit patterns only
    case UNILLM_DTYPE_I8:
    case UNILLM_DTYPE_I4_PACKED:
      *out = MPI_INT8_T;
      return true;
    default:
      return false;
  }
}

size_t element_size(unillm_dtype d) {
  switch (d) {
    case UNILLM_DTYPE_F64:
    case UNILLM_DTYPE_I64:
      return 8;
    case UNILLM_DTYPE_F32:
    case UNILLM_DTYPE_I32:
      return 4;
    case UNILLM_DTYPE_BF16:
    case UNILLM_DTYPE_F16:
      return 2;
    default:
      return 1;
  }
}

bool reducible(unillm_dtype d) {
  return d == UNILLM_DTYPE_F32 || d == UNILLM_DTYPE_F64 || d == UNILLM_DTYPE_I32 ||
         d == UNILLM_DTYPE_I64;
}

// What every operation checks before it touches MPI: the comm, the dtype (and the op of a
// reduction), and that the stream's earlier work has run.
struct Prepared {
  RefComm* c = nullptr;
  MPI_Datatype type = MPI_DATATYPE_NULL;
  MPI_Op op = MPI_OP_NULL;
};

unillm_status prepare(const char* who, unillm_comm comm, unillm_stream stream, unillm_dtype dtype,
                      int32_t reduce_op, Prepared* p) {
  if (!comm || !stream)
    return fail(UNILLM_ERROR_INVALID_ARGUMENT, std::string(who) + ": no communicator or stream");
  p->c = &comm_of(comm);
  if (!element_type(dtype, &p->type))
    return fail(UNILLM_ERROR_INVALID_ARGUMENT,
                std::string(who) + ": unknown dtype code " + std::to_string(dtype));
  if (reduce_op >= 0) {
    if (!reducible(dtype))
      return fail(UNILLM_ERROR_UNSUPPORTED, std::string(who) +
                                                " reduces f32, f64, i32 or i64, not dtype code " +
                                                std::to_string(dtype));
    if (reduce_op != UNILLM_REDUCE_SUM && reduce_op != UNILLM_REDUCE_MAX)
      return fail(UNILLM_ERROR_INVALID_ARGUMENT,
                  std::string(who) + ": unknown reduce op " + std::to_string(reduce_op));
    p->op = reduce_op == UNILLM_REDUCE_SUM ? MPI_SUM : MPI_MAX;
  }
  if (const unillm_status s = check_mpi(who); s != UNILLM_OK) return s;
  const std::string e = stream_of(stream).queue.synchronize();
  return e.empty()
             ? UNILLM_OK
             : fail(UNILLM_ERROR, std::string(who) + ": earlier work on the stream failed: " + e);
}

// The read-write view of count elements at a device pointer of the comm's device (nullptr when
// the range is not device memory).
char* view(const RefComm& c, const void* p, size_t count, unillm_dtype d) {
  return device(c.device).pool.view(p, count * element_size(d));
}

unillm_status not_device(const char* who, const char* what) {
  return fail(UNILLM_ERROR_INVALID_ARGUMENT,
              std::string(who) + ": " + what + " is not memory of the comm's device");
}

// Calls f(offset, n) over [0, count) in pieces of at most INT_MAX elements (MPI counts are ints).
template <typename F>
void chunks(size_t count, F&& f) {
  for (size_t off = 0; off < count; off += INT_MAX)
    f(off, static_cast<int>(std::min<size_t>(INT_MAX, count - off)));
}

unillm_status get_unique_id(char* out) {
  if (const unillm_status s = check_mpi("get_unique_id"); s != UNILLM_OK) return s;
  UniqueId id{};
  std::memcpy(id.magic, kMagic, sizeof kMagic);
  MPI_Comm_rank(MPI_COMM_WORLD, &id.root_world_rank);
  std::random_device rd;
  id.token = (uint64_t{rd()} << 32) ^ rd();
  id.tag = kTagBase + static_cast<int32_t>(id.token % kTagSpan);
  std::memcpy(out, &id, sizeof id);
  return UNILLM_OK;
}

// Every member tells the root its world rank (with the token); the root answers with the world
// ranks in communicator-rank order. Returns "" or what went wrong.
std::string gather_members(const UniqueId& id, int32_t rank, int32_t size,
                           std::vector<int>* world_ranks) {
  struct Hello {
    uint64_t token;
    int32_t rank, world_rank;
  };
  int me = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  world_ranks->assign(static_cast<size_t>(size), -1);
  if (rank == 0) {
    if (me != id.root_world_rank) return "rank 0 is not the process that made the unique id";
    (*world_ranks)[0] = me;
    for (int32_t i = 1; i < size; ++i) {
      Hello h{};
      MPI_Recv(&h, sizeof h, MPI_BYTE, MPI_ANY_SOURCE, id.tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      if (h.token != id.token || h.rank <= 0 || h.rank >= size || (*world_ranks)[h.rank] != -1)
        return "a member presented another unique id or a duplicate rank " + std::to_string(h.rank);
      (*world_ranks)[h.rank] = h.world_rank;
    }
    for (int32_t i = 1; i < size; ++i)
      MPI_Send(world_ranks->data(), size, MPI_INT, (*world_ranks)[i], id.tag, MPI_COMM_WORLD);
    return "";
  }
  const Hello h{id.token, rank, me};
  MPI_Send(&h, sizeof h, MPI_BYTE, id.root_world_rank, id.tag, MPI_COMM_WORLD);
  MPI_Recv(world_ranks->data(), size, MPI_INT, id.root_world_rank, id.tag, MPI_COMM_WORLD,
           MPI_STATUS_IGNORE);
  return "";
}

unillm_status comm_init(int32_t dev, const char* unique_id, int32_t rank, int32_t size,
                        unillm_comm* out) {
  if (const unillm_status s = check_mpi("comm_init"); s != UNILLM_OK) return s;
  int world = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  UniqueId id;
  std::memcpy(&id, unique_id, sizeof id);
  if (std::memcmp(id.magic, kMagic, sizeof kMagic) != 0)
    return fail(UNILLM_ERROR_INVALID_ARGUMENT,
                "comm_init: not a unique id of the reference plugin");
  if (size < 1 || size > world || rank < 0 || rank >= size)
    return fail(UNILLM_ERROR_INVALID_ARGUMENT, "comm_init: rank " + std::to_string(rank) + " of " +
                                                   std::to_string(size) + " in an MPI world of " +
                                                   std::to_string(world));
  if (dev < 0 || dev >= kDevices)
    return fail(UNILLM_ERROR_INVALID_ARGUMENT,
                "comm_init: no reference device " + std::to_string(dev));
  std::vector<int> members;
  if (std::string e = gather_members(id, rank, size, &members); !e.empty())
    return fail(UNILLM_ERROR, "comm_init: " + e);
  // MPI_Comm_create_group is collective over the members only, so a sub-group needs no call
  // from the rest of the world.
  MPI_Group world_group, group;
  MPI_Comm_group(MPI_COMM_WORLD, &world_group);
  MPI_Group_incl(world_group, size, members.data(), &group);
  auto* c = new RefComm;
  MPI_Comm_create_group(MPI_COMM_WORLD, group, id.tag, &c->comm);
  MPI_Group_free(&group);
  MPI_Group_free(&world_group);
  c->device = dev;
  c->rank = rank;
  c->size = size;
  *out = reinterpret_cast<unillm_comm>(c);
  return UNILLM_OK;
}

unillm_status comm_destroy(unillm_comm comm) {
  if (!comm) return UNILLM_OK;
  RefComm* c = &comm_of(comm);
  int done = 0;
  MPI_Finalized(&done);
  if (!done && c->comm != MPI_COMM_NULL) MPI_Comm_free(&c->comm);
  delete c;
  return UNILLM_OK;
}

unillm_status allreduce(unillm_comm comm, unillm_stream stream, const void* send, void* recv,
                        size_t count, unillm_dtype dtype, unillm_reduce_op op) {
  Prepared p;
  if (const unillm_status s = prepare("allreduce", comm, stream, dtype, op, &p); s != UNILLM_OK)
    return s;
  char* from = view(*p.c, send, count, dtype);
  char* to = view(*p.c, recv, count, dtype);
  if (!from) return not_device("allreduce", "send");
  if (!to) return not_device("allreduce", "recv");
  const size_t es = element_size(dtype);
  chunks(count, [&](size_t off, int n) {
    MPI_Allreduce(from == to ? MPI_IN_PLACE : from + off * es, to + off * es, n, p.type, p.op,
                  p.c->comm);
  });
  return UNILLM_OK;
}

unillm_status reduce_scatter(unillm_comm comm, unillm_stream stream, const void* send, void* recv,
                             size_t recv_count, unillm_dtype dtype, unillm_reduce_op op) {
  Prepared p;
  if (const unillm_status s = prepare("reduce_scatter", comm, stream, dtype, op, &p);
      s != UNILLM_OK)
    return s;
  if (recv_count > INT_MAX)
    return fail(UNILLM_ERROR_UNSUPPORTED, "reduce_scatter: more than INT_MAX elements per rank");
  char* from = view(*p.c, send, recv_count * static_cast<size_t>(p.c->size), dtype);
  char* to = view(*p.c, recv, recv_count, dtype);
  if (!from) return not_device("reduce_scatter", "send");
  if (!to) return not_device("reduce_scatter", "recv");
  MPI_Reduce_scatter_block(from, to, static_cast<int>(recv_count), p.type, p.op, p.c->comm);
  return UNILLM_OK;
}

unillm_status allgather(unillm_comm comm, unillm_stream stream, const void* send, void* recv,
                        size_t send_count, unillm_dtype dtype) {
  Prepared p;
  if (const unillm_status s = prepare("allgather", comm, stream, dtype, -1, &p); s != UNILLM_OK)
    return s;
  if (send_count > INT_MAX)
    return fail(UNILLM_ERROR_UNSUPPORTED, "allgather: more than INT_MAX elements per rank");
  char* from = view(*p.c, send, send_count, dtype);
  char* to = view(*p.c, recv, send_count * static_cast<size_t>(p.c->size), dtype);
  if (!from) return not_device("allgather", "send");
  if (!to) return not_device("allgather", "recv");
  const int n = static_cast<int>(send_count);
  MPI_Allgather(from, n, p.type, to, n, p.type, p.c->comm);
  return UNILLM_OK;
}

unillm_status broadcast(unillm_comm comm, unillm_stream stream, void* buf, size_t count,
                        unillm_dtype dtype, int32_t root) {
  Prepared p;
  if (const unillm_status s = prepare("broadcast", comm, stream, dtype, -1, &p); s != UNILLM_OK)
    return s;
  if (root < 0 || root >= p.c->size)
    return fail(UNILLM_ERROR_INVALID_ARGUMENT,
                "broadcast: root " + std::to_string(root) + " not in the comm");
  char* b = view(*p.c, buf, count, dtype);
  if (!b) return not_device("broadcast", "buf");
  const size_t es = element_size(dtype);
  chunks(count, [&](size_t off, int n) { MPI_Bcast(b + off * es, n, p.type, root, p.c->comm); });
  return UNILLM_OK;
}

// Point to point on one tag: pairs match in issue order per peer (MPI keeps that order).
constexpr int kP2pTag = 0;

unillm_status send(unillm_comm comm, unillm_stream stream, const void* buf, size_t count,
                   unillm_dtype dtype, int32_t peer) {
  Prepared p;
  if (const unillm_status s = prepare("send", comm, stream, dtype, -1, &p); s != UNILLM_OK)
    return s;
  if (peer < 0 || peer >= p.c->size || peer == p.c->rank)
    return fail(UNILLM_ERROR_INVALID_ARGUMENT,
                "send: peer " + std::to_string(peer) + " is not another rank");
  char* b = view(*p.c, buf, count, dtype);
  if (!b) return not_device("send", "buf");
  const size_t es = element_size(dtype);
  chunks(count,
         [&](size_t off, int n) { MPI_Send(b + off * es, n, p.type, peer, kP2pTag, p.c->comm); });
  return UNILLM_OK;
}

unillm_status recv(unillm_comm comm, unillm_stream stream, void* buf, size_t count,
                   unillm_dtype dtype, int32_t peer) {
  Prepared p;
  if (const unillm_status s = prepare("recv", comm, stream, dtype, -1, &p); s != UNILLM_OK)
    return s;
  if (peer < 0 || peer >= p.c->size || peer == p.c->rank)
    return fail(UNILLM_ERROR_INVALID_ARGUMENT,
                "recv: peer " + std::to_string(peer) + " is not another rank");
  char* b = view(*p.c, buf, count, dtype);
  if (!b) return not_device("recv", "buf");
  const size_t es = element_size(dtype);
  std::string error;
  chunks(count, [&](size_t off, int n) {
    MPI_Status st;
    MPI_Recv(b + off * es, n, p.type, peer, kP2pTag, p.c->comm, &st);
    int got = 0;
    MPI_Get_count(&st, p.type, &got);
    if (got != n && error.empty())
      error = "recv from rank " + std::to_string(peer) + ": got " + std::to_string(got) +
              " elements, expected " + std::to_string(n);
  });
  return error.empty() ? UNILLM_OK : fail(UNILLM_ERROR_INVALID_ARGUMENT, error);
}

const unillm_collectives_v1 kCollectives = {sizeof(unillm_collectives_v1),
                                            sizeof(UniqueId),
                                            get_unique_id,
                                            comm_init,
                                            comm_destroy,
                                            allreduce,
                                            reduce_scatter,
                                            allgather,
                                            broadcast,
                                            send,
                                            recv};

static_assert(sizeof(UniqueId) <= UNILLM_UNIQUE_ID_MAX);

}  // namespace

const unillm_collectives_v1* collectives_table() { return &kCollectives; }

}  // namespace unillm_ref
