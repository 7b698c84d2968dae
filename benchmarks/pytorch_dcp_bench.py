"""PyTorch's side of benchmarks/dcp_bench.sh: 2 ranks over Gloo hold their
FSDP1 shards (device_id=cpu, use_orig_params, a unit per Linear) of the same
model as dcp_bench.cpp (Linear(1024, 1024) layers, AdamW after one step),
dcp.save the get_state_dict() dicts, then dcp.load and set_state_dict them;
rank 0 prints one line per measurement, the median of REPEAT, each run
after a barrier and an untimed os.sync().

  pytorch_dcp_bench.py MB DIR REPEAT
"""

import os
import sys
import time

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.multiprocessing as mp
import torch.nn as nn
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict


def run(rank, world, mb, directory, repeat, store_path):
    import warnings
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    dist.init_process_group("gloo", store=dist.FileStore(store_path, world), rank=rank,
                            world_size=world)
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp.wrap import ModuleWrapPolicy
    layers = max(1, round(mb / 12.6))
    torch.manual_seed(0)
    net = nn.Sequential(*[nn.Linear(1024, 1024) for _ in range(layers)])
    size = sum(3.0 * p.numel() * p.element_size() for p in net.parameters())
    model = FSDP(net, device_id=torch.device("cpu"), use_orig_params=True,
                 auto_wrap_policy=ModuleWrapPolicy({nn.Linear}))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.randn(4, 1024)).sum().backward()
    optimizer.step()

    def median_ms(action):
        times = []
        for _ in range(repeat):
            os.sync()
            dist.barrier()
            start = time.perf_counter()
            action()
            dist.barrier()
            times.append((time.perf_counter() - start) * 1e3)
        return sorted(times)[len(times) // 2]

    def save():
        msd, osd = get_state_dict(model, optimizer)
        dcp.save({"model": msd, "optim": osd}, checkpoint_id=directory)

    def load():
        msd, osd = get_state_dict(model, optimizer)
        dcp.load({"model": msd, "optim": osd}, checkpoint_id=directory)
        set_state_dict(model, optimizer, model_state_dict=msd, optim_state_dict=osd)

    results = [("save", median_ms(save)), ("load", median_ms(load))]
    if rank == 0:
        for what, ms in results:
            print("pytorch %-18s %7.1f MB %9.1f ms %8.0f MB/s"
                  % (what, size / 1e6, ms, size / 1e6 / (ms / 1e3)), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    mb, directory, repeat = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    os.makedirs(directory, exist_ok=True)
    store = os.path.join(os.path.dirname(directory.rstrip("/")), ".store-%d" % os.getpid())
    mp.spawn(run, args=(2, mb, directory, repeat, store), nprocs=2)
