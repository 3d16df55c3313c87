/* The planner: the cost of a rank program's ops and collectives (cost.c)
 * and the simulator that replays the action tables with those costs
 * (sim.c), on a hardware description (hw.h). It predicts the step time,
 * throughput and memory of a configuration without running it;
 * docs/planner.md describes the model and its calibration. */
#ifndef SHARDC_PLANNER_H
#define SHARDC_PLANNER_H

#include <stdbool.h>
#include <stdint.h>

#include "../abi/schedule.h"
#include "../ir/ir.h"
#include "../passes/passes.h"
#include "hw.h"

/* Activation recomputation: none, the attention core (selective), or each
 * layer's whole forward again in its backward (full). */
typedef enum PlRecompute { PL_RECOMPUTE_NONE, PL_RECOMPUTE_SELECTIVE, PL_RECOMPUTE_FULL } PlRecompute;

/* When the data-parallel reduction of a chunk's gradients starts, as the
 * training program runs it (runtime/dp.h): bucket by bucket as their
 * gradients complete during the chunk's last backward (the runtime's
 * default), the whole chunk at its REDUCE_GRADS action, or nothing before
 * the step's backward is over (the runtime's --no-overlap, and how the
 * paper's runs reduced). */
typedef enum PlDpOverlap { PL_DP_BUCKET, PL_DP_CHUNK, PL_DP_NONE } PlDpOverlap;
extern const char *const pl_dp_overlap_names[]; /* "bucket", "chunk", "none" */
/* A --dp-overlap value (NULL: the default, bucket); false when it names none. */
bool pl_dp_overlap_parse(const char *name, PlDpOverlap *out);

/* A configuration to simulate. */
typedef struct PlConfig {
  int tp, pp, dp, vpp;   /* t, p, d, v */
  int microbatch;        /* b, sequences */
  int global_batch;      /* B, sequences per step: m = B / (b d) */
  const char *schedule;  /* a name of passes/schedule.h's registry; NULL: the default */
  bool sequence_parallel;
  /* --no-scatter-gather: with t > 1 and no sequence parallelism, each
   * pipeline message goes whole from every tensor rank instead of as its
   * 1/t slice all-gathered on arrival (the compiler's default). */
  bool no_scatter_gather;
  int zero;              /* 1: ZeRO-1, the optimizer state sharded over the d replicas */
  PlRecompute recompute;
  int recompute_layers;  /* full: layers per checkpoint N (0 or 1: every layer its own) */
  /* fp32 everything, as the CPU target runs it, instead of the paper's
   * mixed precision: memory as the CPU target keeps it (fp32 weights,
   * gradients and Adam moments, no master copy, fp32 activations), and
   * every byte the costs count (ops, messages, reductions, the optimizer)
   * at 4 bytes per element. */
  bool fp32;
  /* The CUDA target's --precision bf16 (Megatron-LM's bf16 recipe): as
   * mixed precision, activations, pipeline messages and tensor-parallel
   * collectives at 2 bytes, but the weight gradients reduced in fp32 (the
   * data-parallel buckets, ZeRO-1's reduce-scatter, the tied embedding's
   * sum) and ZeRO-1's all-gather of the updated fp32 weights at 4. */
  bool bf16;
  PlDpOverlap dp_overlap;
  double bucket_mb;      /* --bucket-mb: the programs' gradient bucket in MiB (0: 25) */
  /* --tp-overlap: the input gradient's tensor-parallel all-reduce (or
   * reduce-scatter) runs while the weight-gradient GEMM that reads the
   * same output gradient computes, as the later Megatron-LM overlaps
   * them; only where the schedule runs the two together (no W actions).
   * The compiler's rank programs run their collectives in order, so off
   * by default. */
  bool tp_overlap;
  /* Mixed precision models the PyTorch runs of Megatron-LM, as of `megatron`
   * (0: 2021). 2021, the paper's (fp16, the local DDP of examples/sc21):
   * after each microbatch's backward its 16-bit weight gradients are added
   * into a 16-bit gradient buffer in a pass of their own; the step's fp32
   * gradients stay allocated into the next step (train_step zeroes only the
   * buffer); each stage keeps the outputs it sent until their backward.
   * 2022 (Korthikanti et al.'s): the weight-gradient GEMMs accumulate into
   * an fp32 buffer (--gradient-accumulation-fusion), the optimizer's grads
   * are freed each step, and a sent output is freed. The compiler's
   * programs (fp32, bf16) are neither: 0 there. */
  int megatron;
  /* The compiler's memory plan where the model compiles for the target
   * c runs as (fp32: cpu, bf16: cuda): per pipeline stage, the bytes of
   * its program's activations region, one microbatch over all its chunks
   * (cg_kept_activations). NULL: the activations from Korthikanti et
   * al.'s formula. */
  const int64_t *plan_activations;
  /* --ep E: the experts of every routed layer placed on E ranks taken out
   * of the d data-parallel ones (Megatron's layout: consecutive data
   * ranks, so each expert is replicated over d/E of them); 0 or 1: every
   * rank holds every expert. */
  int ep;
  /* --moe-imbalance F: the most loaded expert rank's tokens over the mean
   * (0: PL_MOE_IMBALANCE); a routed layer's capacity factor caps it. */
  double moe_imbalance;
} PlConfig;

