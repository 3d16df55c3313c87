/* Command-line flags of rank programs: one table drives parsing, --help,
 * and what checkpoints record. */
#include "flags.h"

#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../abi/flags.h"
#include "../../abi/suggest.h"
#include "util.h"

typedef enum Kind { K_INT, K_REAL, K_STR, K_SWITCH, K_CHOICE } Kind;

typedef struct Flag {
  const char *name; /* without the leading "--" */
  Kind kind;
  size_t off;      /* of the field in RtFlags */
  const char *arg; /* the value's name in --help */
  const char *def; /* default as text (parsed like a value), NULL: unset */
  int show_def;    /* print "(default ...)" in --help */
  double lo, hi;   /* accepted range of numbers */
  const char *choices;
  int saved; /* recorded in checkpoints, restored by --resume */
  const char *help;
} Flag;

#define F(field) offsetof(RtFlags, field)
#define BIG 1e15

static const Flag flags[] = {
    {"data", K_STR, F(data), "GLOB", NULL, 0, 0, 0, NULL, 1,
     "training shards (llm.c format): a file or a quoted glob, read in sorted order"},
    {"val-data", K_STR, F(val_data), "GLOB", NULL, 0, 0, 0, NULL, 1,
     "validation shards, evaluated every --eval-every steps and at the end"},
    {"steps", K_INT, F(steps), "N", "-1", 0, -1, BIG, NULL, 1,
     "optimizer steps in all (default: one pass over --data; 0 with --data absent)"},
    {"global-batch", K_INT, F(global_batch), "B", "0", 0, 0, BIG, NULL, 1,
     "sequences per step, a multiple of the model's batch times the data-parallel "
     "replicas d: B/(batch*d) microbatches on each replica, whose gradients add up "
     "(default: batch*d; a pipeline stage's schedule fixes it at its microbatches times "
     "batch*d)"},
    {"lr", K_REAL, F(lr), "X", "6e-4", 1, 0, BIG, NULL, 1, "peak learning rate"},
    {"beta1", K_REAL, F(beta1), "X", "0.9", 1, 0, 0.999999999, NULL, 1, "AdamW beta1"},
    {"beta2", K_REAL, F(beta2), "X", "0.95", 1, 0, 0.999999999, NULL, 1, "AdamW beta2"},
    {"eps", K_REAL, F(eps), "X", "1e-8", 1, 1e-300, 1, NULL, 1, "AdamW epsilon"},
    {"weight-decay", K_REAL, F(weight_decay), "X", "0.1", 1, 0, BIG, NULL, 1,
     "decoupled weight decay, applied to matrices and embeddings only (also with sgd)"},
    {"clip", K_REAL, F(clip), "X", "1.0", 1, 0, BIG, NULL, 1,
     "clip the global gradient norm to X (0: no clipping)"},
    {"warmup", K_INT, F(warmup), "N", "0", 1, 0, BIG, NULL, 1,
     "linear learning-rate warmup over the first N steps"},
    {"lr-min", K_REAL, F(lr_min), "X", "0", 1, 0, BIG, NULL, 1,
     "learning rate the cosine schedule ends at"},
    {"lr-schedule", K_CHOICE, F(lr_schedule), "cosine|constant", "cosine", 1, 0, 0,
     "cosine|constant", 1, "after the warmup: cosine decay to --lr-min, or constant"},
    {"optimizer", K_CHOICE, F(optimizer), "adamw|sgd", "adamw", 1, 0, 0, "adamw|sgd", 1,
     "the update rule"},
    {"seed", K_INT, F(seed), "S", "1337", 1, 0, 9.2e18, NULL, 1,
     "seed of the initial weights, the data order, dropout and sampling"},
    {"no-shuffle", K_SWITCH, F(no_shuffle), NULL, "0", 0, 0, 0, NULL, 1,
     "read the windows in order (step i reads the one at token i*B*T) instead of a "
     "seeded permutation per epoch"},
    {"mlm-prob", K_REAL, F(mlm_prob), "X", "0.15", 1, 0, 1, NULL, 1,
     "masked-LM models (loss with ignore=1): the chance that a position is chosen for "
     "prediction (then 80% [MASK], 10% a random token, 10% unchanged)"},
    {"mlm-mask-id", K_INT, F(mlm_mask_id), "ID", "-1", 1, -1, 2147483647, NULL, 1,
     "masked-LM models: the [MASK] token id (-1: the vocabulary's last)"},
    {"mlm-pad-id", K_INT, F(mlm_pad_id), "ID", "-1", 1, -1, 2147483647, NULL, 1,
     "masked-LM models: the padding token id, masked out of attention and the loss "
     "(-1: none)"},
    {"log-every", K_INT, F(log_every), "N", "10", 1, 1, BIG, NULL, 1,
     "print a progress line every N steps (and at the first and last)"},
    {"log-json", K_STR, F(log_json), "FILE", NULL, 0, 0, 0, NULL, 0,
     "append one JSON object per step to FILE (step, loss, lr, grad_norm, tokens_per_s, "
     "val_loss when evaluated); a fresh run truncates it, --resume keeps the steps up to "
     "the checkpoint"},
    {"eval-every", K_INT, F(eval_every), "N", "0", 1, 0, BIG, NULL, 1,
     "validation loss every N steps (0: only at the end)"},
    {"eval-batches", K_INT, F(eval_batches), "N", "20", 1, 1, BIG, NULL, 1,
     "windows of the model's batch the validation loss averages over (at most as many "
     "as --val-data holds)"},
    {"save", K_STR, F(save), "DIR", NULL, 0, 0, 0, NULL, 1,
     "write DIR/model.safetensors (weights) and DIR/state.safetensors (everything "
     "--resume needs) at the end and every --save-every steps"},
    {"save-every", K_INT, F(save_every), "N", "0", 1, 0, BIG, NULL, 1,
     "checkpoint every N steps (0: only at the end)"},
    {"keep-last", K_INT, F(keep_last), "K", "0", 0, 0, 1e6, NULL, 1,
     "save each checkpoint into DIR/step-NNNNNNNN, point DIR/latest at the newest complete "
     "one (--resume DIR follows it) and keep the K newest, deleting older ones only after "
     "their successor is complete (0: one checkpoint in DIR itself)"},
    {"resume", K_STR, F(resume), "DIR", NULL, 0, 0, 0, NULL, 0,
     "continue from DIR/state.safetensors bit-identically; flags not given take the "
     "checkpoint's values"},
    {"init-from", K_STR, F(init_from), "FILE", NULL, 0, 0, 0, NULL, 0,
     "load the initial weights from a safetensors file, a sharded set's index "
     "(model.safetensors.index.json) or a folder of either, by parameter name (a prefix "
     "such as Hugging Face's model. or transformer. is found by itself)"},
    {"init-map", K_STR, F(init_map), "FILE", NULL, 0, 0, 0, NULL, 0,
     "rename --init-from's tensors first: one \"MODEL_NAME FILE_NAME\" pair a line"},
    {"sample-prompt", K_STR, F(sample_prompt), "TEXT", NULL, 0, 0, 0, NULL, 0,
     "after training, generate text (bytes) that continues TEXT"},
    {"sample-ids", K_SWITCH, F(sample_ids), NULL, "0", 0, 0, 0, NULL, 0,
     "--sample-prompt is token ids separated by spaces; print each new id on a line"},
    {"sample-tokens", K_INT, F(sample_tokens), "N", "200", 1, 0, BIG, NULL, 0,
     "tokens to generate"},
    {"temperature", K_REAL, F(temperature), "T", "1.0", 1, 0, 1e6, NULL, 0,
     "sampling temperature (0: always the most likely token)"},
    {"top-k", K_INT, F(top_k), "K", "0", 1, 0, BIG, NULL, 0,
     "sample among the K most likely tokens only (0: all)"},
    {"quiet", K_SWITCH, F(quiet), NULL, "0", 0, 0, 0, NULL, 0,
     "print only errors and the sample (no banner, progress or notes)"},
    {"comm-stats", K_SWITCH, F(comm_stats), NULL, "0", 0, 0, 0, NULL, 0,
     "after every step, each rank prints the bytes it sent per mesh axis: the program's "
     "collectives (the compiler's --report comm times the microbatches) and the runtime's "
     "own (the gradient norm)"},
    {"no-overlap", K_SWITCH, F(no_overlap), NULL, "0", 0, 0, 0, NULL, 0,
     "start the data-parallel gradient reductions only after the whole backward instead of "
     "as each bucket's gradients complete (the same results; measures what overlapping "
     "saves)"},
    {"dp-stats", K_SWITCH, F(dp_stats), NULL, "0", 0, 0, 0, NULL, 0,
     "after training, each data-parallel rank prints the mean time per step its gradient "
     "reductions ran behind the backward and the time it then waited for them"},
    {"dump-grads", K_STR, F(dump_grads), "FILE", NULL, 0, 0, 0, NULL, 0,
     "write the gradients of the first step (before clipping) as safetensors"},
    {"on-nan", K_CHOICE, F(on_nan), "stop|skip", "stop", 1, 0, 0, "stop|skip", 0,
     "a step whose gradient norm or loss is NaN or infinite is reported (with the first "
     "parameter whose gradient is not finite); stop ends the run with an error, skip drops "
     "the step's update (the step still counts) and goes on"},
    {"max-skipped", K_INT, F(max_skipped), "N", "3", 1, 0, BIG, NULL, 0,
     "with --on-nan skip: the run stops with an error once more than N updates were dropped "
     "(a run that goes on dropping updates is not training)"},
    {"no-verify", K_SWITCH, F(no_verify), NULL, "0", 0, 0, 0, NULL, 0,
     "load --resume and --init-from files without comparing their tensors with the checksums "
     "saved in them (faster on huge files; the run says so)"},
    {"timeout", K_REAL, F(timeout), "S", "300", 1, 0, 1e9, NULL, 0,
     "with several ranks: a rank killed, failing or making no progress for S seconds ends "
     "the whole job, with a message naming it (0: never time out; docs/reliability.md)"},
    {"trace", K_STR, F(trace), "FILE", NULL, 0, 0, 0, NULL, 0,
     "record the wall time of every action each rank runs (forward, backward, message waits, "
     "gradient reductions, the optimizer step) for --trace-steps steps after the first, and "
     "write them as one Chrome trace (chrome://tracing, Perfetto; one process per rank), "
     "named as `shardc simulate --trace` names its events"},
    {"trace-steps", K_INT, F(trace_steps), "N", "2", 1, 1, 1e6, NULL, 0,
     "steps --trace records"},
    {"cuda-graphs", K_CHOICE, F(cuda_graphs), "on|off", "on", 1, 0, 0, "on|off", 0,
     "CUDA target: capture each chunk function the compiler marked capturable (the start-up "
     "log lists them) as a CUDA graph on its second call at the same memory, and replay it "
     "after; off runs every kernel as a plain launch (the same results; measures what graphs "
     "save). Programs of other targets ignore it"},
    {"deterministic", K_SWITCH, F(deterministic), NULL, "0", 0, 0, 0, NULL, 0,
     "CUDA target: pin what the libraries would otherwise choose by machine or by timing, so "
     "that a run's bits do not depend on them: NCCL's algorithm and protocol (Ring, Simple; "
     "by default NCCL chooses, NVLS and tree included) and cuBLASLt's algorithms (the "
     "heuristics' first, never SHARD_GEMM_SEARCH's timed pick). It costs collective "
     "bandwidth (docs/targets.md). Programs of other targets ignore it"},
    {"gradcheck", K_INT, F(gradcheck), "N", "0", 0, 0, BIG, NULL, 0,
     "instead of training, compare the gradient of the first batch with central "
     "differences at N coordinates of every parameter (meaningful in f64 builds)"},
    {"gradcheck-tol", K_REAL, F(gradcheck_tol), "X", "1e-6", 1, 0, BIG, NULL, 0,
     "largest relative error --gradcheck accepts"},
    {"gradcheck-floor", K_REAL, F(gradcheck_floor), "X", "1e-3", 1, 0, BIG, NULL, 0,
     "gradients below X are compared in absolute terms: the error is "
     "|analytic - numeric| / max(|analytic|, |numeric|, X)"},
};
enum { NFLAGS = sizeof flags / sizeof flags[0] };

