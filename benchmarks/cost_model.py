#!/usr/bin/env python3
"""An alpha-beta cost model of data-parallel training (docs/design/cost-model.md).

Fits all-reduce costs to benchmarks/cluster_bench.sh's measurements, checks
them, predicts DDP step times from the measured compute time, and then
predicts step time and scaling efficiency on GPU clusters.

  python3 benchmarks/cost_model.py [--measurements DIR] [--backward-fraction F]

Standard library only. Exit 0 even when a validation target is missed (this
is a report); exit 2 when an input file is missing or malformed.
"""
import argparse
import csv
import math
import os
import statistics
import sys

MIB = 1 << 20
ALLREDUCE_COLUMNS = "link,rate_gbit,delay_ms,nodes,ranks_per_node,backend,bytes,seconds".split(",")
# allreduce.csv may also have a `dtype` column (float32 when absent); rows of
# another dtype are fitted on their own, as backend "BACKEND:DTYPE".
STEP_COLUMNS = ("side,model,link,rate_gbit,delay_ms,nodes,ranks_per_node,backend,hook,"
                "param_bytes,buckets,step_ms,nosync_step_ms,images_per_s,tx_bytes_per_step").split(",")
# steps.csv may also have `nosync_backward_ms`, the time inside backward of a
# no_sync step: then b, the share of the step in backward, is measured per
# run instead of assumed (--backward-fraction).
# idle.csv (optional): the smallest all-reduce timed after the caller spun
# idle_us (Note [An all-reduce after idle time]).
IDLE_COLUMNS = "link,nodes,ranks_per_node,backend,bytes,idle_us,seconds".split(",")
TARGET = 0.15  # The brief's bound on |predicted - measured| / measured per step row.

class InputError(Exception):
    """A missing or malformed input file; main() turns it into exit status 2."""

# ----------------------------------------------------------------- input

def read_rows(path, columns, numeric, optional=(), positive=()):
    """Reads a CSV with at least `columns`; converts `numeric` ones to float.

    Empty cells are allowed only in `optional` columns (they become None);
    `positive` columns must be > 0. Errors name the file and line."""
    if not os.path.isfile(path):
        raise InputError(f"{path}: file not found")
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        missing = [c for c in columns if c not in (reader.fieldnames or [])]
        if missing:
            raise InputError(f"{path}:1: header lacks column(s) {', '.join(missing)}; "
                             f"expected {','.join(columns)}")
        rows = []
        for row in reader:
            where = f"{path}:{reader.line_num}: column"
            for c in numeric:
                text = (row.get(c) or "").strip()
                try:
                    row[c] = None if text == "" and c in optional else float(text)
                except ValueError:
                    raise InputError(f"{where} '{c}': expected a number, got '{text}'") from None
                if c in positive and row[c] <= 0:
                    raise InputError(f"{where} '{c}' must be positive, got '{text}'")
            rows.append(row)
    if not rows:
        raise InputError(f"{path}: no data rows")
    return rows

def medians(rows, key_fields, value_fields):
    """One row per distinct key: the first row's fields, with each of
    `value_fields` replaced by its median over the key's rows (None values
    ignored), and `runs`, how many rows went into it. Keeps first-seen order.

    The benchmark repeats every measurement once per round (Note [All-reduce
    in every round] in benchmarks/cluster_bench.sh); the model is fitted to,
    and checked against, each configuration's median."""
    groups = {}
    for r in rows:
        groups.setdefault(tuple(r.get(k) for k in key_fields), []).append(r)
    out = []
    for group in groups.values():
        merged = dict(group[0])
        for field in value_fields:
            values = [r[field] for r in group if r[field] is not None]
            merged[field] = statistics.median(values) if values else None
        merged["runs"] = len(group)
        merged["run_values"] = {f: [r[f] for r in group] for f in value_fields}
        out.append(merged)
    return out

# ----------------------------------------------------------------- fitting

def solve(a, b):
    """Solves a x = b (small, dense) by Gaussian elimination with pivoting."""
    n = len(b)
    m = [list(a[i]) + [b[i]] for i in range(n)]
    for col in range(n):
        piv = max(range(col, n), key=lambda r: abs(m[r][col]))
        if abs(m[piv][col]) < 1e-12:
            raise ValueError("singular normal equations")
        m[col], m[piv] = m[piv], m[col]
        for r in range(col + 1, n):
            f = m[r][col] / m[col][col]
            for c in range(col, n + 1):
                m[r][c] -= f * m[col][c]
    x = [0.0] * n
    for r in reversed(range(n)):
        x[r] = (m[r][n] - sum(m[r][c] * x[c] for c in range(r + 1, n))) / m[r][r]
    return x

