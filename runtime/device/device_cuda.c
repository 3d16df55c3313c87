/* The CUDA device (see device.h): model memory is GPU memory, copies go
 * through the CUDA runtime on one stream, and the optimizer and the sums
 * of squares are the CUDA kernels (kernels/cuda/kernels_cuda.h). Every
 * CUDA call is checked; a failure ends the run with the call, the file
 * and line, and CUDA's error string.
 *
 * The device and the stream are set up on the first call, on the device
 * that is current then: the one the NCCL backend chose for this rank's
 * local rank (comm_nccl.c, in rt_comm_init, which runs first), or device 0
 * of those visible.
 * The bf16 programs read their weights from a bf16 working copy of the
 * fp32 masters (rt_dev_weights_bf16): the AdamW step writes it as it
 * updates the masters, and anything else that writes into the masters (a
 * checkpoint loaded, the initial weights, SGD, and with ZeRO-1 the
 * all-gather of the other replicas' updated fp32 shards, rt_dev_written)
 * marks it stale, so it is cast afresh, whole, before its next use.
 * The optimizer's and the norms' small tables of runs are uploaded once
 * and kept (RUNS_KEPT of them): a step asks for the same few tables every
 * time, so after the first step neither an allocation nor a host wait is
 * needed for them. */
#include "device.h"

#include <cuda_runtime_api.h>
#include <stdlib.h>
#include <string.h>

#include "../../abi/job.h"
#include "kernels_cuda.h"
#include "util.h"

#ifdef SHARD_REAL_F64
#error "the CUDA device trains in fp32 (real = float); gradient checks run on the CPU device"
#endif

static void check(cudaError_t err, const char *call, const char *file, int line) {
  if (err != cudaSuccess)
    rt_fatal("cuda", "%s:%d: %s: %s", file, line, call, cudaGetErrorString(err));
}
#define CUDA_CHECK(call) check((call), #call, __FILE__, __LINE__)

static struct {
  int ready;
  cudaStream_t stream;
  /* The run tables on the device (runs_kept), and the sums of squares:
   * the pieces' partial sums, and the runs' sums read back (apart, so
   * that the sums of several arrays queue before one read). */
  double *sums, *sums_out;
  int64_t sums_cap, sums_out_cap;
  /* Host staging of the run tables. */
  KcRun *host_runs;
  int64_t host_cap;
  /* The bf16 working copy of the weights at `master` (n elements). */
  const real *master;
  int64_t master_n;
  kc_bf16 *copy;
  int stale;
  double *loss; /* the step's loss sum (rt_dev_loss_add), once allocated */
} dev;

/* A write of `bytes` at dst that reaches into the masters leaves their
 * bf16 copy stale. */
static void wrote(const void *dst, int64_t bytes) {
  const char *d = dst, *m = (const char *)dev.master;
  if (dev.copy && d < m + dev.master_n * (int64_t)sizeof(real) && m < d + bytes) dev.stale = 1;
}

/* Picks the device, creates the stream and points the kernels at it. A
 * machine without a usable device is told so plainly. */
static void dev_init(void) {
  if (dev.ready) return;
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0)
    rt_fatal(NULL, "no CUDA device: %s (this program was built for the CUDA target)",
             err != cudaSuccess ? cudaGetErrorString(err) : "none visible");
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaSetDevice(device));
  CUDA_CHECK(cudaStreamCreateWithFlags(&dev.stream, cudaStreamNonBlocking));
  k_cuda_set_stream(dev.stream);
  /* --deterministic: no GEMM algorithm picked by timing (kernels_cuda.h). */
  if (rt_deterministic) k_cuda_gemm_set_search(0);
  /* Freed memory stays in the pool for the next allocation (the pipeline's
   * message buffers come and go every step) instead of going back to the
   * driver at each synchronisation. */
  cudaMemPool_t pool;
  uint64_t keep = UINT64_MAX;
  CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, device));
  CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
  dev.ready = 1;
}

/* ------------------------------------------------------------ memory */

int64_t rt_dev_mem_available(const char **source, int *host) {
  int64_t limit = rt_mem_limit_env();
  *host = 0;
  if (limit >= 0) {
    *source = JOB_MEMORY_LIMIT_ENV;
    return limit;
  }
  dev_init();
  size_t free_bytes = 0, total = 0;
  *source = "free memory of the GPU, cudaMemGetInfo";
  return cudaMemGetInfo(&free_bytes, &total) == cudaSuccess ? (int64_t)free_bytes : -1;
}