/* The default of PlConfig.moe_imbalance (docs/planner.md, Mixtures of
 * experts: the capacity factor Switch Transformer trains with, the load
 * its routers are held to). */
#define PL_MOE_IMBALANCE 1.25

/* Why the training program would reject c, or would ignore one of its
 * flags (which the planner then refuses, so that no prediction is made
 * for a run that differs from the one asked for): a one-line message,
 * malloc'ed, the same from `shardc simulate`, `shardc plan` and
 * pl_simulate; NULL when c is a configuration the program runs as given. */
char *pl_config_refusal(const PlConfig *c);

/* Where the ranks of each parallel group sit: the rank order is Megatron's
 * (tensor fastest, then data, then pipeline), so a tensor group fills a
 * node first and pipeline neighbours are t*d ranks apart. */
typedef struct PlLink {
  double bw;  /* bytes/s one member moves in one direction, efficiency included */
  double lat; /* seconds per message step */
  double launch; /* seconds a collective's kernel costs however small (the device's kernel_s) */
} PlLink;
PlLink pl_tp_link(const PlHw *hw, const PlConfig *c);
/* Bytes per activation, weight or message element as c's target runs it:
 * 2 (bf16, the GPU target), 4 with fp32 (the CPU target). */
double pl_elem_bytes(const PlConfig *c);
/* The ranks of c, t * p * d: on a CPU description they share its cores. */
int pl_ranks(const PlConfig *c);
PlLink pl_dp_link(const PlHw *hw, const PlConfig *c);
PlLink pl_pp_link(const PlHw *hw, const PlConfig *c);
/* The expert-data-parallel group: the d/E ranks that hold copies of the
 * same experts, t*E ranks apart. */
PlLink pl_edp_link(const PlHw *hw, const PlConfig *c);
/* The expert ranks of c (PlConfig.ep, at least 1) and the d/E replicas of
 * each expert. */
int pl_ep(const PlConfig *c);
int pl_edp(const PlConfig *c);
/* One all-to-all of an expert group of n ranks t apart, each sending
 * `bytes` split evenly over the n (its own part stays): the parts to
 * ranks of its node over NVLink and the rest through its share of the
 * node's adapters, at once; one launch and one latency, since the sends
 * are posted together (cost.c). */
double pl_all_to_all_s(const PlHw *hw, int t, int n, double bytes);

/* Alpha-beta ring collectives over n members, `bytes` the whole tensor
 * (the all-gather's result, the reduce-scatter's input), each one kernel
 * launch and its own steps (cost.c). */
double pl_all_reduce_s(PlLink l, int n, double bytes);
double pl_all_gather_s(PlLink l, int n, double bytes);
double pl_reduce_scatter_s(PlLink l, int n, double bytes);
/* The roofline: a GEMM of `flops` on the efficiency curve, and an op that
 * moves `bytes` through memory. */
double pl_gemm_s(const PlHw *hw, double flops);
double pl_memory_s(const PlHw *hw, double bytes);
/* The same GEMM by its shape, M x N outputs over a reduction of K: the
 * curve's time over the share of the last wave of output tiles the SMs
 * fill (pl_gemm_wave_efficiency, 1 on a description without SMs). */
double pl_gemm_shape_s(const PlHw *hw, double m, double n, double k);
double pl_gemm_wave_efficiency(const PlHw *hw, double m, double n);
/* The optimizer step's passes over `bytes`, at the description's update
 * bandwidth (measured on a CPU; else the memory's, as pl_memory_s). */
double pl_update_s(const PlHw *hw, double bytes);
/* The FLOPs the CPU target's attention kernels (kernels/cpu/attention.c)
 * run where `full` is the count of a full forward, 4 numel(q) s: under a
 * causal mask blocks of 32 query rows each take every key up to the
 * block's last, (n + 1) / 2n of the square over n blocks of a sequence of
 * s; the backward runs 5 products against the forward's 2. A CPU
 * description's attention_efficiency is a share of peak at these FLOPs. */
double pl_cpu_attention_flops(double full, double s, bool causal, bool backward);

