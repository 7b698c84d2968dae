#!/usr/bin/python3
r"""PyTorch's side of benchmarks/recovery_bench.sh: the same training as
benchmarks/recovery_bench.cpp (the torchrun tutorial's toy, or the ConvNet on
Fashion-MNIST; DDP on Gloo, SGD), with the torchrun tutorial's recovery:
a snapshot (torch.save of model, optimizer and step) every --save-every
steps, loaded at start-up when present. Run one process per rank under
torchrun with --max_restarts 1:

  OMP_NUM_THREADS=1 /usr/bin/python3 -m torch.distributed.run --standalone \
      --nproc_per_node 2 --max_restarts 1 --redirects 2 --tee 2 \
      benchmarks/pytorch_recovery_bench.py --model linear --snapshot-dir /tmp/s --kill-at 25

Prints the same lines as the C++ side: `pid P rank R round G` at start-up and
`step S round G rank R` after every step, G being TORCHELASTIC_RESTART_COUNT;
with --kill-at K rank 1 SIGKILLs itself right after step K in round 0.
"""

import argparse
import os
import signal
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data.distributed import DistributedSampler

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pytorch_ddp_bench import ConvNet, fashion_mnist  # noqa: E402  (same models and data)


def say(line):
    """One write per line: the ranks share torchrun's stdout, unprefixed."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", choices=["linear", "convnet"], required=True)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--batch", type=int, default=None)
    parser.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--snapshot-dir", required=True)
    parser.add_argument("--save-every", type=int, default=10)
    parser.add_argument("--kill-at", type=int, default=0)
    parser.add_argument("--lead-ms", type=int, default=0,
                        help="sleep after each step before the kill (round 0), so that what "
                             "starts beside the job is ready by then")
    args = parser.parse_args()
    linear = args.model == "linear"
    batch = args.batch or (32 if linear else 100)
    round_ = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(args.seed)
    if linear:
        inputs, targets = torch.rand(2048, 20), torch.rand(2048, 1)
        model, lr, loss_fn = torch.nn.Linear(20, 1), 1e-3, F.mse_loss
    else:
        inputs, targets = fashion_mnist(args.data_dir).tensors
        model, lr, loss_fn = ConvNet(), 0.01, F.cross_entropy
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    path = os.path.join(args.snapshot_dir, "snapshot.pt")
    step, epoch, position = 0, 0, 0
    if os.path.exists(path):  # the tutorial's _load_snapshot
        snapshot = torch.load(path)
        model.load_state_dict(snapshot["model"])
        optimizer.load_state_dict(snapshot["optimizer"])
        step, epoch, position = snapshot["step"], snapshot["epoch"], snapshot["position"]
    ddp_model = DDP(model)
    sampler = DistributedSampler(range(inputs.size(0)), seed=args.seed)
    say(f"pid {os.getpid()} rank {rank} round {round_}")
    while step < args.steps:
        sampler.set_epoch(epoch)
        indices = list(sampler)
        while position < len(indices) and step < args.steps:
            index = torch.tensor(indices[position:position + batch])
            position += batch
            optimizer.zero_grad()
            loss_fn(ddp_model(inputs[index]), targets[index]).backward()
            optimizer.step()
            step += 1
            say(f"step {step} round {round_} rank {rank}")
            if rank == 0 and step % args.save_every == 0:  # the tutorial's _save_snapshot
                os.makedirs(args.snapshot_dir, exist_ok=True)
                torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                            "step": step, "epoch": epoch, "position": position}, path + ".tmp")
                os.replace(path + ".tmp", path)
            if step % args.save_every == 0:
                dist.barrier()  # every rank waits for the file, as ddp's save() does
            if round_ == 0 and step < args.kill_at and args.lead_ms > 0:
                time.sleep(args.lead_ms / 1000)
            if rank == 1 and round_ == 0 and step == args.kill_at:
                os.kill(os.getpid(), signal.SIGKILL)
        if position >= len(indices):
            epoch, position = epoch + 1, 0
    dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
