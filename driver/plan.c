/* `shardc plan`: searches the configurations of a model for a GPU count
 * and a global batch on a hardware description (planner/search.c) and
 * prints the fastest that fit, with why the others were dropped. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../planner/planner.h"
#include "driver.h"

static const DrvOption plan_options[] = {
    DRV_DEFINE_OPTION,
    {"--gpus", "N", "GPUs to plan for"},
    {"--global-batch", "B", "sequences per step"},
    {"--hw", "NAME|FILE", "a hardware preset (shardc hw lists them) or description file"},
    {"--top", "K", "print the K fastest configurations (default 10)"},
    {"--memory-fraction", "F", "the share of device memory a rank may plan for (default 1: the "
     "memory model counts workspaces, communication buffers and fragmentation)"},
    {"--dp-overlap", "bucket|chunk|none", "when data-parallel reductions start (as simulate)"},
    {"--ep", "E", "a routed model: keep the expert ranks at E (default: search every power of two "
     "that divides the experts and d)"},
    {"--json", NULL, "print one JSON object"},
    {"--svg", "FILE", "draw every configuration tried: throughput against memory per GPU"},
    {NULL, NULL, NULL},
};

const DrvCommand drv_plan_command = {
    "plan", "MODEL --gpus N --global-batch B --hw NAME|FILE [options]",
    "search t, p, d, v, microbatch, recomputation, SP, ZeRO-1 and ep; rank what fits by speed",
    "Tries every tensor-parallel size within a node, every pipeline depth and\n"
    "chunk count, microbatches of 1, 2, 4 and 8, sequence parallelism on and\n"
    "off, and for each the least recomputation that fits in the device's\n"
    "memory, without ZeRO-1 and with it; for a model with routed layers, every\n"
    "power of two of expert ranks that divides its experts and d. Every candidate is simulated as\n"
    "`shardc simulate` does; the list is ranked by step time. The families\n"
    "dropped are counted by reason, with an example of each.",
    plan_options, drv_cmd_plan};

/* What the search's loader needs: the model and the command's -D flags. */
typedef struct Loader {
  const char *model;
  int nargs;
  DrvArg *args;
} Loader;

static IrGraph *load(void *ctx, int microbatch) {
  Loader *L = ctx;
  static const DrvOption define = DRV_DEFINE_OPTION;
  DrvArg *args = ir_alloc(sizeof(DrvArg) * (size_t)(L->nargs + 1));
  memcpy(args, L->args, sizeof(DrvArg) * (size_t)L->nargs);
  args[L->nargs] = (DrvArg){&define, ir_fmt("batch=%d", microbatch), -1};
  return drv_load_and_check(L->model, L->nargs + 1, args);
}

static int positive(const char *s) {
  char *end;
  long v = s ? strtol(s, &end, 10) : 0;
  return s && !*end && end != s && v > 0 && v < (1 << 30) ? (int)v : 0;
}

static void print_text(const PlSearch *s, int top, double limit) {
  printf("%d configurations fit in %.1f GiB per GPU (%d simulated); the fastest:\n", s->n,
         limit / 1073741824.0, s->simulated);
  /* A routed model's expert ranks get a column of their own. */
  printf("rank   t   p    d   v%s  b  recompute  SP  zero  step s    TFLOP/s  MFU    GiB\n",
         s->routed ? "  ep" : "");
  for (int i = 0; i < s->n && i < top; i++) {
    const PlCandidate *c = &s->configs[i];
    printf("%4d  %2d  %2d  %3d  %2d%s  %d  %-9s  %-3s %4d  %8.4f  %7.1f  %4.1f%%  %5.1f\n", i + 1,
           c->c.tp, c->c.pp, c->c.dp, c->c.vpp, s->routed ? ir_fmt("  %2d", pl_ep(&c->c)) : "",
           c->c.microbatch,
           pl_recompute_names[c->c.recompute], c->c.sequence_parallel ? "yes" : "no", c->c.zero,
           c->step_time, c->tflops_per_gpu, 100 * c->mfu, c->memory / 1073741824.0);
  }
  printf("dropped:\n");
  for (int k = 0; k < PL_NREJECTS; k++)
    if (s->rejected[k])
      printf("  %-34s %5d  e.g. %s\n", pl_reject_names[k], s->rejected[k], s->example[k]);
}