def relative_lsq(features, measured):
    """Minimises sum(((x . theta) - y) / y)^2 with theta >= 0.

    Dividing each row by its measurement makes this ordinary least squares
    (weight 1/y^2). Columns are scaled to unit norm before the 3x3 (or 2x2)
    normal equations are solved, since they differ by ~10 orders of
    magnitude. A negative coefficient is clamped to 0 and the rest refitted."""
    k = len(features[0])
    rows = [[x / y for x in xs] for xs, y in zip(features, measured)]
    active = list(range(k))
    while True:
        norms = [math.sqrt(sum(r[j] ** 2 for r in rows)) or 1.0 for j in active]
        ata = [[sum(r[i] * r[j] for r in rows) / (ni * nj) for j, nj in zip(active, norms)]
               for i, ni in zip(active, norms)]
        atb = [sum(r[i] for r in rows) / ni for i, ni in zip(active, norms)]
        sol = [v / n for v, n in zip(solve(ata, atb), norms)]
        theta = [0.0] * k
        for j, v in zip(active, sol):
            theta[j] = v
        if min(sol) >= 0:
            return theta
        active.remove(active[sol.index(min(sol))])

def ring_features(m, p):
    """Coefficients of (alpha, beta, gamma) in the ring all-reduce time."""
    return [2 * (p - 1), 2 * (p - 1) / p * m, (p - 1) / p * m]

def separable(features):
    """False when the beta and gamma columns are proportional (cosine ~ 1)."""
    b = [f[1] for f in features]
    g = [f[2] for f in features]
    dot = sum(x * y for x, y in zip(b, g))
    return dot / math.sqrt(sum(x * x for x in b) * sum(y * y for y in g)) < 1 - 1e-9

def fit_ring(rows):
    """Fits alpha, beta, gamma for one (link, backend) from all-reduce rows.

    In the ring formula beta and gamma both multiply (p-1)/p*m, so no set of
    (m, p) separates them: only 2*beta + gamma is identified. We then fold
    gamma into an effective beta (beta_eff = beta + gamma/2) and say so."""
    feats = [ring_features(r["bytes"], r["nodes"] * r["ranks_per_node"]) for r in rows]
    meas = [r["seconds"] for r in rows]
    if separable(feats):
        a, b, g = relative_lsq(feats, meas)
        fit = {"alpha": a, "beta": b, "gamma": g, "folded": False, "form": "sum"}
    else:
        a, b = relative_lsq([f[:2] for f in feats], meas)
        fit = {"alpha": a, "beta": b, "gamma": 0.0, "folded": True, "form": "sum"}
    overlapped = fit_overlapped(feats, meas)
    if overlapped and fit_error(overlapped, rows) < fit_error(fit, rows):
        return overlapped
    return fit

def fit_overlapped(feats, meas):
    """Fits the overlapped form T = max(latency, bandwidth) terms.

    Note [Latency hidden behind the transfer]
    On a link with a delay, Gloo's ring streams its chunks over TCP and the
    per-step latency overlaps the transfer once a message is large enough:
    the measured times are flat up to ~64 KiB, then proportional to size
    (1 Gbit/s, 0.2 ms: 1.29 ms at 4 KiB, 1.36 ms at 64 KiB, 2.09 ms at
    256 KiB = 256 KiB at 1 Gbit/s). A sum α + β·m cannot follow that bend
    (up to 36% off); max(2(p-1)·α, 2(p-1)/p·m·β) does. Alternating: β from
    the rows the bandwidth term decides, α from the others, each by relative
    least squares, until the split stops changing. None when it cannot."""
    def split(alpha, beta):
        return [f[1] * beta >= f[0] * alpha for f in feats]
    # Start: β from the largest message, α from the smallest.
    big = max(range(len(feats)), key=lambda i: feats[i][1])
    small = min(range(len(feats)), key=lambda i: feats[i][1])
    beta, alpha = meas[big] / feats[big][1], meas[small] / feats[small][0]
    for _ in range(20):
        bw = split(alpha, beta)
        bw_rows = [i for i in range(len(feats)) if bw[i]]
        lat_rows = [i for i in range(len(feats)) if not bw[i]]
        if not bw_rows or not lat_rows:
            return None
        # Relative least squares of one coefficient: sum(x/y) / sum((x/y)^2).
        beta = (sum(feats[i][1] / meas[i] for i in bw_rows) /
                sum((feats[i][1] / meas[i]) ** 2 for i in bw_rows))
        alpha = (sum(feats[i][0] / meas[i] for i in lat_rows) /
                 sum((feats[i][0] / meas[i]) ** 2 for i in lat_rows))
        if split(alpha, beta) == bw:
            break
    return {"alpha": alpha, "beta": beta, "gamma": 0.0, "folded": True, "form": "max"}

def fit_error(fit, rows):
    """Sum of squared relative errors of a fit over its rows."""
    return sum(((t_ring(fit, r["bytes"], r["nodes"] * r["ranks_per_node"]) - r["seconds"]) /
                r["seconds"]) ** 2 for r in rows)

def t_ring(fit, m, p):
    """Ring all-reduce time of m bytes over p ranks with a fitted model."""
    if p <= 1:
        return 0.0
    a, b, g = ring_features(m, p)
    if fit.get("form") == "max":  # Note [Latency hidden behind the transfer]
        return max(a * fit["alpha"], b * fit["beta"] + g * fit["gamma"])
    return a * fit["alpha"] + b * fit["beta"] + g * fit["gamma"]

