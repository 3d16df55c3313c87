/* The part of OpenBLAS's cblas.h that kernels/cpu uses, for building the
 * CPU twins of the kernel tests on a GPU machine without OpenBLAS
 * (tests/features/gpu/run.sh's fallback build). Only the CPU reference side of the
 * tests uses it; no rank program ever links it. */
#ifndef SHARD_TESTS_NOBLAS_CBLAS_H
#define SHARD_TESTS_NOBLAS_CBLAS_H

typedef int blasint;
enum CBLAS_ORDER { CblasRowMajor = 101, CblasColMajor = 102 };
enum CBLAS_TRANSPOSE { CblasNoTrans = 111, CblasTrans = 112 };
#define OPENBLAS_SEQUENTIAL 0
#define OPENBLAS_THREAD 1
#define OPENBLAS_OPENMP 2

int openblas_get_parallel(void);
int openblas_get_num_threads(void);
void openblas_set_num_threads(int n);
void cblas_sgemm(enum CBLAS_ORDER order, enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb,
                 blasint M, blasint N, blasint K, float alpha, const float *A, blasint lda,
                 const float *B, blasint ldb, float beta, float *C, blasint ldc);
void cblas_dgemm(enum CBLAS_ORDER order, enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb,
                 blasint M, blasint N, blasint K, double alpha, const double *A, blasint lda,
                 const double *B, blasint ldb, double beta, double *C, blasint ldc);

#endif