static void print_json(const PlSearch *s, int top) {
  cJSON *o = cJSON_CreateObject(), *list = cJSON_AddArrayToObject(o, "configs");
  for (int i = 0; i < s->n && i < top; i++) {
    const PlCandidate *c = &s->configs[i];
    cJSON *e = cJSON_CreateObject();
    cJSON_AddNumberToObject(e, "tp", c->c.tp);
    cJSON_AddNumberToObject(e, "pp", c->c.pp);
    cJSON_AddNumberToObject(e, "dp", c->c.dp);
    cJSON_AddNumberToObject(e, "vpp", c->c.vpp);
    if (s->routed) cJSON_AddNumberToObject(e, "ep", pl_ep(&c->c));
    cJSON_AddNumberToObject(e, "microbatch", c->c.microbatch);
    cJSON_AddStringToObject(e, "recompute", pl_recompute_names[c->c.recompute]);
    cJSON_AddBoolToObject(e, "sequence_parallel", c->c.sequence_parallel);
    cJSON_AddNumberToObject(e, "zero", c->c.zero);
    cJSON_AddNumberToObject(e, "tflops_per_gpu", c->tflops_per_gpu);
    cJSON_AddNumberToObject(e, "mfu", c->mfu);
    cJSON_AddNumberToObject(e, "step_time_s", c->step_time);
    cJSON_AddNumberToObject(e, "memory_bytes_per_gpu", c->memory);
    cJSON_AddItemToArray(list, e);
  }
  cJSON_AddNumberToObject(o, "fitting", s->n);
  cJSON_AddNumberToObject(o, "simulated", s->simulated);
  cJSON *rej = cJSON_AddObjectToObject(o, "rejected");
  for (int k = 0; k < PL_NREJECTS; k++)
    if (s->rejected[k]) {
      cJSON *e = cJSON_AddObjectToObject(rej, pl_reject_names[k]);
      cJSON_AddNumberToObject(e, "count", s->rejected[k]);
      cJSON_AddStringToObject(e, "example", s->example[k]);
    }
  char *text = cJSON_Print(o);
  printf("%s\n", text);
  free(text);
  cJSON_Delete(o);
}

/* ------------------------------------------------------------------ SVG */

/* The plot's frame: pixels of the axes and the ranges they show. */
typedef struct Plot {
  double x0, y0, w, h; /* the axes' box, y0 its top */
  double xmax, ymax;   /* GiB and model TFLOP/s at the right and top edges */
} Plot;

static double px(const Plot *P, double gib) { return P->x0 + P->w * fmin(gib, P->xmax) / P->xmax; }
static double py(const Plot *P, double tf) { return P->y0 + P->h * (1 - tf / P->ymax); }

/* A tick step of 1, 2 or 5 times a power of ten giving about five ticks. */
static double tick(double range) {
  double raw = range / 5, p10 = pow(10, floor(log10(raw)));
  return raw / p10 < 2 ? p10 : raw / p10 < 5 ? 2 * p10 : 5 * p10;
}

static void svg_axes(FILE *f, const Plot *P) {
  fprintf(f, "<rect x='%.1f' y='%.1f' width='%.1f' height='%.1f' fill='none' stroke='#444'/>\n",
          P->x0, P->y0, P->w, P->h);
  double xs = tick(P->xmax), ys = tick(P->ymax);
  for (double x = 0; x <= P->xmax + 1e-9; x += xs)
    fprintf(f, "<line x1='%.1f' y1='%.1f' x2='%.1f' y2='%.1f' stroke='#ddd'/><text x='%.1f' "
            "y='%.1f' text-anchor='middle'>%g</text>\n", px(P, x), P->y0, px(P, x), P->y0 + P->h,
            px(P, x), P->y0 + P->h + 18, x);
  for (double y = 0; y <= P->ymax + 1e-9; y += ys)
    fprintf(f, "<line x1='%.1f' y1='%.1f' x2='%.1f' y2='%.1f' stroke='#ddd'/><text x='%.1f' "
            "y='%.1f' text-anchor='end'>%g</text>\n", P->x0, py(P, y), P->x0 + P->w, py(P, y),
            P->x0 - 6, py(P, y) + 4, y);
  fprintf(f, "<text x='%.1f' y='%.1f' text-anchor='middle'>memory per GPU (GiB)</text>\n",
          P->x0 + P->w / 2, P->y0 + P->h + 42);
  fprintf(f, "<text transform='translate(%.1f %.1f) rotate(-90)' text-anchor='middle'>model "
          "TFLOP/s per GPU (no recomputation counted)</text>\n", P->x0 - 52, P->y0 + P->h / 2);
}

