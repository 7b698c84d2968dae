#!/usr/bin/python3
"""Recovery time after one SIGKILLed worker: benchmarks/recovery_bench.sh's
driver (standard library only). For each model and way of recovering it runs
the job ROUNDS times; rank 1 SIGKILLs itself right after step KILL_AT, and
the driver timestamps the lines the ranks print:

  kill -> first step:   from rank 1's `step KILL_AT round 0` (its last line)
                        to the first step any rank completes afterwards;
  kill -> step K+1:     to the first completion of step KILL_AT + 1, i.e.
                        until the work lost since the last commit or
                        snapshot has been done again.

Ways: ddp-disk (ddprun restarts every worker, which reload the snapshot of
step 20), ddp-memory (ddprun --recovery memory: the lost worker alone is
started again and receives the survivors' commit of step 20), ddp-spare
(as ddp-memory with --spares 1: a hot spare, started with the job and
waiting inside elastic::run, takes the lost rank; the driver checks that it
said it was ready before the kill), and
torch-disk (torchrun restarts every worker of pytorch_recovery_bench.py,
which reload the torch.save snapshot of step 20). Prints one table.
"""

import argparse
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

STEP = re.compile(r"step (\d+) round (\d+) rank (\d+)")
SPARE_READY = re.compile(r"ddprun: spare [0-9a-f]+ \(pid \d+\) ready after")


def measure(command, env, kill_at, timeout, spare=False):
    """Runs one job; returns (kill->first step, kill->step K+1, first step) in s.
    With `spare`, a hot spare must have said it was ready before the kill."""
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                               text=True, bufsize=1, start_new_session=True)
    timer = threading.Timer(timeout, lambda: os.killpg(process.pid, signal.SIGKILL))
    timer.start()
    killed = first = regained = spare_ready = None
    first_step = None
    log = []
    for line in process.stdout:
        now = time.monotonic()
        log.append(line)
        if spare and spare_ready is None and SPARE_READY.search(line):
            spare_ready = now
        for match in STEP.finditer(line):
            step, round_, rank = (int(g) for g in match.groups())
            if round_ == 0 and rank == 1 and step == kill_at and killed is None:
                killed = now
            elif round_ >= 1 and killed is not None:
                if first is None:
                    first, first_step = now, step
                if step == kill_at + 1 and regained is None:
                    regained = now
    process.wait()
    timer.cancel()
    if spare and (spare_ready is None or killed is None or spare_ready > killed):
        sys.stderr.write("".join(log[-60:]))
        raise SystemExit("recovery_bench: the hot spare was not ready before the kill; give a "
                         "later --kill-at")
    if process.returncode != 0 or None in (killed, first, regained):
        sys.stderr.write("".join(log[-60:]))
        raise SystemExit(f"recovery_bench: a run failed (exit {process.returncode}): "
                         f"{' '.join(command)}")
    return first - killed, regained - killed, first_step


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--build", required=True, help="ddp's build directory")
    parser.add_argument("--models", default="linear,convnet")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--kill-at", type=int, default=25)
    parser.add_argument("--lead-ms", type=int, default=100,
                        help="every way sleeps this long after each step before the kill, so "
                             "that a hot spare is ready by then (not in the figures)")
    parser.add_argument("--every", type=int, default=10, help="steps between snapshots/commits")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=300)
    parser.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    args = parser.parse_args()
    here = os.path.dirname(os.path.abspath(__file__))
    ddprun = os.path.join(args.build, "bin", "ddprun")
    bench = os.path.join(args.build, "bin", "recovery_bench")
    env = {k: v for k, v in os.environ.items()
           if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    env["OMP_NUM_THREADS"] = "1"
    common = ["--steps", str(args.steps), "--kill-at", str(args.kill_at), "--lead-ms",
              str(args.lead_ms), "--data-dir", args.data_dir]
    print(f"{'model':8} {'recovery':11} {'kill->first step (s)':>21} {'kill->step K+1 (s)':>19} "
          f"{'resumed at':>10}  runs")
    for model in args.models.split(","):
        for way in ("ddp-disk", "ddp-memory", "ddp-spare", "torch-disk"):
            firsts, regains, resumed = [], [], set()
            for _ in range(args.rounds):
                scratch = tempfile.mkdtemp(prefix="ddp-recovery-bench-")
                snapshots = os.path.join(scratch, "snapshots")
                launcher = [ddprun, "--standalone", "--nproc-per-node", str(args.nproc),
                            "--max-restarts", "1", "--monitor-interval", "0.1"]
                if way == "ddp-disk":
                    command = launcher + [bench, "--model", model, "--snapshot-dir", snapshots,
                                          "--save-every", str(args.every)] + common
                elif way in ("ddp-memory", "ddp-spare"):
                    spares = ["--spares", "1"] if way == "ddp-spare" else []
                    command = launcher[:1] + ["--recovery", "memory"] + spares + launcher[1:] + [
                        bench, "--model", model, "--commit-every", str(args.every)] + common
                else:
                    command = ["/usr/bin/python3", "-m", "torch.distributed.run", "--standalone",
                               "--nproc_per_node", str(args.nproc), "--max_restarts", "1",
                               "--monitor_interval", "0.1", "--redirects", "2", "--tee", "2",
                               "--log_dir", os.path.join(scratch, "logs"),
                               os.path.join(here, "pytorch_recovery_bench.py"), "--model", model,
                               "--snapshot-dir", snapshots, "--save-every",
                               str(args.every)] + common
                try:
                    first, regained, first_step = measure(command, env, args.kill_at,
                                                          args.timeout, way == "ddp-spare")
                finally:
                    shutil.rmtree(scratch, ignore_errors=True)
                firsts.append(first)
                regains.append(regained)
                resumed.add(first_step - 1)
            print(f"{model:8} {way:11} {statistics.median(firsts):21.3f} "
                  f"{statistics.median(regains):19.3f} {'/'.join(map(str, sorted(resumed))):>10}  "
                  f"{len(firsts)} (median; min {min(firsts):.3f}, max {max(firsts):.3f})",
                  flush=True)


if __name__ == "__main__":
    sys.exit(main())
