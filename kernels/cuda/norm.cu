/* Layer normalisation and RMS normalisation over the last dimension, and
 * the residual add fused with them (add-norm): one block per row, the row
 * read once into registers where it fits, 16 bytes at a time where the
 * sizes and pointers allow; statistics in double, the variance about the
 * mean in a second pass over the registers (as on the CPU: the one-pass
 * formula loses digits when the mean is large). */
#include "common.cuh"

/* Rows per partial sum of the weight gradients (see norm_bwd). */
#define NORM_CHUNK 128

/* The row's mean (0 for RMS norm) and 1 / sqrt(var + eps) (of the mean
 * square for RMS norm), summed in double, the row read (and, fused, a + b
 * written) into v once; to every thread of the block. */
template <typename T, int V>
__device__ void row_moments(int layer, const KcRow<T, V> &row, float (&v)[KC_ROW_REGS][V],
                            int64_t n, int64_t h, float eps, double *buf, float *mean,
                            float *rstd) {
  double m = 0, q = 0;
  KC_EACH_ROW_CHUNK(row, v, n, true, {
    for (int i = 0; i < V; i++) m += o_[i];
  });
  m = layer ? kc_block_sum(m, buf) / (double)h : 0.0;
  KC_EACH_ROW_CHUNK(row, v, n, false, {
    for (int i = 0; i < V; i++) {
      double c = (double)o_[i] - m;
      q += c * c;
    }
  });
  q = kc_block_sum(q, buf);
  *mean = (float)m;
  *rstd = (float)(1.0 / sqrt(q / (double)h + (double)eps));
}

/* One block per row: the row (or a + b) read once, its moments from the
 * registers, then y. */
template <typename T, int V>
__global__ void norm_fwd_kernel(int layer, T *y, T *s, const T *x, const T *b, const T *w,
                                const T *bias, int64_t h, float eps) {
  __shared__ double buf[32];
  int64_t off = blockIdx.x * h, n = h / V;
  KcRow<T, V> row = {x + off, b ? b + off : NULL, s ? s + off : NULL};
  float v[KC_ROW_REGS][V], mean, rstd;
  row_moments(layer, row, v, n, h, eps, buf, &mean, &rstd);
  KC_EACH_ROW_CHUNK(row, v, n, false, {
    float wv[V], bv[V], out[V];
    kc_ldv<T, V>(w, c_, wv);
    if (bias) kc_ldv<T, V>(bias, c_, bv);
    for (int i = 0; i < V; i++) {
      float o = (o_[i] - mean) * rstd * wv[i];
      out[i] = bias ? o + bv[i] : o;
    }
    kc_stv<T, V>(y + off, c_, out);
  });
}

/* dx of one row, with xhat the normalised input and g = dy w:
 *   layernorm: dx = rstd (g - mean(g) - xhat mean(g xhat))
 *   rmsnorm:   dx = rstd (g - xhat mean(g xhat))
 * plus dres (NULL: none) where add-norm fused a residual's gradient, and
 * the row's statistics into stat[2 row], stat[2 row + 1]. */
template <typename T, int V>
__global__ void norm_bwd_dx_kernel(int layer, T *dx, const T *dy, const T *x, const T *w,
                                   const T *dres, int64_t h, float eps, float *stat) {
  __shared__ double buf[32];
  int64_t r = blockIdx.x, off = r * h, n = h / V;
  KcRow<T, V> row = {x + off, NULL, NULL};
  /* x and dy of the row, each read once where the registers hold it. */
  float v[KC_ROW_REGS][V], g[KC_ROW_REGS][V], m, rs;
  row_moments(layer, row, v, n, h, eps, buf, &m, &rs);
  double sg = 0, sgx = 0;
  KC_EACH_ROW_CHUNK(row, v, n, false, {
    float t[V], wv[V], *d = k_ < KC_ROW_REGS ? g[k_ < KC_ROW_REGS ? k_ : 0] : t;
    kc_ldv<T, V>(dy + off, c_, d);
    kc_ldv<T, V>(w, c_, wv);
    for (int i = 0; i < V; i++) {
      float gw = d[i] * wv[i];
      sg += gw;
      sgx += (double)gw * ((o_[i] - m) * rs);
    }
  });
  sg = kc_block_sum(sg, buf);
  sgx = kc_block_sum(sgx, buf);
  float a = layer ? (float)(sg / (double)h) : 0.0f, c = (float)(sgx / (double)h);
  KC_EACH_ROW_CHUNK(row, v, n, false, {
    float t[V], wv[V], rv[V], out[V], *d = k_ < KC_ROW_REGS ? g[k_ < KC_ROW_REGS ? k_ : 0] : t;
    if (k_ >= KC_ROW_REGS) kc_ldv<T, V>(dy + off, c_, d);
    kc_ldv<T, V>(w, c_, wv);
    if (dres) kc_ldv<T, V>(dres + off, c_, rv);
    for (int i = 0; i < V; i++) {
      float o = kc_f(kc_to<T>(rs * (d[i] * wv[i] - a - (o_[i] - m) * rs * c)));
      /* A residual's gradient is added to the stored dx, unfused with the
       * product (__fadd_rn): the bits of the add kernel after this one. */
      out[i] = dres ? __fadd_rn(rv[i], o) : o;
    }
    kc_stv<T, V>(dx + off, c_, out);
  });
  if (threadIdx.x == 0) {
    stat[2 * r] = m;
    stat[2 * r + 1] = rs;
  }
}