/* The cost of a part of one rank program for one microbatch. */
typedef struct PlCost {
  double fwd, bwd;             /* seconds: forward and backward */
  double fwd_comm, bwd_comm;   /* the part of them spent in tensor-parallel collectives */
  double fwd_flops, bwd_flops; /* matrix FLOPs one rank does */
  double attn_fwd, attn_flops; /* the forward attention core's seconds and FLOPs (selective
                                * recomputation reruns them) */
  int64_t params;              /* parameter elements one rank holds */
  double bwd_w;                /* seconds of the backward only parameter gradients need (W of
                                * the zero-bubble schedules, IrNode.wgrad); the rest is B */
  double bwd_hidden;           /* seconds of the backward's tensor-parallel collectives the
                                * weight-gradient GEMMs can hide (PlConfig.tp_overlap) */
  int64_t temp;                /* elements of the largest op's outputs (forward or backward):
                                * the temporaries live beside the stash while it runs */
  int64_t expert_params;       /* of params, those of routed experts (reduced over d/E) */
} PlCost;

/* The routed layers of a model (mixtures of experts), as its graph has
 * them: each layer of the stack runs `routed` of them. */
typedef struct PlMoe {
  int routed;              /* routed layers per layer of the stack (0: a dense model) */
  int experts, top_k;      /* of the first */
  int64_t expert_ffn;      /* the output width of its first grouped product (an expert's ffn) */
  int64_t shared_ffn;      /* the first width the shared experts' products give its tokens
                            * (0: none), on this tensor rank */
  double capacity;         /* its capacity factor (0: dropless) */
  int64_t rows;            /* elements of one routed layer's dispatched rows [T*k, h] on a rank */
  int64_t row_elems;       /* elements the forward of one layer keeps on dispatched rows */
  double load;             /* the most loaded expert rank's rows over the mean, as priced */
  double a2a_s;            /* one all-to-all of the rows over the expert group */
  int64_t a2a_bytes;       /* what one rank sends in it, as rt_comm counts (the balanced case) */
} PlMoe;

/* A model as the planner sees it: its layer stack costed from ONE layer of
 * the partitioned, differentiated rank program, which every layer repeats,
 * and the parts before and after it. */
typedef struct PlModel {
  PlCost pre, layer, post; /* embedding side, one layer, head and loss */
  int layers;              /* iterations of every top-level repeat together */
  int64_t tied;            /* parameter elements read both before and after the layers */
  int64_t b, s, h, heads;  /* the layer stack's activation [b, s, h] and attention heads */
  int64_t msg_elems;       /* the activation one rank holds between layers */
  double flops_per_mb;     /* forward matrix FLOPs of one microbatch, all tensor ranks */
  PlMoe moe;
} PlModel;

/* Whether t divides what tensor parallelism splits in the layer stack of
 * the folded, typed graph g: the attention heads (and kv heads) and both
 * dims of every GEMM weight. */
bool pl_tp_divides(const IrGraph *g, int t);

/* Builds the model from a folded, typed graph whose batch is the
 * microbatch: partitions it for c's tensor parallelism, differentiates one
 * layer and costs every node on hw. False after reporting errors. */
bool pl_model_build(IrGraph *g, const PlConfig *c, const PlHw *hw, PlModel *out);

/* What a pipeline stage's ranks need and do (all ranks of a stage alike). */
typedef struct PlStage {
  int stage;            /* its index */
  int layers;           /* layers of all its chunks */
  int chunk_layers;     /* layers of its largest chunk */
  int peak_stash;       /* most microbatch-chunks awaiting their backward */
  double compute;       /* seconds of F, B and W in a step */
  double finish;        /* when its step ends */
  int64_t params;       /* parameter elements per rank */
  int64_t expert_params;/* of them, routed experts' (ZeRO-1 shards them over d/E) */
  bool holds_pre, holds_post; /* the embedding side, the head and loss (virtual stage 0, last) */
  double weights, grads, optimizer, activations; /* bytes per rank */
  /* What a rank holds besides its model state and stash (docs/planner.md,
   * Memory): the device context and library workspaces, the collectives'
   * buffers, the pipeline's message buffers, the largest op's temporaries,
   * and what the allocator loses to fragmentation of all the rest. */
  double workspace, comm_buffers, messages, temporaries, fragmentation;
  /* Mixed precision as Megatron-LM of 2021 ran (PlConfig.megatron): the
   * 16-bit gradient buffer the microbatches add into, besides the fp32
   * gradients, and the stage outputs it keeps until their backward. */
  double grad_buffer, outputs;
  double total; /* all of the above */
} PlStage;

