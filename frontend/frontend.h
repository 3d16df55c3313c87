/* The model language: reads a .shard file and lowers it to an IrGraph.
 * Errors are reported through ir_error (every error the phase finds, with
 * a caret under the spot) and the result is then NULL. */
#ifndef SHARDC_FRONTEND_H
#define SHARDC_FRONTEND_H

#include <stddef.h>

#include "../ir/ir.h"

IrGraph *fe_load(const char *path);
IrGraph *fe_load_source(const char *file, const char *text, size_t len);

#endif