/* The legend's swatches are shapes of their own, not points of the plot. */
static void svg_legend(FILE *f, double x, double y, int beyond, double limit) {
  fprintf(f, "<rect x='%.1f' y='%.1f' width='230' height='%d' fill='#fff' stroke='#999'/>\n", x,
          y, beyond ? 118 : 98);
  fprintf(f, "<circle cx='%.1f' cy='%.1f' r='4' fill='#1f77b4' fill-opacity='0.6'/><text x='%.1f' "
          "y='%.1f'>fits in the limit</text>\n", x + 16, y + 20, x + 30, y + 24);
  fprintf(f, "<circle cx='%.1f' cy='%.1f' r='4' fill='none' stroke='#999'/><text x='%.1f' "
          "y='%.1f'>does not fit</text>\n", x + 16, y + 42, x + 30, y + 46);
  fprintf(f, "<circle cx='%.1f' cy='%.1f' r='7' fill='none' stroke='#d62728' stroke-width='2.5'/>"
          "<text x='%.1f' y='%.1f'>the chosen configuration</text>\n", x + 16, y + 64, x + 30,
          y + 68);
  fprintf(f, "<line x1='%.1f' y1='%.1f' x2='%.1f' y2='%.1f' stroke='#d62728' "
          "stroke-dasharray='5 3'/><text x='%.1f' y='%.1f'>memory limit, %.1f GiB</text>\n",
          x + 10, y + 86, x + 24, y + 86, x + 30, y + 90, limit);
  if (beyond)
    fprintf(f, "<text x='%.1f' y='%.1f'>%d beyond the axis, at its edge</text>\n", x + 10,
            y + 110, beyond);
}

static void write_svg(FILE *f, const PlSearch *s, const PlHw *hw, double limit) {
  const double G = 1073741824.0;
  Plot P = {90, 60, 640, 420, 2 * limit / G, 0};
  int beyond = 0;
  for (int i = 0; i < s->ntried; i++) {
    double tf = s->tried[i].mfu * hw->peak_flops[PL_BF16] / 1e12;
    if (tf > P.ymax) P.ymax = tf;
    beyond += s->tried[i].memory / G > P.xmax;
  }
  P.ymax = P.ymax > 0 ? P.ymax * 1.1 : 1;
  fprintf(f, "<svg xmlns='http://www.w3.org/2000/svg' width='1000' height='550' "
          "font-family='sans-serif' font-size='13'>\n<rect width='100%%' height='100%%' "
          "fill='#fff'/>\n<text x='90' y='24' font-size='16'>shardc plan on %s: %d configurations "
          "replayed, %d fit</text>\n", hw->name, s->ntried, s->n);
  svg_axes(f, &P);
  for (int i = 0; i < s->ntried; i++) {
    const PlCandidate *c = &s->tried[i];
    double tf = c->mfu * hw->peak_flops[PL_BF16] / 1e12;
    fprintf(f, c->fits ? "<circle cx='%.1f' cy='%.1f' r='3' fill='#1f77b4' fill-opacity='0.6'/>\n"
                       : "<circle cx='%.1f' cy='%.1f' r='3' fill='none' stroke='#999'/>\n",
            px(&P, c->memory / G), py(&P, tf));
  }
  fprintf(f, "<line x1='%.1f' y1='%.1f' x2='%.1f' y2='%.1f' stroke='#d62728' "
          "stroke-dasharray='5 3'/>\n", px(&P, limit / G), P.y0, px(&P, limit / G), P.y0 + P.h);
  /* The chosen one is ringed; its label goes under the title, where it
   * cannot run off the plot or over other points. */
  if (s->n) {
    const PlCandidate *b = &s->configs[0];
    fprintf(f, "<circle cx='%.1f' cy='%.1f' r='7' fill='none' stroke='#d62728' "
            "stroke-width='2.5'/>\n<text x='90' y='44' fill='#d62728'>chosen: t=%d p=%d d=%d v=%d "
            "b=%d, recompute %s%s%s: %.1f model TFLOP/s per GPU, %.1f GiB</text>\n",
            px(&P, b->memory / G), py(&P, b->mfu * hw->peak_flops[PL_BF16] / 1e12), b->c.tp,
            b->c.pp, b->c.dp, b->c.vpp, b->c.microbatch, pl_recompute_names[b->c.recompute],
            b->c.sequence_parallel ? ", SP" : "", b->c.zero ? ", ZeRO-1" : "",
            b->mfu * hw->peak_flops[PL_BF16] / 1e12, b->memory / G);
  }
  svg_legend(f, P.x0 + P.w + 20, P.y0, beyond, limit / G);
  fprintf(f, "</svg>\n");
}

