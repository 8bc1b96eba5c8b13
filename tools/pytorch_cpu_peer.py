#!/usr/bin/env python3
"""PyTorch on the CPU beside blobnet's CPU path: the model file's network (tools/pytorch_peer.py
builds it the same way), trained eagerly with SGD (momentum and weight decay from [train]) for one
epoch over the first --train-limit images at the model's batch, then evaluated on the test set.

    tools/pytorch_cpu_peer.py MODEL --data DIR --threads N [--train-limit N] [--batch N] [--eval-batch N]
    tools/pytorch_cpu_peer.py MODEL --data DIR --threads N --recipe [--epochs N] [--seed N]

--dataset names the data's format as tools/pytorch_peer.py does (default: IDX files).

Prints one line: "pytorch cpu: train <images/s> images/s, evaluate <images/s> images/s" (the
first ten steps are not timed: PyTorch's first steps allocate and warm its caches).

With --recipe it trains the model file's whole [train] recipe instead (--epochs and --seed
override it), as tools/pytorch_peer.py does on a GPU: blobnet's SGD rule (v = momentum v + lr
lr_mult (g + decay w), w -= v; biases at bias_lr_mult without decay), its learning-rate policy per
step, and a fresh random order of the whole training set every epoch. It prints each epoch's test
accuracy and last "pytorch cpu: final test accuracy <X>%": the accuracy of a full recipe on a
machine without a GPU, beside `blobnet train MODEL --device cpu`."""
import argparse, os, sys, time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pytorch_peer import Net, input_scaling, load_split, lr_at, parse_model, read_recipe  # noqa: E402

WARM_STEPS = 10


def main():
    p = argparse.ArgumentParser()
    p.add_argument("model")
    p.add_argument("--data", required=True)
    p.add_argument("--dataset", choices=["mnist", "fashion-mnist", "cifar10", "npz"], default="mnist",
                   help="the data's format (default: IDX files)")
    p.add_argument("--threads", type=int, required=True)
    p.add_argument("--train-limit", type=int, default=6400)
    p.add_argument("--batch", type=int)
    p.add_argument("--eval-batch", type=int, default=1000)
    p.add_argument("--recipe", action="store_true", help="train the model file's whole recipe")
    p.add_argument("--epochs", type=int)
    p.add_argument("--seed", type=int)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    if a.recipe:
        return recipe(a)
    sections = parse_model(a.model)
    t = dict(next((o for k, o in sections if k == "train"), {}))
    batch = a.batch or int(t.get("batch", 64))
    mean, std = input_scaling(next(o for k, o in sections if k == "input"))
    gen = torch.Generator().manual_seed(int(t.get("seed", 1)))
    model = Net(sections, gen)
    dev = torch.device("cpu")
    xtr, ytr = load_split(a.data, a.dataset, True, mean, std, dev)
    xte, yte = load_split(a.data, a.dataset, False, mean, std, dev)
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


def accuracy(model, xte, yte, eval_batch):
    model.eval()
    correct = 0
    with torch.no_grad():
        for i in range(0, xte.shape[0], eval_batch):
            correct += (model(xte[i:i + eval_batch]).argmax(1) == yte[i:i + eval_batch]).sum().item()
    model.train()
    return 100.0 * correct / xte.shape[0]


def recipe(a):
    """The model file's whole recipe (see the module's text)."""
    sections = parse_model(a.model)
    a.lr = a.lr_policy = a.optimizer = None
    cfg, aug = read_recipe(sections, a)
    if cfg["optimizer"] != "sgd":
        sys.exit(f"pytorch_cpu_peer: --recipe trains with SGD only, not {cfg['optimizer']}")
    if aug["shift"] or aug["flip"] or aug["cutout"]:
        sys.exit("pytorch_cpu_peer: --recipe does not augment; the model has an [augment] section")
    bs, epochs = int(cfg["batch"]), int(cfg["epochs"])
    mean, std = input_scaling(next(o for k, o in sections if k == "input"))
    dev = torch.device("cpu")
    xtr, ytr = load_split(a.data, a.dataset, True, mean, std, dev)
    xte, yte = load_split(a.data, a.dataset, False, mean, std, dev)
    torch.manual_seed(int(cfg["seed"]))
    model = Net(sections, torch.Generator().manual_seed(int(cfg["seed"])))
    params, vel, mult, decay = [], [], [], []
    for name, w in model.named_parameters():
        bias = name.endswith("bias")
        params.append(w)
        vel.append(torch.zeros_like(w))
        mult.append(cfg["bias_lr_mult"] if bias else 1.0)
        decay.append(0.0 if bias else cfg["weight_decay"])
    n = xtr.shape[0]
    steps = (n + bs - 1) // bs
    order_gen = torch.Generator().manual_seed(int(cfg["seed"]))
    it, acc = 0, float("nan")
    model.train()
    for epoch in range(epochs):
        start = time.perf_counter()
        order = torch.randperm(n, generator=order_gen)
        for s in range(steps):
            idx = order[s * bs:(s + 1) * bs]
            loss = F.cross_entropy(model(xtr[idx]), ytr[idx], label_smoothing=model.smoothing)
            for w in params:
                w.grad = None
            loss.backward()
            lr = lr_at(cfg, it, steps * epochs)
            it += 1
            with torch.no_grad():
                for w, v, m, d in zip(params, vel, mult, decay):
                    g = w.grad.add(w, alpha=d) if d else w.grad
                    v.mul_(cfg["momentum"]).add_(g * (lr * m))
                    w.sub_(v)
        seconds = time.perf_counter() - start
        acc = accuracy(model, xte, yte, a.eval_batch)
        print(f"epoch {epoch + 1}/{epochs}  test acc {acc:6.2f}%  {seconds:.1f} s", flush=True)
    print(f"pytorch cpu: final test accuracy {acc:.2f}% ({a.threads} threads, torch {torch.__version__})")


if __name__ == "__main__":
    main()
