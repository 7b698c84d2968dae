"""The Python side of SnapshotPyTorchInterop (pytorch_checkpoint_test.cpp).

Real PyTorch (Debian's python3-torch) loads what ddp exported and saves what
ddp imports. The models and the data are defined here exactly as the C++
test defines them: the DDP tutorial's ConvNet (examples/common/models.hpp)
and NestedNet (a Sequential encoder that starts with BatchNorm1d, and a
head module; Note [No parameter whose gradient is rounding noise] in the
test says why first).
Every batch is a closed form of its index, so both languages train on the
same numbers without exchanging them.

  pytorch_peer.py continue MODEL OPTIM DIR N M
      A (C++ -> Python): load DIR/mid.pt (C++'s export after N steps) into
      the model and optimizer, train steps N..N+M-1, save DIR/a_end.pt; and
      load DIR/init.pt, train steps 0..N+M-1 uninterrupted, save
      DIR/a_ref.pt.
      B (Python -> C++): a seeded model trains N steps and is saved as
      DIR/b_mid.pt ({"model", "optimizer", "epoch"}), then M more: DIR/b_ref.pt.
  pytorch_peer.py tutorial DIR
      The tutorials' files of one Linear(20, 1): DIR/plain.pt
      (model.state_dict()), DIR/ddp.pt (a DDP model's state_dict(), keys
      "module."...), DIR/snapshot.pt ({"MODEL_STATE", "EPOCHS_RUN": 7}),
      DIR/legacy.pt (the pre-1.6 format), DIR/custom.pt (a class instance
      in the dict), DIR/adam.pt (an Adam state_dict, beside the model).
  pytorch_peer.py check-export DIR
      Loads DIR/export.pt with torch.load's defaults into a ConvNet and an
      SGD optimizer and DIR/export.safetensors (with safetensors where it is
      installed, else by the format's spec), checks that both hold the same
      tensors, and prints one line per fact the test asserts.
"""

import argparse
import json
import os
import struct
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F


class ConvNet(nn.Module):
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


class Head(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(16, 8)
        self.out = nn.Linear(8, 3)

    def forward(self, x):
        return self.out(torch.tanh(self.proj(x)))


class NestedNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(nn.BatchNorm1d(12), nn.Linear(12, 16), nn.ReLU())
        self.head = Head()

    def forward(self, x):
        return self.head(self.encoder(x))


BATCH = 8


def batch(model_name, step):
    """Batch `step`: inputs sin(0.1 * (flat index + 1000 * step) + 0.3) in
    double, then float; labels (3 * sample + 7 * step) mod classes."""
    shape = [BATCH, 1, 28, 28] if model_name == "convnet" else [BATCH, 12]
    classes = 10 if model_name == "convnet" else 3
    count = 1
    for size in shape:
        count *= size
    index = torch.arange(count, dtype=torch.float64) + 1000.0 * step
    x = (index * 0.1 + 0.3).sin().to(torch.float32).reshape(shape)
    y = (torch.arange(BATCH, dtype=torch.int64) * 3 + 7 * step) % classes
    return x, y


def make(model_name, optim_name):
    model = ConvNet() if model_name == "convnet" else NestedNet()
    if optim_name == "sgd":
        optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    elif optim_name == "adam":
        optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    else:
        optimizer = torch.optim.AdamW(model.parameters(), lr=0.01, weight_decay=0.05)
    return model, optimizer


def train(model_name, model, optimizer, first, last):
    model.train()
    for step in range(first, last):
        x, y = batch(model_name, step)
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()


def save(model, optimizer, epoch, path):
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch},
               path)


def continue_(model_name, optim_name, directory, n, m):
    # A: continue C++'s run, and run the whole of it here.
    model, optimizer = make(model_name, optim_name)
    mid = torch.load(os.path.join(directory, "mid.pt"))
    model.load_state_dict(mid["model"])
    optimizer.load_state_dict(mid["optimizer"])
    train(model_name, model, optimizer, n, n + m)
    save(model, optimizer, mid["epoch"], os.path.join(directory, "a_end.pt"))

    model, optimizer = make(model_name, optim_name)
    model.load_state_dict(torch.load(os.path.join(directory, "init.pt"))["model"])
    train(model_name, model, optimizer, 0, n + m)
    save(model, optimizer, 0, os.path.join(directory, "a_ref.pt"))

    # B: a run that starts here.
    torch.manual_seed(1234)
    model, optimizer = make(model_name, optim_name)
    train(model_name, model, optimizer, 0, n)
    save(model, optimizer, 1, os.path.join(directory, "b_mid.pt"))
    train(model_name, model, optimizer, n, n + m)
    save(model, optimizer, 2, os.path.join(directory, "b_ref.pt"))
    print("peer: continued")