/* Which flags the command line gave, by table index. */
static unsigned char given[NFLAGS];

static int64_t *int_field(RtFlags *f, const Flag *d) { return (int64_t *)((char *)f + d->off); }
static double *real_field(RtFlags *f, const Flag *d) { return (double *)((char *)f + d->off); }
static const char **str_field(RtFlags *f, const Flag *d) {
  return (const char **)((char *)f + d->off);
}

/* Index of `text` among "a|b|c", or -1. */
static int choice_index(const char *choices, const char *text) {
  size_t n = strlen(text);
  int i = 0;
  for (const char *p = choices;; i++) {
    const char *bar = strchr(p, '|');
    size_t len = bar ? (size_t)(bar - p) : strlen(p);
    if (len == n && strncmp(p, text, n) == 0) return i;
    if (!bar) return -1;
    p = bar + 1;
  }
}

static void choice_name(const char *choices, int64_t idx, char *buf, int len) {
  const char *p = choices;
  for (int64_t i = 0; i < idx && p; i++)
    p = strchr(p, '|'), p = p ? p + 1 : NULL;
  if (!p) p = "?";
  const char *bar = strchr(p, '|');
  snprintf(buf, (size_t)len, "%.*s", bar ? (int)(bar - p) : (int)strlen(p), p);
}

