/* unillm device plugin ABI: what a shared library exports to add a device kind (an Ascend NPU,
 * a GPU, the in-tree reference device) to unillm. C only; no C++ type, exception or allocation
 * crosses it. Versioned major.minor: a host refuses another major; every struct starts with its
 * own `size` (set by whoever fills it), so a later minor can append fields that an older reader
 * skips. docs/devices.md explains how to write a plugin. */
#ifndef UNILLM_DEVICE_PLUGIN_H
#define UNILLM_DEVICE_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define UNILLM_PLUGIN_ABI_MAJOR 1
#define UNILLM_PLUGIN_ABI_MINOR 1  /* 1: the collectives table (unillm_collectives_v1) */

/* Status codes: every function returns one; a non-zero code comes with last_error(). */
typedef int32_t unillm_status;
#define UNILLM_OK 0
#define UNILLM_ERROR 1                  /* anything else; see last_error() */
#define UNILLM_ERROR_OUT_OF_MEMORY 2
#define UNILLM_ERROR_INVALID_ARGUMENT 3
#define UNILLM_ERROR_UNSUPPORTED 4      /* e.g. a dtype or a shape the kernel does not take */

/* Element types. The codes are fixed forever; 16.. and 32.. are reserved for the quantised
 * formats of weight-only export (int8, packed int4, block-quantised). */
typedef int32_t unillm_dtype;
#define UNILLM_DTYPE_F32 0
#define UNILLM_DTYPE_F64 1
#define UNILLM_DTYPE_BF16 2
#define UNILLM_DTYPE_F16 3
#define UNILLM_DTYPE_I32 4
#define UNILLM_DTYPE_I64 5
#define UNILLM_DTYPE_I8 16
#define UNILLM_DTYPE_I4_PACKED 17      /* two 4-bit values per byte, low nibble first */
#define UNILLM_DTYPE_BLOCK_Q8 32       /* reserved: blocks of int8 with a scale per block */
#define UNILLM_DTYPE_BLOCK_Q4 33       /* reserved: blocks of int4 with a scale per block */

/* Queues of device work; kernels, copies, memsets and frees on one stream run in call order.
 * Events order work across streams. Both are opaque handles the plugin creates. */
typedef struct unillm_stream_opaque* unillm_stream;
typedef struct unillm_event_opaque* unillm_event;

typedef struct {
  size_t size;
  char name[128];           /* e.g. "Ascend910B3" */
  uint64_t total_memory;    /* bytes */
  uint64_t dtype_mask;      /* bit (1 << code) for each unillm_dtype its kernels take */
} unillm_device_properties;

/* A kernel: args points to the op's argument struct (include/unillm/kernel_args.h), whose
 * first field is its size; every pointer in it is a device pointer. The call queues the work on
 * stream and may return before it has run; args itself is only valid during the call. */
typedef unillm_status (*unillm_kernel_fn)(unillm_stream stream, const void* args, size_t args_size);

typedef struct {
  size_t size;
  const char* op;        /* "rms_norm", "linear_backward", … (`unillm env --kernels`) */
  unillm_dtype dtype;    /* the op's key dtype */
  const char* variant;   /* "" for the default */
  unillm_kernel_fn fn;
} unillm_kernel;

typedef struct {
  size_t size;
  unillm_status (*device_count)(int32_t* count);
  unillm_status (*device_properties)(int32_t device, unillm_device_properties* out);
  /* Memory. free_async is stream-ordered: the block may be reused only once the work queued on
   * stream before the call has run (an asynchronous device must not hand out a block a queued
   * kernel still reads). */
  unillm_status (*allocate)(int32_t device, size_t bytes, void** out);
  unillm_status (*free_async)(int32_t device, void* ptr, unillm_stream stream);
  /* Copies on stream. copy_h2d has read src when it returns (the caller may reuse it);
   * copy_d2h has written dst only once the stream has been synchronised. */
  unillm_status (*copy_h2d)(int32_t device, void* dst, const void* src, size_t bytes,
                            unillm_stream stream);
  unillm_status (*copy_d2h)(int32_t device, void* dst, const void* src, size_t bytes,
                            unillm_stream stream);
  unillm_status (*copy_d2d)(int32_t device, void* dst, const void* src, size_t bytes,
                            unillm_stream stream);
  unillm_status (*memset_async)(int32_t device, void* dst, int32_t value, size_t bytes,
                                unillm_stream stream);
  /* Streams and events. */
  unillm_status (*stream_create)(int32_t device, unillm_stream* out);
  unillm_status (*stream_destroy)(int32_t device, unillm_stream stream);
  unillm_status (*stream_synchronize)(int32_t device, unillm_stream stream);
  unillm_status (*event_create)(int32_t device, unillm_event* out);
  unillm_status (*event_destroy)(int32_t device, unillm_event event);
  unillm_status (*event_record)(int32_t device, unillm_event event, unillm_stream stream);
  unillm_status (*stream_wait_event)(int32_t device, unillm_stream stream, unillm_event event);
  unillm_status (*event_synchronize)(int32_t device, unillm_event event);
  /* The message of the last failed call on this thread ("" when none). */
  const char* (*last_error)(void);
} unillm_device_interface;

