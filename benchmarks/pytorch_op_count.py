#!/usr/bin/python3
r"""PyTorch's side of benchmarks/op_count.sh: the ATen operator calls of one
training step, for the bare model and under
torch.nn.parallel.DistributedDataParallel at world size 1 (Gloo on CPU, NCCL
on CUDA), counted the way benchmarks/op_count_bench.cpp counts ddp's (see its
Note [What counts as an operator call]). One process, every configuration;
one line each:

  result side=pytorch model=convnet device=cpu mode=ddp steps=3
      ops_per_step=... top_level_per_step=... other_thread_per_step=...
      other_operator_calls_per_step=... non_operator_records_per_step=...
      record_function_calls_per_step=... torch=...

and, with --op-lines, one line per operator name:

  op side=pytorch model=convnet device=cpu mode=ddp name=aten::add_
      per_step=... top_level_per_step=...

  /usr/bin/python3 benchmarks/pytorch_op_count.py --devices cpu

Counting: torch.profiler (CPU activity only) records every RecordFunction of
the steps, on every thread the steps use; the counts come from its event
tree (kineto_results.experimental_event_tree(), nested by nanosecond times
per thread). An operator call is an event of scope FUNCTION whose name is a
registered operator (it has a schema), the same test as the C++ side's
RecordFunction::operator_name(); counted are the ATen ones (aten::...).
Left out, and counted apart as other_operator_calls_per_step: the other
operators, c10d::allreduce_ and c10d::broadcast_ here, which ddp's side
cannot see (it calls c10d's process groups directly, not through the
dispatcher). Left out, and counted apart as
non_operator_records_per_step: the autograd engine's
"autograd::engine::evaluate_function: ..." records and the C++ reducer's own
"torch.distributed.ddp.reducer::..." records (FUNCTION scope, no operator),
which the C++ side leaves out by the same test. Also left out, and counted
apart as record_function_calls_per_step: the calls Python's
torch.autograd.profiler.record_function makes (in PyTorch 1.13 a
torch.zeros(1) and a handle tensor, 4 calls each; torch.optim wraps
zero_grad and step in one, DDP its forward): instrumentation for the
profiler, which the C++ side has no counterpart of. The profiler's own
"profiler::_record_function_*" operators would be left out too (none is
recorded in 1.13). USER_SCOPE records (Optimizer.step#SGD.step,
DistributedDataParallel.forward, gloo:all_reduce) and autograd nodes
(BACKWARD_FUNCTION) are not operator calls. An operator call is top-level
when no operator call encloses it on its thread.

The bare steps of the two sides then differ only where LibTorch's C++
frontend composes the step differently from Python's (op_count_bench.cpp's
Note [Same step as the Python side] lists each difference).

The models are benchmarks/pytorch_gpu_step_bench.py's (the same layers as
examples/common/models.hpp and resnet18.hpp); the inputs are one random batch
drawn once, as on the C++ side (the data do not change which operators run).
"""

import argparse
import collections
import inspect
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch._C._profiler import _EventType
from torch.profiler import ProfilerActivity, profile

# The models of the GPU step benchmark (this directory is on sys.path when run
# as a script): ConvNet as ddp::examples::ConvNet, ResNet18 as
# ddp::examples::ResNet18. No __pycache__ left in the source tree.
sys.dont_write_bytecode = True
from pytorch_gpu_step_bench import ConvNet, ResNet18  # noqa: E402

FUNCTION_SCOPE = 0  # at::RecordScope::FUNCTION

# DistributedDataParallelOptions fields PyTorch's DDP takes as keyword
# arguments of the same name and meaning; first_bucket_cap_mb,
# delay_allreduce and comm_hook have no such argument, and
# single_process_shortcut is handled apart (ddp_kwargs).
PYTORCH_OPTIONS = {
    "bucket_cap_mb": float,
    "broadcast_buffers": None,
    "find_unused_parameters": None,
    "gradient_as_bucket_view": None,
    "static_graph": None,
}


def parse_bool(text):
    if text in ("true", "1", "on"):
        return True
    if text in ("false", "0", "off"):
        return False
    raise ValueError(f"not a boolean: {text}")


