/* cuBLASLt on the CPU (see cublasLt.h): D = epilogue(alpha op(A) op(B) +
 * beta C), column-major, batched with strides, accumulated in double and
 * rounded once to D's type. Arguments are validated as cuBLASLt does:
 * INVALID_VALUE for shapes, leading dimensions, sizes of attributes or
 * missing pointers that make no sense, NOT_SUPPORTED for what cuBLASLt (or
 * this emulator, which says so) does not do. C is not read when beta is
 * 0, as in cuBLAS. A matmul is work on its stream (captured like a
 * launch), its descriptors read when it is enqueued. */
#include <cublasLt.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "emu.h"

namespace {

struct Layout {
  cudaDataType_t type;
  int32_t order;
  uint64_t rows, cols;
  int64_t ld;
  int32_t batch;
  int64_t stride;
};

struct Desc {
  cublasComputeType_t compute;
  cudaDataType_t scale;
  int32_t pointer_mode;
  int32_t transa, transb;
  uint32_t epilogue;
  const void *bias;
  int64_t bias_stride;
  void *aux;
  int64_t aux_ld, aux_stride;
  int32_t bias_type, aux_type;
};

struct Pref {
  uint64_t workspace;
  uint32_t align[4];
};

} // namespace

struct cublasLtContext {
  int magic;
};
struct cublasLtMatmulDescOpaque {
  Desc d;
};
struct cublasLtMatrixLayoutOpaque {
  Layout l;
};
struct cublasLtMatmulPreferenceOpaque {
  Pref p;
};

