#!/bin/bash
# measure.sh FILE: `$SHARDC hw --measure -o FILE` at small sizes,
# then `shardc hw FILE` must read it back with plausible positive numbers
# (a CPU between 0.1 GFLOP/s and 100 TFLOP/s, memory and links between
# 0.01 and 10000 GB/s, latencies under 10 ms, an op's fixed cost under
# 10 ms, the optimizer's passes between 0.01 and 10000 GB/s, no streaming
# multiprocessors and no GPU workspaces; with more than one core also the
# cores and one core's rates).
set -euo pipefail
. "$SHARDC_SRC/tests/common/checks.sh"
file=$1
rm -f "$file"
"$SHARDC" hw --measure -o "$file" --max-size 128 >/dev/null
"$SHARDC" hw "$file" >"$file.read"
awk -F' = ' '
  function need(key, lo, hi) {
    if (!(key in v)) { print "missing " key; bad = 1; return }
    if (!(v[key] + 0 > lo && v[key] + 0 < hi)) { print key " = " v[key] " not in (" lo ", " hi ")"; bad = 1 }
  }
  /=/ { v[$1] = $2 }
  END {
    need("peak_bf16_tflops", 1e-4, 100); need("peak_fp32_tflops", 1e-4, 100)
    need("memory_gib", 0.01, 1e6); need("memory_bw_gbs", 0.01, 1e4)
    need("gpus_per_node", 0.5, 1e5)
    need("intra_bw_gbs", 0.01, 1e4); need("inter_bw_gbs", 0.01, 1e4)
    need("intra_latency_us", 0, 1e4); need("kernel_us", 0, 1e4)
    need("gemm_efficiency", 0, 1.000001); need("attention_efficiency", 0, 1.000001)
    need("memory_efficiency", 0, 1.000001); need("op_us", -1e-9, 1e4)
    need("update_bw_gbs", 0.01, 1e4)
    if ("sms" in v) { print "sms = " v["sms"] " on a CPU"; bad = 1 }
    if (v["workspace_mib"] + 0 != 0 || v["fragmentation"] + 0 != 0) {
      print "GPU memory terms on a CPU: workspace_mib " v["workspace_mib"] ", fragmentation " v["fragmentation"]; bad = 1
    }
    # On more than one core, the one-core figures of a rank among others.
    if (v["gpus_per_node"] + 0 > 1) {
      need("cores", 1.5, 1e5); need("core_peak_tflops", 1e-4, 100); need("core_memory_bw_gbs", 0.01, 1e4)
      need("core_op_us", -1e-9, 1e4); need("core_update_bw_gbs", 0.01, 1e4)
    }
    if (bad) exit 1
    print "measured description reads back: peak " v["peak_fp32_tflops"] " TFLOP/s, copy " \
          v["memory_bw_gbs"] " GB/s, link " v["intra_bw_gbs"] " GB/s, " v["intra_latency_us"] " us, op " \
          v["op_us"] " us, update " v["update_bw_gbs"] " GB/s"
  }' "$file.read"
