/* The SVG timeline of a pipeline step (timeline.h). The unit-time drawing
 * of `shardc schedule --svg` is the case without communication; its golden
 * (tests/passes/schedule/example_svg.expected) holds it to the byte. */
#include "timeline.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../passes/schedule.h"

/* An sRGB colour from hue (degrees), saturation and lightness (0..1). */
static void hsl_hex(double h, double s, double l, char out[8]) {
  double c = (1 - fabs(2 * l - 1)) * s, hp = fmod(h, 360) / 60;
  double x = c * (1 - fabs(fmod(hp, 2) - 1)), m = l - c / 2, r = 0, g = 0, b = 0;
  if (hp < 1) r = c, g = x;
  else if (hp < 2) r = x, g = c;
  else if (hp < 3) g = c, b = x;
  else if (hp < 4) g = x, b = c;
  else if (hp < 5) r = x, b = c;
  else r = c, b = x;
  snprintf(out, 8, "#%02x%02x%02x", (int)lround((r + m) * 255), (int)lround((g + m) * 255),
           (int)lround((b + m) * 255));
}

/* Microbatches get hues spread by the golden angle, so neighbours differ;
 * backwards are darker, and higher chunks lighter (forward) or darker
 * (backward), as in the paper's figures. */
static void action_colour(const RtSchedAction *a, int v, char out[8]) {
  double hue = fmod(a->mb * 137.508, 360), shade = v > 1 ? (double)a->chunk / (v - 1) : 0;
  if (a->kind == RT_SCHED_F) hsl_hex(hue, 0.62, 0.64 + 0.22 * shade, out);
  else if (a->kind == RT_SCHED_B) hsl_hex(hue, 0.55, 0.42 - 0.16 * shade, out);
  else hsl_hex(hue, 0.35, 0.58, out);
}

/* A tick step of 1, 2 or 5 times a power of ten at least min_units apart
 * (below one unit when the whole step is shorter than that). */
static double tick_step(double min_units) {
  double p10 = 1;
  while (p10 > min_units && p10 > 1e-12) p10 /= 10;
  for (;; p10 *= 10)
    for (int k = 0; k < 3; k++) {
      double step = p10 * (k == 0 ? 1 : k == 1 ? 2 : 5);
      if (step >= min_units) return step;
    }
}

static bool is_compute(const RtSchedAction *a) {
  return a->kind == RT_SCHED_F || a->kind == RT_SCHED_B || a->kind == RT_SCHED_W;
}

static bool is_message(const RtSchedAction *a) {
  return a->kind == RT_SCHED_SEND || a->kind == RT_SCHED_RECV;
}

/* Colours of what is not a microbatch's block: greys and two hues kept
 * off the microbatch palette's lightness, so a legend swatch is not
 * mistaken for a microbatch. */
#define OPT_FILL "#6e6e6e"
#define WAIT_FILL "#2b5fa8"
#define REDUCE_FILL "#b5651d"
#define ACT_ARROW "#1d3f73"
#define GRAD_ARROW "#7a2418"

typedef struct Svg {
  double unit, left, top, row; /* pixels per time unit, margins, row height */
  double lane, pitch;          /* the communication lane under a row; row + lane */
} Svg;

static double px(const DrvTimeline *t, const Svg *g, double time) {
  return g->left + time * t->scale * g->unit;
}

static void block(FILE *f, const DrvTimeline *t, const Svg *g, double y, double h, int r, int i,
                  const char *fill) {
  double x = px(t, g, t->start[r][i]), w = (t->end[r][i] - t->start[r][i]) * t->scale * g->unit;
  fprintf(f, "<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" fill=\"%s\"/>\n", x, y,
          w, h, fill);
}

/* The lane under row r: message waits and the data-parallel reductions,
 * and the optimizer step on the row itself. */
static void svg_comm(FILE *f, const DrvTimeline *t, const Svg *g, int r) {
  double y = g->top + r * g->pitch;
  for (int i = 0; i < t->s->stages[r].n; i++) {
    const RtSchedAction *a = &t->s->stages[r].actions[i];
    if (t->end[r][i] <= t->start[r][i]) continue;
    if (a->kind == RT_SCHED_OPT_STEP) block(f, t, g, y + 1, g->row - 2, r, i, OPT_FILL);
    else if (a->kind == RT_SCHED_REDUCE_GRADS) block(f, t, g, y + g->row, g->lane / 2, r, i, REDUCE_FILL);
    else if (is_message(a) && !(a->flags & RT_SCHED_JOIN))
      block(f, t, g, y + g->row + g->lane / 2, g->lane / 2 - 1, r, i, WAIT_FILL);
  }
}