def t_shm_broadcast(fit, m, p):
    """Shared-memory broadcast: the root copies m bytes into its slot, the
    others copy them out (src/comm/shm/communicator.cpp): two copies in series
    and one barrier per round, i.e. half the all-reduce's latency term.
    Uses the all-reduce's per-byte cost, which may include a reduction share
    (an overestimate, stated in the doc)."""
    if p <= 1:
        return 0.0
    return (p - 1) * fit["alpha"] + 2 * m * (fit["beta"] + fit["gamma"] / 2)

def t_hierarchical(fits, link, m, nodes, local):
    """Hierarchical backend: shm all-reduce within the node, ring between node
    leaders over `link`, shm broadcast from the leader (the three phases of
    src/comm/backends/hierarchical_process_group.cpp, which do not overlap)."""
    shm = fits.get(("shm", "shm", layout(1, local)))
    net = fits.get((link, "gloo", layout(nodes, 1)))
    if shm is None or (nodes > 1 and net is None):
        return None
    inter = t_ring(net, m, nodes) if nodes > 1 else 0.0
    return t_ring(shm, m, local) + inter + t_shm_broadcast(shm, m, local)

def layout(nodes, local):
    """The key of a rank layout: "2x1" is 2 nodes of 1 rank."""
    return f"{int(nodes)}x{int(local)}"

def allreduce_time(fits, link, backend, m, nodes, local):
    """Predicted seconds for one all-reduce, or None when no fit applies."""
    if nodes == 1:
        link = "shm"  # One node: no link, whatever link the row names.
    if backend == "hierarchical":
        return t_hierarchical(fits, link, m, nodes, local)
    fit = fits.get((link, backend, layout(nodes, local)))
    return None if fit is None else t_ring(fit, m, nodes * local)

# ----------------------------------------------------------------- idle time

def idle_penalties(rows, ar_rows=()):
    """What an all-reduce costs after the channel sat idle, per (link,
    backend, layout): a sorted list of (idle seconds, extra seconds) from the
    medians over rounds, extra = T(idle) - T(back to back). T(back to back)
    is the same size's time in `ar_rows` (allreduce.csv's medians, what the
    fits model) where there is one, else the idle run's own gap 0.

    Note [An all-reduce after idle time]
    On the simulated cluster an all-reduce issued after the caller did
    something else costs more than one issued back to back, which is how
    the fits' α is measured: with each node on its own core (Note [A node
    owns its CPUs] in benchmarks/cluster/cluster.sh), the 84-byte all-reduce
    after 30 us of spinning cost 0.15 ms more, after 300 us 0.27 ms, after
    3 ms 0.47 ms, and spinning, a memory sweep and a toy step of the same
    length cost alike (benchmarks/step_gap_bench.cpp). In training almost
    every all-reduce follows compute: the first bucket follows forward, the
    optimizer and part of backward. So allreduce_bench measures the smallest
    message after idle gaps of 0 to 3 ms in every round (--idle-us), and the
    step model adds the extra for how long its channel sat idle before each
    bucket. It is measured, not fitted to step times; it matters only where
    a step is a few all-reduces' latency (the toy: 0.1-0.3 ms of 1.7).

    The reference is the size's steady back-to-back time, the one the fits
    describe. The idle run's own gap-0 batches are not steady: each is a
    few dozen calls after a barrier and a batch with another gap (Note
    [Idle gaps interleaved] in allreduce_bench.cpp), and they came out
    0.1-0.3 ms above the size table's back-to-back time in the same process
    (1.51-1.71 against 1.32-1.47 ms at 1 Gbit/s); report_idle prints that
    as the 0 us column."""
    steady = {(r["link"], r["backend"], layout(r["nodes"], r["ranks_per_node"]), r["bytes"]):
              r["seconds"] for r in ar_rows}
    extra, base = {}, {}
    for r in medians(rows, ("link", "backend", "nodes", "ranks_per_node", "idle_us"),
                     ("seconds",)):
        key = (r["link"], r["backend"], layout(r["nodes"], r["ranks_per_node"]))
        base.setdefault(key, steady.get(key + (r["bytes"],)))
        extra.setdefault(key, []).append((r["idle_us"] * 1e-6, r["seconds"]))
        if r["idle_us"] == 0 and base[key] is None:
            base[key] = r["seconds"]
    return {key: sorted((gap, t - base[key]) for gap, t in points)
            for key, points in extra.items() if base.get(key) is not None}

def idle_extra(points, gap):
    """Extra seconds after `gap` seconds idle: linear from (0, 0) to the
    first measured gap, then linear in log(gap), flat past the last one."""
    points = [p for p in points if p[0] > 0]  # gap 0 is shown, not used (idle_penalties)
    if not points or gap <= 0:
        return 0.0
    g0, e0 = points[0]
    if gap <= g0:
        return e0 * gap / g0
    for (g1, e1), (g2, e2) in zip(points, points[1:]):
        if gap <= g2:
            return e1 + (e2 - e1) * math.log(gap / g1) / math.log(g2 / g1)
    return points[-1][1]

