#!/usr/bin/env python3
"""The PyTorch peer of any blobnet model file: the same layers, wiring, initialisation scheme,
input scaling, data order policy and recipe ([train] and the flags below), trained on the same
data (IDX files, or CIFAR-10's binary batches), so that blobnet's speed and accuracy can be read beside PyTorch's from one run.

    tools/pytorch_peer.py MODEL --data DIR [--epochs N] [--batch N] [--lr X] [--lr-policy P]
                          [--variant V[,V...]] [--until-accuracy P] [--seed N] [--ddp N]

Variants: eager (data on the GPU, one launch per kernel), graph (the whole training step
captured once as a CUDA graph and replayed, under PyTorch's defaults: cuDNN's convolutions may use
TF32, matrix products do not), graph-fp32 (the same with TF32 off in cuDNN and in matrix products
too: FP32 math throughout, as blobnet's default), graph-bf16 (the graph under bf16 autocast).
Each variant sets both TF32 switches for its run (PyTorch's defaults but for graph-fp32) and puts
back what it found after, so that their order does not change what a variant measures. Several
variants separated by commas run one after the other in one process, each from fresh weights, on
the datasets loaded once. Prints a line per epoch (training seconds without the evaluation, as
blobnet's epoch lines) and for each variant a last line with the median epoch time of epochs 2..,
the final test accuracy, the peak device memory without the datasets (as blobnet counts its own)
and, with --until-accuracy, the seconds from process start to that accuracy.

--ddp N trains the same on N GPUs with DistributedDataParallel, as blobnet's --gpus N does: one
process per GPU (torch.multiprocessing), NCCL on 127.0.0.1, each rank the contiguous share
[r*n/N, (r+1)*n/N) of every global batch of n, its loss weighted by N*n_r/n so that DDP's average
of the ranks' gradients is the mean over the global batch whatever the shares; batchnorm
statistics are each rank's own (broadcast_buffers off, no SyncBatchNorm) and averaged before
every evaluation, which each rank does on its share of the test set. The graph variants capture
the step with DDP's all-reduces inside it after 11 eager steps (DDP settles its buckets in the
first ones); where the capture fails, the run goes on eager and says so. Only rank 0 prints; its
lines name the variant as V-ddpN (e.g. "pytorch graph-ddp2:").

The update is blobnet's SGD, v = momentum * v + lr * lr_mult * (g + decay * w), w -= v, with
biases at bias_lr_mult and no decay, and its learning-rate policies per step. Weights are drawn
with the model's initialisers (He normal, Xavier uniform, zero biases) from the seed, but from
PyTorch's generator: the runs start from other values than blobnet's.
"""
import argparse, contextlib, math, os, sys, time

START = time.perf_counter()
VARIANTS = ("eager", "graph", "graph-fp32", "graph-bf16")

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F

from pytorch_crosscheck import read_idx  # the IDX reader, beside this script


def parse_model(path):
    """[section] key = value blocks in file order, comments (# ;) dropped."""
    sections = []
    with open(path) as f:
        for raw in f:
            line = raw.split("#", 1)[0].split(";", 1)[0].strip()
            if not line:
                continue
            if line.startswith("[") and line.endswith("]"):
                sections.append((line[1:-1].strip(), {}))
            elif "=" in line and sections:
                k, v = line.split("=", 1)
                sections[-1][1][k.strip()] = v.strip()
            else:
                sys.exit(f"{path}: cannot read line: {raw.rstrip()}")
    return sections


def input_scaling(o):
    """An [input] section's standardisation: pixels in [0, 1] become (x - mean[c]) / std[c], with
    one value for every channel or one per channel ("auto" is not read here: give the numbers)."""
    def per_channel(text):
        values = [float(v) for v in text.split(",")]
        return torch.tensor(values).view(1, -1, 1, 1) if len(values) > 1 else values[0]
    return per_channel(o.get("mean", "0")), per_channel(o.get("std", "1"))


def window_out(n, size, stride, pad):
    return (n + 2 * pad - size) // stride + 1