/* Stream-ordered (cudaMallocAsync, cudaFreeAsync on the device's stream):
 * cudaMalloc and cudaFree may wait for every stream of the device, and
 * with the NCCL backend one of them can hold a receive that waits for
 * another rank, which may be waiting for this one. The memory is ready
 * for whatever is issued after the call on the device's stream, which is
 * where every operation here and every kernel runs (the NCCL backend's
 * streams wait for it before each operation). */
void *rt_dev_alloc(int64_t bytes, const char *what) {
  dev_init();
  void *mem = NULL;
  size_t n = (size_t)RT_ALIGN64(bytes > 0 ? bytes : 1);
  cudaError_t err = cudaMallocAsync(&mem, n, dev.stream); /* 256-byte aligned */
  if (err != cudaSuccess)
    rt_fatal(NULL, "out of GPU memory allocating %s (%lld bytes): %s", what, (long long)n,
             cudaGetErrorString(err));
  return mem;
}

/* The caller has waited for every use of the memory on another stream (a
 * message is freed after rt_comm_wait), so ordering after the device's
 * stream is enough. */
void rt_dev_free(void *dev_mem) {
  if (dev_mem) CUDA_CHECK(cudaFreeAsync(dev_mem, dev.stream));
  if (dev_mem && dev_mem == (void *)dev.master) { /* the next masters get a copy of their own */
    kc_bf16 *copy = dev.copy;
    dev.copy = NULL, dev.master = NULL, dev.master_n = 0;
    rt_dev_free(copy);
  }
}

void rt_dev_zero(void *dev_mem, int64_t bytes) {
  dev_init();
  if (bytes > 0) CUDA_CHECK(cudaMemsetAsync(dev_mem, 0, (size_t)bytes, dev.stream));
  wrote(dev_mem, bytes);
}

/* ------------------------------------------------------------- copies */

/* Both host copies wait for the stream: the host buffer is the caller's
 * again when they return, pinned or not. */
void rt_dev_to_host(void *host, const void *dev_mem, int64_t bytes) {
  dev_init();
  if (bytes <= 0) return;
  CUDA_CHECK(cudaMemcpyAsync(host, dev_mem, (size_t)bytes, cudaMemcpyDeviceToHost, dev.stream));
  CUDA_CHECK(cudaStreamSynchronize(dev.stream));
}

void rt_dev_from_host(void *dev_mem, const void *host, int64_t bytes) {
  dev_init();
  if (bytes <= 0) return;
  CUDA_CHECK(cudaMemcpyAsync(dev_mem, host, (size_t)bytes, cudaMemcpyHostToDevice, dev.stream));
  CUDA_CHECK(cudaStreamSynchronize(dev.stream));
  wrote(dev_mem, bytes);
}

/* A host buffer holding the device's bytes; written back at the end when
 * the host changed it. */
void *rt_dev_view_begin(void *dev_mem, int64_t bytes) {
  void *view = rt_xmalloc((size_t)(bytes > 0 ? bytes : 1));
  rt_dev_to_host(view, dev_mem, bytes);
  return view;
}

void rt_dev_view_end(void *dev_mem, void *view, int64_t bytes, int written) {
  if (written) rt_dev_from_host(dev_mem, view, bytes);
  free(view);
}

void rt_dev_copy(void *dst, const void *src, int64_t bytes) {
  dev_init();
  if (bytes > 0)
    CUDA_CHECK(cudaMemcpyAsync(dst, src, (size_t)bytes, cudaMemcpyDeviceToDevice, dev.stream));
  wrote(dst, bytes);
}

void rt_dev_written(void *dst, int64_t bytes) { wrote(dst, bytes); }

void rt_dev_accumulate(real *y, const real *x, int64_t n) {
  dev_init();
  if (n > 0) k_cuda_accumulate(y, x, n);
  wrote(y, n * (int64_t)sizeof(real));
}

void rt_dev_sync(void) {
  dev_init();
  CUDA_CHECK(cudaStreamSynchronize(dev.stream));
  CUDA_CHECK(cudaGetLastError());
}

void rt_dev_fill(real *dev_mem, real v, int64_t n) {
  dev_init();
  if (n > 0) k_cuda_fill(dev_mem, v, n);
  wrote(dev_mem, n * (int64_t)sizeof(real));
}

/* One kernel of one thread per microbatch, on the step's stream: the sum
 * waits for nothing, and the host waits once, in rt_dev_loss_take. */
