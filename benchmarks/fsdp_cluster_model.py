#!/usr/bin/env python3
"""FSDP's ways on the simulated cluster: each measured figure beside the cost
model's prediction (benchmarks/fsdp_cluster_bench.sh writes the input).

  python3 benchmarks/fsdp_cluster_model.py [DIR]   (benchmarks/data/fsdp-cluster)

Note [What FSDP sends between nodes]
N nodes of S ranks, P the model's fp32 parameter bytes, L those of the unit
the forward runs last (the backward starts with it, still gathered). The
world's collectives run on the hierarchical backend: shared memory in the
node, a ring over Gloo between one leader per node. Per step, node 0 sends
over its link:
  ddp          the leaders' all-reduce of the gradients: 2 (N-1)/N P;
  fsdp         all-gathers of every unit in the forward and of all but the
               last in the backward, and a reduce-scatter of every
               gradient, each moving (N-1)/N of its buffer across a node:
               (N-1)/N (3P - L);
  fsdp-hybrid  gathers and reduce-scatters stay in the node; each of its S
               ranks all-reduces its shard (P/S) with the ranks holding
               the same shard on the other nodes: 2 (N-1)/N P;
  fsdp-hpz     the forward's gathers and the reduce-scatters cross nodes,
               the backward's gathers stay in the node: 2 (N-1)/N P.
A step at link rate r (links.txt's measured throughput) is predicted from
the same way's step at the fastest rate measured: t(r) = t(fastest) +
B (1/r - 1/r_fastest), B the predicted bytes: the time on the link is not
hidden behind compute (a CPU rank waits for its collectives), and the
latency terms, the same at both rates, cancel.

Standard library only. Exit 0 when a prediction misses (this is a report);
2 when an input is missing or malformed.
"""
import os
import re
import statistics
import sys

from cost_model import InputError, read_rows  # the same directory

COLUMNS = ("model,way,link,rate_gbit,delay_ms,nodes,ranks_per_node,parameters,step_ms,"
           "tx_bytes_per_step,last_unit_bytes").split(",")
WAYS = ("ddp", "fsdp", "fsdp-hybrid", "fsdp-hpz")
MIB = 1 << 20


def predicted_bytes(way, nodes, parameter_bytes, last_unit_bytes):
    """Note [What FSDP sends between nodes]."""
    cross = (nodes - 1) / nodes
    if way == "fsdp":
        return cross * (3 * parameter_bytes - last_unit_bytes)
    if way in ("ddp", "fsdp-hybrid", "fsdp-hpz"):
        return 2 * cross * parameter_bytes
    raise InputError(f"unknown way '{way}'")


def read_runs(path):
    return read_rows(path, COLUMNS, ("rate_gbit", "step_ms", "tx_bytes_per_step", "parameters",
                                     "last_unit_bytes", "nodes"))


def read_links(path):
    """Measured throughput (bytes/s) per tc rate, from links.txt's lines
    "1gbit-0.2ms: rtt_ms=0.49 throughput_gbit=0.998"."""
    links = {}
    if not os.path.isfile(path):
        raise InputError(f"{path}: file not found")
    with open(path) as f:
        for line in f:
            m = re.match(r"(\S+?)gbit-\S+: .*throughput_gbit=([0-9.]+)", line)
            if m:
                links[float(m.group(1))] = float(m.group(2)) * 1e9 / 8
    return links


def main():
    directory = sys.argv[1] if len(sys.argv) > 1 else "benchmarks/data/fsdp-cluster"
    try:
        runs = read_runs(os.path.join(directory, "runs.csv"))
        links = read_links(os.path.join(directory, "links.txt"))
    except InputError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    groups = {}
    for r in runs:
        groups.setdefault((r["model"], r["way"], r["rate_gbit"]), []).append(r)
    fastest = max(links) if links else None
    print(f"{'model':<12} {'way':<12} {'link':>7} {'step ms':>9} {'model ms':>9} {'error':>7} "
          f"{'MiB/step':>9} {'model MiB':>9} {'error':>7}")
    for (model, way, rate), rows in sorted(groups.items(),
                                           key=lambda kv: (kv[0][0], WAYS.index(kv[0][1])
                                                           if kv[0][1] in WAYS else 9, kv[0][2])):
        step = statistics.median(r["step_ms"] for r in rows)
        sent = statistics.median(r["tx_bytes_per_step"] for r in rows)
        nodes = int(rows[0]["nodes"])
        try:
            bytes_ = predicted_bytes(way, nodes, 4 * rows[0]["parameters"],
                                     rows[0]["last_unit_bytes"])
        except InputError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        base = groups.get((model, way, fastest))
        if base and rate != fastest and rate in links:
            base_step = statistics.median(r["step_ms"] for r in base)
            ms = base_step + bytes_ * (1 / links[rate] - 1 / links[fastest]) * 1e3
            model_ms, step_error = f"{ms:9.0f}", f"{(ms - step) / step:+7.0%}"
        else:
            model_ms, step_error = f"{'(base)':>9}", f"{'':>7}"
        bytes_error = f"{(bytes_ - sent) / sent:+7.1%}" if sent > 0 else f"{'-':>7}"
        print(f"{model:<12} {way:<12} {rate:>5g}G {step:9.0f} {model_ms} {step_error} "
              f"{sent / MIB:9.1f} {bytes_ / MIB:9.1f} {bytes_error}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