/* Sets the flag from text; prints an error naming `origin` and returns -1
 * when the text is not a valid value. */
static int set_value(RtFlags *f, const Flag *d, const char *text, const char *origin) {
  char *end;
  errno = 0;
  switch (d->kind) {
  case K_INT: {
    long long v = strtoll(text, &end, 10);
    if (end == text || *end || errno) {
      rt_error(origin, "'%s' is not an integer", text);
      return -1;
    }
    if (v < d->lo || v > d->hi) {
      rt_error(origin, "%lld is out of range (%.0f to %.0f)", v, d->lo, d->hi);
      return -1;
    }
    *int_field(f, d) = v;
    return 0;
  }
  case K_REAL: {
    double v = strtod(text, &end);
    if (end == text || *end || !isfinite(v)) {
      rt_error(origin, "'%s' is not a number", text);
      return -1;
    }
    if (v < d->lo || v > d->hi) {
      rt_error(origin, "%g is out of range (%g to %g)", v, d->lo, d->hi);
      return -1;
    }
    *real_field(f, d) = v;
    return 0;
  }
  case K_STR: *str_field(f, d) = *text ? text : NULL; return 0;
  case K_SWITCH:
    if (strcmp(text, "0") && strcmp(text, "1")) {
      rt_error(origin, "'%s' is not 0 or 1", text);
      return -1;
    }
    *int_field(f, d) = text[0] == '1';
    return 0;
  case K_CHOICE: {
    int i = choice_index(d->choices, text);
    if (i < 0) {
      rt_error(origin, "'%s' is not one of %s", text, d->choices);
      return -1;
    }
    *int_field(f, d) = i;
    return 0;
  }
  }
  return -1;
}

