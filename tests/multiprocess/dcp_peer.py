"""The Python side of SnapshotDcpInterop (dcp_test.cpp): PyTorch's own
torch.distributed.checkpoint (2.x; Debian 13's python3-torch) saves what ddp
loads and loads what ddp saved.

The model and optimizer are those of fsdp_snapshot_model.hpp: a Sequential
of Linear(7, 13), a buffer-only call counter, ReLU, Linear(13, 9), Tanh,
Linear(9, 5); AdamW(lr 1e-2) with weight decay 0.1 on the weights and none
on the biases, in two param groups. Ranks are processes over Gloo on this
machine.

  dcp_peer.py save DIR
      2 ranks, twice: a plain model (replicated, as under DDP) and PyTorch's
      FSDP1 (device_id=cpu, each Linear a unit) train 2 steps, then
      dcp.save({"model", "optim"} of get_state_dict) into DIR/pt-plain and
      DIR/pt-fsdp1; the next 2 steps' batches and the parameters before and
      after them go to DIR/pt-<variant>-ref.pt (the C++ side loads the
      checkpoint, trains the same 2 steps and compares).
  dcp_peer.py load DIR WORLD [fsdp|zero] [into-fsdp1]
      WORLD ranks load ddp's checkpoint DIR/dcp into a plain model and
      AdamW (get_state_dict, dcp.load, set_state_dict), train 4 steps on
      DIR/batches.pt and save the parameters to DIR/python-final-WORLD.pt;
      prints "epoch E step S" as loaded. With "zero": DIR/dcp-zero, which
      ddp's ZeroRedundancyOptimizer saved with AdamW in one group, into
      DIR/python-zero-final-WORLD.pt. With "into-fsdp1": into FSDP1 (a
      unit per Linear, every rank the whole batch) instead of a plain
      model, into DIR/python-fsdp1-final-WORLD.pt.
  dcp_peer.py compare-export DIR
      dcp_to_torch_save(DIR/dcp, DIR/dcp-as-torch.pt), compared tensor for
      tensor with ddp's consolidated export of the same state
      (DIR/consolidated.pt, with the optimizer): prints "equal: N tensors"
      or the first difference.
  dcp_peer.py continue-export DIR
      One process loads DIR/consolidated.pt into a plain model and AdamW
      with load_state_dict, trains 4 steps on DIR/batches.pt and saves the
      parameters to DIR/python-export-final.pt.

A last argument "frozen" to save, load or continue-export freezes the first
Linear and gives AdamW the trainable parameters only, as PyTorch's
fine-tuning recipes do (frozen_optimizer_checks.hpp, whose files DIR then
holds).
"""

import os
import sys

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.multiprocessing as mp
import torch.nn as nn
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict


class CallCounter(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("calls", torch.zeros(1, dtype=torch.long))

    def forward(self, x):
        self.calls.add_(1)
        return x


FROZEN = sys.argv[-1] == "frozen"


def make_net(seed):
    torch.manual_seed(seed)
    net = nn.Sequential(nn.Linear(7, 13), CallCounter(), nn.ReLU(), nn.Linear(13, 9), nn.Tanh(),
                        nn.Linear(9, 5))
    if FROZEN:
        net[0].requires_grad_(False)
    return net


def make_optimizer(model, groups=2):
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    if groups == 1:
        return torch.optim.AdamW([p for _, p in named], lr=1e-2, weight_decay=0.1)
    decay = [p for n, p in named if not n.endswith("bias")]
    no_decay = [p for n, p in named if n.endswith("bias")]
    return torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                              {"params": no_decay, "weight_decay": 0.0}], lr=1e-2)


def init(rank, world, store_path):
    # A FileStore: no port to find free.
    store = dist.FileStore(store_path, world)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world)


def step(model, optimizer, x, y):
    optimizer.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    optimizer.step()


def full_parameters(model):
    # FSDP1's full_state_dict crashes on CPU in PyTorch 2.6 (a SIGSEGV in
    # its clone of the unsharded parameters); summon_full_params does not.
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    if isinstance(model, FSDP):
        with FSDP.summon_full_params(model, writeback=False):
            return [p.detach().clone() for p in model.parameters()]
    return [p.detach().clone() for p in model.parameters()]


def wrap_fsdp1(model):
    # PyTorch 2.6's FSDP1 trains on CPU over Gloo with device_id=cpu.
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp.wrap import ModuleWrapPolicy
    return FSDP(model, device_id=torch.device("cpu"), use_orig_params=True,
                auto_wrap_policy=ModuleWrapPolicy({nn.Linear}))