def ddp_kwargs(variant):
    """The keyword arguments of a variant as op_count_bench spells it:
    "default", or settings joined by '+', each NAME (true) or NAME=VALUE.
    None when PyTorch has no such argument."""
    kwargs = {}
    if variant == "default":
        return kwargs
    for setting in variant.split("+"):
        name, _, value = setting.partition("=")
        if name == "single_process_shortcut":
            # PyTorch's DDP runs its whole path at world size 1 (no shortcut):
            # false is what it always does, true it cannot do.
            if parse_bool(value) if value else True:
                return None
            continue
        if name not in PYTORCH_OPTIONS:
            return None
        convert = PYTORCH_OPTIONS[name]
        kwargs[name] = convert(value) if convert else (parse_bool(value) if value else True)
    return kwargs


_is_operator_cache = {}


def is_operator(name):
    """Whether `name` is a registered operator (has a schema): the records of
    the dispatcher, as RecordFunction::operator_name() tells on the C++
    side."""
    if name not in _is_operator_cache:
        try:
            _is_operator_cache[name] = bool(torch._C._jit_get_schemas_for_operator(name))
        except RuntimeError:  # not namespace::name, e.g. a Python autograd Function
            _is_operator_cache[name] = False
    return _is_operator_cache[name]


USER_SCOPE = 7  # at::RecordScope::USER_SCOPE


def _record_function_makes_tensors():
    """Whether this PyTorch's record_function makes tensors (1.13: a
    torch.zeros(1) handle; 2.x keeps a C++ object and makes none)."""
    try:
        source = inspect.getsource(torch.autograd.profiler.record_function.__init__)
    except (OSError, TypeError):
        return False
    return "torch.zeros(1)" in source


RECORD_FUNCTION_MAKES_TENSORS = _record_function_makes_tensors()


def record_function_calls(roots):
    """The ids of the calls Python's torch.autograd.profiler.record_function
    makes (PyTorch 1.13: torch.zeros(1) in __init__, just before its
    USER_SCOPE record opens, and the handle tensor, aten::empty, first inside
    it). torch.optim wraps zero_grad and step in one each, DDP its forward;
    they run with or without a profiler, but they are the profiler's
    instrumentation, and ddp's C++ has none: left out, counted apart."""
    marked = set()
    if not RECORD_FUNCTION_MAKES_TENSORS:
        return marked

    def mark(event):
        stack = [event]
        while stack:
            node = stack.pop()
            marked.add(node.id)
            stack.extend(node.children)

    def is_user_scope(event):
        return (event.tag == _EventType.TorchOp
                and int(event.extra_fields.scope) == USER_SCOPE)

    def scan(siblings):
        by_thread = collections.defaultdict(list)
        for event in siblings:
            by_thread[event.start_tid].append(event)
        for events in by_thread.values():
            events.sort(key=lambda e: e.start_time_ns)
            for i, event in enumerate(events):
                if is_user_scope(event) and event.children:
                    first = min(event.children, key=lambda e: e.start_time_ns)
                    if first.name == "aten::empty" and not first.children:
                        mark(first)
                    if i > 0 and events[i - 1].name == "aten::zeros":
                        mark(events[i - 1])
                scan(event.children)

    scan(roots)
    return marked


def count(roots):
    """Walks the profiler's event tree (built from nanosecond start and end
    times per thread; FunctionEventList's microsecond tree misplaces short
    calls, and it drops a call whose only parent has the same name). Returns
    (per-name [calls, top-level calls], and per kind the calls and records
    left out: "other_thread" (counted, but off the main thread),
    "other_operator", "non_operator", "profiler_ops", "record_function")."""
    by_name = collections.defaultdict(lambda: [0, 0])
    totals = collections.Counter()
    excluded = record_function_calls(roots)
    # The main thread is the one that started first: each step starts there
    # with zero_grad. start_tid is the profiler's own thread number.
    main_thread = min(roots, key=lambda e: e.start_time_ns).start_tid if roots else None
    stack = [(root, False) for root in roots]
    while stack:
        event, enclosed = stack.pop()
        counted = False
        if event.tag == _EventType.TorchOp and int(event.extra_fields.scope) == FUNCTION_SCOPE:
            if event.name.startswith("profiler::"):
                totals["profiler_ops"] += 1
            elif not is_operator(event.name):
                totals["non_operator"] += 1
            elif not event.name.startswith("aten::"):
                totals["other_operator"] += 1
            elif event.id in excluded:
                totals["record_function"] += 1
            else:
                counted = True
                entry = by_name[event.name]
                entry[0] += 1
                if not enclosed:
                    entry[1] += 1
                if event.start_tid != main_thread:
                    totals["other_thread"] += 1
        stack.extend((child, enclosed or counted) for child in event.children)
    return by_name, totals