static const Flag *find_flag(const char *name, size_t len) {
  for (int i = 0; i < NFLAGS; i++)
    if (strlen(flags[i].name) == len && strncmp(flags[i].name, name, len) == 0) return &flags[i];
  return NULL;
}

static void unknown_flag(const char *arg, const char *name, size_t len) {
  const char *best = NULL;
  int bestd = 3;
  for (int i = 0; i < NFLAGS; i++) {
    int dd = suggest_distance(name, (int)len, flags[i].name, (int)strlen(flags[i].name), 0);
    if (dd < bestd) bestd = dd, best = flags[i].name;
  }
  if (best)
    rt_error(NULL, "unknown flag '%s' (did you mean --%s?)", arg, best);
  else
    rt_error(NULL, "unknown flag '%s' (--help lists the flags)", arg);
}

/* Prints text from column `indent` on, wrapped at 100 columns; `col` is
 * where the cursor stands. */
static void print_wrapped(const char *text, int col, int indent) {
  while (*text) {
    size_t word = strcspn(text, " ");
    if (col > indent && col + 1 + (int)word > 100) {
      printf("\n%*s", indent, "");
      col = indent;
    } else if (col > indent) {
      putchar(' ');
      col++;
    }
    printf("%.*s", (int)word, text);
    col += (int)word;
    text += word;
    while (*text == ' ')
      text++;
  }
  putchar('\n');
}

