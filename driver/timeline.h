/* The SVG timeline of a pipeline step, drawn like the figures of Narayanan
 * et al.: one row per stage, every action a block as long as it took.
 * `shardc schedule --svg` draws the verifier's unit-time timeline with it,
 * `shardc simulate --svg` the simulator's timeline in seconds. */
#ifndef SHARDC_DRIVER_TIMELINE_H
#define SHARDC_DRIVER_TIMELINE_H

#include <stdbool.h>
#include <stdio.h>

#include "../abi/schedule.h"

typedef struct DrvTimeline {
  const RtSchedule *s;          /* the tables drawn */
  double *const *start, *const *end; /* [stage][action], when each ran */
  double makespan;              /* when the last stage finishes */
  double scale;                 /* times are multiplied by this for the axis (1 for units) */
  double min_unit, max_unit;    /* pixels per scaled time unit: the bounds */
  const char *title, *subtitle; /* the two heading lines (SVG-escaped text) */
  const char *time_caption;     /* how the legend names the axis's unit */
  /* Communication too: the optimizer step on the compute row, a lane under
   * each stage with its message waits and gradient reductions, and each
   * pipeline message as a thin arrow from its sender to its receiver. */
  bool comm;
} DrvTimeline;

void drv_timeline_svg(FILE *f, const DrvTimeline *t);

#endif