class Net(torch.nn.Module):
    """The model file's graph: layers in file order, each reading the layer above it or the
    layers its `input` key names ('input' is the data)."""

    def __init__(self, sections, gen):
        super().__init__()
        shapes = {"input": None}
        self.nodes = []
        self.smoothing = 0.0
        prev = "input"
        counts = {}
        for kind, o in sections:
            if kind == "input":
                shapes["input"] = (int(o["channels"]), int(o["height"]), int(o["width"]))
                self.mean, self.std = input_scaling(o)
                continue
            if kind in ("train", "augment", "data"):
                continue
            counts[kind] = counts.get(kind, 0) + 1
            name = o.get("name", f"{kind}{counts[kind]}")
            inputs = [s.strip() for s in o["input"].split(",")] if "input" in o else [prev]
            ins = [shapes[i] for i in inputs]
            c, h, w = ins[0]
            module, out = None, (c, h, w)
            if kind == "conv2d":
                k, st, pad, fo = int(o["size"]), int(o.get("stride", 1)), int(o.get("pad", 0)), int(o["filters"])
                module = torch.nn.Conv2d(c, fo, k, st, pad)
                init(module.weight, o.get("init", "xavier"), c * k * k, fo * k * k, gen)
                out = (fo, window_out(h, k, st, pad), window_out(w, k, st, pad))
            elif kind == "dense":
                fo = int(o["outputs"])
                module = torch.nn.Linear(c * h * w, fo)
                init(module.weight, o.get("init", "xavier"), c * h * w, fo, gen)
                out = (fo, 1, 1)
            elif kind in ("maxpool", "avgpool") and o.get("global", "0") == "1":
                out, o = (c, 1, 1), dict(size=(h, w), stride=(h, w), pad=0)
            elif kind in ("maxpool", "avgpool"):
                k = int(o["size"])
                st, pad = int(o.get("stride", k)), int(o.get("pad", 0))
                out = (c, window_out(h, k, st, pad), window_out(w, k, st, pad))
                o = dict(size=k, stride=st, pad=pad)
            elif kind == "batchnorm":
                bn_type = torch.nn.BatchNorm2d if h * w > 1 else torch.nn.BatchNorm1d
                module = bn_type(c, eps=float(o.get("eps", 1e-5)), momentum=float(o.get("momentum", 0.1)))
            elif kind == "concat":
                out = (sum(s[0] for s in ins), h, w)
            elif kind == "add":
                o = dict(coeff=[float(x) for x in o["coeff"].split(",")] if "coeff" in o else [1.0] * len(inputs))
            elif kind == "softmax_ce":
                self.smoothing = float(o.get("smoothing", 0))
            elif kind not in ("relu", "sigmoid", "tanh", "leaky_relu", "elu", "dropout"):
                sys.exit(f"pytorch_peer: layer type {kind} has no PyTorch counterpart here")
            if module is not None:
                if kind != "batchnorm":
                    torch.nn.init.zeros_(module.bias)
                self.add_module(name, module)
            self.nodes.append((name, kind, inputs, module, o))
            shapes[name] = out
            prev = name
        self.loss_last = self.nodes[-1][1] == "softmax_ce"

    def forward(self, x):
        vals = {"input": x}
        for name, kind, inputs, module, o in self.nodes:
            xs = [vals[i] for i in inputs]
            x = xs[0]
            if kind == "conv2d":
                y = module(x)
            elif kind == "dense":
                y = module(x.flatten(1))
            elif kind == "batchnorm":
                y = module(x if x.dim() == 4 and x.shape[2] * x.shape[3] > 1 else x.flatten(1))
            elif kind == "maxpool":
                y = F.max_pool2d(x, o["size"], o["stride"], o["pad"])
            elif kind == "avgpool":
                y = F.avg_pool2d(x, o["size"], o["stride"], o["pad"], count_include_pad=False)
            elif kind == "relu":
                y = F.relu(x)
            elif kind == "sigmoid":
                y = torch.sigmoid(x)
            elif kind == "tanh":
                y = torch.tanh(x)
            elif kind == "leaky_relu":
                y = F.leaky_relu(x, float(o.get("slope", 0.01)))
            elif kind == "elu":
                y = F.elu(x, float(o.get("alpha", 1.0)))
            elif kind == "dropout":
                y = F.dropout(x, float(o.get("rate", 0.5)), self.training)
            elif kind == "add":
                y = sum(c * v for c, v in zip(o["coeff"], xs))
            elif kind == "concat":
                y = torch.cat(xs, 1)
            elif kind == "softmax_ce":
                y = x.flatten(1)  # logits; the loss is taken outside
            vals[name] = y
        return vals[self.nodes[-1][0]]


