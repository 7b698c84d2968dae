"""PyTorch's side of benchmarks/fsdp_bench.sh and fsdp_vs_pytorch.sh: FSDP2
(fully_shard; WAY=fsdp1: FSDP1's FullyShardedDataParallel, with
device_id=cpu on the CPU; WAY=ddp: DistributedDataParallel) on the same
MLP (Linear layers of WIDTH, Tanh between, each Linear one unit, the root
the whole model), AdamW in fp32, BATCH rows per rank, on CPU over Gloo
(DEVICE=cuda: on cuda:<local rank> over NCCL, with the CUDA caching
allocator's peak of allocated bytes over the timed steps). Run under
torchrun; rank 0 prints one key=value line (medians of the timed steps:
the step and its forward, backward and optimizer parts; the peak RSS, the
largest over the ranks), or the error PyTorch gave."""
import os
import resource
import statistics
import sys
import time

import torch
import torch.distributed as dist


def main():
    width = int(os.environ.get("WIDTH", "3200"))
    layers = int(os.environ.get("LAYERS", "5"))
    steps = int(os.environ.get("STEPS", "3"))
    batch = int(os.environ.get("BATCH", "8"))
    device = torch.device(os.environ.get("DEVICE", "cpu"))
    if device.type == "cuda":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
    else:
        torch.set_num_threads(1)
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    rank = dist.get_rank()

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize(device)
    try:
        from torch.distributed.fsdp import fully_shard  # PyTorch 2.6
    except ImportError:
        from torch.distributed._composable.fsdp import fully_shard
    torch.manual_seed(1)
    modules = []
    for k in range(layers):
        modules.append(torch.nn.Linear(width, width))
        if k + 1 < layers:
            modules.append(torch.nn.Tanh())
    model = torch.nn.Sequential(*modules).to(device)
    way = os.environ.get("WAY", "fsdp2")
    try:
        if way == "fsdp1":  # FSDP1's wrapper, each Linear a unit
            from torch.distributed.fsdp import FullyShardedDataParallel
            from torch.distributed.fsdp.wrap import ModuleWrapPolicy

            model = FullyShardedDataParallel(model, auto_wrap_policy=ModuleWrapPolicy({torch.nn.Linear}),
                                             device_id=device)
        elif way == "ddp":
            model = torch.nn.parallel.DistributedDataParallel(model)
        else:
            for module in model:
                if isinstance(module, torch.nn.Linear):
                    fully_shard(module)
            fully_shard(model)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        times, forwards, backwards, optimizers = [], [], [], []
        for step in range(steps + 1):
            x, y = torch.randn(batch, width, device=device), torch.randn(batch, width, device=device)
            sync()
            if step == 1 and device.type == "cuda":  # the first step made AdamW's state
                torch.cuda.reset_peak_memory_stats(device)
            start = time.perf_counter()
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            sync()
            forward_end = time.perf_counter()
            loss.backward()
            sync()
            backward_end = time.perf_counter()
            optimizer.step()
            sync()
            if step > 0:
                end = time.perf_counter()
                times.append((end - start) * 1000)
                forwards.append((forward_end - start) * 1000)
                backwards.append((backward_end - forward_end) * 1000)
                optimizers.append((end - backward_end) * 1000)
        rss = torch.tensor([resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024])
        dist.all_reduce(rss, op=dist.ReduceOp.MAX)
        if rank == 0:
            peak = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else -1
            print(f"way=pytorch-{way} ranks={dist.get_world_size()} device={device} "
                  f"cuda_peak_bytes={peak} peak_rss_bytes={int(rss.item())} "
                  f"step_ms={statistics.median(times):.2f} "
                  f"forward_ms={statistics.median(forwards):.2f} "
                  f"backward_ms={statistics.median(backwards):.2f} "
                  f"optimizer_ms={statistics.median(optimizers):.2f}")
    except Exception as error:  # recorded, as the issue asks, when it cannot run
        if rank == 0:
            print(f"way=pytorch-{way} error={type(error).__name__}: {str(error).splitlines()[0]}")
        sys.exit(1)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
