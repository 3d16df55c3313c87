/* The calls of the layout ops that every target writes the same way, up
 * to the prefix of its kernels ("k_" on the CPU, "k_cuda_" on the GPU):
 * the kernels of both take the same arguments. */
#include "listing.h"
#include "target.h"

static int norm_axis(int64_t axis, int rank) { return (int)(axis < 0 ? axis + rank : axis); }

bool cg_transpose_call(CgEmitter *e, const IrNode *n, const char *prefix) {
  const IrType *t = &n->in[0]->type;
  int d0 = norm_axis(ir_attr_int(n, "dim0"), t->rank), d1 = norm_axis(ir_attr_int(n, "dim1"), t->rank);
  if (d0 > d1) {
    int s = d0;
    d0 = d1, d1 = s;
  }
  if (d0 == d1) return false;
  emit(e, "%stranspose(%s, %s, %lld, %lld, %lld, %lld, %lld);", prefix, cg_ref(e, n->out[0]),
       cg_ref(e, n->in[0]), (long long)cg_dims_prod(t, 0, d0), (long long)t->shape[d0],
       (long long)cg_dims_prod(t, d0 + 1, d1), (long long)t->shape[d1],
       (long long)cg_dims_prod(t, d1 + 1, t->rank));
  cg_launch_node(e, CG_K_COPY, NULL, n);
  return true;
}

/* [b, s, H*d] <-> [b, H, s, d]. */
void cg_heads_call(CgEmitter *e, const IrNode *n, bool split, const char *prefix) {
  const IrValue *x = n->in[0], *y = n->out[0], *h4 = split ? y : x;
  if (h4->type.rank != 4) {
    cg_error(e, n, "expected [b, H, s, d] of rank 4");
    return;
  }
  const int64_t *d = h4->type.shape;
  emit(e, "%s%s_heads(%s, %s, %lld, %lld, %lld, %lld);", prefix, split ? "split" : "merge",
       cg_ref(e, y), cg_ref(e, x), (long long)d[0], (long long)d[2], (long long)d[1],
       (long long)d[3]);
  cg_launch_node(e, CG_K_COPY, NULL, n);
}