def tutorial(directory):
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.manual_seed(7)
    model = nn.Linear(20, 1)
    torch.save(model.state_dict(), os.path.join(directory, "plain.pt"))
    print("peer: weight sum %.9g" % model.weight.sum().item())
    dist.init_process_group("gloo", init_method="file://" + os.path.join(directory, "store"),
                            rank=0, world_size=1)
    ddp_model = DDP(model)
    torch.save(ddp_model.state_dict(), os.path.join(directory, "ddp.pt"))
    torch.save({"MODEL_STATE": ddp_model.module.state_dict(), "EPOCHS_RUN": 7},
               os.path.join(directory, "snapshot.pt"))
    dist.destroy_process_group()
    torch.save(model.state_dict(), os.path.join(directory, "legacy.pt"),
               _use_new_zipfile_serialization=False)
    torch.save({"model": model.state_dict(), "note": Head()}, os.path.join(directory, "custom.pt"))
    torch.save(model, os.path.join(directory, "whole.pt"))  # the module itself, pickled
    # What many training scripts save beside the model: their argparse
    # arguments, and the epoch as a tensor.
    args = argparse.Namespace(lr=0.01, epochs=7, data="/tmp/data")
    torch.save({"model": model.state_dict(), "args": args, "epoch": torch.tensor(5)},
               os.path.join(directory, "args.pt"))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    F.mse_loss(model(torch.ones(4, 20)), torch.zeros(4, 1)).backward()
    optimizer.step()
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()},
               os.path.join(directory, "adam.pt"))


def read_safetensors(path):
    try:
        from safetensors.torch import load_file
        return load_file(path), "safetensors " + __import__("safetensors").__version__
    except ImportError:
        with open(path, "rb") as f:
            (size,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(size))
            data = f.read()
        codes = {"F32": torch.float32, "F64": torch.float64, "I64": torch.int64}
        tensors = {}
        for name, spec in header.items():
            if name == "__metadata__":
                continue
            begin, end = spec["data_offsets"]
            raw = bytearray(data[begin:end])
            tensors[name] = torch.frombuffer(raw, dtype=codes[spec["dtype"]]).reshape(spec["shape"])
        return tensors, "the format's spec (no python3-safetensors here)"


def check_export(directory):
    ckpt = torch.load(os.path.join(directory, "export.pt"))  # the defaults: weights_only in 2.6
    model, optimizer = make("convnet", "sgd")
    print("peer: load_state_dict", model.load_state_dict(ckpt["model"]))
    optimizer.load_state_dict(ckpt["optimizer"])
    print("peer: keys", ",".join(ckpt["model"].keys()))
    print("peer: epoch", ckpt["epoch"], "counters", json.dumps(ckpt.get("counters")),
          "metadata", json.dumps(ckpt.get("metadata")))
    group = optimizer.param_groups[0]
    print("peer: lr %g momentum %g states %d" % (group["lr"], group["momentum"],
                                                  len(optimizer.state)))
    tensors, reader = read_safetensors(os.path.join(directory, "export.safetensors"))
    same = list(tensors.keys()) == list(ckpt["model"].keys()) or \
        sorted(tensors.keys()) == sorted(ckpt["model"].keys())
    equal = all(torch.equal(tensors[k], ckpt["model"][k]) for k in ckpt["model"])
    print("peer: safetensors read with", reader, "same keys", same, "equal", equal)
    print("peer: fc.bias", " ".join("%.9g" % v for v in model.fc.bias.tolist()))


if __name__ == "__main__":
    command = sys.argv[1]
    if command == "continue":
        continue_(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]), int(sys.argv[6]))
    elif command == "tutorial":
        tutorial(sys.argv[2])
    elif command == "check-export":
        check_export(sys.argv[1 + 1])
    else:
        sys.exit("unknown command " + command)
