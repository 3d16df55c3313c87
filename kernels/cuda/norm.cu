/* Layer normalisation and RMS normalisation over the last dimension: one
 * block per row, statistics in double, two passes for the variance (as on
 * the CPU: the one-pass formula loses digits when the mean is large). */
#include "common.cuh"

/* Rows per partial sum of the weight gradients (see norm_bwd). */
#define NORM_CHUNK 128

/* mean and rstd of row x (rstd = 1 / sqrt(var + eps), or of the mean
 * square for RMS norm, where mean is 0), to every thread of the block. */
template <typename T>
__device__ void row_stats(int layer, const T *x, int64_t h, float eps, double *buf, float *mean,
                          float *rstd) {
  double m = 0;
  if (layer) {
    double s = 0;
    for (int64_t j = threadIdx.x; j < h; j += blockDim.x)
      s += kc_f(x[j]);
    m = kc_block_sum(s, buf) / (double)h;
  }
  double v = 0;
  for (int64_t j = threadIdx.x; j < h; j += blockDim.x) {
    double c = (double)kc_f(x[j]) - m;
    v += c * c;
  }
  v = kc_block_sum(v, buf);
  *mean = (float)m;
  *rstd = (float)(1.0 / sqrt(v / (double)h + (double)eps));
}

template <typename T>
__global__ void norm_fwd_kernel(int layer, T *y, const T *x, const T *w, const T *b, int64_t h,
                                float eps) {
  __shared__ double buf[32];
  const T *xr = x + blockIdx.x * h;
  T *yr = y + blockIdx.x * h;
  float mean, rstd;
  row_stats(layer, xr, h, eps, buf, &mean, &rstd);
  for (int64_t j = threadIdx.x; j < h; j += blockDim.x) {
    float o = (kc_f(xr[j]) - mean) * rstd * kc_f(w[j]);
    yr[j] = kc_to<T>(b ? o + kc_f(b[j]) : o);
  }
}

/* dx of one row, with xhat the normalised input and g = dy w:
 *   layernorm: dx = rstd (g - mean(g) - xhat mean(g xhat))
 *   rmsnorm:   dx = rstd (g - xhat mean(g xhat))
 * and the row's statistics into stat[2 row], stat[2 row + 1]. */
template <typename T>
__global__ void norm_bwd_dx_kernel(int layer, T *dx, const T *dy, const T *x, const T *w,
                                   int64_t h, float eps, float *stat) {
  __shared__ double buf[32];
  int64_t r = blockIdx.x;
  const T *xr = x + r * h, *dyr = dy + r * h;
  float m, rs;
  row_stats(layer, xr, h, eps, buf, &m, &rs);
  double sg = 0, sgx = 0;
  for (int64_t j = threadIdx.x; j < h; j += blockDim.x) {
    float g = kc_f(dyr[j]) * kc_f(w[j]);
    sg += g;
    sgx += (double)g * ((kc_f(xr[j]) - m) * rs);
  }
  sg = kc_block_sum(sg, buf);
  sgx = kc_block_sum(sgx, buf);
  float a = layer ? (float)(sg / (double)h) : 0.0f, c = (float)(sgx / (double)h);
  for (int64_t j = threadIdx.x; j < h; j += blockDim.x)
    dx[r * h + j] = kc_to<T>(rs * (kc_f(dyr[j]) * kc_f(w[j]) - a - (kc_f(xr[j]) - m) * rs * c));
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

template <typename T>
static void norm_fwd(int layer, T *y, const T *x, const T *w, const T *b, int64_t rows, int64_t h,
                     float eps) {
  if (rows == 0 || h == 0) return;
  KC_REQUIRE(rows <= INT32_MAX, "normalisation of %lld rows", (long long)rows);
  KC_LAUNCH((unsigned)rows, KC_ROW_THREADS, 0, kc_stream(), norm_fwd_kernel)(layer, y, x, w, b, h, eps);
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
                     int64_t rows, int64_t h, float eps, void *scratch) {
  if (h == 0) return;
  int64_t chunks = norm_chunks(rows);
  float *stat = (float *)scratch;
  double *pw = (double *)(stat + 2 * rows), *pb = pw + chunks * h;
  KC_REQUIRE(rows <= INT32_MAX && chunks <= 65535, "normalisation of %lld rows", (long long)rows);
  unsigned cols = (unsigned)((h + KC_ELT_THREADS - 1) / KC_ELT_THREADS);
  if (rows > 0) {
    KC_LAUNCH((unsigned)rows, KC_ROW_THREADS, 0, kc_stream(), norm_bwd_dx_kernel)(layer, dx, dy, x, w, h,
                                                                           eps, stat);
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
void k_cuda_layernorm_fwd(float *y, const float *x, const float *w, const float *b, int64_t rows,
                          int64_t h, float eps) {
  norm_fwd(1, y, x, w, b, rows, h, eps);
}
void k_cuda_layernorm_bwd(float *dx, float *dw, float *db, const float *dy, const float *x,
                          const float *w, int64_t rows, int64_t h, float eps, void *scratch) {
  norm_bwd(1, dx, dw, db, dy, x, w, rows, h, eps, scratch);
}
void k_cuda_rmsnorm_fwd(float *y, const float *x, const float *w, int64_t rows, int64_t h,
                        float eps) {
  norm_fwd(0, y, x, w, (const float *)NULL, rows, h, eps);
}
void k_cuda_rmsnorm_bwd(float *dx, float *dw, const float *dy, const float *x, const float *w,
                        int64_t rows, int64_t h, float eps, void *scratch) {
  norm_bwd(0, dx, dw, NULL, dy, x, w, rows, h, eps, scratch);
}
void k_cuda_layernorm_fwd_bf16(kc_bf16 *y, const kc_bf16 *x, const kc_bf16 *w, const kc_bf16 *b,
                               int64_t rows, int64_t h, float eps) {
  norm_fwd(1, B16(y), CB16(x), CB16(w), CB16(b), rows, h, eps);
}
void k_cuda_layernorm_bwd_bf16(kc_bf16 *dx, float *dw, float *db, const kc_bf16 *dy,
                               const kc_bf16 *x, const kc_bf16 *w, int64_t rows, int64_t h,
                               float eps, void *scratch) {
  norm_bwd(1, B16(dx), dw, db, CB16(dy), CB16(x), CB16(w), rows, h, eps, scratch);
}
void k_cuda_rmsnorm_fwd_bf16(kc_bf16 *y, const kc_bf16 *x, const kc_bf16 *w, int64_t rows,
                             int64_t h, float eps) {
  norm_fwd(0, B16(y), CB16(x), CB16(w), (const bf16 *)NULL, rows, h, eps);
}
void k_cuda_rmsnorm_bwd_bf16(kc_bf16 *dx, float *dw, const kc_bf16 *dy, const kc_bf16 *x,
                             const kc_bf16 *w, int64_t rows, int64_t h, float eps, void *scratch) {
  norm_bwd(0, B16(dx), dw, NULL, CB16(dy), CB16(x), CB16(w), rows, h, eps, scratch);
}
}
