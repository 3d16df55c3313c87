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

#endif
