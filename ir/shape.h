/* Shape rules and FLOP rules of the ops in ops.def (implemented in
 * shape.c). A shape rule reads the node's folded attributes and its inputs'
 * types, sets the types of its outputs, and on a mismatch reports an error
 * at the node's location that prints both shapes, returning false. Private
 * to ir/: other folders run the shape rules through the `shape` pass and
 * reach the FLOP rules through ir_op_info(op)->flops. */
#ifndef SHARDC_IR_SHAPE_H
#define SHARDC_IR_SHAPE_H
#include "ir.h"

#define OP(id, name, min_in, max_in, nout, shape, attrs, flags, adjoint, tp, rows, flops, doc) \
  bool shape(IrNode *n); \
  double flops(const IrNode *n);
#include "ops.def"
#undef OP

#endif
