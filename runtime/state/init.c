/* Initial weights. Each value is a pure function of (--seed, the
 * parameter's name, the element index), so the initialisation does not
 * depend on the memory layout, the parameter order or the thread count, and
 * a model whose layout changed still starts from the same weights. */
#include "init.h"
#include "rt.h"
#include "tp.h"

/* A tensor-parallel rank's part of a split or padded parameter: element i
 * takes the value the whole unpadded tensor has at its index there (pair
 * g / 2 of the same stream as below), padding is zero. So every t starts
 * from the weights of one rank. */
static void init_part(const RtParam *prm, real *w, uint64_t key) {
  int r = rt_tp_rank();
  double base = prm->init == RT_INIT_ONES ? 1 : 0;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < prm->numel; i++) {
    int64_t g = rt_tp_full_index(prm, r, i);
    if (g < 0) {
      w[i] = 0;
    } else if (prm->init == RT_INIT_NORMAL) {
      double z0, z1;
      rt_hash_normal2(key, (uint64_t)(g / 2), &z0, &z1);
      w[i] = (real)(prm->mean + prm->std * (g % 2 ? z1 : z0));
    } else {
      w[i] = (real)base;
    }
  }
}

void rt_init_params(const RtModel *m, real *weights, uint64_t seed) {
  for (int p = 0; p < m->nparams; p++) {
    const RtParam *prm = &m->params[p];
    real *w = weights + prm->offset;
    uint64_t key = rt_key2(seed, rt_hash_str(prm->name));
    if (prm->split || prm->unpadded > 0 || prm->expert) {
      init_part(prm, w, key);
      continue;
    }
    switch (prm->init) {
    case RT_INIT_NORMAL: {
      /* By pairs: Box-Muller gives two values for one logarithm. */
      double mean = prm->mean, std = prm->std;
      int64_t n = prm->numel;
#pragma omp parallel for schedule(static)
      for (int64_t k = 0; k < (n + 1) / 2; k++) {
        double z0, z1;
        rt_hash_normal2(key, (uint64_t)k, &z0, &z1);
        w[2 * k] = (real)(mean + std * z0);
        if (2 * k + 1 < n) w[2 * k + 1] = (real)(mean + std * z1);
      }
      break;
    }
    case RT_INIT_ZEROS:
      for (int64_t j = 0; j < prm->numel; j++)
        w[j] = 0;
      break;
    case RT_INIT_ONES:
      for (int64_t j = 0; j < prm->numel; j++)
        w[j] = 1;
      break;
    }
  }
}
