"""PyTorch's side of benchmarks/checkpoint_bench.sh: torch.save (+ fsync, as
ddp's export fsyncs) and torch.load of the same state as checkpoint_bench
(Linear(1024, 1024) layers, SGD momentum), and torch.load of ddp's export.

  pytorch_checkpoint_bench.py MB DIR REPEAT
"""
import os
import sys
import time

import torch

mb, directory, repeat = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
torch.set_num_threads(1)
layers = max(1, round(mb / 8.4))
model = torch.nn.Sequential(*[torch.nn.Linear(1024, 1024) for _ in range(layers)])
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
model(torch.randn(4, 1024)).sum().backward()
optimizer.step()
state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": 0}
size = 2.0 * sum(p.numel() * p.element_size() for p in model.parameters())
path = os.path.join(directory, "pytorch.pt")


def median_ms(run):
    times = []
    for _ in range(repeat):
        os.sync()  # as checkpoint_bench: no earlier write's writeback in the time
        start = time.perf_counter()
        run()
        times.append((time.perf_counter() - start) * 1e3)
    return sorted(times)[len(times) // 2]


def save():
    with open(path, "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())


def line(what, ms):
    print("pytorch %-18s %7.1f MB %9.1f ms %8.0f MB/s" % (what, size / 1e6, ms,
                                                          size / 1e6 / (ms / 1e3)))


line("torch.save+fsync", median_ms(save))
line("torch.load", median_ms(lambda: torch.load(path)))
ddp_file = os.path.join(directory, "ddp.pt")
line("torch.load ddp's", median_ms(lambda: torch.load(ddp_file)))