# ----------------------------------------------------------------- step model

def default_buckets(total):
    """PyTorch's default bucketing, without tensor boundaries: 1 MiB first,
    then 25 MiB caps (in reverse parameter order, which is launch order)."""
    sizes, left, cap = [], total, 1 * MIB
    while left > 0:
        sizes.append(min(cap, left))
        left -= sizes[-1]
        cap = 25 * MIB
    return sizes

def exposed_comm(compute, b, sizes, comm, idle=None):
    """Communication left after backward ends, with one channel, and the
    part of it that `idle` added.

    Time 0 is the start of backward, which lasts b*compute. Gradients become
    ready uniformly in time (by bytes), in launch order: bucket k is ready at
    b*compute*S_k/S. start_k = max(ready_k, end_{k-1}); end_k = start_k +
    comm(s_k) + idle(start_k - end_{k-1}), idle(g) being the extra cost of
    an all-reduce after its channel sat idle g seconds (Note [An all-reduce
    after idle time]; 0 when None). The previous step's last all-reduce
    ended (1-b)*compute before backward: forward and the optimizer ran in
    between. Whatever runs past the end of backward is exposed."""
    total = float(sum(sizes))
    done = -(1 - b) * compute
    cumulative = added = 0.0
    for s in sizes:
        cumulative += s
        ready = b * compute * cumulative / total
        start = max(ready, done)
        extra = idle(start - done) if idle else 0.0
        added += extra
        done = start + comm(s) + extra
    return max(0.0, done - b * compute), added

def link_bytes_per_step(backend, nodes, local, payload):
    """Bytes a node sends between nodes per step for `payload` all-reduced
    bytes: a ring sends 2(n-1)/n of them per participant; with several ranks
    per node the ring still crosses each node's NIC once."""
    if nodes <= 1:
        return 0.0
    n = nodes if backend == "hierarchical" else nodes * local
    return 2 * (n - 1) / n * payload

def backward_fraction(row, default):
    """The share of the step in backward: measured when the row has it."""
    backward = row.get("nosync_backward_ms")
    if backward is None or not 0 < backward <= row["nosync_step_ms"]:
        return default
    return backward / row["nosync_step_ms"]

def step_prediction(row, fits, b, hook_costs=None, measured_b=True, idle=None):
    """Predicted step ms for one steps.csv row, plus notes; None if no fit.

    `hook_costs` maps (side, model, hook) to the seconds of compute the hook
    adds to a step (see hook_costs()); it is added in series. b is the
    backward share where the row does not measure it (or, with measured_b
    False, for every row). `idle` is idle_penalties()' result: the row's
    link, backend and layout, where measured, add their cost of an all-reduce
    after idle time."""
    nodes, local = int(row["nodes"]), int(row["ranks_per_node"])
    sizes = [float(s) for s in (row["buckets"] or "").split(";") if s.strip()]
    if not sizes:
        sizes = default_buckets(row["param_bytes"])
    hook = row["hook"]
    factor, calls, note = 1.0, 1, ""
    if hook in ("fp16", "bf16"):
        factor = 0.5  # Half the bytes; the cast is ignored (memory-bound, small).
    tx = row["tx_bytes_per_step"]
    expected_tx = link_bytes_per_step(row["backend"], nodes, local, sum(sizes))
    if hook != "none" and tx and expected_tx:
        # What a hook sends is taken from the measured traffic: PowerSGD's
        # bytes depend on every tensor's shape, and a bf16 bucket crosses
        # LibTorch 1.13's Gloo widened to float32 (full size).
        factor = tx / expected_tx
        if hook == "powersgd":
            calls = 3 if factor < 0.95 else 1  # uncompressed part, P, Q.
    elif hook == "powersgd":
        note = "no tx bytes: assumed uncompressed"
    backend = row["backend"]
    # Half-size buckets of the fp16 hook travel as float16, which Gloo
    # reduces far slower than float32: its own fit, where measured.
    if hook == "fp16" and factor < 0.75 and (row["link"], backend + ":float16",
                                              layout(nodes, local)) in fits:
        backend += ":float16"

    def comm(s):
        t = allreduce_time(fits, row["link"], backend, s * factor / calls, nodes, local)
        return None if t is None else calls * t

    if any(comm(s) is None for s in sizes):
        return None, None, "no all-reduce fit for this link/backend"
    compute = row["nosync_step_ms"] / 1e3
    points = (idle or {}).get((row["link"], row["backend"], layout(nodes, local)))
    exposed, idle_added = exposed_comm(compute, backward_fraction(row, b) if measured_b else b,
                                       sizes, comm, (lambda g: idle_extra(points, g)) if points
                                       else None)
    step = compute + exposed
    if hook_costs and nodes > 1:
        extra = hook_costs.get((row["side"], row["model"], hook))
        if extra is not None:
            step += extra
            note = f"+{extra * 1e3:.0f} ms hook compute"
        elif hook != "none":
            note = "hook compute not measured"
    if idle_added:
        note = "; ".join(n for n in (note, f"idle {idle_added * 1e3:+.2f} ms") if n)
    tx_ratio = tx / (expected_tx * factor) if tx and expected_tx else None
    return step * 1e3, tx_ratio, note