static void print_help(const char *program) {
  printf("usage: %s [flags]\n\n"
         "Trains the compiled model: reads token shards, runs forward and backward,\n"
         "updates the weights, logs, evaluates, checkpoints and samples.\n\nflags:\n",
         program);
  enum { INDENT = 29 };
  for (int i = 0; i < NFLAGS; i++) {
    const Flag *d = &flags[i];
    char head[64], text[600];
    int n = printf("  --%s%s%s", d->name, d->arg ? " " : "", d->arg ? d->arg : "");
    /* A long flag name gets the help on the next line. */
    printf("%*s", n < INDENT ? INDENT - n : 0, "");
    if (n >= INDENT) printf("\n%*s", INDENT, "");
    head[0] = 0;
    if (d->show_def && d->def) snprintf(head, sizeof head, " (default %s)", d->def);
    snprintf(text, sizeof text, "%s%s", d->help, head);
    print_wrapped(text, INDENT, INDENT);
  }
  printf("  %-*s%s\n", INDENT - 2, "--help", "print this and exit");
}

/* One argument (and maybe the next as its value); returns how many argv
 * entries it used, and counts errors in *errors. */
static int parse_one(RtFlags *f, int argc, char **argv, int i, int *errors) {
  const char *arg = argv[i];
  if (strncmp(arg, "--", 2) != 0 || !arg[2]) {
    rt_error(NULL, "unexpected argument '%s' (flags start with --)", arg);
    ++*errors;
    return 1;
  }
  const char *name = arg + 2, *eq = strchr(name, '=');
  size_t len = eq ? (size_t)(eq - name) : strlen(name);
  const Flag *d = find_flag(name, len);
  if (!d) {
    unknown_flag(arg, name, len);
    ++*errors;
    /* Its value, if it has one, is no stray argument of its own. */
    return !eq && i + 1 < argc && strncmp(argv[i + 1], "--", 2) != 0 ? 2 : 1;
  }
  char origin[64];
  snprintf(origin, sizeof origin, "--%s", d->name);
  given[d - flags] = 1;
  if (d->kind == K_SWITCH) {
    if (eq)
      rt_error(origin, "takes no value"), ++*errors;
    else
      *int_field(f, d) = 1;
    return 1;
  }
  const char *value = eq ? eq + 1 : (i + 1 < argc ? argv[i + 1] : NULL);
  /* `--data --steps 5` forgot the value: taking "--steps" as a file name
   * would only confuse. */
  if (!value || (!eq && strncmp(value, "--", 2) == 0)) {
    rt_error(origin, "needs a value (%s)", d->arg);
    ++*errors;
    return 1;
  }
  if (d->kind == K_STR && !*value)
    rt_error(origin, "the value is empty"), ++*errors;
  else if (set_value(f, d, value, origin) != 0)
    ++*errors;
  return eq ? 1 : 2;
}