/* Partial sums of dw (and db) over the rows of chunk blockIdx.y, one
 * thread per column, rows in order: pw[chunk, j], pb[chunk, j]. */
template <typename T>
__global__ void norm_bwd_partial_kernel(double *pw, double *pb, const T *dy, const T *x,
                                        const float *stat, int64_t rows, int64_t h) {
  int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (j >= h) return;
  int64_t r0 = (int64_t)blockIdx.y * NORM_CHUNK;
  int64_t r1 = r0 + NORM_CHUNK < rows ? r0 + NORM_CHUNK : rows;
  double tw = 0, tb = 0;
  for (int64_t r = r0; r < r1; r++) {
    float d = kc_f(dy[r * h + j]);
    tw += (double)d * ((kc_f(x[r * h + j]) - stat[2 * r]) * stat[2 * r + 1]);
    tb += d;
  }
  pw[blockIdx.y * h + j] = tw;
  if (pb) pb[blockIdx.y * h + j] = tb;
}

/* The chunks' partial sums added in chunk order. */
__global__ void norm_bwd_total_kernel(float *dw, float *db, const double *pw, const double *pb,
                                      int64_t chunks, int64_t h) {
  int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (j >= h) return;
  double tw = 0, tb = 0;
  for (int64_t c = 0; c < chunks; c++) {
    tw += pw[c * h + j];
    if (db) tb += pb[c * h + j];
  }
  dw[j] = (float)tw;
  if (db) db[j] = (float)tb;
}

/* V = 16 bytes of T where every row and pointer allows it, else 1. */
template <typename T>
static void norm_fwd(int layer, T *y, T *s, const T *x, const T *b, const T *w, const T *bias,
                     int64_t rows, int64_t h, float eps) {
  if (rows == 0 || h == 0) return;
  KC_REQUIRE(rows <= INT32_MAX, "normalisation of %lld rows", (long long)rows);
  const int V = 16 / sizeof(T);
  if (h % V == 0 && kc_aligned16(y) && kc_aligned16(s) && kc_aligned16(x) && kc_aligned16(b) &&
      kc_aligned16(w) && kc_aligned16(bias))
    KC_LAUNCH((unsigned)rows, KC_ROW_THREADS, 0, kc_stream(), norm_fwd_kernel<T, V>)(
        layer, y, s, x, b, w, bias, h, eps);
  else
    KC_LAUNCH((unsigned)rows, KC_ROW_THREADS, 0, kc_stream(), norm_fwd_kernel<T, 1>)(
        layer, y, s, x, b, w, bias, h, eps);
  KC_LAUNCHED();
}

/* Scratch: the row statistics (2 floats a row), then the partial sums of
 * dw and db (a double per chunk and column each). */
static int64_t norm_chunks(int64_t rows) { return (rows + NORM_CHUNK - 1) / NORM_CHUNK; }

/* Three launches: dx row by row (keeping the statistics), the partial
 * weight gradients of each chunk of rows, and their sums in chunk order.
 * Every sum runs in an order fixed by the sizes, so the bits never change
 * from run to run. */
