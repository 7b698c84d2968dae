# A PyTorch DDP script, as a Python user would write it for torchrun; the
# LauncherPython tests run it under ddprun (`ddprun ... ddp_script.py`).
#
# It joins the job from the launcher's variables (init_method env://), trains
# a tiny model wrapped in torch.nn.parallel.DistributedDataParallel for
# --steps SGD steps, checkpointing after each, and prints a digest of the
# final parameters. A restarted job resumes from the checkpoint. With
# --kill-at STEP, rank 1 SIGKILLs itself after that step's checkpoint, in
# the first attempt only (TORCHELASTIC_RESTART_COUNT 0).
import argparse
import hashlib
import os
import signal

import torch
import torch.distributed as dist


def batch(step, rank):
    # The data depend on the step and rank alone, so a resumed job sees what
    # an uninterrupted one does.
    g = torch.Generator().manual_seed(1000 * step + rank)
    x = torch.randn(8, 4, generator=g)
    return x, x.sum(dim=1, keepdim=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--kill-at", type=int, default=-1)
    args = parser.parse_args()

    dist.init_process_group("gloo", init_method="env://")
    rank = dist.get_rank()
    restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(
        torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    start = 0
    if os.path.exists(args.checkpoint):
        state = torch.load(args.checkpoint)
        model.module.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start = state["step"] + 1
        print(f"rank {rank} resumed at step {start} (restart {restart})", flush=True)

    for step in range(start, args.steps):
        x, y = batch(step, rank)
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
        if rank == 0:
            state = {"step": step, "model": model.module.state_dict(),
                     "optimizer": optimizer.state_dict()}
            torch.save(state, args.checkpoint + ".tmp")
            os.replace(args.checkpoint + ".tmp", args.checkpoint)
        dist.barrier()  # the checkpoint of this step is written
        if step == args.kill_at and rank == 1 and restart == 0:
            print(f"rank {rank} kills itself after step {step}", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)

    digest = hashlib.sha256()
    for p in model.module.parameters():
        digest.update(p.detach().contiguous().numpy().tobytes())
    print(f"rank {rank} world {dist.get_world_size()} digest {digest.hexdigest()}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
