#!/usr/bin/python3
r"""PyTorch's side of benchmarks/ddp_vs_pytorch.sh: the same training loops as
benchmarks/ddp_train_bench.cpp, with torch.nn.parallel.DistributedDataParallel
on Gloo. Run one process per rank under torchrun:

  OMP_NUM_THREADS=1 /usr/bin/python3 -m torch.distributed.run --standalone \
      --nproc_per_node 2 --redirects 2 --tee 2 benchmarks/pytorch_ddp_bench.py --model linear

(`--redirects 2 --tee 2`: Debian's torchrun 1.13 under Python 3.11 fails to
parse its own default `--redirects 0`.)

(a) linear: the torchrun tutorial's toy trainer (Linear(20, 1), 2048 random
    samples, batch 32 per rank, SGD lr 1e-3). The tutorial's F.cross_entropy
    on a single output is degenerate (the loss is always 0), so both sides use
    mse_loss instead.
(b) convnet: examples/common/models.hpp's ConvNet on Fashion-MNIST, images
    pre-loaded as tensors, batch 100 per rank, SGD lr 0.01, cross entropy.
(c) mlp: a 784-2048-2048-2048-10 perceptron on Fashion-MNIST (40 MB of
    gradients), batch 16 per rank, SGD lr 0.01: for the slow links of
    benchmarks/cluster_bench.sh.

--hook picks PyTorch's comm hook (none, fp16, bf16, powersgd) and
--net-interface the interface whose sent bytes are counted over the
synchronized steps. Rank 0 prints one line:
  result side=pytorch model=... images_per_s=... step_ms=... nosync_step_ms=...
      nosync_backward_ms=... tx_bytes_per_step=...
"""

import argparse
import contextlib
import gzip
import os
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset, TensorDataset
from torch.utils.data.distributed import DistributedSampler

# Fashion-MNIST's pixel statistics, as ddp::data::FashionMnistOptions.
MEAN, STD = 0.2860, 0.3530


class ToyDataset(Dataset):
    """The tutorial's MyTrainDataset: a list of (rand(20), rand(1)) pairs."""

    def __init__(self, size):
        self.data = [(torch.rand(20), torch.rand(1)) for _ in range(size)]

    def __len__(self):
        return len(self.data)

    def __getitem__(self, index):
        return self.data[index]


class ConvNet(nn.Module):
    """The same layers as ddp::examples::ConvNet (examples/common/models.hpp)."""

    def __init__(self):
        super().__init__()
        self.layer1 = nn.Sequential(nn.Conv2d(1, 16, 5, stride=1, padding=2), nn.BatchNorm2d(16),
                                    nn.ReLU(), nn.MaxPool2d(2, stride=2))
        self.layer2 = nn.Sequential(nn.Conv2d(16, 32, 5, stride=1, padding=2), nn.BatchNorm2d(32),
                                    nn.ReLU(), nn.MaxPool2d(2, stride=2))
        self.fc = nn.Linear(7 * 7 * 32, 10)

    def forward(self, x):
        x = self.layer2(self.layer1(x))
        return self.fc(x.reshape(x.size(0), -1))


def mlp():
    """The same layers as ddp_train_bench's --model mlp."""
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 2048), nn.ReLU(), nn.Linear(2048, 2048),
                         nn.ReLU(), nn.Linear(2048, 2048), nn.ReLU(), nn.Linear(2048, 10))


def tx_bytes(interface):
    """The interface's sent-byte counter (the whole node's), 0 without one."""
    if not interface:
        return 0
    with open(f"/sys/class/net/{interface}/statistics/tx_bytes") as f:
        return int(f.read())