def hook_costs(rows, fits, b, idle=None):
    """Seconds of compute a hook adds to a step, per (side, model, hook).

    Note [A hook's compute is measured, not modelled]
    A hook trades bytes for work: fp16 and bf16 cast every bucket there and
    back (several passes over 40 MB for the mlp), PowerSGD multiplies each
    matrix with the gradient twice, orthogonalises and keeps the error
    feedback. On this CPU PowerSGD's work costs more than the communication
    it saves, and no α-β term describes it. So it is measured once per side,
    model and hook, on one node of 2 ranks (no link; the rows with nodes =
    1): step − no_sync step − the model's exposed communication there.
    Those calibration rows are left out of the validation; the rows across
    the link are then predicted with that cost added in series."""
    groups = {}
    for r in rows:
        if int(r["nodes"]) == 1 and r["hook"] != "none":
            groups.setdefault((r["side"], r["model"], r["hook"]), []).append(r)
    costs = {}
    for key, group in groups.items():
        extra = []
        for r in group:
            pred = step_prediction(r, fits, b, idle=idle)[0]
            extra.append((r["step_ms"] - (pred if pred is not None else r["nosync_step_ms"])) / 1e3)
        costs[key] = max(0.0, statistics.median(extra))
    return costs

def fit_backward_fraction(rows, fits, costs, idle=None):
    """The one b in [0.05, 1] for all rows, measured or not, minimising the
    sum of squared relative step errors (a check on the measured ones)."""
    best = None
    for i in range(5, 101):
        errs = []
        for r in rows:
            pred = step_prediction(r, fits, i / 100, costs, measured_b=False, idle=idle)[0]
            if pred is not None:
                errs.append((pred - r["step_ms"]) / r["step_ms"])
        if errs:
            score = sum(e * e for e in errs)
            if best is None or score < best[0]:
                best = (score, i / 100, errs)
    return best

# ----------------------------------------------------------------- GPU clusters
# Constants and their sources: docs/design/cost-model.md, "Hardware constants".
NCCL_BASE = 8.4e-6       # NCCL tuning.cc: Ring/Simple base latency per call.
NCCL_STEP_NVLINK = 3.4e-6  # Ring/Simple per-step latency over NVLink.
NCCL_STEP_PCI = 5.7e-6     # ... over PCIe.
NCCL_STEP_NET = 9.6e-6     # ... over the network.
NET_EFFICIENCY = 0.9     # Share of the NIC line rate a collective achieves.