template <typename T>
static void norm_bwd(int layer, T *dx, float *dw, float *db, const T *dy, const T *x, const T *w,
                     const T *dres, int64_t rows, int64_t h, float eps, void *scratch) {
  if (h == 0) return;
  int64_t chunks = norm_chunks(rows);
  float *stat = (float *)scratch;
  double *pw = (double *)(stat + 2 * rows), *pb = pw + chunks * h;
  KC_REQUIRE(rows <= INT32_MAX && chunks <= 65535, "normalisation of %lld rows", (long long)rows);
  unsigned cols = (unsigned)((h + KC_ELT_THREADS - 1) / KC_ELT_THREADS);
  if (rows > 0) {
    const int V = 16 / sizeof(T);
    if (h % V == 0 && kc_aligned16(dx) && kc_aligned16(dy) && kc_aligned16(x) &&
        kc_aligned16(w) && kc_aligned16(dres))
      KC_LAUNCH((unsigned)rows, KC_ROW_THREADS, 0, kc_stream(), norm_bwd_dx_kernel<T, V>)(
          layer, dx, dy, x, w, dres, h, eps, stat);
    else
      KC_LAUNCH((unsigned)rows, KC_ROW_THREADS, 0, kc_stream(), norm_bwd_dx_kernel<T, 1>)(
          layer, dx, dy, x, w, dres, h, eps, stat);
    KC_LAUNCHED();
    KC_LAUNCH(dim3(cols, (unsigned)chunks), KC_ELT_THREADS, 0, kc_stream(), norm_bwd_partial_kernel)(
        pw, db ? pb : NULL, dy, x, stat, rows, h);
    KC_LAUNCHED();
  }
  KC_LAUNCH(cols, KC_ELT_THREADS, 0, kc_stream(), norm_bwd_total_kernel)(dw, db, pw, pb, chunks, h);
  KC_LAUNCHED();
}

extern "C" {
int64_t k_cuda_norm_bwd_scratch(int64_t rows, int64_t h) {
  return 2 * rows * (int64_t)sizeof(float) + 2 * norm_chunks(rows) * h * (int64_t)sizeof(double);
}
#define NORM_ENTRIES(SFX, T, S, CS)                                                              \
  void k_cuda_layernorm_fwd##SFX(T *y, const T *x, const T *w, const T *b, int64_t rows,        \
                                 int64_t h, float eps) {                                        \
    norm_fwd(1, S(y), S(NULL), CS(x), CS(NULL), CS(w), CS(b), rows, h, eps);                     \
  }                                                                                             \
  void k_cuda_rmsnorm_fwd##SFX(T *y, const T *x, const T *w, int64_t rows, int64_t h, float eps) { \
    norm_fwd(0, S(y), S(NULL), CS(x), CS(NULL), CS(w), CS(NULL), rows, h, eps);                  \
  }                                                                                             \
  void k_cuda_add_layernorm_fwd##SFX(T *s, T *y, const T *a, const T *b, const T *w,            \
                                     const T *bias, int64_t rows, int64_t h, float eps) {       \
    norm_fwd(1, S(y), S(s), CS(a), CS(b), CS(w), CS(bias), rows, h, eps);                        \
  }                                                                                             \
  void k_cuda_add_rmsnorm_fwd##SFX(T *s, T *y, const T *a, const T *b, const T *w, int64_t rows, \
                                   int64_t h, float eps) {                                      \
    norm_fwd(0, S(y), S(s), CS(a), CS(b), CS(w), CS(NULL), rows, h, eps);                        \
  }                                                                                             \
  void k_cuda_layernorm_bwd##SFX(T *dx, float *dw, float *db, const T *dy, const T *x,          \
                                 const T *w, int64_t rows, int64_t h, float eps, void *scratch) { \
    norm_bwd(1, S(dx), dw, db, CS(dy), CS(x), CS(w), CS(NULL), rows, h, eps, scratch);           \
  }                                                                                             \
  void k_cuda_rmsnorm_bwd##SFX(T *dx, float *dw, const T *dy, const T *x, const T *w,           \
                               int64_t rows, int64_t h, float eps, void *scratch) {             \
    norm_bwd(0, S(dx), dw, NULL, CS(dy), CS(x), CS(w), CS(NULL), rows, h, eps, scratch);         \
  }                                                                                             \
  void k_cuda_layernorm_bwd_res##SFX(T *dx, float *dw, float *db, const T *dy, const T *x,      \
                                     const T *w, const T *dres, int64_t rows, int64_t h,        \
                                     float eps, void *scratch) {                                \
    norm_bwd(1, S(dx), dw, db, CS(dy), CS(x), CS(w), CS(dres), rows, h, eps, scratch);           \
  }                                                                                             \
  void k_cuda_rmsnorm_bwd_res##SFX(T *dx, float *dw, const T *dy, const T *x, const T *w,       \
                                   const T *dres, int64_t rows, int64_t h, float eps,           \
                                   void *scratch) {                                             \
    norm_bwd(0, S(dx), dw, NULL, CS(dy), CS(x), CS(w), CS(dres), rows, h, eps, scratch);         \
  }

/* The entry points of kernels_cuda.h, once in fp32 and once in bf16. */
#define F32(p) ((float *)(p))
#define CF32(p) ((const float *)(p))
NORM_ENTRIES(, float, F32, CF32)
NORM_ENTRIES(_bf16, kc_bf16, B16, CB16)
}