typedef struct PlResult {
  double step_time;      /* seconds */
  double model_flops;    /* per step, all GPUs: 3x the forward, no recomputation */
  double counted_flops;  /* model_flops plus the recomputed forwards (the paper's count) */
  double tflops_per_gpu; /* counted_flops / (step_time * GPUs) / 1e12 */
  double mfu;            /* model_flops / (step_time * GPUs) of the bf16 peak */
  double bubble_fraction;/* (pipeline end - ideal) / ideal, ideal the busiest stage's compute */
  double memory_max;     /* bytes, the most of any rank */
  double memory_over;    /* bytes memory_max exceeds the device's memory by (0: it fits) */
  double f_chunk, b_chunk;    /* seconds of one microbatch's F and B on the busiest chunk */
  double w_chunk;             /* of b_chunk, what W runs when the tables have W actions (the
                               * rest is B); 0 when they have none */
  double p2p_s, dp_s, opt_s;  /* one pipeline message, one chunk's reduction, the optimizer */
  int microbatches;
  int nstages;
  PlStage *stages;       /* p entries, malloc'ed (pl_result_free) */
  /* pl_simulate_timeline only (else NULL): the tables replayed, and when
   * each action started and ended, [stage][action], in seconds (a batch's
   * messages from posting to completion, a reduction on the stage's
   * communication stream). */
  RtSchedule *tables;
  double **start, **end;
} PlResult;

/* Replays every stage's action table with the model's costs. False with a
 * message in *error (malloc'ed) when the configuration is impossible. */
bool pl_simulate(const PlModel *m, const PlConfig *c, const PlHw *hw, PlResult *out,
                 char **error);
/* The same, keeping the timeline in out->tables, start and end. */
bool pl_simulate_timeline(const PlModel *m, const PlConfig *c, const PlHw *hw, PlResult *out,
                          char **error);
void pl_result_free(PlResult *r);
/* The memory per rank of a stage of a replayed configuration on hw, had
 * it run with c's recomputation and ZeRO-1 instead (they change no
 * stash): fills weights .. total of st. */
void pl_stage_memory(const PlModel *m, const PlConfig *c, const PlHw *hw, PlStage *st);

/* Activation bytes one layer keeps for one microbatch until its backward
 * (Korthikanti et al., REFERENCE.md), 16-bit activations. */
double pl_layer_activation_bytes(const PlModel *m, int tp, bool sequence_parallel,
                                 PlRecompute recompute);

/* ---------------------------------------------------------------- search */

/* What the search asks of its caller: the model, folded and typed, with
 * `microbatch` sequences per microbatch (a fresh graph each call, since
 * costing partitions it). NULL after reporting errors. */
typedef IrGraph *(*PlLoadFn)(void *ctx, int microbatch);

/* Why a family of configurations was dropped. */
typedef enum PlReject {
  PL_REJ_NODE,       /* the tensor group would span nodes */
  PL_REJ_DIVISIBLE,  /* heads, hidden or the batch do not divide */
  PL_REJ_LAYERS,     /* fewer layers than virtual stages */
  PL_REJ_SCHEDULE,   /* the schedule refuses (p, v, m) */
  PL_REJ_MEMORY,     /* does not fit even with full recomputation and ZeRO-1 */
  PL_NREJECTS
} PlReject;

typedef struct PlCandidate {
  PlConfig c;
  double step_time, tflops_per_gpu, mfu, memory;
  bool fits; /* memory within the limit */
} PlCandidate;

typedef struct PlSearch {
  PlCandidate *configs; /* every configuration that fits, fastest first (malloc'ed) */
  int n;
  PlCandidate *tried;   /* every replay, in the order run, fitting or not (malloc'ed) */
  int ntried;
  int rejected[PL_NREJECTS];         /* configurations dropped, by reason */
  char example[PL_NREJECTS][160];    /* one of each, described */
  int simulated;                     /* replays run */
  bool routed;                       /* the model has routed layers: ep was searched too */
} PlSearch;

/* Searches t (within a node), p, v, the microbatch, recomputation,
 * sequence parallelism, ZeRO-1 and, for a routed model, the expert ranks
 * (powers of two dividing the experts and d) for `gpus` GPUs and a global batch,
 * keeping what needs at most mem_limit bytes per GPU (every term of
 * pl_stage_memory counted), each with the data-parallel overlap given;
 * ep > 0 keeps the expert ranks at ep (refused, with errors reported,
 * where the model has no routed layer or ep does not divide its experts).
 * False after a load error. */
bool pl_search(PlLoadFn load, void *ctx, int gpus, int global_batch, const PlHw *hw,
               double mem_limit, PlDpOverlap overlap, int ep, PlSearch *out);
void pl_search_free(PlSearch *s);
extern const char *const pl_recompute_names[]; /* "none", "selective", "full" */
extern const char *const pl_reject_names[];    /* "node", "divisibility", ... */

#endif
