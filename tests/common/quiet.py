"""Whether this machine's cores are this test's: one busy process per core,
each must get 80% of a core over half a second of its own CPU time. Prints
what each got; exit 0 when quiet, 1 when shared. The timing tests
(planner/trace_run.sh, planner/program_cost_trace.sh) ask it after a miss,
so that a miss on a machine other jobs share is not held against a model.
"""
import os, sys, time
cores = os.cpu_count() or 1
r, w = os.pipe()
for i in range(cores):
    if os.fork() == 0:
        t0, c0 = time.monotonic(), time.process_time()
        while time.process_time() - c0 < 0.5:
            pass
        os.write(w, b"%f\n" % (0.5 / (time.monotonic() - t0)))
        os._exit(0)
for i in range(cores):
    os.wait()
os.close(w)
shares = [float(x) for x in os.read(r, 4096).split()]
print("probe: %d busy processes got %s of a core each" % (cores, ", ".join("%.2f" % s for s in shares)))
sys.exit(0 if min(shares) >= 0.8 else 1)
