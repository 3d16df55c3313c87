/* Token embeddings: a row gather forward; a deterministic scatter-add
 * backward. The backward gives each thread one column of a range of
 * EMB_IDS table rows: it zeroes its part of the column, then walks all
 * tokens in order and adds those whose id falls in its range. Every
 * element of dtable is written by one thread only, with the adds in token
 * order: no atomics, and the CPU kernel's bits. */
#include "common.cuh"

/* Table rows per thread of the backward: the ids are read once per range,
 * so fewer, larger ranges read less; more ranges give more threads. */
#define EMB_IDS 64

/* Rows of ids outside [lo, lo + V) are zeros (the vocabulary-parallel form;
 * lo = 0 and V the whole vocabulary otherwise, where such an id is a bug). */
template <typename T>
__global__ void emb_fwd_kernel(T *out, const int32_t *ids, const T *table, int64_t n, int64_t h,
                               int64_t lo, int64_t V, int strict) {
  KC_FOR_ELEMENTS(i, n * h) {
    int64_t row = (int64_t)ids[i / h] - lo;
    if (strict) KC_ASSERT(row >= 0 && row < V);
    out[i] = row >= 0 && row < V ? table[row * h + i % h] : kc_to<T>(0.0f);
  }
}

/* grid.x * blockDim.x >= h columns, grid.y = ceil(V / EMB_IDS) id ranges. */
template <typename T>
__global__ void emb_bwd_kernel(float *dtable, const int32_t *ids, const T *dout, int64_t n,
                               int64_t V, int64_t h, int64_t lo, int strict) {
  int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  int64_t r0 = (int64_t)blockIdx.y * EMB_IDS, r1 = r0 + EMB_IDS < V ? r0 + EMB_IDS : V;
  if (j >= h) return;
  for (int64_t r = r0; r < r1; r++)
    dtable[r * h + j] = 0;
  for (int64_t i = 0; i < n; i++) {
    int64_t row = (int64_t)ids[i] - lo;
    if (strict) KC_ASSERT(row >= 0 && row < V);
    if (row >= r0 && row < r1) dtable[row * h + j] += kc_f(dout[i * h + j]);
  }
}

template <typename T>
static void emb_fwd(T *out, const int32_t *ids, const T *table, int64_t n, int64_t h, int64_t lo,
                    int64_t V, int strict) {
  if (n * h == 0) return;
  KC_LAUNCH(KC_GRID(n * h), emb_fwd_kernel)(out, ids, table, n, h, lo, V, strict);
  KC_LAUNCHED();
}

template <typename T>
static void emb_bwd(float *dtable, const int32_t *ids, const T *dout, int64_t n, int64_t V,
                    int64_t h, int64_t lo, int strict) {
  if (V * h == 0) return;
  KC_REQUIRE((V + EMB_IDS - 1) / EMB_IDS <= 65535, "embedding of %lld rows", (long long)V);
  int threads = h < 128 ? 32 : 128;
  dim3 grid((unsigned)((h + threads - 1) / threads), (unsigned)((V + EMB_IDS - 1) / EMB_IDS));
  KC_LAUNCH(grid, threads, 0, kc_stream(), emb_bwd_kernel)(dtable, ids, dout, n, V, h, lo, strict);
  KC_LAUNCHED();
}

__global__ void arange_kernel(int32_t *out, int64_t n) {
  KC_FOR_ELEMENTS(i, n) out[i] = (int32_t)i;
}

extern "C" {
/* The plain forms know the table's row count only in the backward; the
 * forward cannot bound-check ids on the host without a copy, so a bad id
 * traps in debug builds and reads zeros in release. */
void k_cuda_embedding_fwd(float *out, const int32_t *ids, const float *table, int64_t n,
                          int64_t h) {
  emb_fwd(out, ids, table, n, h, 0, INT64_MAX, 1);
}
void k_cuda_embedding_bwd(float *dtable, const int32_t *ids, const float *dout, int64_t n,
                          int64_t V, int64_t h) {
  emb_bwd(dtable, ids, dout, n, V, h, 0, 1);
}
void k_cuda_embedding_fwd_bf16(kc_bf16 *out, const int32_t *ids, const kc_bf16 *table, int64_t n,
                               int64_t h) {
  emb_fwd(B16(out), ids, CB16(table), n, h, 0, INT64_MAX, 1);
}
void k_cuda_embedding_bwd_bf16(float *dtable, const int32_t *ids, const kc_bf16 *dout, int64_t n,
                               int64_t V, int64_t h) {
  emb_bwd(dtable, ids, CB16(dout), n, V, h, 0, 1);
}
void k_cuda_arange(int32_t *out, int64_t n) {
  if (n == 0) return;
  KC_LAUNCH(KC_GRID(n), arange_kernel)(out, n);
  KC_LAUNCHED();
}
void k_cuda_embedding_fwd_vp(float *out, const int32_t *ids, const float *table, int64_t n,
                             int64_t h, int64_t lo, int64_t V) {
  emb_fwd(out, ids, table, n, h, lo, V, 0);
}
void k_cuda_embedding_bwd_vp(float *dtable, const int32_t *ids, const float *dout, int64_t n,
                             int64_t V, int64_t h, int64_t lo) {
  emb_bwd(dtable, ids, dout, n, V, h, lo, 0);
}
void k_cuda_embedding_fwd_vp_bf16(kc_bf16 *out, const int32_t *ids, const kc_bf16 *table,
                                  int64_t n, int64_t h, int64_t lo, int64_t V) {
  emb_fwd(B16(out), ids, CB16(table), n, h, lo, V, 0);
}
void k_cuda_embedding_bwd_vp_bf16(float *dtable, const int32_t *ids, const kc_bf16 *dout,
                                  int64_t n, int64_t V, int64_t h, int64_t lo) {
  emb_bwd(dtable, ids, CB16(dout), n, V, h, lo, 0);
}
}
