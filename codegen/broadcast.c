/* How an elementwise operand is read when it broadcasts: the same for
 * every target that writes fused loops (cpu.c, cuda/fused.c), which differ
 * only in the loops they build around these indices; and how a matmul's
 * batch dims broadcast, the same for every target's GEMM calls. */
#include "target.h"

int64_t cg_dims_prod(const IrType *t, int from, int to) {
  int64_t p = 1;
  for (int k = from; k < to; k++) p *= t->shape[k];
  return p;
}

/* t's dims right-aligned to s's rank, 1 where t has none. */
static void aligned_dims(const IrType *t, const IrType *s, int64_t *td) {
  for (int k = 0; k < s->rank; k++) {
    int j = k - (s->rank - t->rank);
    td[k] = j >= 0 ? t->shape[j] : 1;
  }
}

CgBc cg_bcast(const IrType *t, const IrType *s) {
  int64_t nt = ir_type_numel(t), ns = ir_type_numel(s), td[IR_MAX_RANK];
  if (nt == ns) return (CgBc){CG_BC_FULL, ns};
  if (nt == 1) return (CgBc){CG_BC_SCALAR, 1};
  aligned_dims(t, s, td);
  int r = s->rank, p = 0, q = r;
  while (p < r && td[p] == 1) p++;
  bool suffix = true, row = true;
  for (int k = p; k < r; k++) suffix &= td[k] == s->shape[k];
  if (suffix) return (CgBc){CG_BC_SUFFIX, cg_dims_prod(s, p, r)};
  while (q > 0 && td[q - 1] == 1) q--;
  for (int k = 0; k < q; k++) row &= td[k] == s->shape[k];
  if (row) return (CgBc){CG_BC_ROW, cg_dims_prod(s, q, r)};
  return (CgBc){CG_BC_GENERAL, 0};
}

/* Each dim of s that t does not broadcast along contributes its
 * coordinate times t's stride; the outermost needs no modulo (i is below
 * s's size) and the innermost no division. */
const char *cg_bcast_index(const IrType *t, const IrType *s, const char *i) {
  int64_t td[IR_MAX_RANK], sstride = 1, tstride = 1;
  int64_t ss[IR_MAX_RANK], ts[IR_MAX_RANK];
  aligned_dims(t, s, td);
  for (int k = s->rank - 1; k >= 0; k--) {
    ss[k] = sstride, ts[k] = tstride;
    sstride *= s->shape[k], tstride *= td[k];
  }
  char *x = NULL;
  for (int k = 0; k < s->rank; k++) {
    if (td[k] == 1) continue;
    const char *c = k == 0 ? ir_fmt("%s / %lld", i, (long long)ss[k])
                    : ss[k] == 1 ? ir_fmt("%s %% %lld", i, (long long)s->shape[k])
                                 : ir_fmt("%s / %lld %% %lld", i, (long long)ss[k], (long long)s->shape[k]);
    c = ts[k] == 1 ? ir_fmt("(%s)", c) : ir_fmt("(%s) * %lld", c, (long long)ts[k]);
    x = x ? ir_fmt("%s + %s", x, c) : (char *)c;
  }
  return x ? x : "0";
}

bool cg_matmul_shape(CgEmitter *e, const IrNode *n, CgMatmul *mm) {
  const IrValue *a = n->in[0], *b = n->in[1], *y = n->out[0];
  if (a->type.rank < 2 || b->type.rank < 2 || y->type.rank < 2) {
    cg_error(e, n, "operands of rank below 2");
    return false;
  }
  int ta = (int)ir_attr_int(n, "transpose_a"), tb = (int)ir_attr_int(n, "transpose_b");
  int64_t m = cg_dim(y, -2), nn = cg_dim(y, -1), k = ta ? cg_dim(a, -2) : cg_dim(a, -1);
  int64_t batch = cg_numel(y) / (m * nn), ba = cg_numel(a) / (m * k), bb = cg_numel(b) / (k * nn);
  *mm = (CgMatmul){.ta = ta, .tb = tb, .m = m, .n = nn, .k = k, .batch = batch,
                   .lda = ta ? m : k, .ldb = tb ? k : nn,
                   .sa = ba == 1 ? 0 : m * k, .sb = bb == 1 ? 0 : k * nn};
  if (batch == 1) mm->form = CG_MM_ONE;
  else if (bb == 1 && !ta && ba == batch) mm->form = CG_MM_ROWS;
  else if ((ba == 1 || ba == batch) && (bb == 1 || bb == batch)) mm->form = CG_MM_BATCHED;
  else {
    cg_error(e, n, "batch dims that neither match nor are shared");
    return false;
  }
  return true;
}