namespace {

using kc_emu::note;

cublasStatus_t bad(const char *why) {
  note("cuBLASLt: %s: CUBLAS_STATUS_INVALID_VALUE", why);
  return CUBLAS_STATUS_INVALID_VALUE;
}
cublasStatus_t unsupported(const char *why) {
  note("cuBLASLt: %s: CUBLAS_STATUS_NOT_SUPPORTED", why);
  return CUBLAS_STATUS_NOT_SUPPORTED;
}

size_t elem(cudaDataType_t t) { return t == CUDA_R_16BF ? 2 : 4; }

float load(cudaDataType_t t, const void *p, int64_t i) {
  if (t == CUDA_R_16BF) {
    uint32_t u = (uint32_t)((const uint16_t *)p)[i] << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
  }
  return ((const float *)p)[i];
}

void store(cudaDataType_t t, void *p, int64_t i, double v) {
  float f = (float)v;
  if (t == CUDA_R_16BF) {
    uint32_t u;
    memcpy(&u, &f, 4);
    uint16_t b = (u & 0x7fffffffu) > 0x7f800000u ? (uint16_t)((u >> 16) | 0x40u)
                                                 : (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    ((uint16_t *)p)[i] = b;
  } else {
    ((float *)p)[i] = f;
  }
}

/* cuBLASLt's GELU, the tanh form, and its derivative. */
float gelu(float x) {
  const float c = 0.7978845608028654f;
  return 0.5f * x * (1.0f + tanhf(c * (x + 0.044715f * x * x * x)));
}
float gelu_grad(float x) {
  const float c = 0.7978845608028654f;
  float t = tanhf(c * (x + 0.044715f * x * x * x));
  return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * c * (1.0f + 3.0f * 0.044715f * x * x);
}

bool has_bias(uint32_t e) {
  return e == CUBLASLT_EPILOGUE_BIAS || e == CUBLASLT_EPILOGUE_GELU_BIAS ||
         e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
}
bool writes_bias(uint32_t e) {
  return e == CUBLASLT_EPILOGUE_DGELU_BGRAD || e == CUBLASLT_EPILOGUE_BGRADA ||
         e == CUBLASLT_EPILOGUE_BGRADB;
}
bool has_aux(uint32_t e) {
  return e == CUBLASLT_EPILOGUE_GELU_AUX || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS ||
         e == CUBLASLT_EPILOGUE_DGELU || e == CUBLASLT_EPILOGUE_DGELU_BGRAD;
}

/* The problem as the heuristic and the matmul see it. */
struct Problem {
  Desc d;
  Layout a, b, c, dl;
  int64_t m, n, k;
};

/* What the library refuses though the emulator could compute it, so that
 * a program's fallbacks run here as they would on the GPU (the heuristic
 * returns NOT_SUPPORTED, as cuBLASLt's does for an epilogue it has no
 * kernel for):
 *  - a bias gradient of an operand (BGRADA, BGRADB) only where that
 *    operand is stored with k as its second dimension, column-major: A not
 *    transposed (m x k), B transposed (n x k). That is the layout the
 *    library's epilogue kernels reduce in (the weight-gradient GEMMs of
 *    training frameworks call BGRADB so, with transb = T); in the other
 *    transposition there is no algorithm;
 *  - the aux matrix's leading dimension (EPILOGUE_AUX_LD) a multiple of 8,
 *    as the documentation of the attribute requires.
 * (cublasLtMatmul adds the pointers' alignment: see epilogue_pointers.) */
cublasStatus_t refused(const Problem &p) {
  uint32_t e = p.d.epilogue;
  if (e == CUBLASLT_EPILOGUE_BGRADA && p.d.transa)
    return unsupported("BGRADA with A transposed (the bias gradient of A needs transa = N)");
  if (e == CUBLASLT_EPILOGUE_BGRADB && !p.d.transb)
    return unsupported("BGRADB with B not transposed (the bias gradient of B needs transb = T)");
  if (has_aux(e) && p.d.aux_ld % 8 != 0) {
    note("cuBLASLt: EPILOGUE_AUX_LD %lld is not a multiple of 8", (long long)p.d.aux_ld);
    return unsupported("an aux leading dimension that is not a multiple of 8");
  }
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t check_layout(const Layout &l, const char *name) {
  if (l.order != CUBLASLT_ORDER_COL)
    kc_emu::die("cuBLASLt: layout %s has order %d: the emulator knows column-major only", name,
                l.order);
  if (l.ld < 1 || (uint64_t)l.ld < l.rows) return bad("a leading dimension below the row count");
  if (l.batch < 1) return bad("a batch count below 1");
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t validate(Problem *p, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t A,
                        cublasLtMatrixLayout_t B, cublasLtMatrixLayout_t C,
                        cublasLtMatrixLayout_t D) {
  if (!desc || !A || !B || !C || !D) return bad("a null descriptor");
  p->d = desc->d;
  p->a = A->l, p->b = B->l, p->c = C->l, p->dl = D->l;
  const Desc &d = p->d;
  if (d.compute != CUBLAS_COMPUTE_32F) return unsupported("a compute type other than 32F");
  if (d.scale != CUDA_R_32F) return unsupported("a scale type other than 32F");
  if (d.pointer_mode != CUBLASLT_POINTER_MODE_HOST) return unsupported("device pointer mode");
  const char *names[] = {"A", "B", "C", "D"};
  const Layout *ls[] = {&p->a, &p->b, &p->c, &p->dl};
  for (int i = 0; i < 4; i++) {
    cublasStatus_t s = check_layout(*ls[i], names[i]);
    if (s != CUBLAS_STATUS_SUCCESS) return s;
  }
  p->m = (int64_t)(d.transa ? p->a.cols : p->a.rows);
  p->k = (int64_t)(d.transa ? p->a.rows : p->a.cols);
  int64_t kb = (int64_t)(d.transb ? p->b.cols : p->b.rows);
  p->n = (int64_t)(d.transb ? p->b.rows : p->b.cols);
  if (kb != p->k) return bad("op(A) and op(B) disagree on k");
  if ((int64_t)p->c.rows != p->m || (int64_t)p->c.cols != p->n || (int64_t)p->dl.rows != p->m ||
      (int64_t)p->dl.cols != p->n)
    return bad("C or D is not m x n");
  if (p->m < 1 || p->n < 1 || p->k < 1) return bad("an empty dimension");
  if (p->a.batch != p->b.batch || p->a.batch != p->c.batch || p->a.batch != p->dl.batch)
    return bad("batch counts differ");
  if (p->a.type != p->b.type) return unsupported("A and B of different types");
  if (p->c.type != p->dl.type) return unsupported("C and D of different types");
  bool ok = (p->a.type == CUDA_R_32F && p->c.type == CUDA_R_32F) ||
            (p->a.type == CUDA_R_16BF && (p->c.type == CUDA_R_16BF || p->c.type == CUDA_R_32F));
  if (!ok) return unsupported("this combination of A/B and C/D types");
  uint32_t e = d.epilogue;
  bool known = e == CUBLASLT_EPILOGUE_DEFAULT || e == CUBLASLT_EPILOGUE_RELU || e == CUBLASLT_EPILOGUE_GELU ||
               has_bias(e) || writes_bias(e) || has_aux(e);
  if (!known) {
    if (e == CUBLASLT_EPILOGUE_RELU_BIAS || e == CUBLASLT_EPILOGUE_RELU_AUX ||
        e == CUBLASLT_EPILOGUE_RELU_AUX_BIAS || e == CUBLASLT_EPILOGUE_DRELU ||
        e == CUBLASLT_EPILOGUE_DRELU_BGRAD)
      return unsupported("this ReLU epilogue (the emulator does not implement it)");
    return bad("an unknown epilogue");
  }
  if (e != CUBLASLT_EPILOGUE_DEFAULT && p->a.batch > 1 && (writes_bias(e) || has_aux(e)))
    return unsupported("a batched GEMM with an aux or bias-gradient epilogue (the emulator does not implement it)");
  cudaDataType_t bt = d.bias_type < 0 ? p->dl.type : (cudaDataType_t)d.bias_type;
  if ((has_bias(e) || writes_bias(e)) && bt != CUDA_R_32F && bt != CUDA_R_16BF)
    return unsupported("a bias type other than 32F and 16BF");
  if (has_aux(e) && d.aux_ld < p->m) return bad("EPILOGUE_AUX_LD below the rows of D");
  return refused(*p);
}

/* What an algorithm remembers of the problem it was found for. */
void fingerprint(const Problem &p, uint64_t *out) {
  out[0] = 0x656d75616c676fULL;
  out[1] = (uint64_t)p.m << 32 ^ (uint64_t)p.n;
  out[2] = (uint64_t)p.k << 8 ^ (uint64_t)p.d.transa << 1 ^ (uint64_t)p.d.transb;
  out[3] = (uint64_t)p.a.type << 16 ^ (uint64_t)p.c.type << 8 ^ (uint64_t)p.a.batch << 24;
  out[4] = p.d.epilogue;
}

void run(const Problem &p, float alpha, float beta, const void *A, const void *B, const void *C,
         void *D) {
  const Desc &d = p.d;
  uint32_t e = d.epilogue;
  cudaDataType_t bt = d.bias_type < 0 ? p.dl.type : (cudaDataType_t)d.bias_type;
  cudaDataType_t at = d.aux_type < 0 ? p.dl.type : (cudaDataType_t)d.aux_type;
  for (int32_t bi = 0; bi < p.a.batch; bi++) {
    int64_t oa = bi * p.a.stride, ob = bi * p.b.stride, oc = bi * p.c.stride, od = bi * p.dl.stride;
    for (int64_t j = 0; j < p.n; j++)
      for (int64_t i = 0; i < p.m; i++) {
        double acc = 0;
        for (int64_t l = 0; l < p.k; l++) {
          int64_t ia = d.transa ? l + i * p.a.ld : i + l * p.a.ld;
          int64_t ib = d.transb ? j + l * p.b.ld : l + j * p.b.ld;
          acc += (double)load(p.a.type, A, oa + ia) * load(p.b.type, B, ob + ib);
        }
        double v = alpha * acc;
        if (beta != 0.0f) v += (double)beta * load(p.c.type, C, oc + i + j * p.c.ld);
        if (has_bias(e)) v += load(bt, d.bias, bi * d.bias_stride + i);
        if (e == CUBLASLT_EPILOGUE_GELU_AUX || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS)
          store(at, d.aux, i + j * d.aux_ld, v);
        if (e == CUBLASLT_EPILOGUE_RELU) v = v > 0 ? v : 0;
        if (e == CUBLASLT_EPILOGUE_GELU || e == CUBLASLT_EPILOGUE_GELU_BIAS ||
            e == CUBLASLT_EPILOGUE_GELU_AUX || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS)
          v = gelu((float)v);
        if (e == CUBLASLT_EPILOGUE_DGELU || e == CUBLASLT_EPILOGUE_DGELU_BGRAD)
          v = (float)v * gelu_grad(load(at, d.aux, i + j * d.aux_ld));
        store(p.dl.type, D, od + i + j * p.dl.ld, v);
      }
  }
  if (!writes_bias(e)) return;
  /* Bias gradients: over the columns of D (DGELU_BGRAD), or over k of
   * op(A) (BGRADA, one per row of D) or of op(B) (BGRADB, one per column). */
  int64_t len = e == CUBLASLT_EPILOGUE_BGRADB ? p.n : p.m;
  for (int64_t r = 0; r < len; r++) {
    double s = 0;
    if (e == CUBLASLT_EPILOGUE_DGELU_BGRAD)
      for (int64_t j = 0; j < p.n; j++) s += load(p.dl.type, D, r + j * p.dl.ld);
    else if (e == CUBLASLT_EPILOGUE_BGRADA)
      for (int64_t l = 0; l < p.k; l++) s += load(p.a.type, A, d.transa ? l + r * p.a.ld : r + l * p.a.ld);
    else
      for (int64_t l = 0; l < p.k; l++) s += load(p.b.type, B, d.transb ? r + l * p.b.ld : l + r * p.b.ld);
    store(bt, (void *)d.bias, r, s);
  }
}

/* Whether [p, p + the matrix's extent) is device memory, aligned to the
 * element and to what the algorithm was promised. */
cublasStatus_t check_matrix(const void *ptr, const Layout &l, uint32_t align, const char *name) {
  char why[160];
  if (!ptr) {
    snprintf(why, sizeof why, "matrix %s is a null pointer", name);
    return bad(why);
  }
  uintptr_t a = (uintptr_t)ptr;
  uint32_t need = align < 16 ? align : 16;
  if (a % elem(l.type) || a % need) {
    snprintf(why, sizeof why, "matrix %s at %p is not %u-byte aligned as its algorithm requires",
             name, ptr, need > elem(l.type) ? need : (uint32_t)elem(l.type));
    return bad(why);
  }
  size_t last = (size_t)((l.batch - 1) * (l.stride > 0 ? l.stride : 0) + (int64_t)(l.cols - 1) * l.ld +
                         (int64_t)l.rows);
  if (!kc_emu::device_range(ptr, last * elem(l.type))) {
    snprintf(why, sizeof why, "matrix %s (%p, %zu elements) is not inside one device allocation",
             name, ptr, last);
    return bad(why);
  }
  return CUBLAS_STATUS_SUCCESS;
}

/* The epilogue's vectors are read and written with D's vector width: the
 * bias and the aux matrix must be aligned as D was promised to be (at most
 * 16 bytes), and to their own element. */
cublasStatus_t epilogue_pointers(const Problem &p, uint32_t align_d) {
  uint32_t e = p.d.epilogue, need = align_d < 16 ? align_d : 16;
  cudaDataType_t bt = p.d.bias_type < 0 ? p.dl.type : (cudaDataType_t)p.d.bias_type;
  cudaDataType_t at = p.d.aux_type < 0 ? p.dl.type : (cudaDataType_t)p.d.aux_type;
  char why[160];
  if ((has_bias(e) || writes_bias(e)) && ((uintptr_t)p.d.bias % need || (uintptr_t)p.d.bias % elem(bt))) {
    snprintf(why, sizeof why, "the bias pointer %p is not %u-byte aligned as D's algorithm requires",
             p.d.bias, need);
    return bad(why);
  }
  if (has_aux(e) && ((uintptr_t)p.d.aux % need || (uintptr_t)p.d.aux % elem(at))) {
    snprintf(why, sizeof why, "the aux pointer %p is not %u-byte aligned as D's algorithm requires",
             p.d.aux, need);
    return bad(why);
  }
  return CUBLAS_STATUS_SUCCESS;
}

template <typename T> cublasStatus_t put(T *dst, const void *buf, size_t size) {
  if (!buf || size != sizeof(T)) return bad("an attribute of the wrong size");
  memcpy(dst, buf, sizeof(T));
  return CUBLAS_STATUS_SUCCESS;
}

/* An attribute's n bytes at src into buf (size bytes), as cuBLASLt's
 * getters: a null buffer of size 0 asks for the size only. */
cublasStatus_t get(const void *src, size_t n, void *buf, size_t size, size_t *written) {
  if (written) *written = n;
  if (!buf && size == 0) return written ? CUBLAS_STATUS_SUCCESS : bad("nowhere to write");
  if (!buf || size != n) return bad("an attribute buffer of the wrong size");
  memcpy(buf, src, n);
  return CUBLAS_STATUS_SUCCESS;
}

} // namespace

extern "C" {

cublasStatus_t cublasLtCreate(cublasLtHandle_t *handle) {
  if (!handle) return bad("a null handle pointer");
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    cudaGetLastError();
    return CUBLAS_STATUS_NOT_INITIALIZED;
  }
  *handle = new cublasLtContext{1};
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}

const char *cublasLtGetStatusName(cublasStatus_t s) {
  switch (s) {
  case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
  case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
  case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
  case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
  case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
  case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
  case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
  case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
  case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
  case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
  }
  return "CUBLAS_STATUS_UNKNOWN";
}
const char *cublasLtGetStatusString(cublasStatus_t s) { return cublasLtGetStatusName(s); }

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *desc, cublasComputeType_t compute,
                                        cudaDataType_t scale) {
  if (!desc) return bad("a null descriptor pointer");
  Desc d = {};
  d.compute = compute;
  d.scale = scale;
  d.epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  d.bias_type = d.aux_type = -1;
  *desc = new cublasLtMatmulDescOpaque{d};
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
  delete desc;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc,
                                              cublasLtMatmulDescAttributes_t attr,
                                              const void *buf, size_t size) {
  if (!desc) return bad("a null descriptor");
  Desc &d = desc->d;
  cublasStatus_t s;
  switch (attr) {
  case CUBLASLT_MATMUL_DESC_COMPUTE_TYPE: return put((int32_t *)&d.compute, buf, size);
  case CUBLASLT_MATMUL_DESC_SCALE_TYPE: return put((int32_t *)&d.scale, buf, size);
  case CUBLASLT_MATMUL_DESC_POINTER_MODE: return put(&d.pointer_mode, buf, size);
  case CUBLASLT_MATMUL_DESC_TRANSA:
  case CUBLASLT_MATMUL_DESC_TRANSB: {
    int32_t op;
    if ((s = put(&op, buf, size)) != CUBLAS_STATUS_SUCCESS) return s;
    if (op < CUBLAS_OP_N || op > CUBLAS_OP_C) return bad("an unknown operation");
    (attr == CUBLASLT_MATMUL_DESC_TRANSA ? d.transa : d.transb) = op != CUBLAS_OP_N;
    return CUBLAS_STATUS_SUCCESS;
  }
  case CUBLASLT_MATMUL_DESC_EPILOGUE: return put(&d.epilogue, buf, size);
  case CUBLASLT_MATMUL_DESC_BIAS_POINTER: return put(&d.bias, buf, size);
  case CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE: return put(&d.bias_stride, buf, size);
  case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER: return put(&d.aux, buf, size);
  case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD: return put(&d.aux_ld, buf, size);
  case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE: return put(&d.aux_stride, buf, size);
  case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: return put(&d.bias_type, buf, size);
  case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE: return put(&d.aux_type, buf, size);
  default: return unsupported("a matmul descriptor attribute the emulator does not implement");
  }
}

cublasStatus_t cublasLtMatmulDescGetAttribute(cublasLtMatmulDesc_t desc,
                                              cublasLtMatmulDescAttributes_t attr, void *buf,
                                              size_t size, size_t *written) {
  if (!desc) return bad("a null descriptor");
  const Desc &d = desc->d;
  int32_t ta = d.transa, tb = d.transb;
  const void *src;
  size_t n;
  switch (attr) {
  case CUBLASLT_MATMUL_DESC_TRANSA: src = &ta, n = 4; break;
  case CUBLASLT_MATMUL_DESC_TRANSB: src = &tb, n = 4; break;
  case CUBLASLT_MATMUL_DESC_EPILOGUE: src = &d.epilogue, n = 4; break;
  case CUBLASLT_MATMUL_DESC_BIAS_POINTER: src = &d.bias, n = sizeof(void *); break;
  case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER: src = &d.aux, n = sizeof(void *); break;
  case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD: src = &d.aux_ld, n = 8; break;
  default: return unsupported("reading a matmul descriptor attribute the emulator does not implement");
  }
  return get(src, n, buf, size, written);
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *layout, cudaDataType_t type,
                                          uint64_t rows, uint64_t cols, int64_t ld) {
  if (!layout) return bad("a null layout pointer");
  if (type != CUDA_R_32F && type != CUDA_R_16BF)
    return unsupported("a matrix type other than 32F and 16BF");
  *layout = new cublasLtMatrixLayoutOpaque{Layout{type, CUBLASLT_ORDER_COL, rows, cols, ld, 1, 0}};
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
  delete layout;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t layout,
                                                cublasLtMatrixLayoutAttribute_t attr,
                                                const void *buf, size_t size) {
  if (!layout) return bad("a null layout");
  Layout &l = layout->l;
  switch (attr) {
  case CUBLASLT_MATRIX_LAYOUT_TYPE: return put((uint32_t *)&l.type, buf, size);
  case CUBLASLT_MATRIX_LAYOUT_ORDER: return put(&l.order, buf, size);
  case CUBLASLT_MATRIX_LAYOUT_ROWS: return put(&l.rows, buf, size);
  case CUBLASLT_MATRIX_LAYOUT_COLS: return put(&l.cols, buf, size);
  case CUBLASLT_MATRIX_LAYOUT_LD: return put(&l.ld, buf, size);
  case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT: return put(&l.batch, buf, size);
  case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET: return put(&l.stride, buf, size);
  default: return unsupported("a layout attribute the emulator does not implement");
  }
}

cublasStatus_t cublasLtMatrixLayoutGetAttribute(cublasLtMatrixLayout_t layout,
                                                cublasLtMatrixLayoutAttribute_t attr, void *buf,
                                                size_t size, size_t *written) {
  if (!layout) return bad("a null layout");
  const Layout &l = layout->l;
  const void *src;
  size_t n;
  switch (attr) {
  case CUBLASLT_MATRIX_LAYOUT_ROWS: src = &l.rows, n = 8; break;
  case CUBLASLT_MATRIX_LAYOUT_COLS: src = &l.cols, n = 8; break;
  case CUBLASLT_MATRIX_LAYOUT_LD: src = &l.ld, n = 8; break;
  case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT: src = &l.batch, n = 4; break;
  case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET: src = &l.stride, n = 8; break;
  default: return unsupported("reading a layout attribute the emulator does not implement");
  }
  return get(src, n, buf, size, written);
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *pref) {
  if (!pref) return bad("a null preference pointer");
  /* cuBLASLt assumes 256-byte aligned matrices unless told otherwise. */
  *pref = new cublasLtMatmulPreferenceOpaque{Pref{0, {256, 256, 256, 256}}};
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  delete pref;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr,
                                                    const void *buf, size_t size) {
  if (!pref) return bad("a null preference");
  Pref &p = pref->p;
  uint32_t mode;
  switch (attr) {
  case CUBLASLT_MATMUL_PREF_SEARCH_MODE: {
    cublasStatus_t s = put(&mode, buf, size);
    return s != CUBLAS_STATUS_SUCCESS || mode == 0 ? s : unsupported("a search mode other than best fit");
  }
  case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES: return put(&p.workspace, buf, size);
  case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES:
  case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES:
  case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES:
  case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES:
    return put(&p.align[attr - CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES], buf, size);
  default: return unsupported("a preference attribute the emulator does not implement");
  }
}

/* One algorithm, needing no workspace, good for the problem's shapes and
 * the alignments the preference promises. */
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(
    cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t A,
    cublasLtMatrixLayout_t B, cublasLtMatrixLayout_t C, cublasLtMatrixLayout_t D,
    cublasLtMatmulPreference_t pref, int requested, cublasLtMatmulHeuristicResult_t results[],
    int *returned) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!pref || requested < 1 || !results || !returned) return bad("heuristic arguments");
  Problem p;
  cublasStatus_t s = validate(&p, desc, A, B, C, D);
  *returned = 0;
  if (s != CUBLAS_STATUS_SUCCESS) return s;
  memset(&results[0], 0, sizeof results[0]);
  fingerprint(p, results[0].algo.data);
  for (int i = 0; i < 4; i++) results[0].algo.data[5] |= (uint64_t)(pref->p.align[i] & 0xffff) << (16 * i);
  results[0].workspaceSize = 0;
  results[0].state = CUBLAS_STATUS_SUCCESS;
  results[0].wavesCount = 1.0f;
  *returned = 1;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                              const void *alpha, const void *A, cublasLtMatrixLayout_t Adesc,
                              const void *B, cublasLtMatrixLayout_t Bdesc, const void *beta,
                              const void *C, cublasLtMatrixLayout_t Cdesc, void *D,
                              cublasLtMatrixLayout_t Ddesc, const cublasLtMatmulAlgo_t *algo,
                              void *workspace, size_t workspace_bytes, cudaStream_t stream) {
  (void)workspace, (void)workspace_bytes;
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!alpha || !beta) return bad("a null alpha or beta");
  Problem p;
  cublasStatus_t s = validate(&p, desc, Adesc, Bdesc, Cdesc, Ddesc);
  if (s != CUBLAS_STATUS_SUCCESS) return s;
  uint32_t align[4] = {256, 256, 256, 256};
  if (algo) {
    uint64_t fp[8];
    fingerprint(p, fp);
    if (memcmp(fp, algo->data, 5 * sizeof(uint64_t)) != 0)
      return bad("an algorithm found for another problem (shape, types, transposition or epilogue)");
    for (int i = 0; i < 4; i++) align[i] = (uint32_t)(algo->data[5] >> (16 * i) & 0xffff);
  }
  float a = *(const float *)alpha, b = *(const float *)beta;
  const void *ptrs[] = {A, B, C, D};
  const Layout *ls[] = {&p.a, &p.b, &p.c, &p.dl};
  const char *names[] = {"A", "B", "C", "D"};
  for (int i = 0; i < 4; i++) {
    if (i == 2 && b == 0.0f && C == nullptr) continue;
    if ((s = check_matrix(ptrs[i], *ls[i], align[i], names[i])) != CUBLAS_STATUS_SUCCESS) return s;
  }
  if (C == D && p.c.ld != p.dl.ld) return bad("C and D in place with different leading dimensions");
  uint32_t e = p.d.epilogue;
  if ((has_bias(e) || writes_bias(e)) && !p.d.bias) return bad("the epilogue's bias pointer is null");
  if (has_aux(e) && !p.d.aux) return bad("the epilogue's aux pointer is null");
  if ((s = epilogue_pointers(p, align[3])) != CUBLAS_STATUS_SUCCESS) return s;
  cudaError_t err = kc_emu::enqueue(stream, [p, a, b, A, B, C, D]() { run(p, a, b, A, B, C, D); },
                                    "cublasLtMatmul");
  if (err != cudaSuccess) {
    note("cublasLtMatmul: %s", cudaGetErrorString(err));
    return CUBLAS_STATUS_EXECUTION_FAILED;
  }
  return CUBLAS_STATUS_SUCCESS;
}

} // extern "C"