/* The flags the launcher knows (abi/flags.h) must be this table's, in
 * name and in whether they take a value: a difference is a bug of ours,
 * reported before anything else. */
static void check_abi_flags(void) {
  static const struct {
    const char *name;
    int takes;
  } abi[] = {
#define X(name, takes) {name, takes},
      PROGRAM_FLAGS(X)
#undef X
  };
  enum { NABI = sizeof abi / sizeof abi[0] };
  int bad = (int)NABI != (int)NFLAGS;
  for (int i = 0; i < NFLAGS && !bad; i++)
    bad = strcmp(abi[i].name, flags[i].name) || abi[i].takes != (flags[i].kind != K_SWITCH);
  if (bad)
    rt_fatal(NULL, "internal error: the flags of abi/flags.h are not those of runtime/base/flags.c "
             "(%d and %d, or one differs)", (int)NABI, (int)NFLAGS);
}

void rt_flags_parse(RtFlags *f, int argc, char **argv, const char *program) {
  check_abi_flags();
  memset(f, 0, sizeof *f);
  memset(given, 0, sizeof given);
  for (int i = 0; i < NFLAGS; i++)
    if (flags[i].def && set_value(f, &flags[i], flags[i].def, "default") != 0) abort();
  for (int i = 1; i < argc; i++)
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      print_help(program);
      exit(0);
    }
  int errors = 0;
  for (int i = 1; i < argc;)
    i += parse_one(f, argc, argv, i, &errors);
  if (errors) exit(1);
}

static int saved_index(int i) {
  for (int k = 0, n = 0; k < NFLAGS; k++)
    if (flags[k].saved && n++ == i) return k;
  return -1;
}

int rt_flags_saved_count(void) {
  int n = 0;
  for (int k = 0; k < NFLAGS; k++)
    n += flags[k].saved;
  return n;
}

const char *rt_flags_saved_name(int i) { return flags[saved_index(i)].name; }

void rt_flags_saved_value(const RtFlags *f, int i, char *buf, int len) {
  const Flag *d = &flags[saved_index(i)];
  RtFlags *mf = (RtFlags *)f; /* the accessors do not write */
  switch (d->kind) {
  case K_INT:
  case K_SWITCH: snprintf(buf, (size_t)len, "%lld", (long long)*int_field(mf, d)); break;
  case K_REAL: /* the shortest text that reads back as the same double */
    snprintf(buf, (size_t)len, "%.15g", *real_field(mf, d));
    if (strtod(buf, NULL) != *real_field(mf, d))
      snprintf(buf, (size_t)len, "%.17g", *real_field(mf, d));
    break;
  case K_STR: snprintf(buf, (size_t)len, "%s", *str_field(mf, d) ? *str_field(mf, d) : ""); break;
  case K_CHOICE: choice_name(d->choices, *int_field(mf, d), buf, len); break;
  }
}

int rt_flags_restore_checked(RtFlags *f, int i, const char *text, const char *origin) {
  /* Restored strings outlive the checkpoint file they came from. */
  static char *copies[NFLAGS];
  int k = saved_index(i);
  if (given[k]) return 1;
  free(copies[k]);
  copies[k] = rt_xstrdup(text);
  return set_value(f, &flags[k], copies[k], origin) != 0 ? -1 : 0;
}

int rt_flags_restore(RtFlags *f, int i, const char *text, const char *origin) {
  int rc = rt_flags_restore_checked(f, i, text, origin);
  if (rc < 0) exit(1);
  return rc;
}
