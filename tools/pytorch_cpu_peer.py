#!/usr/bin/env python3
"""PyTorch on the CPU beside blobnet's CPU path: the model file's network (tools/pytorch_peer.py
builds it the same way), trained eagerly with SGD (momentum and weight decay from [train]) for one
epoch over the first --train-limit images at the model's batch, then evaluated on the test set.

    tools/pytorch_cpu_peer.py MODEL --data DIR --threads N [--train-limit N] [--batch N] [--eval-batch N]

Prints one line: "pytorch cpu: train <images/s> images/s, evaluate <images/s> images/s" (the
first ten steps are not timed: PyTorch's first steps allocate and warm its caches)."""
import argparse, os, sys, time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pytorch_peer import Net, input_scaling, load_split, parse_model  # noqa: E402

WARM_STEPS = 10


def main():
    p = argparse.ArgumentParser()
    p.add_argument("model")
    p.add_argument("--data", required=True)
    p.add_argument("--threads", type=int, required=True)
    p.add_argument("--train-limit", type=int, default=6400)
    p.add_argument("--batch", type=int)
    p.add_argument("--eval-batch", type=int, default=1000)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    sections = parse_model(a.model)
    t = dict(next((o for k, o in sections if k == "train"), {}))
    batch = a.batch or int(t.get("batch", 64))
    mean, std = input_scaling(next(o for k, o in sections if k == "input"))
    gen = torch.Generator().manual_seed(int(t.get("seed", 1)))
    model = Net(sections, gen)
    dev = torch.device("cpu")
    xtr, ytr = load_split(a.data, "mnist", True, mean, std, dev)
    xte, yte = load_split(a.data, "mnist", False, mean, std, dev)
    xtr, ytr = xtr[: a.train_limit], ytr[: a.train_limit]
    opt = torch.optim.SGD(model.parameters(), lr=float(t.get("lr", 0.01)), momentum=float(t.get("momentum", 0.9)),
                          weight_decay=float(t.get("weight_decay", 5e-4)))
    model.train()
    steps = (xtr.shape[0] + batch - 1) // batch
    start = None
    for s in range(steps):
        if s == WARM_STEPS:
            start = time.perf_counter()
        x, y = xtr[s * batch:(s + 1) * batch], ytr[s * batch:(s + 1) * batch]
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    timed = xtr.shape[0] - min(WARM_STEPS, steps) * batch
    train_rate = timed / (time.perf_counter() - start) if start and timed > 0 else float("nan")
    model.eval()
    start = time.perf_counter()
    with torch.no_grad():
        for i in range(0, xte.shape[0], a.eval_batch):
            model(xte[i:i + a.eval_batch]).argmax(1)
    eval_rate = xte.shape[0] / (time.perf_counter() - start)
    print(f"pytorch cpu: train {train_rate:.0f} images/s, evaluate {eval_rate:.0f} images/s "
          f"({a.threads} threads, torch {torch.__version__})")


if __name__ == "__main__":
    main()