def save_rank(rank, world, store_path, directory):
    init(rank, world, store_path)
    for variant in ("plain", "fsdp1"):
        model = make_net(31)
        if variant == "fsdp1":
            model = wrap_fsdp1(model)
        optimizer = make_optimizer(model)
        torch.manual_seed(900)
        batches = [(torch.randn(12, 7), torch.randn(12, 5)) for _ in range(4)]

        def train(x, y):
            if variant == "fsdp1":  # each rank its rows; FSDP averages
                x, y = x.chunk(world)[rank], y.chunk(world)[rank]
            step(model, optimizer, x, y)

        for x, y in batches[:2]:
            train(x, y)
        msd, osd = get_state_dict(model, optimizer)
        dcp.save({"model": msd, "optim": osd, "epoch": 2},
                 checkpoint_id=os.path.join(directory, "pt-" + variant))
        before = full_parameters(model)
        for x, y in batches[2:]:
            train(x, y)
        after = full_parameters(model)
        if rank == 0:
            torch.save({"params": before, "next": after, "x": [b[0] for b in batches[2:]],
                        "y": [b[1] for b in batches[2:]]},
                       os.path.join(directory, "pt-" + variant + "-ref.pt"))
        dist.barrier()
    dist.destroy_process_group()


def load_rank(rank, world, store_path, directory, zero, fsdp1):
    init(rank, world, store_path)
    model = make_net(5)
    if fsdp1:
        model = wrap_fsdp1(model)
    optimizer = make_optimizer(model, 1 if zero else 2)
    msd, osd = get_state_dict(model, optimizer)
    loaded = {"model": msd, "optim": osd, "epoch": 0, "step_in_epoch": 0}
    dcp.load(loaded, checkpoint_id=os.path.join(directory, "dcp-zero" if zero else "dcp"))
    set_state_dict(model, optimizer, model_state_dict=msd, optim_state_dict=osd)
    batches = torch.load(os.path.join(directory, "batches.pt"))
    for i in range(0, len(batches), 2):
        step(model, optimizer, batches[i], batches[i + 1])
    params = full_parameters(model)  # under FSDP1 a collective
    if rank == 0:
        print("epoch %d step %d" % (loaded["epoch"], loaded["step_in_epoch"]))
        kind = "zero-" if zero else "fsdp1-" if fsdp1 else ""
        torch.save(params, os.path.join(directory, "python-%sfinal-%d.pt" % (kind, world)))
    dist.destroy_process_group()


def compare_export(directory):
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
    converted = os.path.join(directory, "dcp-as-torch.pt")
    dcp_to_torch_save(os.path.join(directory, "dcp"), converted)
    a = torch.load(converted, weights_only=False)
    b = torch.load(os.path.join(directory, "consolidated.pt"))
    pairs = [("model." + k, a["model"][k], v) for k, v in b["model"].items()]
    names = [n for g in a["optim"]["param_groups"] for n in g["params"]]
    indices = [i for g in b["optimizer"]["param_groups"] for i in g["params"]]
    for name, index in zip(names, indices):
        for field, value in b["optimizer"]["state"][index].items():
            pairs.append(("optim.state.%s.%s" % (name, field), a["optim"]["state"][name][field],
                          value))
    for ga, gb in zip(a["optim"]["param_groups"], b["optimizer"]["param_groups"]):
        for option in ("lr", "betas", "eps", "weight_decay", "amsgrad"):
            if ga[option] != gb[option]:
                raise SystemExit("option %s differs: %r and %r" % (option, ga[option], gb[option]))
    for key, x, y in pairs:
        if x.dtype != y.dtype or x.shape != y.shape or not torch.equal(x, y):
            raise SystemExit("differs: " + key)
    if (a["epoch"], a["step_in_epoch"]) != (b["epoch"], b["step_in_epoch"]):
        raise SystemExit("the epoch or step differs")
    print("equal: %d tensors" % len(pairs))


def continue_export(directory):
    checkpoint = torch.load(os.path.join(directory, "consolidated.pt"))
    model = make_net(5)
    optimizer = make_optimizer(model)
    model.load_state_dict(checkpoint["model"])
    optimizer.load_state_dict(checkpoint["optimizer"])
    batches = torch.load(os.path.join(directory, "batches.pt"))
    for i in range(0, len(batches), 2):
        step(model, optimizer, batches[i], batches[i + 1])
    torch.save([p.detach().clone() for p in model.parameters()],
               os.path.join(directory, "python-export-final.pt"))


def main():
    command, directory = sys.argv[1], sys.argv[2]
    store_path = os.path.join(directory, ".store-%s-%d" % (command, os.getpid()))
    if command == "save":
        mp.spawn(save_rank, args=(2, store_path, directory), nprocs=2)
    elif command == "load":
        world = int(sys.argv[3])
        zero = len(sys.argv) > 4 and sys.argv[4] == "zero"
        fsdp1 = "into-fsdp1" in sys.argv[5:]
        mp.spawn(load_rank, args=(world, store_path, directory, zero, fsdp1), nprocs=world)
    elif command == "compare-export":
        compare_export(directory)
    elif command == "continue-export":
        continue_export(directory)
    else:
        raise SystemExit("unknown command " + command)


if __name__ == "__main__":
    main()
