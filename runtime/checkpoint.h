/* Checkpoints: DIR/model.safetensors holds the weights under the model's
 * parameter names (what --init-from and other tools read);
 * DIR/state.safetensors holds everything --resume needs on its own: the
 * weights again, AdamW's m and v (NAME.exp_avg, NAME.exp_avg_sq), and in
 * its metadata the step, the sampling RNG and the flags that decide the
 * next steps. Each file is replaced atomically and each is complete by
 * itself, so a crash at any moment leaves a loadable checkpoint (and never
 * a new model.safetensors paired with an old optimizer state). */
#ifndef SHARD_RT_CHECKPOINT_H
#define SHARD_RT_CHECKPOINT_H

#include "rt.h"

/* Writes both files into rt->f.save (created if needed). */
void rt_ckpt_save(Rt *rt);
/* Opens DIR/state.safetensors of --resume: restores the flags the command
 * line did not give, the step and the RNG. Runs before memory exists. */
void rt_ckpt_resume_open(Rt *rt);
/* Reads the weights and the optimizer state of the opened state file. */
void rt_ckpt_resume_load(Rt *rt);
/* --init-from: weights only; every parameter must be present with its
 * shape. */
void rt_ckpt_init_from(Rt *rt, const char *path);
/* --dump-grads: the gradients region as safetensors, by parameter name. */
void rt_ckpt_dump_grads(Rt *rt, const char *path);

#endif