/* Collectives (ABI 1.1, optional): what a device's own communication library (HCCL, NCCL, …)
 * offers parallel training. A communicator joins `size` processes, one device each; the host
 * makes a unique id on rank 0 (get_unique_id), broadcasts it over MPI, and every rank calls
 * comm_init with it, its rank and the size. Each operation queues on `stream` like a kernel:
 * it runs after the work queued there before it, and the work queued after it sees its output;
 * the host synchronises the stream (or an event) before reading the result. Buffers are device
 * pointers of the communicator's device. Counts are elements of `dtype`. Reductions (`op`) take
 * f32, f64, i32 and i64; other dtypes are only moved (allgather, broadcast, send, recv). Every
 * rank of a communicator issues its collectives in the same order; send and recv pair in issue
 * order per peer (there are no tags). A plugin that cannot join a communicator here (e.g. the
 * process was not launched for it) returns UNILLM_ERROR_UNSUPPORTED from comm_init with a
 * message; the host then stages device tensors through its own MPI. */
typedef struct unillm_comm_opaque* unillm_comm;
typedef int32_t unillm_reduce_op;
#define UNILLM_REDUCE_SUM 0
#define UNILLM_REDUCE_MAX 1
#define UNILLM_UNIQUE_ID_MAX 128  /* the largest unique_id_size a host accepts */

typedef struct {
  size_t size;
  size_t unique_id_size;  /* bytes get_unique_id writes (the host broadcasts that many) */
  unillm_status (*get_unique_id)(char* out);
  /* Collective over the `size` ranks that pass the same id; `rank` in [0, size). */
  unillm_status (*comm_init)(int32_t device, const char* unique_id, int32_t rank, int32_t size,
                             unillm_comm* out);
  unillm_status (*comm_destroy)(unillm_comm comm);
  /* recv[i] = op over ranks of send[i], i < count; send == recv is in place. */
  unillm_status (*allreduce)(unillm_comm comm, unillm_stream stream, const void* send, void* recv,
                             size_t count, unillm_dtype dtype, unillm_reduce_op op);
  /* send: size · recv_count elements; rank r receives the reduction of block r. */
  unillm_status (*reduce_scatter)(unillm_comm comm, unillm_stream stream, const void* send,
                                  void* recv, size_t recv_count, unillm_dtype dtype,
                                  unillm_reduce_op op);
  /* recv: size · send_count elements, block r from rank r. */
  unillm_status (*allgather)(unillm_comm comm, unillm_stream stream, const void* send, void* recv,
                             size_t send_count, unillm_dtype dtype);
  /* buf of rank root into every rank's buf. */
  unillm_status (*broadcast)(unillm_comm comm, unillm_stream stream, void* buf, size_t count,
                             unillm_dtype dtype, int32_t root);
  unillm_status (*send)(unillm_comm comm, unillm_stream stream, const void* buf, size_t count,
                        unillm_dtype dtype, int32_t peer);
  unillm_status (*recv)(unillm_comm comm, unillm_stream stream, void* buf, size_t count,
                        unillm_dtype dtype, int32_t peer);
} unillm_collectives_v1;

/* What unillm_plugin_init fills. The pointed-to data must stay valid until the process ends. */
typedef struct {
  size_t size;
  uint32_t abi_major, abi_minor;  /* the UNILLM_PLUGIN_ABI_* the plugin was built with */
  const char* name;               /* the device kind: `--device NAME[:INDEX]` */
  const unillm_device_interface* device;
  size_t num_kernels;
  const unillm_kernel* kernels;
  char error[256];                /* a plugin that fails to initialise says why here */
  /* ABI 1.1: the device's collectives, or NULL. Fill it only when out->size reaches past it (a
   * 1.0 host's struct ends before it); a 1.0 plugin never writes it, and the host zeroed it. */
  const unillm_collectives_v1* collectives;
} unillm_plugin;

/* The one symbol a plugin exports. host_abi_* are the host's; the host zeroes *out and sets
 * out->size. A plugin that cannot run (no device, a driver error, a host ABI it does not take)
 * returns a non-zero status with a message in out->error. */
#define UNILLM_PLUGIN_INIT_SYMBOL "unillm_plugin_init"
typedef unillm_status (*unillm_plugin_init_fn)(uint32_t host_abi_major, uint32_t host_abi_minor,
                                               unillm_plugin* out);

#ifdef __cplusplus
}
#endif

#endif /* UNILLM_DEVICE_PLUGIN_H */