def init(weight, how, fan_in, fan_out, gen):
    with torch.no_grad():
        if how == "he":
            weight.copy_(torch.randn(weight.shape, generator=gen) * math.sqrt(2.0 / fan_in))
        else:
            limit = math.sqrt(6.0 / (fan_in + fan_out))
            weight.copy_((torch.rand(weight.shape, generator=gen) * 2 - 1) * limit)


def annealed(start, end, pct):
    return end + (start - end) / 2 * (math.cos(math.pi * pct) + 1)


def lr_at(cfg, it, total):
    """blobnet's policies; onecycle is PyTorch's OneCycleLR (cosine, momentum not cycled); the
    first `warmup` steps scale the policy's rate by (it + 1) / warmup."""
    lr, p = cfg["lr"], cfg["lr_policy"]
    if p == "step":
        rate = lr * cfg["gamma"] ** (it // cfg["stepsize"])
    elif p == "inv":
        rate = lr * (1 + cfg["gamma"] * it) ** -cfg["power"]
    elif p == "cosine":
        rate = cfg["lr_min"] + 0.5 * (lr - cfg["lr_min"]) * (1 + math.cos(math.pi * min(it, total) / total))
    elif p == "onecycle":
        initial = lr / cfg["div_factor"]
        up = cfg["pct_start"] * total - 1
        if it <= up:
            rate = annealed(initial, lr, it / up)
        else:
            rate = annealed(lr, initial / cfg["final_div_factor"], min(1.0, (it - up) / (total - 1 - up)))
    elif p == "poly":
        rate = lr * (1 - min(it / total, 1.0)) ** cfg["poly_power"]
    elif p == "fixed":
        rate = lr
    else:
        sys.exit(f"pytorch_peer: no lr policy {p!r} here (fixed, step, inv, cosine, onecycle, poly)")
    warmup = int(cfg["warmup"])
    return rate * (it + 1) / warmup if it < warmup else rate


def augment(x, aug, fill, gen):
    """Each example moved by (dx, dy) in [-shift, shift] with `fill` moved in (or the image
    reflected, pad = reflect), then mirrored left-right with probability 1/2, then a cutout square
    set to 0 (blobnet draws its own numbers: the same law, not the same draws)."""
    n, c, h, w = x.shape
    shift, flip, cutout = aug["shift"], aug["flip"], aug["cutout"]
    if shift:
        d = torch.randint(-shift, shift + 1, (2, n), device=x.device, generator=gen)
        if aug["pad"] == "reflect":
            padded = F.pad(x, (shift, shift, shift, shift), mode="reflect")
        else:
            padded = F.pad(x, (shift, shift, shift, shift), value=0.0) + F.pad(
                torch.zeros_like(x), (shift, shift, shift, shift), value=1.0) * fill
        rows = (shift + d[0])[:, None, None] + torch.arange(h, device=x.device)[None, :, None]
        cols = (shift + d[1])[:, None, None] + torch.arange(w, device=x.device)[None, None, :]
        x = padded.permute(0, 2, 3, 1)[torch.arange(n, device=x.device)[:, None, None], rows, cols].permute(0, 3, 1, 2)
    if flip:
        mirrored = torch.rand(n, device=x.device, generator=gen) < 0.5
        x = torch.where(mirrored[:, None, None, None], x.flip(3), x)
    if cutout:
        cy = torch.randint(0, h, (n, 1, 1), device=x.device, generator=gen)
        cx = torch.randint(0, w, (n, 1, 1), device=x.device, generator=gen)
        rows = torch.arange(h, device=x.device)[None, :, None]
        cols = torch.arange(w, device=x.device)[None, None, :]
        half = cutout // 2
        inside = ((rows - cy + half) >= 0) & ((rows - cy + half) < cutout) & ((cols - cx + half) >= 0) & (
            (cols - cx + half) < cutout)
        x = x.masked_fill(inside[:, None], 0.0)
    return x


def read_recipe(sections, a):
    """The model file's [train] recipe with the command line's overrides, and its [augment]."""
    t = dict(next((o for k, o in sections if k == "train"), {}))
    cfg = dict(batch=64, epochs=10, lr=0.01, momentum=0.9, weight_decay=5e-4, lr_policy="fixed", gamma=1e-4,
               power=0.75, stepsize=10000, lr_min=0.0, bias_lr_mult=1.0, seed=1, optimizer="sgd", beta1=0.9,
               beta2=0.999, eps=1e-8, warmup=0, pct_start=0.3, div_factor=25.0, final_div_factor=1e4, alpha=0.99,
               centered=0.0)
    for k, v in t.items():
        cfg[k] = v if k in ("lr_policy", "optimizer") else float(v)
    for k in ("epochs", "batch", "lr", "lr_policy", "seed", "optimizer"):
        if getattr(a, k) is not None:
            cfg[k] = getattr(a, k)
    # Each table entry has its own defaults: RMSprop's momentum is 0, poly's power 1.
    if cfg["optimizer"] == "rmsprop" and "momentum" not in t:
        cfg["momentum"] = 0.0
    cfg["poly_power"] = float(t.get("power", 1.0))
    aug = dict(next((o for k, o in sections if k == "augment"), {}))
    return cfg, dict(shift=int(aug.get("shift", 0)), flip=int(aug.get("flip", 0)), pad=aug.get("pad", "zero"),
                     cutout=int(aug.get("cutout", 0)))


def read_cifar10(data, train):
    """CIFAR-10's binary batches: a label byte, then 3x32x32 pixel bytes, per record."""
    names = [f"data_batch_{i}.bin" for i in range(1, 6)] if train else ["test_batch.bin"]
    blobs = [np.fromfile(os.path.join(data, f), dtype=np.uint8) for f in names if os.path.exists(os.path.join(data, f))]
    records = np.concatenate(blobs).reshape(-1, 3073)
    return records[:, 1:].reshape(-1, 3, 32, 32), records[:, 0]


def read_npz(data, train):
    """A NumPy archive of x_train, y_train, x_test and y_test (Keras's names), or a folder of those
    four .npy files; x as uint8 pixels in (N, H, W) or (N, H, W, C), channels last, as blobnet
    writes it (blobnet data --write npz:PATH)."""
    split = "train" if train else "test"
    if os.path.isdir(data):
        x, y = (np.load(os.path.join(data, f"{k}_{split}.npy")) for k in ("x", "y"))
    else:
        with np.load(data) as z:
            x, y = z[f"x_{split}"], z[f"y_{split}"]
    if x.dtype != np.uint8:
        raise SystemExit(f"{data}: x_{split} holds {x.dtype}; this peer reads uint8 pixels only")
    return (x.transpose(0, 3, 1, 2) if x.ndim == 4 else x), y


def load_split(data, fmt, train, mean, std, dev):
    if fmt == "cifar10":
        images, labels = read_cifar10(data, train)
    elif fmt == "npz":
        images, labels = read_npz(data, train)
    else:
        prefix = "train" if train else "t10k"
        images = read_idx(os.path.join(data, prefix + "-images-idx3-ubyte.gz"))
        labels = read_idx(os.path.join(data, prefix + "-labels-idx1-ubyte.gz"))
    x = torch.tensor(images, device=dev).float() / 255
    if x.dim() == 3:
        x = x[:, None]
    y = torch.tensor(labels.astype(np.int64), device=dev)
    if torch.is_tensor(mean):
        mean, std = mean.to(dev), std.to(dev)
    return (x - mean) / std, y


def share(n, rank, world):
    """The positions [lo, hi) of a global batch of n that a rank trains on."""
    return rank * n // world, (rank + 1) * n // world


def average_buffers(model, world):
    """Each rank's batchnorm statistics replaced by the ranks' mean (counters left alone)."""
    for b in model.buffers():
        if b.is_floating_point():
            dist.all_reduce(b)
            b.div_(world)


def train(variant, sections, cfg, aug, data, until_accuracy, rank=0, world=1):
    """One variant's run from fresh weights, as rank `rank` of `world` (DDP when world > 1);
    returns (epoch seconds, final test accuracy, seconds from process start to until_accuracy or
    None)."""
    bs, epochs = int(cfg["batch"]), int(cfg["epochs"])
    torch.manual_seed(int(cfg["seed"]))
    gen = torch.Generator().manual_seed(int(cfg["seed"]))
    model = Net(sections, gen).cuda()
    dev = torch.device("cuda")
    forward = model
    if world > 1:
        # Built on a side stream, as a later capture of its all-reduces needs.
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            forward = torch.nn.parallel.DistributedDataParallel(
                model, device_ids=[rank], broadcast_buffers=False, gradient_as_bucket_view=True)
        torch.cuda.current_stream().wait_stream(side)
    (xtr, ytr), (xte, yte) = data
    n = xtr.shape[0]
    steps_per_epoch = (n + bs - 1) // bs
    total = steps_per_epoch * epochs

    params, vel, sq, avg_g, mult, decay = [], [], [], [], [], []
    for name, p in model.named_parameters():
        bias = name.endswith("bias")
        params.append(p)
        vel.append(torch.zeros_like(p))
        sq.append(torch.zeros_like(p))
        avg_g.append(torch.zeros_like(p))
        mult.append(cfg["bias_lr_mult"] if bias else 1.0)
        decay.append(0.0 if bias else cfg["weight_decay"])
    lr_t = torch.zeros((), device=dev)
    t_t = torch.zeros((), device=dev)  # the Adam step, on the device for a replayed graph
    bf16 = variant == "graph-bf16"
    opt, b1, b2, eps = cfg["optimizer"], cfg["beta1"], cfg["beta2"], cfg["eps"]
    if opt not in ("sgd", "adam", "adamw", "rmsprop"):
        sys.exit(f"pytorch_peer: no optimizer {opt!r} here (sgd, adam, adamw, rmsprop)")

    def update():
        """blobnet's rules: SGD v = mom v + lr (g + wd w), w -= v; Adam, AdamW and RMSprop as
        PyTorch's."""
        if opt == "sgd":
            for p, v, m, d in zip(params, vel, mult, decay):
                g = p.grad.add(p, alpha=d) if d else p.grad
                v.mul_(cfg["momentum"]).add_(g * (lr_t * m))
                p.sub_(v)
            return
        if opt == "rmsprop":
            a, mom = cfg["alpha"], cfg["momentum"]
            for p, buf, s, ga, m, d in zip(params, vel, sq, avg_g, mult, decay):
                g = p.grad.add(p, alpha=d) if d else p.grad
                s.mul_(a).addcmul_(g, g, value=1 - a)
                if cfg["centered"]:
                    ga.lerp_(g, 1 - a)
                    avg = s.addcmul(ga, ga, value=-1).sqrt_().add_(cfg["eps"])
                else:
                    avg = s.sqrt().add_(cfg["eps"])
                if mom > 0:
                    buf.mul_(mom).addcdiv_(g, avg)
                    p.sub_(buf * (lr_t * m))
                else:
                    p.sub_(g / avg * (lr_t * m))
            return
        t_t.add_(1)
        c1, c2 = 1 - b1 ** t_t, 1 - b2 ** t_t
        for p, m1, m2, m, d in zip(params, vel, sq, mult, decay):
            lr = lr_t * m
            g = p.grad
            if opt == "adamw" and d:
                p.mul_(1 - lr * d)
            elif d:
                g = g.add(p, alpha=d)
            m1.mul_(b1).add_(g, alpha=1 - b1)
            m2.mul_(b2).addcmul_(g, g, value=1 - b2)
            p.sub_(lr * (m1 / c1) / ((m2 / c2).sqrt() + eps))

    weight = torch.ones((), device=dev)  # N * n_r / n: DDP's mean of the ranks is the global mean

    def step(x, y):
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16):
            out = forward(x)
        loss = F.cross_entropy(out.float(), y, label_smoothing=model.smoothing) * weight
        for p in params:
            p.grad = None
        loss.backward()
        with torch.no_grad():
            update()
        return loss.detach()  # nothing may keep the step's autograd graph alive into a capture

    def evaluate():
        if world > 1:
            average_buffers(model, world)
        model.eval()
        lo, hi = share(xte.shape[0], rank, world)
        correct = torch.zeros((), device=dev)
        with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16):
            for i in range(lo, hi, 1000):
                j = min(i + 1000, hi)
                correct += (model(xte[i:j]).argmax(1) == yte[i:j]).sum()
        if world > 1:
            dist.all_reduce(correct)
        model.train()
        return 100.0 * correct.item() / xte.shape[0]

    graph, warm = None, torch.cuda.Stream()
    warm_steps = 11 if world > 1 else 3
    lo, hi = share(bs, rank, world)
    sx = torch.zeros((hi - lo,) + tuple(xtr.shape[1:]), device=dev)
    sy = torch.zeros(hi - lo, dtype=torch.long, device=dev)
    order_gen = torch.Generator(device=dev).manual_seed(int(cfg["seed"]))
    # Under DDP the ranks' shares may differ in size, so augmentation draws from a generator of
    # each rank's own: the data order's generator stays the same on every rank.
    aug_gen = order_gen if world == 1 else torch.Generator(device=dev).manual_seed(int(cfg["seed"]) + 1 + rank)
    fill = (0.0 - model.mean) / model.std
    if torch.is_tensor(fill):
        fill = fill.to(dev)

    def batch(idxs):
        x = xtr[idxs]
        return augment(x, aug, fill, aug_gen) if aug["shift"] or aug["flip"] or aug["cutout"] else x
    label = variant if world == 1 else f"{variant}-ddp{world}"
    eager = variant == "eager"
    it, times, reached = 0, [], None
    for ep in range(epochs):
        order = torch.randperm(n, device=dev, generator=order_gen)
        if world > 1:
            dist.barrier(device_ids=[rank])
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        loss_sum = torch.zeros((), device=dev)
        for s in range(steps_per_epoch):
            idxs = order[s * bs:(s + 1) * bs]
            m = idxs.shape[0]
            i0, i1 = share(m, rank, world)
            # An empty share still joins DDP's all-reduce: one example at weight 0.
            mine = idxs[i0:i1] if i1 > i0 else idxs[:1]
            weight.fill_(world * (i1 - i0) / m)
            lr_t.fill_(lr_at(cfg, it, total))
            if eager or m < bs:
                loss = step(batch(mine), ytr[mine])
            else:
                sx.copy_(batch(mine))
                sy.copy_(ytr[mine])
                if it < warm_steps:  # warm-up steps on a side stream before the capture, as PyTorch asks
                    warm.wait_stream(torch.cuda.current_stream())
                    with torch.cuda.stream(warm):
                        loss = step(sx, sy)
                    torch.cuda.current_stream().wait_stream(warm)
                else:
                    if graph is None:
                        graph = torch.cuda.CUDAGraph()
                        try:
                            with torch.cuda.graph(graph):
                                static_loss = step(sx, sy)
                        except RuntimeError as e:
                            if world == 1:
                                raise
                            if rank == 0:
                                print(f"pytorch {label}: the step with DDP could not be captured ({e}); "
                                      "going on eager", flush=True)
                            eager, graph = True, None
                            torch.cuda.synchronize()
                    if graph is not None:
                        graph.replay()
                        loss = static_loss
                    else:
                        loss = step(sx, sy)
            loss_sum += loss / world
            it += 1
        if world > 1:
            dist.all_reduce(loss_sum)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
        acc = evaluate()
        if rank == 0:
            print(f"pytorch {label}: epoch {ep + 1}/{epochs}  lr {lr_at(cfg, it, total):.6f}  train loss "
                  f"{loss_sum.item() / steps_per_epoch:.4f}  test acc {acc:6.2f}%  {times[-1]:.3f} s", flush=True)
        if until_accuracy is not None and reached is None and acc >= until_accuracy:
            reached = time.perf_counter() - START
            break
    return times, acc, reached