def register_hook(model, hook, powersgd_rank):
    """PyTorch's comm hook of the same name as ddp_train_bench's --hook."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook
    if hook == "fp16":
        model.register_comm_hook(None, default_hooks.fp16_compress_hook)
    elif hook == "bf16":
        model.register_comm_hook(None, default_hooks.bf16_compress_hook)
    elif hook == "powersgd":
        # Compression from the second iteration, as the C++ side.
        state = powerSGD_hook.PowerSGDState(process_group=None,
                                            matrix_approximation_rank=powersgd_rank,
                                            start_powerSGD_iter=2)
        model.register_comm_hook(state, powerSGD_hook.powerSGD_hook)


def read_idx_gz(path, header_bytes):
    # Plain file when the .gz is absent (as the C++ reader accepts both).
    if os.path.exists(path):
        with gzip.open(path, "rb") as f:
            raw = f.read()
    else:
        with open(path[:-3], "rb") as f:
            raw = f.read()
    return np.frombuffer(raw, dtype=np.uint8, offset=header_bytes)


def fashion_mnist(root):
    images = read_idx_gz(os.path.join(root, "train-images-idx3-ubyte.gz"), 16)
    labels = read_idx_gz(os.path.join(root, "train-labels-idx1-ubyte.gz"), 8)
    images = torch.from_numpy(images.copy()).reshape(-1, 1, 28, 28).float().div_(255.0)
    images.sub_(MEAN).div_(STD)
    return TensorDataset(images, torch.from_numpy(labels.astype(np.int64)))


def batches(loader, sampler):
    """Endless batches, reshuffled each epoch as DistributedSampler expects."""
    epoch = 0
    while True:
        sampler.set_epoch(epoch)
        for batch in loader:
            yield batch
        epoch += 1


def run_steps(model, optimizer, loss_fn, source, steps, sync, interface):
    """Times `steps` training steps (data fetch included) between barriers;
    returns seconds, the last loss, the bytes the interface sent and the
    seconds spent inside loss.backward()."""
    dist.barrier()
    sent = tx_bytes(interface)
    start = time.perf_counter()
    loss, backward = None, 0.0
    for _ in range(steps):
        inputs, targets = next(source)
        optimizer.zero_grad()
        with contextlib.nullcontext() if sync else model.no_sync():
            loss = loss_fn(model(inputs), targets)
            backward_start = time.perf_counter()
            loss.backward()
            backward += time.perf_counter() - backward_start
        optimizer.step()
    dist.barrier()
    return time.perf_counter() - start, loss.item(), tx_bytes(interface) - sent, backward


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", choices=["linear", "convnet", "mlp"], required=True)
    parser.add_argument("--steps", type=int, default=None, help="timed steps per rank")
    parser.add_argument("--warmup", type=int, default=None, help="untimed steps first")
    parser.add_argument("--batch", type=int, default=None, help="batch size per rank")
    parser.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--hook", choices=["none", "fp16", "bf16", "powersgd"], default="none")
    parser.add_argument("--powersgd-rank", type=int, default=2)
    parser.add_argument("--net-interface", default="",
                        help="count the bytes this interface sends during the synchronized steps")
    args = parser.parse_args()
    linear = args.model == "linear"
    defaults = {"linear": (2000, 100, 32), "convnet": (100, 10, 100), "mlp": (20, 3, 16)}
    steps = args.steps or defaults[args.model][0]
    warmup = args.warmup if args.warmup is not None else defaults[args.model][1]
    batch = args.batch or defaults[args.model][2]

    torch.set_num_threads(1)  # One intra-op thread per rank, as the C++ side.
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(args.seed + rank)

    if linear:
        dataset = ToyDataset(2048)
        model, lr, loss_fn = nn.Linear(20, 1), 1e-3, F.mse_loss
    else:
        dataset = fashion_mnist(args.data_dir)
        model = ConvNet() if args.model == "convnet" else mlp()
        lr, loss_fn = 0.01, F.cross_entropy
    param_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    sampler = DistributedSampler(dataset, seed=args.seed)
    loader = DataLoader(dataset, batch_size=batch, shuffle=False, sampler=sampler)
    ddp_model = DDP(model)
    try:
        register_hook(ddp_model, args.hook, args.powersgd_rank)
    except TypeError as error:
        # PyTorch 1.13's bf16_compress_hook refuses to run without NCCL.
        if rank == 0:
            print(f"unavailable side=pytorch hook={args.hook} reason={error}", flush=True)
        dist.destroy_process_group()
        return 0
    optimizer = torch.optim.SGD(ddp_model.parameters(), lr=lr)
    source = batches(loader, sampler)

    nic = args.net_interface
    run_steps(ddp_model, optimizer, loss_fn, source, warmup, True, nic)
    sync_s, loss, sent, _ = run_steps(ddp_model, optimizer, loss_fn, source, steps, True, nic)
    nosync_s, _, _, backward_s = run_steps(ddp_model, optimizer, loss_fn, source, steps, False,
                                           nic)
    if rank == 0:
        print(f"result side=pytorch model={args.model} ranks={world} batch={batch} steps={steps} "
              f"images_per_s={world * batch * steps / sync_s:.1f} "
              f"step_ms={1e3 * sync_s / steps:.4f} nosync_step_ms={1e3 * nosync_s / steps:.4f} "
              f"nosync_backward_ms={1e3 * backward_s / steps:.4f} "
              f"loss={loss:.4f} hook={args.hook} param_bytes={param_bytes} "
              f"tx_bytes_per_step={sent // steps} torch={torch.__version__}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
