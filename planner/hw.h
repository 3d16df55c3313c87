/* Hardware descriptions for the planner: the presets and the file format
 * (hw.c). docs/planner.md explains the numbers and the calibration. */
#ifndef SHARDC_PLANNER_HW_H
#define SHARDC_PLANNER_HW_H

#include <stdbool.h>
#include <stdio.h>

/* The precisions a description gives a peak rate for. */
typedef enum PlPrecision { PL_BF16, PL_FP16, PL_TF32, PL_FP32, PL_NPREC } PlPrecision;

/* One accelerator and the nodes it sits in. Bandwidths are bytes per
 * second in one direction, latencies seconds. */
typedef struct PlHw {
  const char *name;
  const char *doc;                /* one line for `shardc hw` */
  double peak_flops[PL_NPREC];    /* dense FLOP/s per precision (0: not supported) */
  double mem_bytes, mem_bw;       /* device memory and its bandwidth */
  int gpus_per_node;
  double intra_bw, intra_lat;     /* one GPU to the others of its node (NVLink/NVSwitch) */
  double inter_bw, inter_lat;     /* a whole node to the others (all its network adapters) */
  /* The calibration (docs/planner.md): how close real kernels come to the
   * roofline. A GEMM of F FLOPs runs at gemm_eff * F / (F + gemm_half) of
   * peak; fused attention at attn_eff of peak; every other op moves its
   * bytes at mem_eff of the bandwidth; each kernel costs at least
   * kernel_s; collectives reach comm_eff of the link bandwidth. */
  double gemm_eff, gemm_half, attn_eff, mem_eff, kernel_s, comm_eff;
  /* Memory a rank holds besides its tensors (docs/planner.md, Memory):
   * the device context with the libraries' workspaces, the buffers of one
   * communicator (NCCL's, per group a rank belongs to), and the share of
   * reserved memory a caching allocator loses to fragmentation (PyTorch's,
   * as the paper's Megatron-LM ran; the compiler's targets allocate once
   * from the memory plan and lose none). */
  double workspace_bytes, comm_buffer_bytes, fragmentation;
  /* Streaming multiprocessors (0: none, a CPU). A GEMM's output is cut
   * into tiles of 256 x 128 (either way round), one tile per SM at a
   * time: a product whose tiles fill the last wave only in part runs at
   * tiles / (waves x sms) of its rate (NVIDIA's wave quantization). */
  int sms;
  /* What every op of a rank program costs beyond its work (0 on the GPU
   * presets, where a kernel's launch overlaps the kernel before it): on a
   * CPU description the start and end of one parallel region with the
   * rank's threads as the programs run them (OMP_WAIT_POLICY=passive
   * wakes the team each time). And the bandwidth the optimizer step's
   * passes reach (the update, the gradient norm, the finiteness check of
   * the weights and moments; 0: memory bandwidth x mem_eff). */
  double op_s, update_bw;
  /* A CPU description (`shardc hw --measure`): the node's `cores`, which
   * the ranks on it share, each running cores / ranks OpenMP threads (the
   * launch recipe of `shardc run`). The figures above are one rank's with
   * every core; the core_ ones one rank's with one core while every other
   * core runs a rank too. 0 cores: accelerators, one per rank. */
  int cores;
  double core_peak, core_gemm_half, core_attn_eff, core_mem_bw, core_kernel_s;
  double core_mem_eff, core_op_s, core_update_bw;
} PlHw;

/* The presets, ending with a {NULL} entry. */
extern const PlHw pl_hw_presets[];
const PlHw *pl_hw_find(const char *name);
/* A preset by name, else a description file (`key = value` lines, `#`
 * comments; docs/planner.md lists the keys). Reports errors as
 * file:line:col and returns false. */
bool pl_hw_load(const char *name_or_file, PlHw *out);
/* The description in the file format, which pl_hw_load reads back. */
void pl_hw_print(FILE *out, const PlHw *hw);
/* What one of `ranks` ranks on a node of hw gets: hw itself for
 * accelerators; for a CPU description the rates of cores / ranks threads
 * (docs/planner.md), between the one-core and the all-core figures. */
PlHw pl_hw_rank_share(const PlHw *hw, int ranks);

#endif