/* Every pipeline message as an arrow from its posting on the sender to
 * its arrival on the receiver. Messages between two stages match in
 * posting order (as the runtime matches them), so one cursor per peer
 * walks the receiver's table once for every sender. */
static void svg_arrows(FILE *f, const DrvTimeline *t, const Svg *g) {
  const RtSchedule *s = t->s;
  size_t np = s->pp > 0 ? (size_t)s->pp : 1;
  int *cursor = calloc(np, sizeof *cursor);
  if (!cursor) return;
  for (int r = 0; r < s->pp; r++) {
    memset(cursor, 0, np * sizeof *cursor);
    for (int i = 0; i < s->stages[r].n; i++) {
      const RtSchedAction *a = &s->stages[r].actions[i];
      if (a->kind != RT_SCHED_SEND) continue;
      int q = a->peer, j = cursor[q];
      const RtSchedTable *qt = &s->stages[q];
      while (j < qt->n && !(qt->actions[j].kind == RT_SCHED_RECV && qt->actions[j].peer == r)) j++;
      if (j >= qt->n) break;
      cursor[q] = j + 1;
      bool down = q > r;
      double y1 = g->top + r * g->pitch + (down ? g->pitch - 1 : 1);
      double y2 = g->top + q * g->pitch + (down ? 1 : g->pitch - 1);
      fprintf(f, "<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\" stroke=\"%s\" "
              "stroke-width=\"0.8\" stroke-opacity=\"0.7\" marker-end=\"url(#%s)\"/>\n",
              px(t, g, t->start[r][i]), y1, px(t, g, t->end[q][j]), y2,
              a->msg == RT_SCHED_ACT ? ACT_ARROW : GRAD_ARROW,
              a->msg == RT_SCHED_ACT ? "arrow-act" : "arrow-grad");
    }
  }
  free(cursor);
}

/* Past 16 stages the arrows of every message hide the blocks they join;
 * the lanes still show each stage's waits. */
enum { ARROW_MAX_STAGES = 16, ARROW_MAX_MESSAGES = 4096 };

static bool arrows(const DrvTimeline *t) {
  if (!t->comm || t->s->pp > ARROW_MAX_STAGES) return false;
  long sends = 0;
  for (int r = 0; r < t->s->pp; r++)
    for (int i = 0; i < t->s->stages[r].n; i++) sends += t->s->stages[r].actions[i].kind == RT_SCHED_SEND;
  return sends <= ARROW_MAX_MESSAGES;
}

static void svg_rows(FILE *f, const DrvTimeline *t, const Svg *g) {
  const RtSchedule *s = t->s;
  int label_every = g->row >= 10 ? 1 : (int)ceil(10 / g->row);
  for (int r = 0; r < s->pp; r++) {
    double y = g->top + r * g->pitch;
    if (r % label_every == 0)
      fprintf(f, "<text x=\"%.2f\" y=\"%.2f\" text-anchor=\"end\" font-size=\"%d\">stage %d</text>\n",
              g->left - 6, y + g->row / 2 + 4, g->row >= 14 ? 11 : 9, r);
    fprintf(f, "<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" fill=\"#e8e8e8\"/>\n",
            g->left, y + 1, t->makespan * t->scale * g->unit, g->row - 2);
    for (int i = 0; i < s->stages[r].n; i++) {
      const RtSchedAction *a = &s->stages[r].actions[i];
      if (!is_compute(a)) continue;
      double x = px(t, g, t->start[r][i]), w = (t->end[r][i] - t->start[r][i]) * t->scale * g->unit;
      char fill[8], label[32];
      action_colour(a, s->vpp, fill);
      fprintf(f, "<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" fill=\"%s\"%s/>\n", x,
              y + 1, w, g->row - 2, fill, w > 4 ? " stroke=\"#fff\" stroke-width=\"0.6\"" : "");
      if (a->kind != RT_SCHED_F && w >= 5) /* a pattern on a sliver only greys it */
        fprintf(f, "<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" fill=\"url(#%s)\"/>\n",
                x, y + 1, w, g->row - 2, a->kind == RT_SCHED_B ? "hatch" : "cross");
      if (s->vpp > 1) snprintf(label, sizeof label, "%s%dc%d", rt_sched_kind_name(a->kind), a->mb, a->chunk);
      else snprintf(label, sizeof label, "%s%d", rt_sched_kind_name(a->kind), a->mb);
      if (g->row >= 12 && w >= 6.5 * (double)strlen(label))
        fprintf(f, "<text x=\"%.2f\" y=\"%.2f\" text-anchor=\"middle\" font-size=\"10\" fill=\"%s\">"
                "%s</text>\n", x + w / 2, y + g->row / 2 + 3.5,
                a->kind == RT_SCHED_F ? "#000" : "#fff", label);
    }
    if (t->comm) svg_comm(f, t, g, r);
  }
  if (arrows(t)) svg_arrows(f, t, g);
}