void rt_dev_loss_add(const real *dev_mem) {
  dev_init();
  if (!dev.loss) {
    dev.loss = rt_dev_alloc(sizeof(double), "the step's loss sum");
    rt_dev_zero(dev.loss, sizeof(double));
  }
  k_cuda_add_scalar(dev.loss, dev_mem);
}

double rt_dev_loss_take(void) {
  double s = 0;
  if (!dev.loss) return 0;
  rt_dev_to_host(&s, dev.loss, sizeof s);
  rt_dev_zero(dev.loss, sizeof(double));
  return s;
}

/* The CUDA kernels count no dispatches (yet): no drops are reported. */
void rt_dev_moe_count(int vstage) { (void)vstage; }
int rt_dev_moe_take(RtDevMoeStat *out, int max) {
  (void)out, (void)max;
  return 0;
}

/* ------------------------------------------------------ staged windows */

/* Pinned host buffers, their copies in GPU memory, and the events that
 * order them: `copied` after a slot's copy on the copy stream (the step's
 * stream waits for it in get, the host in stage_host), `consumed` on the
 * step's stream at a put, which the copy waits for (the step before may
 * still be reading the slot's previous window). */
struct RtDevStage {
  int64_t bytes;
  void *host[2], *mem[2];
  cudaEvent_t copied[2], consumed[2];
  int pending[2];
};

static cudaStream_t copy_stream;

RtDevStage *rt_dev_stage_new(int64_t bytes) {
  dev_init();
  if (!copy_stream) CUDA_CHECK(cudaStreamCreateWithFlags(&copy_stream, cudaStreamNonBlocking));
  RtDevStage *s = rt_xcalloc(1, sizeof *s);
  s->bytes = bytes > 0 ? bytes : 1;
  for (int k = 0; k < 2; k++) {
    if (cudaHostAlloc(&s->host[k], (size_t)s->bytes, cudaHostAllocDefault) != cudaSuccess)
      rt_fatal(NULL, "out of pinned host memory for a staged token window (%lld bytes)",
               (long long)s->bytes);
    s->mem[k] = rt_dev_alloc(s->bytes, "a staged token window");
    CUDA_CHECK(cudaEventCreateWithFlags(&s->copied[k], cudaEventDisableTiming));
    CUDA_CHECK(cudaEventCreateWithFlags(&s->consumed[k], cudaEventDisableTiming));
  }
  return s;
}

void *rt_dev_stage_host(RtDevStage *s, int slot) {
  if (s->pending[slot]) CUDA_CHECK(cudaEventSynchronize(s->copied[slot]));
  s->pending[slot] = 0;
  return s->host[slot];
}

void rt_dev_stage_put(RtDevStage *s, int slot) {
  CUDA_CHECK(cudaEventRecord(s->consumed[slot], dev.stream));
  CUDA_CHECK(cudaStreamWaitEvent(copy_stream, s->consumed[slot], 0));
  CUDA_CHECK(cudaMemcpyAsync(s->mem[slot], s->host[slot], (size_t)s->bytes,
                             cudaMemcpyHostToDevice, copy_stream));
  CUDA_CHECK(cudaEventRecord(s->copied[slot], copy_stream));
  s->pending[slot] = 1;
}

const void *rt_dev_stage_get(RtDevStage *s, int slot) {
  CUDA_CHECK(cudaStreamWaitEvent(dev.stream, s->copied[slot], 0));
  return s->mem[slot];
}

void rt_dev_stage_free(RtDevStage *s) {
  if (!s) return;
  CUDA_CHECK(cudaStreamSynchronize(copy_stream));
  CUDA_CHECK(cudaStreamSynchronize(dev.stream));
  for (int k = 0; k < 2; k++) {
    CUDA_CHECK(cudaFreeHost(s->host[k]));
    rt_dev_free(s->mem[k]);
    CUDA_CHECK(cudaEventDestroy(s->copied[k]));
    CUDA_CHECK(cudaEventDestroy(s->consumed[k]));
  }
  free(s);
}

/* --------------------------------------------- the bf16 working copy */

/* One copy, of the one weights region a program of one rank has: a call
 * for other weights replaces it. The cast is k_cuda_cast_f32_bf16's round
 * to nearest even, the AdamW kernel's too. */
