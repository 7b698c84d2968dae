#!/usr/bin/env python3
r"""PyTorch's side of benchmarks/gpu_vs_pytorch.sh: the same training steps as
benchmarks/gpu_step_bench.cpp (see its Note [Same work as the Python side]),
with torch.nn.parallel.DistributedDataParallel at world size 1 on NCCL for
mode ddp (ddp-view: with gradient_as_bucket_view; graphed: DDP with the
whole step captured in a CUDA graph as PyTorch's documentation of CUDA
graphs shows for DDP, fp32 only). Every DDP has broadcast_buffers=False:
PyTorch's default broadcasts BatchNorm's running statistics at every
forward, even at world size 1, where ddp's DDP skips it (the C++ side's
Note [Buffers broadcast on neither side]). One process, every
configuration; one line each, with the peak of allocated GPU memory over the
timed steps:

  result side=pytorch model=... precision=... mode=... step_ms=... loss=... peak_mib=...
      broadcast_buffers=0 torch=...

  python3 benchmarks/pytorch_gpu_step_bench.py --models convnet,resnet18

--profile PATH (one configuration only) then profiles --profile-steps more
steps with torch.profiler (CPU and CUDA), writes the Chrome trace to PATH
and prints the operators by device time and by self CPU time, as the C++
side's --profile does for ddp.

--device cpu runs the same loops on the CPU (Gloo for mode ddp), for a smoke
test on a machine without a GPU.
"""

import argparse
import gzip
import os
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

# The ConvNet, the idx reader and Fashion-MNIST's pixel statistics are the
# CPU benchmark's (this directory is on sys.path when run as a script).
from pytorch_ddp_bench import MEAN, STD, ConvNet, read_idx_gz  # noqa: E402


class BasicBlock(nn.Module):
    """As ddp::examples::BasicBlock (examples/common/resnet18.hpp)."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False),
                                            nn.BatchNorm2d(cout))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + (self.downsample(x) if self.downsample is not None else x))


class ResNet18(nn.Module):
    """As ddp::examples::ResNet18: 3x3 stem, no max-pooling, 1 input channel."""

    def __init__(self, classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 64, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.layer1 = nn.Sequential(BasicBlock(64, 64, 1), BasicBlock(64, 64, 1))
        self.layer2 = nn.Sequential(BasicBlock(64, 128, 2), BasicBlock(128, 128, 1))
        self.layer3 = nn.Sequential(BasicBlock(128, 256, 2), BasicBlock(256, 256, 1))
        self.layer4 = nn.Sequential(BasicBlock(256, 512, 2), BasicBlock(512, 512, 1))
        self.fc = nn.Linear(512, classes)

    def forward(self, x):
        h = F.relu(self.bn1(self.conv1(x)))
        h = self.layer4(self.layer3(self.layer2(self.layer1(h))))
        return self.fc(F.adaptive_avg_pool2d(h, 1).flatten(1))


def fashion_mnist(root, device):
    images = read_idx_gz(os.path.join(root, "train-images-idx3-ubyte.gz"), 16)
    labels = read_idx_gz(os.path.join(root, "train-labels-idx1-ubyte.gz"), 8)
    images = torch.from_numpy(images.copy()).reshape(-1, 1, 28, 28).float().div_(255.0)
    images.sub_(MEAN).div_(STD)
    return images.to(device), torch.from_numpy(labels.astype(np.int64)).to(device)


class Batches:
    """Batches in the order of the C++ side's Batches."""

    def __init__(self, images, labels, batch, seed):
        self.images, self.labels, self.batch, self.seed = images, labels, batch, seed
        self.epoch = 0
        self.shuffle()

    def shuffle(self):
        generator = torch.Generator().manual_seed(self.seed + self.epoch)
        self.order = torch.randperm(self.images.size(0), generator=generator).to(self.images.device)
        self.position = 0

    def next(self):
        if self.position + self.batch > self.order.size(0):
            self.epoch += 1
            self.shuffle()
        index = self.order[self.position:self.position + self.batch]
        self.position += self.batch
        return self.images.index_select(0, index), self.labels.index_select(0, index)