/* One legend entry: a swatch and its text; returns the x after it. */
static double swatch(FILE *f, double x, double y, const char *fill, const char *text, double w) {
  fprintf(f, "<rect x=\"%.2f\" y=\"%.2f\" width=\"18\" height=\"12\" fill=\"%s\"/>"
          "<text x=\"%.2f\" y=\"%.2f\" font-size=\"11\">%s</text>\n", x, y, fill, x + 22, y + 10, text);
  return x + w;
}

static void svg_comm_legend(FILE *f, const DrvTimeline *t, const Svg *g, double y) {
  double x = swatch(f, g->left, y, OPT_FILL, "optimizer step", 120);
  x = swatch(f, x, y, WAIT_FILL, "waiting for messages (lane under a stage)", 270);
  x = swatch(f, x, y, REDUCE_FILL, "gradient reduction (overlaps)", 200);
  if (!arrows(t)) {
    fprintf(f, "<text x=\"%.2f\" y=\"%.2f\" font-size=\"11\">message arrows left out (more than "
            "%d stages or %d messages)</text>\n", x, y + 10, ARROW_MAX_STAGES, ARROW_MAX_MESSAGES);
    return;
  }
  fprintf(f, "<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\" stroke=\"%s\" "
          "marker-end=\"url(#arrow-act)\"/><text x=\"%.2f\" y=\"%.2f\" font-size=\"11\">activation"
          "</text>\n", x, y + 6, x + 18, y + 6, ACT_ARROW, x + 22, y + 10);
  x += 85;
  fprintf(f, "<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\" stroke=\"%s\" "
          "marker-end=\"url(#arrow-grad)\"/><text x=\"%.2f\" y=\"%.2f\" font-size=\"11\">gradient "
          "message</text>\n", x, y + 6, x + 18, y + 6, GRAD_ARROW, x + 22, y + 10);
}

static void svg_axis_and_legend(FILE *f, const DrvTimeline *t, const Svg *g) {
  int p = t->s->pp, v = t->s->vpp;
  double y = g->top + p * g->pitch + 4, step = tick_step(40 / g->unit);
  for (double u = 0; u <= t->makespan * t->scale + 1e-9; u += step)
    fprintf(f, "<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\" stroke=\"#888\"/>"
            "<text x=\"%.2f\" y=\"%.2f\" text-anchor=\"middle\" font-size=\"9\">%g</text>\n",
            g->left + u * g->unit, y, g->left + u * g->unit, y + 4, g->left + u * g->unit, y + 14, u);
  y += 30;
  char fc[8], bc[8];
  RtSchedAction fa = {.kind = RT_SCHED_F}, ba = {.kind = RT_SCHED_B};
  action_colour(&fa, v, fc);
  action_colour(&ba, v, bc);
  double x = g->left;
  fprintf(f, "<rect x=\"%.2f\" y=\"%.2f\" width=\"18\" height=\"12\" fill=\"%s\"/>"
          "<text x=\"%.2f\" y=\"%.2f\" font-size=\"11\">forward</text>\n", x, y, fc, x + 22, y + 10);
  x += 90;
  fprintf(f, "<rect x=\"%.2f\" y=\"%.2f\" width=\"18\" height=\"12\" fill=\"%s\"/>"
          "<rect x=\"%.2f\" y=\"%.2f\" width=\"18\" height=\"12\" fill=\"url(#hatch)\"/>"
          "<text x=\"%.2f\" y=\"%.2f\" font-size=\"11\">%s (darker, hatched)</text>\n",
          x, y, bc, x, y, x + 22, y + 10, sched_has_w(t->s) ? "B: input gradient" : "backward");
  x += sched_has_w(t->s) ? 220 : 190;
  if (sched_has_w(t->s)) { /* zero-bubble: the backward is B (input gradient) and W */
    RtSchedAction wa = {.kind = RT_SCHED_W};
    char wc[8];
    action_colour(&wa, v, wc);
    fprintf(f, "<rect x=\"%.2f\" y=\"%.2f\" width=\"18\" height=\"12\" fill=\"%s\"/>"
            "<rect x=\"%.2f\" y=\"%.2f\" width=\"18\" height=\"12\" fill=\"url(#cross)\"/>"
            "<text x=\"%.2f\" y=\"%.2f\" font-size=\"11\">W: weight gradient (greyer, crossed)</text>\n",
            x, y, wc, x, y, x + 22, y + 10);
    x += 230;
  }
  fprintf(f, "<rect x=\"%.2f\" y=\"%.2f\" width=\"18\" height=\"12\" fill=\"#e8e8e8\"/>"
          "<text x=\"%.2f\" y=\"%.2f\" font-size=\"11\">idle (bubble)</text>\n", x, y, x + 22, y + 10);
  fprintf(f, "<text x=\"%.2f\" y=\"%.2f\" font-size=\"11\">colour: microbatch; label F&lt;mb&gt;%s;"
          " %s</text>\n", g->left, y + 28, v > 1 ? "c&lt;chunk&gt;" : "", t->time_caption);
  if (v > 1)
    fprintf(f, "<text x=\"%.2f\" y=\"%.2f\" font-size=\"11\">chunks: higher chunks lighter "
            "(forward) or darker (backward)</text>\n", g->left, y + 44);
  if (t->comm) svg_comm_legend(f, t, g, y + (v > 1 ? 56 : 40));
}