uint16_t *rt_dev_weights_bf16(const real *w, int64_t n) {
  dev_init();
  if (dev.master != w || dev.master_n != n) {
    rt_dev_free(dev.copy);
    dev.copy = rt_dev_alloc(n * (int64_t)sizeof(kc_bf16), "the bf16 copy of the weights");
    dev.master = w;
    dev.master_n = n;
    dev.stale = 1;
  }
  if (dev.stale) k_cuda_cast_f32_bf16(dev.copy, w, n);
  dev.stale = 0;
  return dev.copy;
}

/* ------------------------------------------------------- CUDA graphs */

/* What a captured function's launches bake in besides its code and the
 * program's own device symbols: the pointers it reads through ctx (and,
 * in a bf16 program, the working copy W16 points into). The chunk
 * functions the compiler marks capturable use nothing else of ctx but
 * ctx->tp, which a rank keeps for its whole run. */
typedef struct GraphKey {
  const void *weights, *grads, *activations, *temporaries, *bf16;
} GraphKey;

typedef struct Graph {
  GraphKey key;
  int warm;             /* ran once plainly at this key: cuBLASLt's plans and the rest are made */
  cudaGraphExec_t exec; /* NULL until captured */
} Graph;

struct RtDevGraphs {
  Graph *graph;
  int n, cap;
};

static Graph *graph_at(RtDevGraphs *g, const GraphKey *k) {
  for (int i = 0; i < g->n; i++)
    if (memcmp(&g->graph[i].key, k, sizeof *k) == 0) return &g->graph[i];
  if (g->n == g->cap) {
    g->cap = g->cap ? 2 * g->cap : 4;
    Graph *more = rt_xcalloc((size_t)g->cap, sizeof *more);
    if (g->n) memcpy(more, g->graph, (size_t)g->n * sizeof *more);
    free(g->graph);
    g->graph = more;
  }
  Graph *gr = &g->graph[g->n++];
  memset(gr, 0, sizeof *gr);
  gr->key = *k;
  return gr;
}

/* The capture runs fn once with the stream in capture mode: its launches
 * are recorded, not run. ThreadLocal mode makes a call of this thread
 * that cannot be captured (an allocation, a synchronisation, a copy to
 * the host) fail at once, with CUDA's error, instead of being recorded,
 * and leaves other threads' CUDA calls (NCCL's) alone. */
static void capture(Graph *gr, void (*fn)(RtCtx *), RtCtx *ctx) {
  cudaGraph_t graph = NULL;
  CUDA_CHECK(cudaStreamBeginCapture(dev.stream, cudaStreamCaptureModeThreadLocal));
  fn(ctx);
  cudaError_t err = cudaStreamEndCapture(dev.stream, &graph);
  if (err != cudaSuccess)
    rt_fatal("cuda", "%s:%d: capturing a chunk function as a CUDA graph: %s (--cuda-graphs off "
             "runs it as plain launches)", __FILE__, __LINE__, cudaGetErrorString(err));
  CUDA_CHECK(cudaGraphInstantiate(&gr->exec, graph, 0));
  CUDA_CHECK(cudaGraphDestroy(graph));
}

RtDevGraphRun rt_dev_graph_call(RtDevGraphs **g, void (*fn)(RtCtx *), RtCtx *ctx) {
  dev_init();
  if (!*g) *g = rt_xcalloc(1, sizeof **g);
  /* A graph reads the working copy as it stands: refresh it first. */
  if (dev.copy && dev.stale) rt_dev_weights_bf16(dev.master, dev.master_n);
  GraphKey k = {ctx->weights, ctx->grads, ctx->activations, ctx->temporaries, dev.copy};
  Graph *gr = graph_at(*g, &k);
  if (!gr->warm) {
    gr->warm = 1;
    fn(ctx);
    return RT_DEV_GRAPH_PLAIN;
  }
  RtDevGraphRun run = RT_DEV_GRAPH_REPLAYED;
  if (!gr->exec) capture(gr, fn, ctx), run = RT_DEV_GRAPH_CAPTURED;
  CUDA_CHECK(cudaGraphLaunch(gr->exec, dev.stream));
  return run;
}

void rt_dev_graph_free(RtDevGraphs *g) {
  if (!g) return;
  for (int i = 0; i < g->n; i++)
    if (g->graph[i].exec) CUDA_CHECK(cudaGraphExecDestroy(g->graph[i].exec));
  free(g->graph);
  free(g);
}

/* ---------------------------------------------------- tables of runs */

/* Room for n runs on the host side of the staging. */
static KcRun *host_runs(int64_t n) {
  if (n > dev.host_cap) {
    free(dev.host_runs);
    dev.host_runs = rt_xmalloc((size_t)n * sizeof(KcRun));
    dev.host_cap = n;
  }
  return dev.host_runs;
}

