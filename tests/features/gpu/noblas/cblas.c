/* Plain loops behind noblas/cblas.h: row-major only, each dot product
 * summed in double, rows shared among OpenMP threads. Slow next to
 * OpenBLAS, fast enough for the test shapes. */
#include "cblas.h"

int openblas_get_parallel(void) { return OPENBLAS_SEQUENTIAL; }
int openblas_get_num_threads(void) { return 1; }
void openblas_set_num_threads(int n) { (void)n; }

#define GEMM_BODY(real)                                                                    \
  for (blasint i = 0; i < M; i++)                                                          \
    for (blasint j = 0; j < N; j++) {                                                      \
      double s = 0;                                                                        \
      for (blasint k = 0; k < K; k++) {                                                    \
        real a = ta == CblasTrans ? A[(long)k * lda + i] : A[(long)i * lda + k];           \
        real b = tb == CblasTrans ? B[(long)j * ldb + k] : B[(long)k * ldb + j];           \
        s += (double)a * (double)b;                                                        \
      }                                                                                    \
      real *c = &C[(long)i * ldc + j];                                                     \
      *c = (real)(alpha * s + (beta == 0 ? 0 : beta * *c));                                \
    }

void cblas_sgemm(enum CBLAS_ORDER order, enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb,
                 blasint M, blasint N, blasint K, float alpha, const float *A, blasint lda,
                 const float *B, blasint ldb, float beta, float *C, blasint ldc) {
  (void)order;
#pragma omp parallel for schedule(static)
  GEMM_BODY(float)
}

void cblas_dgemm(enum CBLAS_ORDER order, enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb,
                 blasint M, blasint N, blasint K, double alpha, const double *A, blasint lda,
                 const double *B, blasint ldb, double beta, double *C, blasint ldc) {
  (void)order;
#pragma omp parallel for schedule(static)
  GEMM_BODY(double)
}