@contextlib.contextmanager
def tf32_switches(variant):
    """cuDNN's and the matrix products' TF32 switches as `variant` measures them: off for
    graph-fp32, else PyTorch's defaults (cuDNN on, products off); the switches found are put back
    at the end."""
    cudnn, matmul = torch.backends.cudnn, torch.backends.cuda.matmul
    found = cudnn.allow_tf32, matmul.allow_tf32
    cudnn.allow_tf32 = variant != "graph-fp32"
    matmul.allow_tf32 = False
    try:
        yield
    finally:
        cudnn.allow_tf32, matmul.allow_tf32 = found


def median_later(times):
    """The median epoch time of epochs 2.. (epoch 1 alone for a one-epoch run)."""
    later = sorted(times[1:] or times)
    mid = len(later) // 2
    return later[mid] if len(later) % 2 else (later[mid - 1] + later[mid]) / 2


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("--data", required=True)
    ap.add_argument("--dataset", choices=["mnist", "fashion-mnist", "cifar10", "npz"],
                    help="the data's format (default: the model's [data] format, else IDX files)")
    ap.add_argument("--epochs", type=int)
    ap.add_argument("--batch", type=int)
    ap.add_argument("--lr", type=float)
    ap.add_argument("--lr-policy")
    ap.add_argument("--seed", type=int)
    ap.add_argument("--optimizer", choices=["sgd", "adam", "adamw", "rmsprop"])
    ap.add_argument("--variant", default="graph",
                    help="eager, graph (PyTorch's defaults: TF32 convolutions), graph-fp32 (TF32 off) or "
                         "graph-bf16, or several of them separated by commas, run one after the other in this "
                         "process")
    ap.add_argument("--until-accuracy", type=float)
    ap.add_argument("--ddp", type=int, default=1, metavar="N",
                    help="train on N GPUs with DistributedDataParallel, one process per GPU")
    a = ap.parse_args()
    variants = a.variant.split(",")
    for v in variants:
        if v not in VARIANTS:
            ap.error(f"--variant: '{v}' is not one of {', '.join(VARIANTS)}")
    if a.until_accuracy is not None and len(variants) > 1:
        ap.error("--until-accuracy times one variant from the process start: give one --variant")
    if a.ddp < 1:
        ap.error("--ddp: the number of GPUs must be 1 or more")
    if a.ddp > 1:
        if a.ddp > torch.cuda.device_count():
            ap.error(f"--ddp {a.ddp}: this machine has {torch.cuda.device_count()} CUDA devices")
        port = free_port()
        torch.multiprocessing.spawn(run_rank, args=(a, variants, port), nprocs=a.ddp)
    else:
        run_rank(0, a, variants, None)


