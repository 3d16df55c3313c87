/* Shape rules of the ops in ops.def (implemented in shape.c). Each reads
 * the node's folded attributes and its inputs' types, sets the types of its
 * outputs, and on a mismatch reports an error at the node's location that
 * prints both shapes, returning false. Private to ir/: other folders run
 * them through the `shape` pass. */
#ifndef SHARDC_IR_SHAPE_H
#define SHARDC_IR_SHAPE_H
#include "ir.h"

#define OP(id, name, min_in, max_in, nout, shape, attrs, flags, adjoint, doc) \
  bool shape(IrNode *n);
#include "ops.def"
#undef OP

#endif
