#!/usr/bin/env python3
"""The tables of benchmarks/cluster_bench.sh, from the measurements it wrote.

  python3 benchmarks/cluster/report.py [DIR]     (default benchmarks/data/cluster)

Reads DIR/steps.csv and DIR/allreduce.csv (and DIR/links.txt, the measured
links, and DIR/failures.txt, the PyTorch runs that failed, when present) and prints medians over the runs of each
configuration: ddp against PyTorch on each link, flat Gloo against the
hierarchical backend, the comm hooks, and all-reduce times by size.
Standard library only; exit 2 when a file is missing.
"""
import csv
import os
import statistics
import sys
from collections import defaultdict

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from cost_model import table  # noqa: E402  (the same table layout as the cost model's)


def read(path):
    """The rows of a CSV file as dicts; exits 2 when it is missing."""
    if not os.path.isfile(path):
        print(f"report.py: error: {path} not found; run benchmarks/cluster_bench.sh first",
              file=sys.stderr)
        sys.exit(2)
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def fmt(value, digits):
    """A number with `digits` decimals, or n/a."""
    return "n/a" if value is None else f"{value:.{digits}f}"


def ratio(a, b):
    """a / b, or None where either is missing."""
    return None if a is None or b is None or b == 0 else a / b


def main():
    """Prints every table."""
    folder = sys.argv[1] if len(sys.argv) > 1 else "benchmarks/data/cluster"
    steps, allreduce = read(os.path.join(folder, "steps.csv")), read(
        os.path.join(folder, "allreduce.csv"))
    runs = defaultdict(lambda: defaultdict(list))
    for r in steps:
        key = (r["side"], r["model"], r["link"], f"{r['nodes']}x{r['ranks_per_node']}",
               r["backend"], r["hook"])
        for field in ("images_per_s", "step_ms", "nosync_step_ms", "tx_bytes_per_step"):
            runs[key][field].append(float(r[field]))

    def med(side, model, link, layout, backend, hook, field):
        values = runs.get((side, model, link, layout, backend, hook), {}).get(field)
        return statistics.median(values) if values else None

    def exposed(*key):
        step, nosync = med(*key, "step_ms"), med(*key, "nosync_step_ms")
        return None if step is None or nosync is None else step - nosync

    def megabytes(*key):
        value = med(*key, "tx_bytes_per_step")
        return None if value is None else value / 1e6

    counts = sorted({len(v["step_ms"]) for v in runs.values()})
    print(f"medians of {'/'.join(map(str, counts))} runs per configuration; exposed = step - "
          "no_sync step (ms); MB = bytes node 0 sent per step")
    links_file = os.path.join(folder, "links.txt")
    if os.path.isfile(links_file):
        with open(links_file) as f:
            print("links as measured between two nodes:\n" + f.read().rstrip())
    failures_file = os.path.join(folder, "failures.txt")
    if os.path.isfile(failures_file):
        with open(failures_file) as f:
            print("runs that failed (left out of the medians):\n" + f.read().rstrip())
    links = sorted({r["link"] for r in steps if r["nodes"] != "1"},
                   key=lambda l: float(l.split("gbit")[0]))
    for link in links:
        print(f"\n== {link}: 2 nodes x 1 rank, Gloo, ddp against PyTorch")
        rows = []
        for model in ("linear", "convnet", "mlp"):
            d = ("ddp", model, link, "2x1", "gloo", "none")
            p = ("pytorch", model, link, "2x1", "gloo", "none")
            rows.append([model, fmt(med(*d, "images_per_s"), 0), fmt(med(*p, "images_per_s"), 0),
                         fmt(ratio(med(*d, "images_per_s"), med(*p, "images_per_s")), 2),
                         fmt(med(*d, "step_ms"), 2), fmt(med(*p, "step_ms"), 2),
                         fmt(exposed(*d), 2), fmt(exposed(*p), 2),
                         fmt(megabytes(*d), 4), fmt(megabytes(*p), 4)])
        table(["model", "ddp img/s", "PT img/s", "ratio", "ddp step", "PT step", "ddp exposed",
               "PT exposed", "ddp MB", "PT MB"], rows)
        print(f"\n== {link}: 2 nodes x 2 ranks, ddp: flat Gloo against the hierarchical backend")
        rows = []
        for model in ("convnet", "mlp"):
            f = ("ddp", model, link, "2x2", "gloo", "none")
            h = ("ddp", model, link, "2x2", "hierarchical", "none")
            rows.append([model, fmt(med(*f, "images_per_s"), 0), fmt(med(*h, "images_per_s"), 0),
                         fmt(ratio(med(*h, "images_per_s"), med(*f, "images_per_s")), 2),
                         fmt(exposed(*f), 1), fmt(exposed(*h), 1), fmt(megabytes(*f), 2),
                         fmt(megabytes(*h), 2)])
        table(["model", "flat img/s", "hier img/s", "hier/flat", "flat exposed", "hier exposed",
               "flat MB", "hier MB"], rows)
    hooked = sorted({r["link"] for r in steps if r["hook"] != "none" and r["nodes"] != "1"})
    for link in hooked:
        print(f"\n== {link}: comm hooks, mlp, 2 nodes x 1 rank (speedup: over no hook)")
        rows = []
        for hook in ("none", "fp16", "bf16", "powersgd"):
            d = ("ddp", "mlp", link, "2x1", "gloo", hook)
            p = ("pytorch", "mlp", link, "2x1", "gloo", hook)
            rows.append([hook, fmt(med(*d, "images_per_s"), 1), fmt(med(*p, "images_per_s"), 1),
                         fmt(megabytes(*d), 2), fmt(megabytes(*p), 2),
                         fmt(exposed(*d), 1), fmt(exposed(*p), 1),
                         fmt(ratio(med(*d, "images_per_s"),
                                   med("ddp", "mlp", link, "2x1", "gloo", "none",
                                       "images_per_s")), 2),
                         fmt(ratio(med(*p, "images_per_s"),
                                   med("pytorch", "mlp", link, "2x1", "gloo", "none",
                                       "images_per_s")), 2)])
        table(["hook", "ddp img/s", "PT img/s", "ddp MB", "PT MB", "ddp exposed", "PT exposed",
               "ddp speedup", "PT speedup"], rows)
    # All-reduce, us per call, by size.
    columns, times, sizes = [], defaultdict(list), set()
    for r in allreduce:
        column = (f"{r['link']} {r['nodes']}x{r['ranks_per_node']} {r['backend']}"
                  f"{'' if r.get('dtype', 'float32') == 'float32' else ' ' + r['dtype']}")
        if column not in columns:
            columns.append(column)
        times[column, int(r["bytes"])].append(float(r["seconds"]) * 1e6)
        sizes.add(int(r["bytes"]))
    rounds = sorted({len(v) for v in times.values()})
    for title, keep in (("one node (shm and Gloo over loopback)", lambda c: c.startswith("shm")),
                        ("the links", lambda c: not c.startswith("shm"))):
        chosen = [c for c in columns if keep(c)]
        print(f"\n== all-reduce on {title}: us per call (each run: the median of 5 batches;"
              f" here the median of {'/'.join(map(str, rounds))} runs)")
        table(["bytes"] + chosen,
              [[s] + [fmt(statistics.median(times[c, s]) if (c, s) in times else None, 1)
                      for c in chosen] for s in sorted(sizes)])
    return 0


if __name__ == "__main__":
    sys.exit(main())
