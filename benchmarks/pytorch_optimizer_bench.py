"""PyTorch's AdamW beside ddp's optimizer_bench: one core, 50 M fp32
parameters in one tensor, each implementation PyTorch has (the loop over
parameters, foreach, and fused where this PyTorch has it on CPU: 2.4 and
later). Prints one row per way, as benchmarks/optimizer_bench.cpp does.

    python3 benchmarks/pytorch_optimizer_bench.py [--params MILLIONS] [--steps N]
"""
import argparse
import statistics
import time

import torch


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--params", type=float, default=50)
    parser.add_argument("--steps", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    total = int(args.params * 1e6)
    ways = [("loop", dict(foreach=False)), ("foreach", dict(foreach=True))]
    if tuple(int(x) for x in torch.__version__.split(".")[:2]) >= (2, 4):
        ways.append(("fused", dict(fused=True)))
    print(f"PyTorch {torch.__version__}")
    for name, kwargs in ways:
        torch.manual_seed(0)
        p = torch.randn(total, requires_grad=True)
        p.grad = torch.randn(total)
        optimizer = torch.optim.AdamW([p], lr=1e-3, weight_decay=0.1, **kwargs)
        optimizer.step()
        times = []
        for _ in range(args.steps):
            start = time.perf_counter()
            optimizer.step()
            times.append(time.perf_counter() - start)
        ms = statistics.median(times) * 1e3
        print(f"torch.optim.AdamW {name:<10} whole {ms:10.1f} {ms * 1e6 / total:10.2f} "
              f"{28 * total / (ms / 1e3) / 1e9:9.1f}")


if __name__ == "__main__":
    main()
