"""gdn-ops --output json and --output csv, read back by Python's own parsers, for every mode.

    python3 check_output_formats.py PATH_TO_GDN_OPS

Each run is made twice, as JSON and as CSV. JSON: one document whose counts agree with its
records, every record with a verdict and numeric metrics. CSV: a header, then rows as wide as it,
a column per metric holding a number or nothing. For test (deterministic) the CSV and JSON
numbers must be the same doubles, written at full precision. Exits non-zero on the first
mismatch, saying which run and what.
"""
import csv
import io
import json
import math
import subprocess
import sys

VERDICTS = {"OK", "FAIL", "not supported", "timed", "supported"}
RECORD_COLUMNS = ["mode", "backend", "group", "case", "verdict", "note"]
MODEL = ["--preset", "qwen3.5-27b"]
LIST_PRESETS = ["list", "--preset"]

# (arguments, expected exit status); small cases only: the suite runs on two cores.
RUNS = [
    (["test", "-b", "CPU", "-p", "^fd$", "-o", "GATED_DELTA_NET"], 0),
    (["test", "-b", "CPU", "-p", "T=1,", "-o", "GATED_DELTA_NET"] + MODEL, 0),
    (["grad", "-b", "REF", "-p", "Sk=1,", "--samples", "2"], 0),
    (["perf", "-b", "CPU", "-p", "Hv=48,T=1,.*beta=rand\\)", "-o", "GATED_DELTA_NET", "--min-time", "0.01"], 0),
    (["support", "-b", "REF,CPU", "-p", "^fd$"], 0),
    (["list"], 0),
    (["list", "perf"], 0),
    (LIST_PRESETS, 0),
    (["list", "fd"] + MODEL, 1),  # a model has no fd group: nothing to list, a valid empty document
    (["test", "-b", "CPU", "-p", "nomatch"], 1),
]


def fail(run, what):
    sys.exit(f"gdn-ops {' '.join(run)}: {what}")


def gdn_ops(exe, args, output, expected_status):
    r = subprocess.run([exe] + args + ["--output", output], capture_output=True, text=True)
    if r.returncode != expected_status:
        fail(args, f"--output {output}: exit status {r.returncode}, expected {expected_status}\n{r.stderr}")
    return r.stdout


def number_or_none(run, text, where):
    if text == "":
        return None
    try:
        return float(text)
    except ValueError:
        fail(run, f"{where}: {text!r} is not a number")


def check_json(run, doc):
    mode = run[0]
    if doc.get("mode") != mode:
        fail(run, f"JSON mode {doc.get('mode')!r}")
    if MODEL[1] in run and "model" not in doc:
        fail(run, "JSON has no model")
    if run == LIST_PRESETS:
        for p in doc["presets"]:
            if not (p["Hv"] % p["Hk"] == 0 and p["conv_dim"] == 2 * p["Hk"] * p["Sk"] + p["Hv"] * p["Sv"]):
                fail(run, f"JSON preset {p}")
        return [(p["name"], p["Sk"], p["Sv"], p["Hk"], p["Hv"], p["source"]) for p in doc["presets"]]
    if mode == "list":
        cases = doc["cases"]
        counts = {}
        for c in cases:
            if not c["case"].startswith("GATED_DELTA_NET"):
                fail(run, f"JSON case {c['case']!r}")
            counts[c["group"]] = counts.get(c["group"], 0) + 1
        if counts != doc["groups"]:
            fail(run, f"JSON groups {doc['groups']} for cases counting {counts}")
        return [(c["group"], c["case"]) for c in cases]
    tally = {v: 0 for v in VERDICTS}
    for r in doc["results"]:
        if r["verdict"] not in VERDICTS:
            fail(run, f"JSON verdict {r['verdict']!r}")
        tally[r["verdict"]] += 1
        for name, value in r["metrics"].items():
            if value is not None and not isinstance(value, (int, float)):
                fail(run, f"JSON metric {name} = {value!r}")
    expected = {"passed": tally["OK"], "failed": tally["FAIL"], "skipped": tally["not supported"]}
    if mode == "perf":
        expected["timed"] = tally["timed"]
        for name in ("startup_peak_GFLOP/s", "peak_threads", "peak_isa"):
            if name not in doc:
                fail(run, f"JSON has no {name}")
    if mode == "support":
        expected["supported"] = tally["supported"]
    for key, n in expected.items():
        if doc.get(key) != n:
            fail(run, f"JSON {key} = {doc.get(key)} but {n} records say so")
    return [(r["backend"], r["case"], r["verdict"], r["metrics"]) for r in doc["results"]]


def check_csv(run, text):
    rows = list(csv.reader(io.StringIO(text)))
    if not rows:
        fail(run, "CSV has no header")
    header = rows[0]
    if run == LIST_PRESETS:
        if header[:2] != ["mode", "preset"]:
            fail(run, f"CSV header {header}")
        return [(r[1], int(r[2]), int(r[3]), int(r[4]), int(r[5]), r[9]) for r in rows[1:]]
    fixed = ["mode", "group", "case"] if run[0] == "list" else RECORD_COLUMNS
    if header[: len(fixed)] != fixed:
        fail(run, f"CSV header {header}")
    if MODEL[1] in run and "model" not in header:
        fail(run, "CSV has no model column")
    out = []
    for row in rows[1:]:
        if len(row) != len(header):
            fail(run, f"CSV row of {len(row)} fields under a header of {len(header)}: {row}")
        record = dict(zip(header, row))
        if record["mode"] != run[0]:
            fail(run, f"CSV mode {record['mode']!r}")
        if run[0] == "list":
            out.append((record["group"], record["case"]))
            continue
        if record["verdict"] not in VERDICTS:
            fail(run, f"CSV verdict {record['verdict']!r}")
        metrics = {}
        for name in header[len(fixed):]:
            if name in ("model", "peak_isa"):
                continue
            value = number_or_none(run, record[name], f"CSV column {name}")
            if value is not None:
                metrics[name] = value
        out.append((record["backend"], record["case"], record["verdict"], metrics))
    return out


def main():
    exe = sys.argv[1]
    for args, status in RUNS:
        from_json = check_json(args, json.loads(gdn_ops(exe, args, "json", status)))
        from_csv = check_csv(args, gdn_ops(exe, args, "csv", status))
        if len(from_json) != len(from_csv):
            fail(args, f"{len(from_json)} JSON records, {len(from_csv)} CSV rows")
        if status == 0 and not from_json:
            fail(args, "no records")
        if args[0] == "perf":
            for backend, case, verdict, metrics in from_csv:
                for name in ("ms", "cpu_ms", "tok/s", "GFLOP/s", "runs"):
                    if not metrics.get(name, 0) > 0:
                        fail(args, f"CSV {case} [{backend}]: {name} = {metrics.get(name)}")
        if args[0] in ("test", "list"):  # deterministic: the same records, the same doubles
            if from_json != from_csv:
                fail(args, f"JSON and CSV differ:\n{from_json[:2]}\n{from_csv[:2]}")
        if args[0] == "test" and from_json:
            # Full precision: some metric carries more than the 6 digits %g would keep.
            values = [v for _, _, _, m in from_json for v in m.values() if v]
            if not any(float(f"{v:.6g}") != v for v in values):
                fail(args, f"every metric has at most 6 significant digits: {values[:4]}")
        print(f"gdn-ops {' '.join(args)}: JSON and CSV read back ({len(from_json)} records)")


if __name__ == "__main__":
    main()
