/* A string-keyed hash map in the arena, for the frontend's symbol tables:
 * a model of a million statements must not make every lookup a scan. */
#ifndef SHARDC_FE_MAP_H
#define SHARDC_FE_MAP_H

#include "../ir/ir.h"

typedef struct FeMap {
  const char **keys; /* NULL: empty slot */
  void **vals;
  int cap, len;
} FeMap;

/* The value stored under key, or NULL. */
void *fe_map_get(const FeMap *m, const char *key);
/* Stores val under key, replacing what was there. The key is not copied. */
void fe_map_put(FeMap *m, const char *key, void *val);

#endif
