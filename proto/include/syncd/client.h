/* libsyncclient: the thin client a framework process links to talk to its node's syncd.
 *
 * Contract
 * - No threads, no third-party dependencies: only the C/C++ runtime. Every call runs on the
 *   caller's thread. A syncd_client may be used from several threads; calls are serialised
 *   internally, and a thread blocked in syncd_wait() does not block submissions.
 * - Tensors are matched across ranks by name, as in Horovod. All ranks must submit the same names
 *   with the same dtype, shape, op and root; a disagreement fails the collective on every rank with
 *   a message naming the tensor and the ranks.
 * - Collectives work in place on `data`. When `data` lies in this client's arena (syncd_alloc) the
 *   daemon reads and writes it directly (zero copy); otherwise it is staged through the arena, one
 *   copy each way, and must stay valid until the request completes (syncd_wait/syncd_poll).
 * - Every submitted request gets exactly one completion. Errors are returned as syncd_status codes;
 *   syncd_last_error() holds the text of the most recent error on the calling thread.
 */
#ifndef SYNCD_CLIENT_H_
#define SYNCD_CLIENT_H_

#include <stddef.h>
#include <stdint.h>

#include <syncd/version.h> /* SYNCD_VERSION_CODE: the release this program is built against */

#ifdef __cplusplus
extern "C" {
#endif

#define SYNCD_API __attribute__((visibility("default")))

/* C++ sees every enum below with `int` as its fixed underlying type, the type C gives it: a value
   a C caller passes that is none of the enumerators (refused with SYNCD_ERR_INVALID) is then a
   value C++ may hold too, not undefined behaviour inside the library. */
#ifdef __cplusplus
#define SYNCD_ENUM_INT : int
#else
#define SYNCD_ENUM_INT
#endif

typedef enum syncd_status SYNCD_ENUM_INT {
  SYNCD_OK = 0,
  SYNCD_IN_PROGRESS = 1,        /* syncd_poll: not complete yet (not an error) */
  SYNCD_ERR_INVALID = 2,        /* bad argument: name, dtype, shape, pointer, handle */
  SYNCD_ERR_MISMATCH = 3,       /* ranks disagreed on dtype, op, shape or root for one name */
  SYNCD_ERR_DUPLICATE = 4,      /* the name is already in flight on this rank */
  SYNCD_ERR_RANK_LOST = 5,      /* a participating rank died */
  SYNCD_ERR_DAEMON_LOST = 6,    /* the node's syncd is gone */
  SYNCD_ERR_TIMEOUT = 7,        /* syncd_wait deadline passed; the request is still in flight */
  SYNCD_ERR_NO_MEMORY = 8,      /* arena exhausted or too many requests in flight */
  SYNCD_ERR_PROTOCOL = 9,       /* version mismatch or malformed message */
  SYNCD_ERR_REFUSED = 10,       /* the daemon refused the attach (rank taken, wrong uid, ...) */
  SYNCD_ERR_SYSTEM = 11,        /* an OS call failed */
  SYNCD_ERR_INTERNAL = 12,
  SYNCD_ERR_STALLED = 13        /* the job was shut down: ranks never submitted a tensor others did
                                   (syncd --stall-shutdown-s); the message names it and them */
} syncd_status;

typedef enum syncd_dtype SYNCD_ENUM_INT {
  SYNCD_INT8 = 0,
  SYNCD_UINT8 = 1,
  SYNCD_INT32 = 2,
  SYNCD_INT64 = 3,
  SYNCD_FLOAT16 = 4,
  SYNCD_BFLOAT16 = 5,
  SYNCD_FLOAT32 = 6,
  SYNCD_FLOAT64 = 7,
  SYNCD_INT16 = 8,
  SYNCD_BOOL = 9, /* one byte, 0 or 1. Allreduce: SUM and MAX are logical or, MIN and PRODUCT
                     logical and (as torch.distributed); AVERAGE and scale factors are refused */
  SYNCD_DTYPE_COUNT = 10
} syncd_dtype;

typedef enum syncd_reduce_op SYNCD_ENUM_INT {
  SYNCD_SUM = 0,
  SYNCD_AVERAGE = 1, /* sum divided by the number of ranks; integers truncate toward zero */
  SYNCD_MIN = 2,
  SYNCD_MAX = 3,
  SYNCD_PRODUCT = 4,
  /* Adasum (Maleki et al., MLSys 2021; Horovod's op=Adasum): allreduce of float host tensors over a
   * power of two of ranks; every rank's tensor takes part (a joined, lost or vacant rank fails it) */
  SYNCD_ADASUM = 5,
  SYNCD_REDUCE_OP_COUNT = 6
} syncd_reduce_op;

#define SYNCD_MAX_NAME 191 /* bytes, without the terminating NUL */
#define SYNCD_MAX_DIMS 8

typedef struct syncd_client syncd_client;
typedef uint64_t syncd_handle;

/* Where to attach and who this process is. Fields left at -1 / NULL / 0 are read from the
 * environment: SYNCD_RUN_DIR, SYNCD_RANK, SYNCD_SIZE, SYNCD_LOCAL_RANK, SYNCD_LOCAL_SIZE,
 * SYNCD_JOB_ID (syncrun sets them all). Under srun without them, Slurm's SLURM_PROCID,
 * SLURM_NTASKS, SLURM_LOCALID, SLURM_TASKS_PER_NODE/SLURM_NODEID and SLURM_JOB_ID are used, and
 * the run directory is /run/syncd/<SLURM_JOB_ID>. The job id lets a long-running daemon tell one job's
 * ranks from the next job's; 0 means unspecified. */
typedef struct syncd_init_options {
  const char* run_dir;
  int rank, size, local_rank, local_size;
  int attach_timeout_ms; /* how long to retry while the daemon's socket is not there yet; -1: 10 s */
  uint64_t job_id;
} syncd_init_options;

SYNCD_API void syncd_init_options_default(syncd_init_options* opts);
/* Attaches to the daemon. On failure *out is NULL and syncd_last_error() says why. */
SYNCD_API int syncd_init(const syncd_init_options* opts, syncd_client** out);
/* Detaches. Requests still in flight are abandoned (the daemon fails them on the other ranks). */
SYNCD_API void syncd_shutdown(syncd_client* c);
/* Tells the daemon this process is done with the job, as syncd_shutdown does, but keeps the shared
 * memory mapped: for runtimes whose objects may still point into the arena while the process
 * exits (syncd.torch calls it from Python's atexit, as Horovod shuts down there). Without it, a
 * process that exits without syncd_shutdown is to the daemon a rank that died. Requests still in
 * flight are abandoned; every later call but syncd_shutdown fails with SYNCD_ERR_INVALID. In a
 * forked child (its copy of the client) neither this nor syncd_shutdown says anything to the
 * daemon: the parent stays attached. */
SYNCD_API void syncd_leave(syncd_client* c);

/* This client's daemon is gone (SYNCD_ERR_DAEMON_LOST) and another was started in its place
 * (systemd's Restart=, an upgrade, syncrun --restart-daemons): attaches to it, handing it this
 * client's segment. The client stays the same object, and its arena keeps what it holds: pointers
 * from syncd_alloc stay valid, with their contents. Requests the old daemon held fail with
 * SYNCD_ERR_DAEMON_LOST when waited for; process sets must be added again. The daemon takes the
 * rank back as a replacement (syncd_replaces_lost_rank). Waits up to timeout_ms for a daemon to
 * answer in the run directory: SYNCD_ERR_DAEMON_LOST if none does; SYNCD_ERR_INVALID while the
 * daemon is alive. No other call on this client may run meanwhile. */
SYNCD_API int syncd_reattach(syncd_client* c, int timeout_ms);

/* Elastic jobs (--on-loss continue or restore): once the job has lost a node, every request of
 * this rank fails (SYNCD_ERR_RANK_LOST) until it acknowledges the job's new membership here,
 * after its calls in flight completed (hvd.elastic.run does it when it resets). *membership (may
 * be NULL): how many times the membership changed. SYNCD_ERR_DAEMON_LOST: this rank's own daemon
 * is gone, the rank cannot go on. */
SYNCD_API int syncd_acknowledge_membership(syncd_client* c, uint32_t* membership);
/* The launch ranks of the job's global set (every rank's collectives), ascending, as the daemons
 * run it now: every launch rank until the job loses a node; then (--on-loss continue or restore)
 * those of the nodes left, ranks lost there included (their daemon stands in for them: they add
 * nothing, receive nothing). What a collective takes per rank of the set (alltoall's splits, a
 * scatter's shares) goes to these ranks in this order. Writes up to `capacity` ranks (`ranks` may
 * be NULL with capacity 0), *count: how many there are, *membership (may be NULL): the membership
 * they belong to (as syncd_acknowledge_membership counts; requests are refused under an older
 * one). SYNCD_ERR_DAEMON_LOST: this rank's daemon is gone. */
SYNCD_API int syncd_job_set_ranks(syncd_client* c, int* ranks, int capacity, int* count, uint32_t* membership);
/* *replaces: 1 when this rank took the place of a rank the job had gone on without (a
 * replacement, e.g. syncrun --elastic --respawn): its daemon stood in for the lost rank until now,
 * and this rank takes part again from the first collective it submits (hvd.elastic.run joins the
 * others at their next commit and gets the state from rank 0); 0 otherwise. Waits for the daemon
 * to have taken the rank in (a moment after syncd_init): SYNCD_ERR_DAEMON_LOST, or
 * SYNCD_ERR_TIMEOUT after 10 s. */
SYNCD_API int syncd_replaces_lost_rank(syncd_client* c, int* replaces);

SYNCD_API int syncd_rank(const syncd_client* c);
SYNCD_API int syncd_size(const syncd_client* c);
SYNCD_API int syncd_local_rank(const syncd_client* c);
SYNCD_API int syncd_local_size(const syncd_client* c);
SYNCD_API int syncd_cross_rank(const syncd_client* c);
SYNCD_API int syncd_cross_size(const syncd_client* c);
/* The daemon's --coord mode: "negotiate", "gs", "nbcs" or "topo". Under "topo" a framework
 * binding registers its training graph (syncd_register_graph) so the plan is used. */
SYNCD_API const char* syncd_coord_mode(const syncd_client* c);

/* Zero-copy buffers in the client's shared arena (64-byte aligned). NULL when exhausted. */
SYNCD_API void* syncd_alloc(syncd_client* c, size_t bytes);
SYNCD_API void syncd_free(syncd_client* c, void* ptr);
/* Whether [ptr, ptr+bytes) lies inside the arena. */
SYNCD_API int syncd_in_arena(const syncd_client* c, const void* ptr, size_t bytes);

typedef struct syncd_tensor {
  const char* name;      /* unique among this rank's in-flight requests (of its process set) */
  void* data;            /* input and output */
  syncd_dtype dtype;
  int ndim;              /* 0 for a scalar */
  const int64_t* shape;  /* ndim extents */
  int process_set;       /* 0 (left out in an initializer): every rank; else a syncd_add_process_set id */
} syncd_tensor;

SYNCD_API int syncd_allreduce_async(syncd_client* c, const syncd_tensor* t, syncd_reduce_op op,
                                    double prescale, double postscale, syncd_handle* out);
SYNCD_API int syncd_broadcast_async(syncd_client* c, const syncd_tensor* t, int root,
                                    syncd_handle* out);
/* Compression of an allreduce's inter-node hop, done by the daemons on their own cores: the ranks
 * of a node reduce exactly, what travels between nodes is compressed (fp16, bf16: cast, and summed
 * in that type between nodes, as Horovod's Compression.fp16 sums). For host tensors of float32 or
 * float64; other dtypes travel as they are. Every rank of the collective must ask for the same: a
 * mismatch fails on every rank, naming the tensor and the ranks. DEFAULT: the daemon's
 * --compression, for tensors of at least --compression-min-bytes (syncd_allreduce_async asks for
 * it). Under --coord topo the registered graph carries each tensor's (syncd_graph_op.compression)
 * and a submission must ask for the same. */
typedef enum syncd_compression {
  SYNCD_COMPRESSION_DEFAULT = 0,
  SYNCD_COMPRESSION_NONE = 1,
  SYNCD_COMPRESSION_FP16 = 2, /* IEEE half */
  SYNCD_COMPRESSION_BF16 = 3, /* bfloat16: float32's range, 8 bits of mantissa */
  /* With error feedback: each node keeps, per tensor name, what compression left out of its sums
   * and adds it to the tensor's next sum (bounded by syncd --compression-residual-bytes; dropped
   * at the job's end and when its membership changes). */
  SYNCD_COMPRESSION_TOPK = 4,    /* each node's largest `ratio` of the elements, by magnitude */
  SYNCD_COMPRESSION_RANDOMK = 5, /* withdrawn: refused (SYNCD_ERR_INVALID, saying why); use TOPK */
  SYNCD_COMPRESSION_ONEBIT = 6,  /* each element's sign; per 64 elements the mean of those >= 0 and
                                  * of the others (Seide et al.'s 1-bit SGD) */
  /* PowerSGD (Vogels et al.): a tensor of two or more dimensions, as a matrix of its first
   * dimension's rows, travels as two thin factors of `rank` columns (one power iteration per step,
   * warm-started from the last step's); other tensors, and those the factors would not make
   * smaller, travel as they are. */
  SYNCD_COMPRESSION_POWERSGD = 7,
  SYNCD_COMPRESSION_COUNT,
  /* Not a method, a request: DEFAULT where the daemon's --compression is a cast (fp16, bf16), NONE
   * where it keeps error feedback. For tensors whose names do not recur step after step (the
   * torch.distributed backend numbers its collectives): their residuals would never be fed back. */
  SYNCD_COMPRESSION_DEFAULT_CAST = 0x40
} syncd_compression;
SYNCD_API int syncd_allreduce_compressed_async(syncd_client* c, const syncd_tensor* t, syncd_reduce_op op,
                                               double prescale, double postscale, syncd_compression compression,
                                               syncd_handle* out);
/* The same with top-k's and random-k's `ratio` (0 < ratio <= 1, in steps of 1e-6; 0: the daemon's
 * --compression-ratio); for PowerSGD `ratio` is its rank instead (a whole number, 1..1024; 0: the
 * daemon's --compression-rank). Every rank must ask for the same ratio or rank. */
SYNCD_API int syncd_allreduce_compressed_ratio_async(syncd_client* c, const syncd_tensor* t, syncd_reduce_op op,
                                                     double prescale, double postscale,
                                                     syncd_compression compression, double ratio,
                                                     syncd_handle* out);
/* Reduces every rank's tensor as syncd_allreduce_async does (op, scale factors, AVERAGE dividing by
 * the set's size) into the tensor of `root` (a global rank of t->process_set), in place; the
 * other ranks' tensors are left as they were. Host tensors. */
SYNCD_API int syncd_reduce_async(syncd_client* c, const syncd_tensor* t, syncd_reduce_op op, int root,
                                 double prescale, double postscale, syncd_handle* out);
/* GPU tensors: `t->data` is CUDA device memory (any allocation of this process: cudaMalloc, a
 * framework's caching allocator). The daemon reads and writes it in place through a CUDA IPC handle
 * of its allocation, after the work already queued on `stream` (a cudaStream_t; NULL: the legacy
 * default stream): the call records an interprocess event there and the daemon's stream waits on
 * it, so the caller never synchronises its stream. The request completes (syncd_wait/syncd_poll)
 * once the result is in device memory; do not touch the tensor before. Every rank must submit the
 * name as a GPU tensor. The CUDA driver is loaded on first use: SYNCD_ERR_INVALID when it cannot
 * be, when `data` is not device memory, or when the daemon has no such GPU. */
SYNCD_API int syncd_allreduce_gpu_async(syncd_client* c, const syncd_tensor* t, syncd_reduce_op op,
                                        double prescale, double postscale, void* stream, syncd_handle* out);
SYNCD_API int syncd_broadcast_gpu_async(syncd_client* c, const syncd_tensor* t, int root, void* stream,
                                        syncd_handle* out);
/* ---- Allgather, alltoall, reducescatter (host tensors; a GPU path is not there yet).
 *
 * Allgather and alltoall results have a size known only once every rank has submitted, so the
 * daemon writes them into this client's result area (syncd --result-area-size) and the request's
 * completion fills *result (keep it alive until then): the data (read only), its size, and one row
 * count per rank. Copy the data out, then give the block back with syncd_release_result; a
 * result never released keeps its room (a later allgather fails with SYNCD_ERR_NO_MEMORY on the
 * rank whose area is full, and completes on the others). A failed request has no result. */
typedef struct syncd_result {
  const void* data;
  uint64_t bytes;
  int nranks;          /* entries of rows */
  const int64_t* rows; /* allgather: each rank's first dimension; alltoall: the rows each rank sent here */
  void* block;         /* for syncd_release_result */
} syncd_result;

/* Concatenation of every rank's tensor along the first dimension, in rank order. First
 * dimensions may differ; the tensor needs at least one dimension and the others must agree. */
SYNCD_API int syncd_allgather_async(syncd_client* c, const syncd_tensor* t, syncd_result* result, syncd_handle* out);
/* The allgather's concatenation, for `root` only (a global rank of t->process_set): the root's
 * *result holds every rank's rows in rank order; the other ranks' *result stays empty (bytes 0). */
SYNCD_API int syncd_gather_async(syncd_client* c, const syncd_tensor* t, int root, syncd_result* result,
                                 syncd_handle* out);
/* The root's t holds R rows; rank k of the set gets its share of them, in rank order, in *result:
 * syncd_reducescatter_rows(R, size, k) rows (the root's own share too). Every other rank passes a
 * tensor of 0 rows with the dtype and other dimensions of the root's (a rank that passes rows fails
 * the scatter on every rank). */
SYNCD_API int syncd_scatter_async(syncd_client* c, const syncd_tensor* t, int root, syncd_result* result,
                                  syncd_handle* out);
/* Rank s sends splits[d] rows (from its first row on, in rank order) to each rank d and gets what
 * every rank sent it, in rank order; result->rows are the received splits. `splits` NULL: equal
 * parts (the first dimension must divide by the number of ranks); else `nsplits` is the size. */
SYNCD_API int syncd_alltoall_async(syncd_client* c, const syncd_tensor* t, const int64_t* splits, int nsplits,
                                   syncd_result* result, syncd_handle* out);
/* Reduces every rank's tensor (SYNCD_SUM or SYNCD_AVERAGE, scale factors as allreduce) and keeps
 * this rank's share of the first dimension, in place at the start of t->data: rows
 * syncd_reducescatter_rows(shape[0], size, rank); the first (shape[0] % size) ranks get one more. */
SYNCD_API int syncd_reducescatter_async(syncd_client* c, const syncd_tensor* t, syncd_reduce_op op, double prescale,
                                        double postscale, syncd_handle* out);
SYNCD_API int64_t syncd_reducescatter_rows(int64_t first_dim, int size, int rank);
/* Gives a result's block back to the daemon; *result is cleared. */
SYNCD_API void syncd_release_result(syncd_client* c, syncd_result* result);

/* ---- Process sets: collectives among a subset of the ranks (Horovod's process sets).
 *
 * syncd_add_process_set is a collective of every rank of the job: all call it with the same
 * ranks (any order; duplicates are an error), in the same order as their other set changes, and
 * get the same id (ids are never reused within a job). Then collectives with t->process_set = id
 * involve the set's ranks only: names are matched within the set, AVERAGE divides by the set's
 * size, roots and alltoall splits are the set's (a root is a global rank of the set), and a rank
 * outside the set gets SYNCD_ERR_INVALID. Sets on one node never leave its daemon; disjoint sets
 * run concurrently. syncd_remove_process_set (every rank, collective) fails what is still in
 * flight in the set; its id is then refused. The set's rank of this process (-1 if not in it) and
 * its size come from syncd_process_set_rank / _size. */
SYNCD_API int syncd_add_process_set(syncd_client* c, const int* ranks, int nranks, int64_t timeout_ms, int* id);
SYNCD_API int syncd_remove_process_set(syncd_client* c, int id, int64_t timeout_ms);
SYNCD_API int syncd_process_set_rank(const syncd_client* c, int id);
SYNCD_API int syncd_process_set_size(const syncd_client* c, int id);
/* A barrier of a process set (0: every rank), and syncd_fail_async for a name of a process set. */
SYNCD_API int syncd_barrier_set_async(syncd_client* c, int process_set, syncd_handle* out);
SYNCD_API int syncd_fail_set_async(syncd_client* c, int process_set, const char* name, const char* why,
                                   syncd_handle* out);

/* ---- Point to point (torch.distributed's send and recv): a tensor from one rank to another of
 * t->process_set, through their daemons, not coordinated with the other ranks.
 *
 * syncd_send_async sends t to `peer` (a global rank of the set, not this one). syncd_recv_async
 * fills t with what `peer` (SYNCD_ANY_SOURCE: any rank of the set) sent with the same `tag` (>= 0)
 * in the same set; messages from one rank with one tag arrive in the order they were sent. A
 * receive whose dtype or size differ from the send it takes fails with SYNCD_ERR_MISMATCH naming
 * both ranks (the send completes). A send completes once the data left (small tensors) or the
 * receiver took it (large ones; a send to a rank on this node: once it is received), so a rank
 * that sends before it receives from a rank doing the same can wait forever with large
 * tensors: post the receive first, or use the async calls. syncd_recv_wait waits for a receive
 * and says which rank sent (source may be NULL; timeout 0 only looks: SYNCD_ERR_TIMEOUT until it
 * completed). Host tensors only. */
#define SYNCD_ANY_SOURCE (-1)
SYNCD_API int syncd_send_async(syncd_client* c, const syncd_tensor* t, int peer, int tag, syncd_handle* out);
SYNCD_API int syncd_recv_async(syncd_client* c, const syncd_tensor* t, int peer, int tag, syncd_handle* out);
SYNCD_API int syncd_recv_wait(syncd_client* c, syncd_handle h, int64_t timeout_ms, int* source);

/* Join (Horovod's hvd.join): this rank has no more data. Blocks until every rank of the job has
 * joined; meanwhile this rank takes part in the others' collectives with nothing of its own
 * (zeros to reduce, no rows to gather or send; a broadcast from it fails), so ranks with uneven
 * amounts of data finish without a hang. *last_rank (may be NULL): the last rank to join. Host
 * tensors only; the global set only. */
SYNCD_API int syncd_join(syncd_client* c, int64_t timeout_ms, int* last_rank);

/* ---- Partial allreduce (eager-SGD's partial collectives: Li et al., PPoPP 2020).
 *
 * A persistent allreduce of one name, called once per step by every rank of the set, that runs in
 * rounds without waiting for every rank. A round starts once
 *   SYNCD_PARTIAL_SOLO:     `quorum` ranks (default 1: the first to arrive) have arrived;
 *   SYNCD_PARTIAL_MAJORITY: the round's initiator has arrived (a rank drawn from the name and the
 *                           round number, the same on every rank; then at least `quorum` ranks).
 * A round sums what every rank has contributed since the previous one: the ranks that arrived for
 * it (fresh) and what late ranks left (stale). Nothing is lost: a rank that arrives after its round
 * ran gets the latest round's result at once, and its tensor goes into the next round. The daemon
 * holds each rank's not-yet-taken contributions, so an absent rank contributes without running.
 * SYNCD_AVERAGE divides by the number of contributions the round summed (fresh and stale), so a
 * rank with nothing to give does not shrink the result. Ops: SYNCD_SUM, SYNCD_AVERAGE; the dtype,
 * shape and op of a name never change. The result replaces t->data; syncd_partial_wait also says
 * which round it is and how many ranks were fresh in it (NAP). Host tensors, one node for now. */
typedef enum syncd_partial_mode SYNCD_ENUM_INT { SYNCD_PARTIAL_SOLO = 1, SYNCD_PARTIAL_MAJORITY = 2 } syncd_partial_mode;
typedef struct syncd_partial_info {
  uint64_t round;  /* the round whose result t->data holds (1, 2, ...) */
  int nap;         /* ranks whose contribution to that round was fresh */
  int initiator;   /* majority: the round's initiator (a rank of the set); solo: the first to arrive */
  int fresh;       /* whether this rank's tensor went into that round (0: it goes into the next) */
} syncd_partial_info;
/* `mode`: a syncd_partial_mode (an int, so that any value a binding passes is checked, not undefined). */
SYNCD_API int syncd_partial_allreduce_async(syncd_client* c, const syncd_tensor* t, syncd_reduce_op op, int mode,
                                            int quorum, syncd_handle* out);
/* syncd_wait for a partial allreduce, with its round (info may be NULL). */
SYNCD_API int syncd_partial_wait(syncd_client* c, syncd_handle h, int64_t timeout_ms, syncd_partial_info* info);

/* At most 16 barriers may be in flight on one rank; a 17th fails with SYNCD_ERR_DUPLICATE. */
SYNCD_API int syncd_barrier_async(syncd_client* c, syncd_handle* out);
/* This rank cannot take part in the collective called `name` (a binding's own check refused its
 * tensor, say). Rather than leave the other ranks waiting for a request that will never come,
 * every rank's request of that name fails with SYNCD_ERR_MISMATCH and a message naming this rank
 * and `why` (at most 1023 bytes are kept). The handle completes, with that error, once every rank
 * has submitted the name; wait for it or poll it like any other. */
SYNCD_API int syncd_fail_async(syncd_client* c, const char* name, const char* why, syncd_handle* out);

/* The job's timeline (Horovod's hvd.start_timeline): node 0's daemon writes every node's events to
 * `path` (a path on node 0's machine; make it absolute) in the Chrome trace event format (Perfetto,
 * chrome://tracing), until syncd_stop_timeline or the job's end. Any rank may start or stop it;
 * starting it again with the same path does nothing. Both block until this rank's daemon has
 * carried the request out (at most 10 s). SYNCD_ERR_INVALID: no path, or another file is being
 * written (stop it first). */
SYNCD_API int syncd_start_timeline(syncd_client* c, const char* path);
SYNCD_API int syncd_stop_timeline(syncd_client* c);

/* ---- TOPO: register the training graph once; the daemons then run a precomputed order and
 * fusion plan with no per-step negotiation (when started with --coord topo).
 *
 * The graph: operations, dependency edges (producer -> consumer, as indices into ops) and the
 * fetches (the operations a step runs; only what they depend on counts). An operation with a
 * tensor name is a collective: an allreduce of that tensor, with that dtype, element count and
 * op. Every rank of the job registers the same graph; the call blocks until every daemon holds
 * the same plan. A rank registering a different graph fails the registration on every rank,
 * naming the ranks (and nodes) whose plans differ.
 *
 * After registration, allreduces of the graph's tensors follow the plan: group g runs once every
 * local rank has submitted all of its tensors and groups before it ran; submit them with exactly
 * the registered dtype, count and op. Other names are negotiated as before. Call it when none of
 * the graph's tensors is in flight on this rank. Under other --coord modes the plan is checked
 * and agreed the same way but not used. One plan per job: registering the same graph again
 * succeeds, a different one fails.
 *
 * Each collective also names its tensor's memory: host (syncd_allreduce_async) or GPU
 * (syncd_allreduce_gpu_async). It is part of the plan: a tensor in GPU memory on one rank and in
 * host memory on another makes the plans differ (refused at registration), a submission in the
 * other memory fails the job naming the tensor, and a fusion group holds one kind only. */
typedef enum syncd_memory SYNCD_ENUM_INT { SYNCD_MEMORY_HOST = 0, SYNCD_MEMORY_GPU = 1 } syncd_memory;

typedef struct syncd_graph_op {
  const char* name;   /* the operation, for error messages; may be NULL */
  const char* tensor; /* NULL: not a collective; else the name of the tensor it allreduces */
  syncd_dtype dtype;
  uint64_t count; /* elements */
  syncd_reduce_op op;
  syncd_memory memory; /* a collective's tensor; 0 (zero-initialised): host */
  /* a host float32/float64 collective's inter-node hop, as its submissions ask
   * (syncd_allreduce_compressed_async); 0 (zero-initialised): DEFAULT, the daemon's --compression */
  syncd_compression compression;
  /* top-k's and random-k's ratio or PowerSGD's rank, as its submissions ask
   * (syncd_allreduce_compressed_ratio_async); 0: the daemon's */
  double compression_ratio;
} syncd_graph_op;

typedef struct syncd_graph {
  const syncd_graph_op* ops;
  size_t num_ops;
  const uint32_t* edges; /* 2 * num_edges indices: producer, consumer, producer, consumer, ... */
  size_t num_edges;
  const uint32_t* fetches;
  size_t num_fetches;
} syncd_graph;

/* Blocks up to timeout_ms (-1: forever). On success *plan_hash (may be NULL) gets the plan's hash,
 * the same on every rank. */
SYNCD_API int syncd_register_graph(syncd_client* c, const syncd_graph* g, int64_t timeout_ms, uint64_t* plan_hash);

/* SYNCD_IN_PROGRESS while running; otherwise the request's final status (the handle is released). */
SYNCD_API int syncd_poll(syncd_client* c, syncd_handle h);
/* Blocks until completion or timeout_ms (-1: forever). A timeout leaves the request in flight. */
SYNCD_API int syncd_wait(syncd_client* c, syncd_handle h, int64_t timeout_ms);

/* Text of the most recent error returned on this thread (never NULL). */
SYNCD_API const char* syncd_last_error(void);
SYNCD_API const char* syncd_status_name(int status);
SYNCD_API size_t syncd_dtype_size(syncd_dtype dtype);

/* The library loaded: its release ("0.1.0", SYNCD_VERSION_STRING of the build) and the version of
 * the shared-memory ABI it speaks with its daemon; `syncd --version` prints both of the daemon's.
 * syncd_init refuses a daemon of another ABI, naming both. */
SYNCD_API const char* syncd_version(void);
SYNCD_API int syncd_version_code(void); /* SYNCD_VERSION_CODE of the library loaded */
SYNCD_API uint32_t syncd_shm_abi_version(void);

#ifdef __cplusplus
}
#endif
#endif /* SYNCD_CLIENT_H_ */