void drv_timeline_svg(FILE *f, const DrvTimeline *t) {
  const RtSchedule *s = t->s;
  Svg g = {.left = 70, .top = 58};
  double span = t->makespan * t->scale;
  g.unit = 1100 / span;
  if (g.unit > t->max_unit) g.unit = t->max_unit;
  if (g.unit < t->min_unit) g.unit = t->min_unit;
  g.row = s->pp <= 16 ? 26 : (416.0 / s->pp < 5 ? 5 : 416.0 / s->pp);
  g.lane = t->comm ? (s->pp <= 16 ? 10 : 4) : 0;
  g.pitch = g.row + g.lane;
  double width = g.left + span * g.unit + 20, height = g.top + s->pp * g.pitch + 100;
  if (t->comm) height += 30;
  if (width < 760) width = 760;
  fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
          "font-family=\"sans-serif\">\n", width, height);
  fprintf(f, "<defs><pattern id=\"hatch\" patternUnits=\"userSpaceOnUse\" width=\"6\" height=\"6\">"
          "<path d=\"M0,6 L6,0\" stroke=\"#000\" stroke-opacity=\"0.3\"/></pattern>"
          "<pattern id=\"cross\" patternUnits=\"userSpaceOnUse\" width=\"6\" height=\"6\">"
          "<path d=\"M0,0 L6,6\" stroke=\"#000\" stroke-opacity=\"0.3\"/></pattern>");
  if (t->comm)
    fprintf(f, "<marker id=\"arrow-act\" viewBox=\"0 0 6 6\" refX=\"6\" refY=\"3\" markerWidth=\"5\" "
            "markerHeight=\"5\" orient=\"auto\"><path d=\"M0,0 L6,3 L0,6 z\" fill=\"%s\"/></marker>"
            "<marker id=\"arrow-grad\" viewBox=\"0 0 6 6\" refX=\"6\" refY=\"3\" markerWidth=\"5\" "
            "markerHeight=\"5\" orient=\"auto\"><path d=\"M0,0 L6,3 L0,6 z\" fill=\"%s\"/></marker>",
            ACT_ARROW, GRAD_ARROW);
  fprintf(f, "</defs>\n");
  fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"#fff\"/>\n");
  fprintf(f, "<text x=\"%.2f\" y=\"22\" font-size=\"15\" font-weight=\"bold\">%s</text>\n", g.left,
          t->title);
  fprintf(f, "<text x=\"%.2f\" y=\"40\" font-size=\"11\">%s</text>\n", g.left, t->subtitle);
  svg_rows(f, t, &g);
  svg_axis_and_legend(f, t, &g);
  fprintf(f, "</svg>\n");
}
