/* The syntax tree of a .shard file, as the parser builds it and lowering
 * (lower.c) reads it. Nodes live in the IR arena. The tree keeps names and
 * locations exactly as written; every check of meaning happens in lowering,
 * so that the parser only has to know the grammar. */
#ifndef SHARDC_AST_H
#define SHARDC_AST_H

#include "../ir/ir.h"

/* How deep expressions, blocks and repeats may nest. Deeper than any
 * model, and shallow enough that the recursive walks over the tree and
 * over IrExpr trees stay far from the end of the C stack. */
#define FE_MAX_DEPTH 1000
/* A chain of one operator group, a + b - c + ... or a * b / c ..., is flat,
 * not nested: its terms count apart from the depth, up to this many. */
#define FE_MAX_CHAIN IR_MAX_CHAIN
/* Whether binary operators a and b chain flat (the same group). */
static inline int fe_same_group(char a, char b) {
  int ga = a == '+' || a == '-', gb = b == '+' || b == '-';
  return ga == gb && a != '%' && b != '%';
}

typedef struct AstExpr AstExpr;
typedef struct AstStmt AstStmt;

typedef enum AstExprKind {
  AST_INT,    /* i */
  AST_FLOAT,  /* f */
  AST_BOOL,   /* i (0 or 1) */
  AST_NAME,   /* name: an identifier or a dotted path */
  AST_CALL,   /* name(args), or inst: name(args) */
  AST_BINARY, /* a op b */
  AST_NEG,    /* -a */
  AST_LIST,   /* [args] (positional only) */
} AstExprKind;

/* One argument of a call: positional when kw is NULL. */
typedef struct AstArg {
  const char *kw;
  IrLoc kw_loc;
  AstExpr *e;
} AstArg;

struct AstExpr {
  AstExprKind kind;
  int depth;    /* of the tree below, bounded by FE_MAX_DEPTH; a flat chain
                 * (FE_MAX_CHAIN) adds one level, not one per term */
  int chain;    /* AST_BINARY: terms so far of its flat chain, less one */
  IrLoc loc;    /* where the expression starts */
  IrLoc op_loc; /* AST_BINARY, AST_NEG: the operator */
  int64_t i;
  double f;
  const char *name; /* AST_NAME: the path; AST_CALL: the callee */
  const char *inst; /* AST_CALL: the instance name, or NULL */
  IrLoc inst_loc;
  char op; /* AST_BINARY: one of + - * / % */
  AstExpr *a, *b;
  AstArg *args; /* AST_CALL, AST_LIST */
  int nargs;
};

typedef enum AstStmtKind {
  AST_LET,    /* let names = e */
  AST_ASSIGN, /* names[0] = e */
  AST_INPUT,  /* input names[0]: type */
  AST_PARAM,  /* param names[0]: type = init (names[0] is the dotted path) */
  AST_BLOCK,  /* block names[0](params) { body } */
  AST_REPEAT, /* repeat names[0][e] { body } */
  AST_OUTPUT, /* output names[0] = e */
  AST_RETURN, /* return e */
} AstStmtKind;

/* `dtype[dims]`; dtype is NULL when omitted (f32). */
typedef struct AstType {
  const char *dtype;
  IrLoc dtype_loc;
  AstExpr **dims;
  int ndims;
  IrLoc loc;
} AstType;

/* The tensor-parallel annotation after a param's init: `split(DIM)`,
 * `split(DIM, BLOCKS)` or `replicated`, checked by lowering. */
typedef enum AstShardKind { AST_SHARD_NONE, AST_SHARD_SPLIT, AST_SHARD_REPLICATED } AstShardKind;
typedef struct AstShard {
  AstShardKind kind;
  IrLoc loc;
  AstArg *args; /* AST_SHARD_SPLIT */
  int nargs;
} AstShard;

/* `zeros`, `ones` or `normal(mean, std)`, checked by lowering. */
typedef struct AstInit {
  const char *kind;
  IrLoc loc;
  AstArg *args;
  int nargs;
  bool call; /* written with parentheses */
} AstInit;

struct AstStmt {
  AstStmtKind kind;
  IrLoc loc; /* the keyword, or the name of an assignment */
  const char **names;
  IrLoc *name_locs;
  int nnames;
  AstExpr *e; /* the value; the repeat count; the returned value */
  AstType type;
  AstInit init;
  AstShard shard;      /* AST_PARAM */
  const char **params; /* AST_BLOCK */
  IrLoc *param_locs;
  int nparams;
  AstStmt **body; /* AST_BLOCK, AST_REPEAT */
  int nbody;
  IrLoc end_loc; /* AST_BLOCK, AST_REPEAT: the closing brace */
  bool misplaced; /* reported as out of place; lowering skips it */
};

typedef struct AstFile {
  const char *file;
  const char *model; /* NULL when the file has no `model` line */
  IrLoc model_loc;
  AstStmt **items;
  int nitems;
} AstFile;

/* What the parser and the scanner share: the file being read, the tree
 * under construction and the text of the last token for messages. */
typedef struct FeParser {
  const char *file;
  AstFile *ast;
  int errors;        /* syntax and lexical errors seen */
  int line, col;     /* where the scanner stands */
  int end_line, end_col; /* just after the last token */
  int bad_line, bad_col; /* just after the last run of bad bytes */
  char last_text[80];    /* the last token, cut to fit, for messages */
  AstExpr *dummy;        /* stands for every expression after an error */
  /* Where the scanner stands in a `param ... = init` declaration, so that
   * `split(` and `replicated` right after the init are annotations rather
   * than names (fe_yylex in lexer.l); `annot_depth` counts open brackets. */
  int annot_state, annot_depth;
} FeParser;

IrLoc fe_loc(const FeParser *p, int line, int col);

/* Constructors used by the parser actions. */
AstExpr *ast_expr(AstExprKind kind, IrLoc loc);
AstStmt *ast_stmt(AstStmtKind kind, IrLoc loc);

/* A growable list for the parser's semantic values; finished into a plain
 * array by the ast_*_array helpers. */
typedef struct AstList {
  IrVec v;
  IrVec locs; /* IrLoc* per item where the list holds names */
} AstList;
AstList *ast_list_new(void);
void ast_list_push(AstList *l, void *item);
void ast_list_push_name(AstList *l, const char *name, IrLoc loc);
/* A path grows by appending `.name` in place so that a long path costs
 * linear time. */
typedef struct AstPath {
  char *buf;
  size_t len, cap;
} AstPath;
AstPath *ast_path_new(const char *first);
void ast_path_append(AstPath *p, const char *name);

void ast_set_names(AstStmt *s, AstList *names);
void ast_set_params(AstStmt *s, AstList *params);
void ast_set_body(AstStmt *s, AstList *body);
void ast_set_args(AstExpr *e, AstList *args); /* items are AstArg* */
AstArg *ast_arg(const char *kw, IrLoc kw_loc, AstExpr *e);
/* Copies a list of AstArg* into an array. */
AstArg *ast_args_array(AstList *args, int *n);
AstExpr **ast_exprs_array(AstList *exprs, int *n);

/* Parses the text and returns the tree; NULL when the text had syntax or
 * lexical errors (they are reported). */
AstFile *fe_parse(const char *file, const char *text, size_t len);

/* Lowers the tree to a graph; NULL when it reported errors. */
IrGraph *fe_lower(AstFile *ast);

#endif
