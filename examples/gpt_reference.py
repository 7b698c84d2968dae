#!/usr/bin/env python3
"""The transformer of examples/common/gpt.hpp in plain PyTorch.

Loads what `example_gpt_fortunes --export FILE` wrote (torch.save's format)
into the same model, written here with torch.nn alone and the same
parameter names, and evaluates it on the validation windows the example
evaluates: the last 5% of the fortunes corpus, --valid-windows (256) evenly spaced.
Prints the mean loss, the perplexity and the next-byte accuracy, and a
sample continuing --prompt.

    /usr/bin/python3 examples/gpt_reference.py gpt.pt --heads 4
"""

import argparse
import math
import os

import torch
from torch import nn


class Block(nn.Module):
    """Pre-norm causal self-attention and an MLP, as GptBlockImpl."""

    def __init__(self, width, heads, dropout):
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.norm2 = nn.LayerNorm(width)
        self.up = nn.Linear(width, 4 * width)
        self.down = nn.Linear(4 * width, width)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        batch, length, width = x.shape
        head_width = width // self.heads

        def split(t):
            return t.reshape(batch, length, self.heads, head_width).transpose(1, 2)

        q, k, v = (split(t) for t in self.qkv(self.norm1(x)).chunk(3, dim=-1))
        scores = q @ k.transpose(-2, -1) / math.sqrt(head_width)
        future = torch.ones(length, length, dtype=torch.bool).triu(1)
        scores = scores.masked_fill(future, float("-inf"))
        attended = (scores.softmax(-1) @ v).transpose(1, 2).reshape(batch, length, width)
        x = x + self.dropout(self.proj(attended))
        return x + self.dropout(self.down(torch.nn.functional.gelu(self.up(self.norm2(x)))))


class Gpt(nn.Module):
    """Embeddings, blocks named block0, block1, ..., a final norm, the head tied."""

    def __init__(self, vocabulary, context, width, heads, layers, dropout=0.0):
        super().__init__()
        self.token = nn.Embedding(vocabulary, width)
        self.position = nn.Embedding(context, width)
        self.dropout = nn.Dropout(dropout)
        for layer in range(layers):
            self.add_module(f"block{layer}", Block(width, heads, dropout))
        self.layers = layers
        self.norm = nn.LayerNorm(width)

    def forward(self, tokens):
        h = self.dropout(self.token(tokens) + self.position(torch.arange(tokens.shape[1])))
        for layer in range(self.layers):
            h = getattr(self, f"block{layer}")(h)
        return self.norm(h) @ self.token.weight.t()


def read_corpus(directory):
    names = sorted(n for n in os.listdir(directory)
                   if not n.endswith((".dat", ".u8")) and os.path.isfile(os.path.join(directory, n)))
    data = b"".join(open(os.path.join(directory, n), "rb").read() for n in names)
    return torch.tensor(list(data), dtype=torch.long)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("checkpoint")
    parser.add_argument("--heads", type=int, default=4, help="attention heads (large: 16)")
    parser.add_argument("--data-dir", default="/usr/share/games/fortunes")
    parser.add_argument("--prompt", default="The ")
    parser.add_argument("--valid-windows", type=int, default=256, help="as the example's")
    args = parser.parse_args()

    state = torch.load(args.checkpoint)["model"]
    vocabulary, width = state["token.weight"].shape
    context = state["position.weight"].shape[0]
    layers = sum(1 for key in state if key.endswith(".qkv.weight"))
    model = Gpt(vocabulary, context, width, args.heads, layers)
    model.load_state_dict(state)  # strict: every name and shape must match
    model.eval()

    corpus = read_corpus(args.data_dir)
    valid = corpus[len(corpus) * 95 // 100:]
    stride = (len(valid) - context - 1) // args.valid_windows
    starts = torch.arange(args.valid_windows) * stride
    windows = valid[starts.unsqueeze(1) + torch.arange(context + 1).unsqueeze(0)]
    loss_sum, correct, count = 0.0, 0.0, 0
    with torch.no_grad():
        for chunk in windows.split(16):
            logits = model(chunk[:, :-1]).reshape(-1, vocabulary)
            targets = chunk[:, 1:].reshape(-1)
            loss_sum += torch.nn.functional.cross_entropy(logits, targets, reduction="sum").item()
            correct += (logits.argmax(-1) == targets).sum().item()
            count += targets.numel()
        loss = loss_sum / count
        print(f"python loss={loss:.6f} perplexity={math.exp(loss):.4f} accuracy={correct / count:.4f}")
        text = list(args.prompt.encode())
        for _ in range(120):
            logits = model(torch.tensor([text[-context:]]))[0, -1]
            text.append(int(logits.argmax()))
        print("sample:", bytes(text).decode("utf-8", errors="replace"))


if __name__ == "__main__":
    main()
