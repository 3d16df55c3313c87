/* Initial weights. Each value is a pure function of (--seed, the
 * parameter's name, the element index), so the initialisation does not
 * depend on the memory layout, the parameter order or the thread count, and
 * a model whose layout changed still starts from the same weights. */
#include "rt.h"

void rt_init_params(const RtModel *m, real *weights, uint64_t seed) {
  for (int p = 0; p < m->nparams; p++) {
    const RtParam *prm = &m->params[p];
    real *w = weights + prm->offset;
    uint64_t key = rt_key2(seed, rt_hash_str(prm->name));
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
