"""gdn-ops perf on one thread: cpu_ms, the process's CPU time over the span ms times, cannot exceed
ms (one thread computes, nothing spins). It did for GGML when the CPU clock also covered the copy
of ggml's result out of the graph while the wall clock did not.

    python3 check_cpu_time.py PATH_TO_GDN_OPS BACKEND
"""
import json
import subprocess
import sys

exe, backend = sys.argv[1], sys.argv[2]
args = [exe, "perf", "-b", backend, "-t", "1", "--preset", "qwen3.5-27b", "-o", "GATED_DELTA_NET", "-p", "T=(1|16),.*beta=rand\\)$",
        "--min-time", "0.05", "--output", "json"]
r = subprocess.run(args, capture_output=True, text=True)
if r.returncode != 0:
    sys.exit(f"exit status {r.returncode}\n{r.stderr}")
timed = [x for x in json.loads(r.stdout)["results"] if x["verdict"] == "timed"]
if len(timed) != 2:
    sys.exit(f"{len(timed)} cases timed, expected 2: {r.stdout}")
for x in timed:
    ms, cpu_ms = x["metrics"]["ms"], x["metrics"]["cpu_ms"]
    print(f"{x['case']} [{backend}]: ms {ms:.4f}, cpu_ms {cpu_ms:.4f}")
    # Each run's CPU window nests inside its wall window, so on one thread its CPU time is at
    # most its wall time and the medians are too; the margin covers the two clocks' sources.
    if not 0 < cpu_ms <= ms * 1.01 + 0.002:
        sys.exit(f"cpu_ms {cpu_ms} is not within ms {ms} on one thread")