def per_step(total, steps):
    return str(total // steps) if total % steps == 0 else f"{total / steps:.2f}"


def run_configuration(args, model_name, device, variant):
    resnet = model_name == "resnet18"
    torch.manual_seed(args.seed)
    net = (ResNet18() if resnet else ConvNet()).to(device)
    model = net
    if variant is not None:
        kwargs = ddp_kwargs(variant)
        model = nn.parallel.DistributedDataParallel(
            net, device_ids=[device.index or 0] if device.type == "cuda" else None, **kwargs)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    batch = args.resnet_batch if resnet else args.convnet_batch
    x = torch.randn(batch, 1, 28, 28).to(device)
    y = torch.randint(0, 10, (batch,)).to(device)

    def step():
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()

    for _ in range(args.warmup):
        step()
    if device.type == "cuda":
        torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(args.steps):
            step()
        if device.type == "cuda":
            torch.cuda.synchronize()
    return count(prof.profiler.kineto_results.experimental_event_tree())


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default="convnet,resnet18")
    parser.add_argument("--devices", default="cpu", help="cpu, cuda")
    parser.add_argument("--options",
                        default="default,single_process_shortcut=false,gradient_as_bucket_view,"
                        "single_process_shortcut=false+gradient_as_bucket_view",
                        help="DDP variants as op_count_bench spells them")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--convnet-batch", type=int, default=32)
    parser.add_argument("--resnet-batch", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--op-lines", action="store_true", help="print one line per operator name")
    args = parser.parse_args()
    if args.steps < 1 or args.warmup < 0:
        parser.error("--steps must be at least 1 and --warmup at least 0")
    devices = args.devices.split(",")
    if "cuda" in devices and not torch.cuda.is_available():
        print("error: --devices cuda, but no CUDA device is visible to PyTorch", file=sys.stderr)
        return 2
    for device_name in devices:
        device = torch.device("cuda:0" if device_name == "cuda" else "cpu")
        # World size 1: an in-process store, as ddp::init uses at world size 1.
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo",
                                store=dist.HashStore(), rank=0, world_size=1)
        for model_name in args.models.split(","):
            # Variants with the same keyword arguments (default and
            # single_process_shortcut=false) are one run.
            runs = {}
            for variant in [None] + args.options.split(","):
                mode = "bare" if variant is None else (
                    "ddp" if variant == "default" else "ddp:" + variant)
                head = f"side=pytorch model={model_name} device={device_name} mode={mode}"
                if variant is not None and ddp_kwargs(variant) is None:
                    print(f"result {head} steps={args.steps} ops_per_step=na top_level_per_step=na "
                          f"unsupported=1 torch={torch.__version__}", flush=True)
                    continue
                key = None if variant is None else tuple(sorted(ddp_kwargs(variant).items()))
                if key not in runs:
                    runs[key] = run_configuration(args, model_name, device, variant)
                by_name, totals = runs[key]
                total = sum(v[0] for v in by_name.values())
                top = sum(v[1] for v in by_name.values())
                steps = args.steps
                print(f"result {head} steps={steps} ops_per_step={per_step(total, steps)} "
                      f"top_level_per_step={per_step(top, steps)} "
                      f"other_thread_per_step={per_step(totals['other_thread'], steps)} "
                      f"other_operator_calls_per_step={per_step(totals['other_operator'], steps)} "
                      f"non_operator_records_per_step={per_step(totals['non_operator'], steps)} "
                      f"record_function_calls_per_step={per_step(totals['record_function'], steps)} "
                      f"profiler_ops_left_out={totals['profiler_ops']} torch={torch.__version__}",
                      flush=True)
                if args.op_lines:
                    for name in sorted(by_name):
                        calls, top_calls = by_name[name]
                        if calls == 0:
                            continue
                        print(f"op {head} name={name} per_step={per_step(calls, steps)} "
                              f"top_level_per_step={per_step(top_calls, steps)}", flush=True)
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
