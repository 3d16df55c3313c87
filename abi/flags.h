/* The command line of a rank program, as both sides know it: the runtime
 * (runtime/base/flags.c), whose table of flags must list exactly these, and
 * `shardc run` (driver/run.c), which checks a training command line
 * against them before anything starts, without running the program to
 * ask (a program that cannot start, under `ulimit -v` say, would make
 * that question hang). A flag's types, ranges and help live in the
 * runtime's table; here only what the launcher needs: each flag's name
 * without the leading "--" and whether it takes a value (1) or is a
 * switch (0).
 *
 * A flag added to the runtime's table and not here is an internal error
 * the rank program reports at its start (rt_flags_parse), so the two
 * cannot drift apart unseen. */
#ifndef SHARD_ABI_FLAGS_H
#define SHARD_ABI_FLAGS_H

#define PROGRAM_FLAGS(X) \
  X("data", 1) \
  X("val-data", 1) \
  X("steps", 1) \
  X("global-batch", 1) \
  X("lr", 1) \
  X("beta1", 1) \
  X("beta2", 1) \
  X("eps", 1) \
  X("weight-decay", 1) \
  X("clip", 1) \
  X("warmup", 1) \
  X("lr-min", 1) \
  X("lr-schedule", 1) \
  X("optimizer", 1) \
  X("seed", 1) \
  X("no-shuffle", 0) \
  X("mlm-prob", 1) \
  X("mlm-mask-id", 1) \
  X("mlm-pad-id", 1) \
  X("log-every", 1) \
  X("log-json", 1) \
  X("eval-every", 1) \
  X("eval-batches", 1) \
  X("save", 1) \
  X("save-every", 1) \
  X("keep-last", 1) \
  X("resume", 1) \
  X("init-from", 1) \
  X("init-map", 1) \
  X("sample-prompt", 1) \
  X("sample-ids", 0) \
  X("sample-tokens", 1) \
  X("temperature", 1) \
  X("top-k", 1) \
  X("quiet", 0) \
  X("comm-stats", 0) \
  X("no-overlap", 0) \
  X("dp-stats", 0) \
  X("dump-grads", 1) \
  X("on-nan", 1) \
  X("max-skipped", 1) \
  X("no-verify", 0) \
  X("timeout", 1) \
  X("trace", 1) \
  X("trace-steps", 1) \
  X("cuda-graphs", 1) \
  X("deterministic", 0) \
  X("gradcheck", 1) \
  X("gradcheck-tol", 1) \
  X("gradcheck-floor", 1)

#endif
