/* Checkpoints: DIR/model.safetensors holds the weights under the model's
 * parameter names (what --init-from and other tools read);
 * DIR/state.safetensors holds everything --resume needs on its own: the
 * weights again, AdamW's m and v (NAME.exp_avg, NAME.exp_avg_sq), and in
 * its metadata the step, the sampling RNG, the flags that decide the next
 * steps and (for information) the layout it was saved under. Each file is
 * replaced atomically and each is complete by itself, so a crash at any
 * moment leaves a loadable checkpoint (and never a new model.safetensors
 * paired with an old optimizer state).
 *
 * Files do not depend on the layout (t, p, d, v, ZeRO) of the job: they
 * hold every parameter of the model (all pipeline stages; a tied parameter
 * once) as a whole, unpadded tensor, in the order of their names, so that
 * the same model gives the same tensors whatever the layout, and a job of
 * any layout loads them.
 *
 * Saving (rt_ckpt_save, rt_ckpt_dump_grads) is collective over the world:
 * every rank calls it at the same point, with no operation of the mesh's
 * communicators in flight; world rank 0 writes. Loading needs no
 * communication: every rank reads the file (checkpoints live where all
 * ranks see them) and keeps its part. */
#ifndef SHARD_RT_CHECKPOINT_H
#define SHARD_RT_CHECKPOINT_H

#include "rt.h"

/* Writes both files into rt->f.save (created if needed), or with
 * --keep-last K into its folder of this step, then points DIR/latest at
 * it and deletes the folders beyond the K newest (ckpt_keep.c). Returns
 * the folder written (until the next call). */
const char *rt_ckpt_save(Rt *rt);

/* ckpt_keep.c: DIR/step-NNNNNNNN of a step; the folder DIR/latest names,
 * or DIR itself when there is no pointer (a folder of one checkpoint);
 * the pointer's update after a complete save, and the pruning. Rank 0
 * alone writes. */
char *rt_ckpt_step_dir(const char *dir, int64_t step);
char *rt_ckpt_resolve(const char *dir);
void rt_ckpt_publish(const char *dir, int64_t step, int64_t keep);
/* The pointer's text (len bytes of the file at path): its folder name in
 * *name (malloc'd), or -1 with an error naming the file when it is not
 * one line "step-" and digits (what the fuzz harness calls). */
int rt_ckpt_latest_parse(const char *text, size_t len, const char *path, char **name, RtErr *e);
/* Takes the lock of --save DIR (which exists) for the life of the
 * process and returns its descriptor; another live holder is a fatal
 * error naming its pid and host, and so is a folder where no file can be
 * created. */
int rt_ckpt_lock(const char *dir);
/* Removes the temporaries an interrupted save left in DIR and its step
 * folders (call it holding the lock); returns how many. */
int rt_ckpt_clean_temporaries(const char *dir);
/* Opens DIR/state.safetensors of --resume: refuses a checkpoint of
 * another model (name, -D values but batch, parameter names and shapes)
 * with one error listing every difference; restores the flags the command
 * line did not give (--save becomes DIR unless given), the step and the
 * RNG. Runs before memory exists; collective over the world. */
void rt_ckpt_resume_open(Rt *rt);
/* Before training: when --save DIR already holds a checkpoint, it must
 * be of this model (name, -D values but batch, parameter names and
 * shapes): a checkpoint is never overwritten by another model's. One
 * error lists every difference. Collective over the world. */
void rt_ckpt_check_save(Rt *rt);
/* ckpt_state.c: the state file's own fields (its format, the step, the
 * sampler's generator), checked; -1 with the error in *e when one is
 * missing or bad. */
typedef struct RtCkptState {
  int64_t step;
  uint64_t rng[4];
} RtCkptState;
int rt_ckpt_state_fields(const RtStFile *f, RtCkptState *out, RtErr *e);
/* Appends a line ("\n  what") to a list of differences in out (len
 * bytes), up to 24 lines and a "..." (*lines counts them). */
void rt_ckpt_diff_add(char *out, size_t len, int *lines, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Every -D of `a` ("k=v k=v ...") that `b` lacks or sets otherwise, as
 * lines of rt_ckpt_diff_add; `batch` only splits a step's sequences into
 * microbatches (--microbatch) and is left out. a_is_file: a is the
 * checkpoint's, b this program's (else the reverse). */
void rt_ckpt_define_diffs(const char *a, const char *b, int a_is_file, char *out, size_t len,
                          int *lines);
/* Reads the weights and the optimizer state of the opened state file (with
 * ZeRO, this data-parallel rank's parts of the state). */
void rt_ckpt_resume_load(Rt *rt);
/* --init-from: weights only; every parameter must be present with its
 * shape. PATH is a safetensors file, a sharded set's index
 * (model.safetensors.index.json) or a folder holding either, as
 * Hugging Face writes them. Names are the model's; a file whose names
 * carry a prefix (`model.`, `transformer.`) loads as well, and with
 * --init-map FILE a map renames what no prefix explains. One error line
 * says what is missing, with the nearest names the file holds. */
void rt_ckpt_init_from(Rt *rt, const char *path);
/* ckpt_names.c. Renames tensors of f by a map file: lines "MODEL_NAME
 * FILE_NAME", blank lines and '#' comments skipped; a line naming a
 * tensor f lacks, or a name mapped twice, is a fatal error with the map's
 * line. */
void rt_ckpt_apply_map(RtStFile *f, const char *map);
/* Finds the prefix that the most parameters of m the file lacks carry in
 * it (the base model's: `model.`, `transformer.`) and renames those
 * tensors to the model's names, with a note. A parameter with a leading
 * expert dimension that the file keeps as one tensor per expert (the
 * index after a word of its name: `...experts.3.w1.weight` for
 * `...experts.w1.weight`) is stacked from them; an expert missing, of
 * another shape, or another count of experts is a fatal error naming
 * the tensor. */
void rt_ckpt_strip_prefix(RtStFile *f, const RtModel *m);
/* Up to three names of f nearest to `name` (the same name under a
 * prefix first, then by edit distance), ", "-separated in buf; NULL when
 * none is near. */
const char *rt_ckpt_nearest(const RtStFile *f, const char *name, char *buf, size_t len);
/* --dump-grads: the gradients region as safetensors, by parameter name.
 * With d > 1 call it after the data-parallel reduction: it writes the
 * reduced gradients (with ZeRO, each rank's owned parts of the buckets). */
void rt_ckpt_dump_grads(Rt *rt, const char *path);

#endif