def synchronize(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def time_steps(args, resnet, step, device):
    """Untimed warm-up, then ms per timed step and the peak of allocated GPU
    memory over the timed steps (MiB; -1 on the CPU)."""
    for _ in range(args.warmup):
        step()
    steps = args.resnet_steps if resnet else args.convnet_steps
    synchronize(device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    start = time.perf_counter()
    for _ in range(steps):
        step()
    synchronize(device)
    seconds = time.perf_counter() - start
    peak_mib = torch.cuda.max_memory_allocated(device) / 2**20 if device.type == "cuda" else -1
    return 1e3 * seconds / steps, peak_mib


def run_configuration(args, model_name, precision, mode, images, labels, device):
    resnet = model_name == "resnet18"
    torch.manual_seed(args.seed)
    net = (ResNet18() if resnet else ConvNet()).to(device)
    model = net
    if mode in ("ddp", "ddp-view"):
        model = nn.parallel.DistributedDataParallel(
            net, device_ids=[device.index or 0] if device.type == "cuda" else None,
            broadcast_buffers=False, gradient_as_bucket_view=mode == "ddp-view")
    optimizer = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    scaler = torch.amp.GradScaler(device.type) if precision == "fp16" else None
    batches = Batches(images, labels, args.resnet_batch if resnet else args.convnet_batch, args.seed)
    loss = None
    if mode == "graphed":
        return run_graphed(args, resnet, net, optimizer, batches, device)

    def step():
        nonlocal loss
        x, y = batches.next()
        optimizer.zero_grad()
        with torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
            output = model(x)
        loss = F.cross_entropy(output.float(), y)
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        else:
            loss.backward()
            optimizer.step()

    step_ms, peak_mib = time_steps(args, resnet, step, device)
    if args.profile:
        profile_steps(args, step, device)
    return step_ms, loss.item(), peak_mib


def profile_steps(args, step, device):
    """After the timed steps (so that the profiler's cost is in no timing):
    --profile-steps steps under torch.profiler, the Chrome trace written to
    --profile, and the tables."""
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    synchronize(device)
    with torch.profiler.profile(activities=activities) as profiler:
        start = time.perf_counter()
        for _ in range(args.profile_steps):
            step()
        synchronize(device)
        wall_ms = 1e3 * (time.perf_counter() - start)
    profiler.export_chrome_trace(args.profile)
    print(f"profile: Chrome trace written to {args.profile}")
    print(f"profile: {args.profile_steps} steps, {wall_ms / args.profile_steps:.3f} ms per step "
          "with the profiler on")
    averages = profiler.key_averages()
    # PyTorch 2.4 renamed the CUDA columns to device ones.
    device_key = ("device_time_total" if averages and hasattr(averages[0], "device_time_total")
                  else "cuda_time_total")
    print(f"\nTop 15 by total device (CUDA) time, over the {args.profile_steps} profiled steps")
    print(averages.table(sort_by=device_key, row_limit=15))
    print(f"Top 15 by self CPU time, over the {args.profile_steps} profiled steps")
    print(averages.table(sort_by="self_cpu_time_total", row_limit=15), flush=True)


def run_graphed(args, resnet, net, optimizer, batches, device):
    """The documented recipe: construct DDP and warm up 11 iterations on a
    side stream (DDP keeps each parameter's gradient accumulator, which must
    not belong to the default stream), capture forward, backward and the
    optimizer step with the gradients set to None, then copy each batch into
    the static inputs and replay."""
    static_x, static_y = (t.clone() for t in batches.next())
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        model = nn.parallel.DistributedDataParallel(net, device_ids=[device.index or 0],
                                                    broadcast_buffers=False)
        for _ in range(11):
            optimizer.zero_grad(set_to_none=True)
            F.cross_entropy(model(static_x), static_y).backward()
            optimizer.step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    optimizer.zero_grad(set_to_none=True)
    with torch.cuda.graph(graph):
        static_loss = F.cross_entropy(model(static_x), static_y)
        static_loss.backward()
        optimizer.step()

    def step():
        x, y = batches.next()
        static_x.copy_(x)
        static_y.copy_(y)
        graph.replay()

    step_ms, peak_mib = time_steps(args, resnet, step, device)
    return step_ms, static_loss.item(), peak_mib


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default="convnet,resnet18")
    parser.add_argument("--precisions", default="fp32,bf16,fp16")
    parser.add_argument("--modes", default="bare,ddp,ddp-view,graphed")
    parser.add_argument("--convnet-steps", type=int, default=300)
    parser.add_argument("--resnet-steps", type=int, default=150)
    parser.add_argument("--warmup", type=int, default=30)
    parser.add_argument("--convnet-batch", type=int, default=256)
    parser.add_argument("--resnet-batch", type=int, default=128)
    parser.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--profile", default="",
                        help="after the timed steps of the one configuration given, profile more "
                             "steps with torch.profiler and write the Chrome trace to this path")
    parser.add_argument("--profile-steps", type=int, default=20)
    parser.add_argument("--print-params", action="store_true",
                        help="print each model's parameter count and exit")
    args = parser.parse_args()
    if args.print_params:
        for name, make in (("convnet", ConvNet), ("resnet18", ResNet18)):
            print(f"params {name} {sum(p.numel() for p in make().parameters())}")
        return 0
    if args.profile and len(args.models.split(",")) * len(args.precisions.split(",")) * \
            len(args.modes.split(",")) != 1:
        print("error: --profile profiles one configuration: give one each of --models, "
              "--precisions and --modes", file=sys.stderr)
        return 2
    device = torch.device("cuda:0" if args.device == "cuda" else "cpu")
    if device.type == "cuda" and not torch.cuda.is_available():
        print("error: no CUDA device is visible", file=sys.stderr)
        return 2
    torch.backends.cudnn.benchmark = True
    if "graphed" in args.modes.split(","):
        # The recipe's condition for capturing DDP's NCCL calls.
        os.environ["TORCH_NCCL_ASYNC_ERROR_HANDLING"] = "0"
    # World size 1: an in-process store, as ddp::init uses at world size 1.
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo", store=dist.HashStore(),
                            rank=0, world_size=1)
    images, labels = fashion_mnist(args.data_dir, device)
    for model in args.models.split(","):
        for precision in args.precisions.split(","):
            for mode in args.modes.split(","):
                if mode in ("graphed", "ddp-view") and precision != "fp32":
                    continue  # as the C++ side: fp32 only
                if mode == "graphed" and device.type != "cuda":
                    continue
                step_ms, loss, peak_mib = run_configuration(args, model, precision, mode, images, labels,
                                                  device)
                batch = args.resnet_batch if model == "resnet18" else args.convnet_batch
                steps = args.resnet_steps if model == "resnet18" else args.convnet_steps
                print(f"result side=pytorch model={model} precision={precision} mode={mode} "
                      f"batch={batch} steps={steps} step_ms={step_ms:.4f} "
                      f"images_per_s={1e3 * batch / step_ms:.1f} loss={loss:.4f} peak_mib={peak_mib:.1f} "
                      f"broadcast_buffers=0 torch={torch.__version__}", flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