static bool save_svg(const char *path, const PlSearch *s, const PlHw *hw, double limit) {
  FILE *f = fopen(path, "w");
  if (f) write_svg(f, s, hw, limit);
  if (!f || fclose(f) != 0) {
    fprintf(stderr, "shardc plan: error: cannot write %s: %s\n", path, strerror(errno));
    return false;
  }
  return true;
}

int drv_cmd_plan(int nargs, DrvArg *args) {
  const DrvCommand *cmd = &drv_plan_command;
  const char *model = drv_model_arg(cmd, nargs, args);
  if (!model) return 1;
  int gpus = positive(drv_value(nargs, args, "--gpus"));
  int batch = positive(drv_value(nargs, args, "--global-batch"));
  const char *top_s = drv_value(nargs, args, "--top"), *hw_name = drv_value(nargs, args, "--hw");
  int top = top_s ? positive(top_s) : 10;
  if (!gpus) return drv_usage_error(cmd, "--gpus N: a positive GPU count is required");
  if (!batch) return drv_usage_error(cmd, "--global-batch B: a positive batch is required");
  if (!top) return drv_usage_error(cmd, "--top: expected a positive integer, got '%s'", top_s);
  if (!hw_name) return drv_usage_error(cmd, "--hw NAME|FILE is required");
  const char *frac_s = drv_value(nargs, args, "--memory-fraction");
  char *end = NULL;
  double frac = frac_s ? strtod(frac_s, &end) : 1;
  if (frac_s && (*end || end == frac_s || !(frac > 0 && frac <= 1)))
    return drv_usage_error(cmd, "--memory-fraction: expected a number in (0, 1], got '%s'", frac_s);
  const char *overlap_s = drv_value(nargs, args, "--dp-overlap");
  PlDpOverlap overlap;
  if (!pl_dp_overlap_parse(overlap_s, &overlap))
    return drv_usage_error(cmd, "--dp-overlap: expected bucket, chunk or none, got '%s'", overlap_s);
  const char *ep_s = drv_value(nargs, args, "--ep");
  int ep = ep_s ? positive(ep_s) : 0;
  if (ep_s && !ep) return drv_usage_error(cmd, "--ep: expected a positive integer, got '%s'", ep_s);
  if (ep > 1 && gpus % ep)
    return drv_usage_error(cmd, "--ep %d must divide --gpus %d: the expert ranks are taken out "
                           "of the data-parallel ones", ep, gpus);
  PlHw hw;
  if (!pl_hw_load(hw_name, &hw)) return 1;
  Loader L = {model, nargs, args};
  PlSearch s;
  if (!pl_search(load, &L, gpus, batch, &hw, frac * hw.mem_bytes, overlap, ep, &s)) return 1;
  const char *svg = drv_value(nargs, args, "--svg");
  bool ok = !svg || save_svg(svg, &s, &hw, frac * hw.mem_bytes);
  if (!ok) {
    /* save_svg said why. */
  } else if (drv_flag(nargs, args, "--json")) {
    print_json(&s, top);
  } else {
    print_text(&s, top, frac * hw.mem_bytes);
  }
  ok = ok && s.n > 0;
  pl_search_free(&s);
  return ok ? 0 : 1;
}
