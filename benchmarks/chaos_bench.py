#!/usr/bin/python3
"""What a ddp job does when its parts are killed: benchmarks/chaos_bench.sh's
driver (standard library only). Each case runs the toy trainer (3 ranks on
Gloo, --recovery memory, a commit every 4 steps, 2 epochs of 22 steps) under
the real ddprun, kills something at a known point, and records what was
killed and when, what the job did (from ddprun's and the ranks' lines), the
time from the kill to the next step, and the final parameters' digest
against the same job run without failures (for a lost node, against 3
ranks stopped at the commit's step and resumed at 2 from disk: the job
goes on smaller; for a node that joins, 2 ranks resumed at 3). Prints one
Markdown table.
"""

import argparse
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

STEP = re.compile(r"^\[(\d+)\] epoch \d+ step (\d+) ")
CONTINUING = re.compile(r"generation [1-9]\d*: continuing from commit (\d+) of rank (\d+)")
RESUMED = re.compile(r"resumed at epoch (\d+), step (\d+)")
DIGEST = re.compile(r"params-digest=([0-9a-f]{16})")
SPARE_READY = re.compile(r"ddprun: spare ([0-9a-f]{8}) \(pid (\d+)\) ready after")


class Job:
    """One ddprun (or several, one per node), its lines timestamped as they come."""

    def __init__(self, commands, env, timeout):
        self.lines = []  # (time, node, line)
        self.lock = threading.Lock()
        self.processes = [subprocess.Popen(c, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                           env=env, text=True, bufsize=1,
                                           start_new_session=True) for c in commands]
        self.readers = [threading.Thread(target=self._read, args=(i, p), daemon=True)
                        for i, p in enumerate(self.processes)]
        for reader in self.readers:
            reader.start()
        self.deadline = time.monotonic() + timeout

    def _read(self, node, process):
        for line in process.stdout:
            with self.lock:
                self.lines.append((time.monotonic(), node, line.rstrip("\n")))

    def wait_for(self, pattern, node=None):
        """The first (time, match) of `pattern` (on `node`), waiting up to the deadline."""
        seen = 0
        while time.monotonic() < self.deadline:
            with self.lock:
                lines = self.lines[seen:]
            for when, n, line in lines:
                match = re.search(pattern, line)
                if match and (node is None or n == node):
                    return when, match
            seen += len(lines)
            time.sleep(0.005)
        raise SystemExit(f"chaos_bench: no line matched {pattern!r} in time:\n" + self.text())

    def finish(self):
        for process in self.processes:
            try:
                process.wait(timeout=max(1, self.deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        for reader in self.readers:
            reader.join(timeout=5)
        return [p.returncode for p in self.processes]

    def text(self):
        with self.lock:
            return "\n".join(f"{n}: {line}" for _, n, line in self.lines)

    def after(self, moment, pattern):
        """The first (time, match) of `pattern` after `moment`, or None."""
        with self.lock:
            for when, _, line in self.lines:
                match = re.search(pattern, line)
                if when >= moment and match:
                    return when, match
        return None


def free_port():
    with socket.socket() as s:  # a benchmark, not a test: a race here only fails the run
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--build", required=True, help="ddp's build directory")
    parser.add_argument("--timeout", type=float, default=180)
    args = parser.parse_args()
    ddprun = os.path.join(args.build, "bin", "ddprun")
    toy = os.path.join(args.build, "bin", "example_toy_trainer")
    env = {k: v for k, v in os.environ.items()
           if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    env["OMP_NUM_THREADS"] = "1"
    launcher = [ddprun, "--max-restarts", "3", "--monitor-interval", "0.1", "--stop-grace", "2",
                "--recovery", "memory"]
    trainer = [toy, "--epochs", "2", "--seed", "7", "--commit-every", "4"]

    def one_node(extra_launcher=(), extra_trainer=()):
        return [launcher[:1] + ["--standalone", "--nproc-per-node", "3"] + launcher[1:]
                + list(extra_launcher) + trainer + list(extra_trainer)]

    def nodes(last_call=30, extra_trainer=()):
        """Three nodes of one rank each, c10d, --nnodes 2:3, --recovery memory:
        a lost node, even the stores' host, is survived in memory at 2 ranks
        (Note [A new host] in src/launch/node_rendezvous.hpp), and a
        node that joins is taken in at 3 (Note [A node joins in memory])."""
        port = str(free_port())
        return [[ddprun, "--nnodes", "2:3", "--nproc-per-node", "1", "--rdzv-backend", "c10d",
                 "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", f"chaos{port}"]
                + launcher[1:] + ["--rdzv-conf", f"last_call_timeout={last_call}"] + trainer
                + list(extra_trainer) for _ in range(3)]

    def continued_at_two(step, before=3, after=2):
        """The digest of `before` ranks stopped at `step` with a snapshot,
        resumed at `after`."""
        scratch = tempfile.mkdtemp(prefix="ddp-chaos-")
        snapshots = ["--snapshot-dir", os.path.join(scratch, "snapshots")]
        for nproc, more in ((before, ["--max-steps", str(step)]), (after, [])):
            job, _ = run([[ddprun, "--standalone", "--nproc-per-node", str(nproc)] + trainer
                          + snapshots + more])
            job.finish()
        shutil.rmtree(scratch, ignore_errors=True)
        return digest_of(job)

    def run(commands, stagger=0.0):
        if stagger:
            first = Job(commands[:1], env, args.timeout)
            time.sleep(stagger)
            rest = Job(commands[1:], env, args.timeout)
            return first, rest
        return Job(commands, env, args.timeout), None

    references = {}

    def reference(key, commands):
        if key not in references:
            job, _ = run(commands)
            job.finish()
            match = DIGEST.search(job.text())
            references[key] = match.group(1) if match else "none"
        return references[key]

    rows = []

    def row(case, killed, did, to_next, digest, expected):
        verdict = "**equal**" if digest == expected else f"differs ({digest} vs {expected})"
        rows.append((case, killed, did, to_next, verdict))
        print(f"chaos_bench: {case}: {did}; {to_next}; digest {verdict}", file=sys.stderr,
              flush=True)

    def next_step_after(job, moment):
        """Seconds from `moment` to the first step of a later generation."""
        found = job.after(moment, CONTINUING.pattern) or job.after(moment, RESUMED.pattern)
        if not found:
            return None
        step = job.after(found[0], STEP.pattern)
        return None if not step else step[0] - moment

    def digest_of(job):
        match = DIGEST.search(job.text())
        return match.group(1) if match else "none"

    def self_kill(trainer_args, kill_line, launcher_args=()):
        """Runs a job of which a rank kills itself after printing `kill_line`:
        (job, exit codes, seconds to the next generation's step, its commit)."""
        job, _ = run(one_node(launcher_args, trainer_args))
        killed_at, _ = job.wait_for(kill_line)
        codes = job.finish()
        cont = CONTINUING.search(job.text())
        return job, codes, next_step_after(job, killed_at), cont.group(1) if cont else "none"

    plain = reference("plain", one_node())

    # 1. A worker, by itself, right after step 9 (one step after a commit).
    job, codes, seconds, commit = self_kill(["--kill-at", "1:9"], r"^\[1\] epoch 0 step 9 ")
    row("worker", "rank 1 (SIGKILL), after step 9",
        f"replaced alone in a new process; survivors kept theirs, all continued from commit "
        f"{commit} (exit {codes[0]})", f"{seconds:.3f} s", digest_of(job), plain)

    # 2. A worker, with a hot spare ready (steps slowed to 100 ms until then).
    job, _ = run(one_node(["--spares", "1"], ["--kill-at", "1:21", "--step-delay-ms", "100"]))
    ready_at, _ = job.wait_for(SPARE_READY.pattern)
    killed_at, _ = job.wait_for(r"^\[1\] epoch 0 step 21 ")
    codes = job.finish()
    taken = re.search(r"spare ([0-9a-f]{8}) \(pid \d+, ready for (\d+) ms\) takes rank 1",
                      job.text())
    seconds = next_step_after(job, killed_at)
    row("worker, with a spare", "rank 1 (SIGKILL), after step 21; the spare ready "
        f"{killed_at - ready_at:.1f} s before",
        ("its rank taken by the ready spare" if taken else "replaced by a new process")
        + f" (exit {codes[0]})", f"{seconds:.3f} s", digest_of(job), plain)

    # 3. The spare itself, once ready.
    job, _ = run(one_node(["--spares", "1"], ["--step-delay-ms", "50"]))
    _, match = job.wait_for(SPARE_READY.pattern)
    os.kill(int(match.group(2)), signal.SIGKILL)
    job.wait_for(r"started spare (?!" + match.group(1) + ")")
    codes = job.finish()
    row("spare", "the spare (SIGKILL), once it said it was ready",
        f"named (\"ended with signal 9 (Killed) before it was needed\"), another spare started; "
        f"training not interrupted (exit {codes[0]})", "— (no step lost)", digest_of(job), plain)

    # 4. Two workers within one step.
    job, codes, seconds, _ = self_kill(["--kill-at", "1:9,2:9"], r"^\[[12]\] epoch 0 step 9 ")
    generations = sorted(set(re.findall(r"starting it again alone in generation (\d+)",
                                        job.text())))
    row("two failures within one step", "ranks 1 and 2 (SIGKILL), both after step 9",
        f"each replaced alone (generations {', '.join(generations)}); rank 0 kept its process "
        f"(exit {codes[0]})", f"{seconds:.3f} s", digest_of(job), plain)

    # 5. During a commit: a plain one (local), and a ZeRO one (a collective).
    job, codes, seconds, commit = self_kill(["--kill-in-commit", "1:8"],
                                            r"^\[1\] epoch 0 step 8 ")
    row("failure during a commit", "rank 1 (SIGKILL), entering the commit of step 8",
        f"the survivors' commit of step 8 went to the replacement (commit {commit}) "
        f"(exit {codes[0]})", f"{seconds:.3f} s", digest_of(job), plain)
    zero = ["--zero-stage", "1", "--momentum", "0.9"]
    zero_digest = reference("zero", one_node(extra_trainer=zero))
    job, codes, seconds, commit = self_kill(zero + ["--kill-in-commit", "1:8"],
                                            r"^\[1\] epoch 0 step 8 ")
    row("failure during a ZeRO commit", "rank 1 (SIGKILL), entering the commit of step 8 "
        "(ZeRO stage 1: a collective)",
        f"the commit's all-gather failed on the survivors; all rolled back to commit "
        f"{commit} (step 4) and the shard came from its buddy (exit {codes[0]})",
        f"{seconds:.3f} s", digest_of(job), zero_digest)

    # 6. A node, then the store's host: three nodes, one's ddprun and worker SIGKILLed.
    for victim, case in ((2, "node (node 2 of 3)"), (0, "store host (node 0 of 3)")):
        host, rest = run(nodes(), stagger=0.5)
        when, _ = (host if victim == 0 else rest).wait_for(rf"^\[{victim}\] epoch 0 step 9 ")
        if victim == 0:
            process = host.processes[0]
        else:  # one rank per node: the node whose worker is rank `victim`
            with rest.lock:
                index = next(n for t, n, line in rest.lines
                             if t <= when and line.startswith(f"[{victim}] epoch 0 step 9 "))
            process = rest.processes[index]
        killed_at = time.monotonic()
        os.killpg(process.pid, signal.SIGKILL)
        codes = host.finish() + rest.finish()
        survivors = [job for job in (host, rest) if job is not host or victim != 0]
        text = "\n".join(job.text() for job in survivors)
        seconds = min((s for s in (next_step_after(job, killed_at) for job in survivors)
                       if s is not None), default=None)
        cont = CONTINUING.search(text)
        how = ("node 1's standby took over the store" if "this node hosts it now" in text
               else "node 0 saw node 2's heartbeat stop (node_timeout 5 s)"
               if "node 2 stopped its heartbeat" in text else "")
        did = (f"{how}; the other two re-formed at 2 ranks, their workers kept, from commit "
               f"{cont.group(1)} in memory (exit codes {codes})" if cont and how else
               f"exit codes {codes}")
        expected = continued_at_two(4 * (int(cont.group(1)) - 1)) if cont else "none"
        row(case, f"node {victim}'s ddprun and its worker (SIGKILL to the group), after step 9",
            did, f"{seconds:.3f} s" if seconds is not None else "— (no further step)",
            digest_of(host if victim != 0 else rest), expected)

    # 7. The store's host hangs (SIGSTOP: no connection closes, as in a
    # partition); continued once the others are done.
    host, rest = run(nodes(last_call=10, extra_trainer=["--collective-timeout", "5"]),
                     stagger=0.5)
    host.wait_for(r"^\[0\] epoch 0 step 9 ")
    stopped_at = time.monotonic()
    os.killpg(host.processes[0].pid, signal.SIGSTOP)
    rest_codes = rest.finish()
    os.killpg(host.processes[0].pid, signal.SIGCONT)
    host_codes = host.finish()
    text = rest.text()
    cont = CONTINUING.search(text)
    seconds = next_step_after(rest, stopped_at)
    refused = "came back to the rendezvous" in host.text()
    did = (f"the others found its store silent (reply bound: node_timeout + 5 s; workers: "
           f"collective timeout 5 s, then 5 s + 5 s), node 1's standby took over, and they "
           f"went on at 2 ranks from commit {cont.group(1) if cont else '?'} in memory (exit "
           f"codes {rest_codes}); node 0, continued after they ended, "
           + ("refused to run the job again alone" if refused else "did not refuse")
           + f" (exit {host_codes[0]})")
    expected = continued_at_two(4 * (int(cont.group(1)) - 1)) if cont else "none"
    row("store host hangs (a partition)", "node 0's ddprun and its worker (SIGSTOP), after step 9",
        did, f"{seconds:.3f} s" if seconds is not None else "— (no further step)",
        digest_of(rest), expected)

    # 8. No failure: a third node joins two that train (steps slowed to 50 ms).
    commands = nodes(last_call=1, extra_trainer=["--step-delay-ms", "50"])
    host, rest = run(commands[:2], stagger=0.5)
    host.wait_for(r"^\[0\] epoch 0 step 9 ")
    joined_at = time.monotonic()
    third = Job(commands[2:], env, args.timeout)
    codes = host.finish() + rest.finish() + third.finish()
    jobs = (host, rest, third)
    text = "\n".join(job.text() for job in jobs)
    cont = CONTINUING.search(text)
    seconds = min((s for s in (next_step_after(job, joined_at) for job in jobs) if s is not None),
                  default=None)
    did = (f"the two kept their workers and took it in at their next commit: 3 ranks from "
           f"commit {cont.group(1)} in memory (exit codes {codes})" if cont
           else f"not taken in (exit codes {codes})")
    expected = continued_at_two(4 * (int(cont.group(1)) - 1), before=2, after=3) if cont \
        else reference("two", [[ddprun, "--standalone", "--nproc-per-node", "2"] + trainer])
    row("a node joins (no failure)", "nothing: a third node started after step 9 of two",
        did, f"{seconds:.3f} s (start → first step at 3 ranks)" if seconds is not None
        else "—", digest_of(host), expected)

    print("| case | killed, and when | what the job did | kill → next step | final digest "
          "against an uninterrupted run |")
    print("|---|---|---|---:|---|")
    for r in rows:
        print("| " + " | ".join(r) + " |")


if __name__ == "__main__":
    sys.exit(main())