def free_port():
    """A TCP port on 127.0.0.1 that nothing listens on now, for the ranks' rendezvous."""
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_rank(rank, a, variants, port):
    """Every variant in turn on GPU `rank` of a.ddp (one process, no group, when a.ddp is 1)."""
    world = a.ddp
    if world > 1:
        torch.cuda.set_device(rank)
        dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                                device_id=torch.device("cuda", rank))
    sections = parse_model(a.model)
    cfg, aug = read_recipe(sections, a)
    mean, std = input_scaling(next(o for k, o in sections if k == "input"))
    dev = torch.device("cuda", rank)
    fmt = a.dataset or dict(next((o for k, o in sections if k == "data"), {})).get("format", "mnist")
    data = (load_split(a.data, fmt, True, mean, std, dev), load_split(a.data, fmt, False, mean, std, dev))
    torch.cuda.synchronize()
    resident = torch.cuda.memory_allocated()  # the datasets, which blobnet's figure leaves out too
    for variant in variants:
        torch.cuda.reset_peak_memory_stats()
        with tf32_switches(variant):
            times, acc, reached = train(variant, sections, cfg, aug, data, a.until_accuracy, rank, world)
        peak = (torch.cuda.max_memory_allocated() - resident) / 1048576
        torch.cuda.empty_cache()
        if rank != 0:
            continue
        label = variant if world == 1 else f"{variant}-ddp{world}"
        line = (f"pytorch {label}: {median_later(times) * 1000:.1f} ms per epoch ("
                + (f"median of epochs 2-{len(times)}" if len(times) > 1 else "epoch 1") + "), "
                f"final test accuracy {acc:.2f}%, peak device memory {peak:.1f} MiB")
        if a.until_accuracy is not None:
            line += f", {a.until_accuracy:g}% " + (f"at {reached:.2f} s from start" if reached else "not reached")
        print(line, flush=True)
    if world > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