def gpu_allreduce(alg, m, p, g, rate_gbit, intra_bw, intra_step):
    """NCCL-like all-reduce time: p GPUs, g per node, one NIC per node (or
    NICs summing to rate_gbit per node), intra-node bus bandwidth intra_bw.

    ring: 2(p-1) steps, 2(N-1) of them across nodes; every byte leaves each
      node 2(p-1)/p times, paced by the slower of NIC and intra-node link.
    tree: NCCL's double binary tree between nodes, a chain inside: latency
      2((g-1) intra + log2(N) inter) steps; each node sends ~2m.
    hier: reduce-scatter in the node, g concurrent rings between nodes on
      1/g of the data each (sharing the node's NIC), all-gather in the node;
      three calls in series."""
    nodes = max(1, p // g)
    net = rate_gbit * 1e9 / 8 * NET_EFFICIENCY
    if nodes == 1:
        return NCCL_BASE + 2 * (p - 1) * intra_step + 2 * (p - 1) / p * m / intra_bw
    slow = min(net, intra_bw)
    if alg == "ring":
        lat = (2 * (p - 1) - 2 * (nodes - 1)) * intra_step + 2 * (nodes - 1) * NCCL_STEP_NET
        return NCCL_BASE + lat + 2 * (p - 1) / p * m / slow
    if alg == "tree":
        lat = 2 * ((g - 1) * intra_step + math.log2(nodes) * NCCL_STEP_NET)
        return NCCL_BASE + lat + 2 * m / slow
    intra = (g - 1) * intra_step + (g - 1) / g * m / intra_bw
    inter = 2 * (nodes - 1) * NCCL_STEP_NET + 2 * (nodes - 1) / nodes * m / net
    return 3 * NCCL_BASE + 2 * intra + inter

def gpu_step(compute, grad_bytes, b, cap, alg, p, g, rate, intra_bw, intra_step):
    """Predicted step seconds on p GPUs (first bucket 1 MiB, then `cap`)."""
    sizes, left, c = [], grad_bytes, min(1 * MIB, cap)
    while left > 0:
        sizes.append(min(c, left))
        left -= sizes[-1]
        c = cap
    return compute + exposed_comm(
        compute, b, sizes, lambda s: gpu_allreduce(alg, s, p, g, rate, intra_bw, intra_step))[0]

# ----------------------------------------------------------------- output

def table(headers, rows):
    """Prints rows under headers, columns right-aligned except the first."""
    cells = [[str(c) for c in r] for r in [headers] + rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    for r in cells:
        print("  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                        for i, (c, w) in enumerate(zip(r, widths))))

def summary(errs):
    """'max X%, median Y%' of absolute relative errors."""
    a = [abs(e) for e in errs]
    return f"max {100 * max(a):.1f}%, median {100 * statistics.median(a):.1f}%" if a else "no rows"

def section(title):
    """Prints a section heading."""
    print(f"\n== {title} ==")

def report_fit(ar_rows):
    """Fits each (link, backend, layout); prints the fit table; returns the fits.

    Note [One fit per layout]
    On this 2-core machine 4 ranks oversubscribe the cores (and the link
    router needs one too), so a ring step costs more at p = 4 than at p = 2
    for reasons no α-β term describes. One fit across p gave errors up to
    50%; so each layout (nodes x ranks per node) gets its own α and β. The
    model still composes them: the hierarchical backend's prediction uses the
    shm fit of its node and the link's fit of its leaders."""
    groups = {}
    for r in ar_rows:
        if r["backend"] != "hierarchical":
            key = (r["link"], r["backend"], layout(r["nodes"], r["ranks_per_node"]))
            groups.setdefault(key, []).append(r)
    fits, out = {}, []
    for key in sorted(groups):
        rows = groups[key]
        ps = sorted({int(r["nodes"] * r["ranks_per_node"]) for r in rows})
        try:
            fit = fit_ring(rows)
        except ValueError:
            out.append([*key, "", ",".join(map(str, ps)), "cannot fit (need two sizes)", "", "",
                        "", ""])
            continue
        fits[key] = fit
        beta_eff = fit["beta"] + fit["gamma"] / 2
        gbit = 8 / beta_eff / 1e9 if beta_eff > 0 else float("inf")
        gamma = "folded into beta" if fit["folded"] else f"{fit['gamma'] * 1e9:.3f} ns/B"
        delay = rows[0]["delay_ms"]
        out.append([*key, fit["form"], ",".join(map(str, ps)), f"{fit['alpha'] * 1e6:.1f}",
                    "" if delay is None else f"{delay * 1e3:.0f}", f"{gbit:.2f}", gamma, len(rows)])
    table(["link", "backend", "layout", "form", "p", "alpha us", "delay us", "Gbit/s eff", "gamma", "rows"],
          out)
    print("form: sum = 2(p-1)a + 2(p-1)/p m b; max = max of the two terms (latency hidden"
          "\n  behind the transfer), whichever fits the rows better.")
    if any(f["folded"] for f in fits.values()):
        print("gamma: a ring all-reduce moves and reduces the same (p-1)/p*m bytes per rank, so"
              "\n  timings identify only 2*beta + gamma; 'Gbit/s eff' is 8/(beta + gamma/2).")
    return fits

def report_allreduce(ar_rows, fits):
    """Per-row all-reduce errors: fits, then the composed hierarchical model."""
    out, errs = [], {}
    for r in ar_rows:
        nodes, local = int(r["nodes"]), int(r["ranks_per_node"])
        pred = allreduce_time(fits, r["link"], r["backend"], r["bytes"], nodes, local)
        if pred is None:
            continue
        e = (pred - r["seconds"]) / r["seconds"]
        kind = "predicted" if r["backend"] == "hierarchical" else "fit"
        errs.setdefault((r["link"], r["backend"], kind), []).append(e)
        out.append([r["link"], r["backend"], f"{nodes}x{local}", int(r["bytes"]),
                    f"{r['seconds'] * 1e6:.0f}", f"{pred * 1e6:.0f}", f"{100 * e:+.1f}"])
    table(["link", "backend", "nodes x local", "bytes", "measured us", "model us", "err %"], out)
    print()
    for key in sorted(errs):
        print(f"{key[0]} {key[1]} ({key[2]}): {summary(errs[key])}")

def report_idle(idle):
    """The extra cost of an all-reduce after each measured idle gap."""
    gaps = sorted({g for points in idle.values() for g, _ in points})
    out = []
    for key in sorted(idle):
        extra = dict(idle[key])
        out.append([" ".join(key)] + [f"{extra[g] * 1e6:+.0f}" if g in extra else "-"
                                      for g in gaps])
    table(["link backend layout"] + [f"{g * 1e6:g} us" for g in gaps], out)
    print("extra us per all-reduce (smallest size, median over rounds) after the caller spun for"
          "\n  the gap, against the size's steady back-to-back time (Note [An all-reduce after idle"
          "\n  time]); 0 us: the idle run's own back-to-back batches, not used by the model.")

STEP_KEY = ("side", "model", "link", "backend", "nodes", "ranks_per_node", "hook")
STEP_VALUES = ("step_ms", "nosync_step_ms", "images_per_s", "tx_bytes_per_step",
               "nosync_backward_ms")

def spread(values):
    """(max - min) / median of a run's values, in percent; '-' for one run."""
    values = [v for v in values if v is not None]
    if len(values) < 2:
        return "-"
    return f"{100 * (max(values) - min(values)) / statistics.median(values):.0f}"

def report_steps(step_rows, fits, b, idle=None):
    """Step validation per side, on each configuration's median over its
    runs; the <15% target is checked on the ddp configurations. The error
    of each single run against its own prediction is printed too."""
    configs = medians(step_rows, STEP_KEY, STEP_VALUES)
    costs = hook_costs(configs, fits, b, idle)
    for (side, model, hook), extra in sorted(costs.items()):
        print(f"{hook} compute, {side} {model}: {extra * 1e3:.1f} ms per step "
              f"(one node, Note [A hook's compute is measured, not modelled])")
    for side in ("ddp", "pytorch"):
        rows = [r for r in configs if r["side"] == side]
        if not rows:
            continue
        print(f"\n-- side {side} (medians over runs; b: backward's share of the step, measured,"
              f" or {b:.3f} where not) --")
        out, errs, misses = [], [], []
        for r in rows:
            pred, tx_ratio, note = step_prediction(r, fits, b, costs, idle=idle)
            config = (f"{r['model']} {r['link']} {r['backend']} {int(r['nodes'])}x"
                      f"{int(r['ranks_per_node'])} {r['hook']}")
            measured = [f"{backward_fraction(r, b):.2f}", f"{r['step_ms']:.2f}", r["runs"],
                        spread(r["run_values"]["step_ms"])]
            if int(r["nodes"]) == 1 and r["hook"] != "none":
                out.append([config, *measured, "-", "-", "-", "calibration"])
                continue
            if pred is None:
                out.append([config, *measured, "-", "-", "-", note])
                misses.append(f"{config}: {note}")
                continue
            e = (pred - r["step_ms"]) / r["step_ms"]
            errs.append(e)
            if abs(e) >= TARGET:
                misses.append(f"{config}: {100 * e:+.1f}%")
            out.append([config, *measured, f"{pred:.2f}", f"{100 * e:+.1f}",
                        "-" if tx_ratio is None else f"{tx_ratio:.2f}", note])
        table(["model link backend nodes x local hook", "b", "measured ms", "runs", "spread %",
               "predicted ms", "err %", "tx/model", "note"], out)
        print(f"{side}: {summary(errs)} over {len(errs)} configurations")
        run_errs = []
        for r in step_rows:
            if r["side"] != side or (int(r["nodes"]) == 1 and r["hook"] != "none"):
                continue
            pred = step_prediction(r, fits, b, costs, idle=idle)[0]
            if pred is not None:
                run_errs.append((pred - r["step_ms"]) / r["step_ms"])
        print(f"{side}, each run against its own prediction: {summary(run_errs)} over "
              f"{len(run_errs)} runs")
        if side == "ddp":
            print(f"target |err| < {100 * TARGET:.0f}% on every ddp configuration: "
                  f"{'HOLDS' if not misses else 'MISSED'}")
        for m in misses:
            print(f"  miss: {m}")
    best = fit_backward_fraction([r for r in configs if r["side"] == "ddp" and
                                  (int(r["nodes"]) > 1 or r["hook"] == "none")], fits, costs,
                                 idle)
    if best:
        print(f"\none b for every ddp configuration, best fit: b = {best[1]:.2f} "
              f"({summary(best[2])}); a check on the measured ones")


A100 = {"intra_bw": 230e9, "intra_step": NCCL_STEP_NVLINK, "g": 8}
SCALE_MODELS = {  # name: (gradient bytes, compute seconds per step, what)
    "ResNet-50": (25.6e6 * 4, 64 / 938, "batch 64/GPU, A100 TF32 at 938 img/s"),
    "BERT-base": (110e6 * 4, 0.050, "seq 128, batch 32/GPU, A100 TF32, ~2.7 TFLOP at ~54 TFLOPS"),
}

def report_scale(name, b):
    """Step ms and scaling efficiency for 8..256 A100s."""
    grad, compute, what = SCALE_MODELS[name]
    print(f"{grad / 1e6:.1f} MB fp32 gradients, compute {compute * 1e3:.1f} ms ({what}), "
          f"8 GPUs/node, NVLink {A100['intra_bw'] / 1e9:.0f} GB/s, buckets 1 + 25 MiB, b = {b:.3f}")
    combos = [(rate, alg) for rate in (100, 200, 400) for alg in ("ring", "tree", "hier")]
    out = []
    for p in (8, 16, 32, 64, 128, 256):
        cells = [p]
        for rate, alg in combos:
            step = gpu_step(compute, grad, b, 25 * MIB, alg, p, A100["g"], rate,
                            A100["intra_bw"], A100["intra_step"])
            cells.append(f"{step * 1e3:.1f}/{100 * compute / step:.0f}%")
        out.append(cells)
    table(["ranks"] + [f"{r}G {a}" for r, a in combos], out)
    print("cells: predicted step ms / scaling efficiency (compute / step)")

def report_published(b):
    """Runs the model on the published papers' hardware."""
    print("Horovod (Sergeev & Del Balso 2018; horovod docs): 4 Pascal GPUs per server, 25 Gbit/s "
          "RoCE,\n  NCCL 2 flat ring, 64 MB tensor fusion, batch 64, single-GPU img/s from Horovod's "
          "README;\n  intra-node PCIe ring assumed at 10 GB/s.")
    horovod = {  # name: (params, img/s on one Pascal GPU, {gpus: published efficiency})
        "Inception V3": (23.8e6, 134.4, {128: "90% (88% TCP, paper)", 512: "90%"}),
        "ResNet-101": (44.5e6, 119.4, {128: "90% (88% TCP, paper)", 512: "90%"}),
        "VGG-16": (138e6, 130.9, {128: "79%", 512: "68%"}),
    }
    out = []
    for name, (params, ips, published) in horovod.items():
        compute = 64 / ips
        for p, pub in published.items():
            step = gpu_step(compute, params * 4, b, 64 * MIB, "ring", p, 4, 25, 10e9, NCCL_STEP_PCI)
            out.append([name, p, f"{compute * 1e3:.0f}", f"{step * 1e3:.0f}",
                        f"{100 * compute / step:.0f}%", pub])
    table(["model", "GPUs", "compute ms", "step ms", "predicted", "published"], out)
    print("\nPyTorch DDP (Li et al., VLDB 2020): 'near-linear scalability using 256 GPUs' (abstract)."
          "\n  Hardware as recalled, not verified: 8 V100 per server on NVLink, 100 Gbit/s between"
          "\n  servers; NVLink2 bus bandwidth ~130 GB/s; batch 32/GPU assumed.")
    ddp = {"ResNet-50": (25.6e6 * 4, 32 / 367), "BERT-base": (110e6 * 4, 0.34)}
    out = []
    for name, (grad, compute) in ddp.items():
        for p in (32, 256):
            step = gpu_step(compute, grad, b, 25 * MIB, "ring", p, 8, 100, 130e9, NCCL_STEP_NVLINK)
            out.append([name, p, f"{compute * 1e3:.0f}", f"{step * 1e3:.1f}",
                        f"{100 * compute / step:.0f}%"])
    table(["model", "GPUs", "compute ms", "step ms", "predicted"], out)

def main(argv=None):
    """Reads the measurements and prints every section."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--measurements", default="benchmarks/data/cluster",
                        help="directory with allreduce.csv and steps.csv")
    parser.add_argument("--backward-fraction", type=float, default=2 / 3,
                        help="share of the compute time spent in backward (default 2/3)")
    args = parser.parse_args(argv)
    if not 0 < args.backward_fraction <= 1:
        parser.error("--backward-fraction must be in (0, 1]")
    b = args.backward_fraction
    d = args.measurements
    try:
        ar = read_rows(os.path.join(d, "allreduce.csv"), ALLREDUCE_COLUMNS,
                       ["rate_gbit", "delay_ms", "nodes", "ranks_per_node", "bytes", "seconds"],
                       optional=["rate_gbit", "delay_ms"],
                       positive=["nodes", "ranks_per_node", "bytes", "seconds"])
        steps = read_rows(os.path.join(d, "steps.csv"), STEP_COLUMNS,
                          ["rate_gbit", "delay_ms", "nodes", "ranks_per_node", "param_bytes",
                           "step_ms", "nosync_step_ms", "images_per_s", "tx_bytes_per_step",
                           "nosync_backward_ms"],
                          optional=["rate_gbit", "delay_ms", "images_per_s", "tx_bytes_per_step",
                                    "nosync_backward_ms"],
                          positive=["nodes", "ranks_per_node", "param_bytes", "step_ms",
                                    "nosync_step_ms"])
        idle_path = os.path.join(d, "idle.csv")
        idle_rows = read_rows(idle_path, IDLE_COLUMNS,
                              ["nodes", "ranks_per_node", "bytes", "idle_us", "seconds"],
                              positive=["nodes", "ranks_per_node", "bytes", "seconds"]) \
            if os.path.isfile(idle_path) else []
    except InputError as error:
        print(f"cost_model.py: error: {error}", file=sys.stderr)
        return 2
    for r in ar:
        if (r.get("dtype") or "float32") != "float32":
            r["backend"] = f"{r['backend']}:{r['dtype']}"
    # Note [All-reduce in every round]: fit each size's median over rounds.
    ar = medians(ar, ("link", "backend", "nodes", "ranks_per_node", "bytes"), ("seconds",))
    section("fit")
    fits = report_fit(ar)
    section("all-reduce validation")
    report_allreduce(ar, fits)
    idle = idle_penalties(idle_rows, ar)
    if idle:
        section("all-reduce after idle time")
        report_idle(idle)
    section("step validation")
    report_steps(steps, fits, b, idle)
    for name in SCALE_MODELS:
        section(f"prediction: {name}")
        report_scale(name, b)
    section("published figures")
    report_published(b)
    return 0

if __name__ == "__main__":
    sys.exit(main())