/* Tables of runs kept on the device, each with its host copy. A step
 * uses one for the optimizer, one for the gradient norm and one for the
 * finiteness checks (more with ZeRO-1's ranges); 8 leave room. */
#define RUNS_KEPT 8
static struct KeptRuns {
  KcRun *host, *dev;
  int64_t n;
} runs_kept[RUNS_KEPT];
static int runs_next; /* the entry a new table replaces, in turn */

/* The n runs of host_runs() on the device, their `at` filled in, and the
 * total number of elements in *total. A table seen before is the device
 * copy kept of it: no copy and no host wait. A new one replaces the
 * oldest kept table; its upload waits for the stream, so that no kernel
 * queued earlier still reads the table it overwrites. */
static const KcRun *upload_runs(int64_t n, int64_t *total) {
  *total = 0;
  for (int64_t i = 0; i < n; i++) {
    dev.host_runs[i].at = *total;
    *total += dev.host_runs[i].n;
  }
  size_t bytes = (size_t)n * sizeof(KcRun);
  for (int k = 0; k < RUNS_KEPT; k++)
    if (runs_kept[k].dev && runs_kept[k].n == n && memcmp(runs_kept[k].host, dev.host_runs, bytes) == 0)
      return runs_kept[k].dev;
  struct KeptRuns *e = &runs_kept[runs_next];
  runs_next = (runs_next + 1) % RUNS_KEPT;
  if (n > e->n || !e->dev) {
    rt_dev_free(e->dev);
    free(e->host);
    e->dev = rt_dev_alloc((int64_t)(bytes ? bytes : 1), "a table of runs of the optimizer or norms");
    e->host = rt_xmalloc(bytes ? bytes : 1);
  }
  e->n = n;
  memcpy(e->host, dev.host_runs, bytes);
  rt_dev_from_host(e->dev, e->host, (int64_t)bytes);
  return e->dev;
}

static KcRun run_of(int64_t w, int64_t s, int64_t n, int decay) {
  KcRun r = {w, s, n, 0, decay != 0, 0};
  return r;
}

/* --------------------------------------------------------- the optimizer */

/* One launch over every element of the n staged runs. AdamW writes the
 * updated weights' bf16 copy as it goes (when the masters have one that is
 * not stale); SGD leaves it to be cast before its next use. */
static void update(int64_t n, real *w, const real *g, real *mom, real *vel, const RtDevOpt *o) {
  int64_t total;
  const KcRun *runs = upload_runs(n, &total);
  if (o->adamw) {
    KcAdamW h = {o->grad_scale, o->decay, o->beta1, o->beta2, o->eps, o->step_size, o->bc2_sqrt};
    kc_bf16 *copy = dev.copy && !dev.stale && w == dev.master ? dev.copy : NULL;
    k_cuda_adamw_runs(w, g, mom, vel, copy, runs, n, total, &h);
    if (!copy) wrote(w, dev.master_n * (int64_t)sizeof(real));
  } else {
    k_cuda_sgd_runs(w, g, runs, n, total, o->decay, o->lr, o->grad_scale);
    wrote(w, dev.master_n * (int64_t)sizeof(real));
  }
}

void rt_dev_update_params(const RtModel *m, real *w, const real *g, real *mom, real *vel,
                          const RtDevOpt *o) {
  dev_init();
  KcRun *r = host_runs(m->nparams);
  for (int p = 0; p < m->nparams; p++) {
    const RtParam *prm = &m->params[p];
    r[p] = run_of(prm->offset, prm->offset, prm->numel, prm->weight_decay);
  }
  update(m->nparams, w, g, mom, vel, o);
}

void rt_dev_update_ranges(const RtDevRange *r, int64_t nr, real *w, const real *g, real *mom,
                          real *vel, const RtDevOpt *o) {
  dev_init();
  KcRun *h = host_runs(nr);
  for (int64_t i = 0; i < nr; i++)
    h[i] = run_of(r[i].w, r[i].s, r[i].n, r[i].decay);
  update(nr, w, g, mom, vel, o);
}

/* ------------------------------------------------------ sums of squares */

/* Elements of one block's piece of a run in the sums of squares. One
 * block per run would leave a GPU's other multiprocessors idle while one
 * sums the 51M-element embedding gradient of GPT-2 medium; pieces of 64K
 * (128 elements a thread) give it 786 blocks. A run of at most one piece
 * is summed exactly as by one block per run. */
#define SUMSQ_PIECE ((int64_t)1 << 16)

/* Queues the sums of squares of the n staged runs into dst[0, n) (the
 * device): each run cut into pieces of SUMSQ_PIECE elements, one block
 * each (the table's first np entries), then each run's pieces added in
 * order by one thread (its group, the n entries after them). The order
 * depends on the lengths alone, so the bits do not change from run to
 * run. */
static void queue_sum_squares(const real *x, int64_t n, double *dst) {
  if (n == 0) return;
  KcRun *runs = rt_xmalloc((size_t)n * sizeof *runs);
  memcpy(runs, dev.host_runs, (size_t)n * sizeof *runs);
  int64_t np = 0;
  for (int64_t i = 0; i < n; i++) np += runs[i].n > SUMSQ_PIECE ? (runs[i].n + SUMSQ_PIECE - 1) / SUMSQ_PIECE : 1;
  KcRun *t = host_runs(np + n);
  for (int64_t i = 0, p = 0; i < n; i++) {
    int64_t first = p;
    for (int64_t o = 0; o == 0 || o < runs[i].n; o += SUMSQ_PIECE, p++) {
      int64_t len = runs[i].n - o < SUMSQ_PIECE ? runs[i].n - o : SUMSQ_PIECE;
      t[p] = run_of(runs[i].w + o, runs[i].s + o, len, 0);
    }
    t[np + i] = run_of(first, first, p - first, 0);
  }
  free(runs);
  int64_t total;
  const KcRun *table = upload_runs(np + n, &total);
  /* Freed in stream order: a sum queued before still reads the old one. */
  if (np > dev.sums_cap) {
    rt_dev_free(dev.sums);
    dev.sums = rt_dev_alloc(np * (int64_t)sizeof(double), "the sums of squares");
    dev.sums_cap = np;
  }
  k_cuda_sum_squares_runs(dev.sums, x, table, np);
  k_cuda_sum_groups(dst, dev.sums, table + np, n);
}

/* Room on the device for n sums to be read back. */
static double *sums_out(int64_t n) {
  if (n > dev.sums_out_cap) {
    rt_dev_free(dev.sums_out);
    dev.sums_out = rt_dev_alloc(n * (int64_t)sizeof(double), "the sums of squares read back");
    dev.sums_out_cap = n;
  }
  return dev.sums_out;
}

/* out (host) = the sums of squares of the n staged runs. */
static void sum_squares(const real *x, int64_t n, double *out) {
  if (n == 0) return;
  double *d = sums_out(n);
  queue_sum_squares(x, n, d);
  rt_dev_to_host(out, d, n * (int64_t)sizeof(double));
}

/* Stages the fixed chunks [c * chunk, min((c + 1) * chunk, n)) of [0, n)
 * as runs; their count. */
static int64_t stage_chunks(int64_t n, int64_t chunk) {
  int64_t nchunks = (n + chunk - 1) / chunk;
  KcRun *h = host_runs(nchunks);
  for (int64_t c = 0; c < nchunks; c++) {
    int64_t end = (c + 1) * chunk < n ? (c + 1) * chunk : n;
    h[c] = run_of(c * chunk, c * chunk, end - c * chunk, 0);
  }
  return nchunks;
}

void rt_dev_sum_squares(const real *x, const RtDevRange *r, int64_t nr, double *out) {
  dev_init();
  KcRun *h = host_runs(nr);
  for (int64_t i = 0; i < nr; i++)
    h[i] = run_of(r[i].w, r[i].w, r[i].n, 0);
  sum_squares(x, nr, out);
}

void rt_dev_sum_squares_chunked(const real *x, int64_t n, int64_t chunk, double *out) {
  dev_init();
  sum_squares(x, stage_chunks(n, chunk), out);
}

/* Every array's sums queued into one buffer, then one read: one host
 * wait where an array each would take k. */
void rt_dev_sum_squares_chunked_many(int k, const real *const *x, const int64_t *n, int64_t chunk,
                                     double *out) {
  dev_init();
  int64_t all = 0;
  for (int i = 0; i < k; i++) all += (n[i] + chunk - 1) / chunk;
  if (all == 0) return;
  double *d = sums_out(all);
  int64_t at = 0;
  for (int i = 0; i < k; i++) {
    int64_t nchunks = stage_chunks(n[i], chunk);
    queue_sum_squares(x[i], nchunks, d + at);
    at += nchunks;
  }
  rt_dev_to_host(out, d, all * (int64_t)sizeof(double));
}
