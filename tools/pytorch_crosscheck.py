"""Cross-checks blobnet's GPU training against PyTorch, step by step.

blobnet writes its initial LeNet weights (--epochs 0 --save) and then trains STEPS steps
with a per-step CSV log. This script loads the same initial weights into a PyTorch LeNet,
feeds the same batches in the same order (blobnet's shuffle, reimplemented below), applies
the same SGD rule (Caffe's: v = m*v + lr*mult*(g + wd*w), w -= v; biases: 2x lr, no decay;
lr policy inv) and compares every step's mean loss. TF32 is off on both sides. With
--optimizer adam, adamw or rmsprop, blobnet trains with that optimizer and the PyTorch side with
torch.optim.Adam, AdamW or RMSprop themselves (the same multipliers, the rate set every step).
The optimizer's and the policy's keys are the model file's [train] values where it gives them
(models/lenet.cfg gives momentum 0.9, which rmsprop then reads too), else blobnet's defaults;
--momentum overrides momentum on both sides. --lr-policy poly trains with Caffe's poly policy,
lr * (1 - s / T)^power over the run's T = STEPS steps (power from [train], LeNet's 0.75), instead of
the model's inv.

    python3 tools/pytorch_crosscheck.py --data DIR [--blobnet ./blobnet] [--steps 20] [--optimizer NAME]
                                        [--lr-policy inv|poly] [--momentum X]
    (RMSprop's first steps move every weight by about 10x its rate, so at LeNet's lr 0.01, and
    still at 1e-4, PyTorch against itself with one weight moved by one ulp drifts past the 1e-4
    bar; --optimizer rmsprop --lr 0.00001 keeps the check on a smooth path, with --momentum 0
    for the plain rule. SGD and poly: --lr 0.001, as tools/gpu_check.sh runs them.)

Exit status 0 when every step's relative difference is below --tolerance (1e-4).
"""
import argparse, csv, gzip, json, os, struct, subprocess, sys, tempfile

import numpy as np
import torch
import torch.nn.functional as F

MASK = (1 << 64) - 1


def splitmix64(state):
    state = (state + 0x9E3779B97F4A7C15) & MASK
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return state, z ^ (z >> 31)


def blobnet_shuffle(count, seed):
    """datasets/idx.c: Fisher-Yates driven by splitmix64 with rejection of biased draws."""
    order = list(range(count))
    state = seed & MASK
    for i in range(count - 1, 0, -1):
        bound = i + 1
        threshold = ((1 << 64) - bound) % bound
        while True:
            state, r = splitmix64(state)
            if r >= threshold:
                break
        j = r % bound
        order[i], order[j] = order[j], order[i]
    return order


def epoch_seed(seed, epoch):
    """src/train/trainer.c: bn_epoch_seed."""
    return (seed * 0x9E3779B97F4A7C15 + epoch + 1) & MASK


def read_idx(path):
    with gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb") as f:
        raw = f.read()
    magic, n = struct.unpack(">II", raw[:8])
    if magic == 2051:
        rows, cols = struct.unpack(">II", raw[8:16])
        return np.frombuffer(raw, np.uint8, offset=16).reshape(n, 1, rows, cols)
    return np.frombuffer(raw, np.uint8, offset=8)


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    meta = header.pop("__metadata__", {})
    base = 8 + n
    tensors = {}
    for name, t in header.items():
        assert t["dtype"] == "F32", name
        begin, end = t["data_offsets"]
        tensors[name] = np.frombuffer(data[base + begin:base + end], "<f4").reshape(t["shape"])
    return tensors, meta


def read_section(model_path, name):
    """The keys of the model file's [name] section, as text."""
    keys, section = {}, None
    with open(model_path) as f:
        for line in f:
            line = line.split("#")[0].split(";")[0].strip()
            if line.startswith("["):
                section = line.strip("[] ")
            elif section == name and "=" in line:
                key, value = (t.strip() for t in line.split("=", 1))
                keys[key] = value
    return keys


def input_standardisation(model_path):
    """The [input] section's mean and std (defaults 0 and 1), as blobnet applies them."""
    keys = read_section(model_path, "input")
    return np.float32(float(keys.get("mean", 0.0))), np.float32(float(keys.get("std", 1.0)))


def lenet_forward(p, x):
    x = F.max_pool2d(F.conv2d(x, p["conv1.weight"], p["conv1.bias"]), 2)
    x = F.max_pool2d(F.conv2d(x, p["conv2.weight"], p["conv2.bias"]), 2)
    x = F.relu(F.linear(x.flatten(1), p["ip1.weight"], p["ip1.bias"]))
    return F.linear(x, p["ip2.weight"], p["ip2.bias"])


def run(cmd):
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--blobnet", default="./blobnet")
    ap.add_argument("--model", default="models/lenet.cfg")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--device", default="gpu")
    ap.add_argument("--tolerance", type=float, default=1e-4)
    ap.add_argument("--lr", type=float, default=None, help="override the model's base learning rate on both sides")
    ap.add_argument("--optimizer", default="sgd", choices=["sgd", "adam", "adamw", "rmsprop"])
    ap.add_argument("--lr-policy", default="inv", choices=["inv", "poly"])
    ap.add_argument("--momentum", type=float, default=None, help="override momentum on both sides")
    a = ap.parse_args()
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.deterministic = True

    work = tempfile.mkdtemp(prefix="crosscheck-")
    init, log = os.path.join(work, "init.safetensors"), os.path.join(work, "steps.csv")
    common = [a.blobnet, "train", a.model, "--data", a.data, "--device", a.device, "--batch", str(a.batch), "--quiet"]
    if a.lr is not None:
        common += ["--lr", repr(a.lr)]
    if a.momentum is not None:
        common += ["--momentum", repr(a.momentum)]
    common += ["--optimizer", a.optimizer, "--lr-policy", a.lr_policy]
    run(common + ["--epochs", "0", "--save", init])
    run(common + ["--epochs", "1", "--train-limit", str(a.steps * a.batch), "--log", log, "--log-every", "1"])
    with open(log) as f:
        rows = [r for r in csv.DictReader(f) if r["test_acc"] == ""]
    blob_losses = [float(r["train_loss"]) for r in rows]
    blob_lrs = [float(r["lr"]) for r in rows]

    weights, meta = read_safetensors(init)
    dev = torch.device("cuda")
    # "<layer>.<param>"; the optimizer's state is "<state>.<layer>.<param>".
    params = {k: torch.tensor(v.copy(), device=dev, requires_grad=True) for k, v in weights.items()
              if k.count(".") == 1}
    velocity = {k: torch.zeros_like(v) for k, v in params.items()}
    seed = int(meta["seed"])
    count = a.steps * a.batch
    order = blobnet_shuffle(count, epoch_seed(seed, 0))
    images = read_idx(os.path.join(a.data, "train-images-idx3-ubyte.gz"))[:count]
    labels = read_idx(os.path.join(a.data, "train-labels-idx1-ubyte.gz"))[:count]
    keys = read_section(a.model, "train")
    base_lr = a.lr if a.lr is not None else float(keys.get("lr", 0.01))
    wd, bias_mult = float(keys.get("weight_decay", 5e-4)), float(keys.get("bias_lr_mult", 1.0))
    gamma = float(keys.get("gamma", 1e-4))
    power = float(keys.get("power", 0.75 if a.lr_policy == "inv" else 1.0))
    momentum = a.momentum if a.momentum is not None else float(
        keys.get("momentum", 0.0 if a.optimizer == "rmsprop" else 0.9))
    alpha, eps = float(keys.get("alpha", 0.99)), float(keys.get("eps", 1e-8))
    betas = (float(keys.get("beta1", 0.9)), float(keys.get("beta2", 0.999)))
    centered = int(keys.get("centered", 0)) == 1
    mean, std = input_standardisation(a.model)

    def rate_at(step):
        """The policy's rate at step (from 0) of the run's a.steps steps."""
        if a.lr_policy == "poly":
            return base_lr * (1 - min(step / a.steps, 1.0)) ** power
        return base_lr * (1 + gamma * step) ** -power

    def train_torch(params, velocity, nudge):
        """PyTorch's losses for the run; nudge moves one weight by one float32 ulp, to measure
        how far rounding alone carries two correct runs apart."""
        params = {k: v.detach().clone().requires_grad_(True) for k, v in params.items()}
        velocity = {k: v.clone() for k, v in velocity.items()}
        if nudge:
            with torch.no_grad():
                w = params["ip1.weight"].view(-1)
                w[0] = torch.nextafter(w[0], torch.tensor(1.0, device=dev))
        losses = []
        opt, groups = None, []
        if a.optimizer != "sgd":
            groups = [dict(params=[p], mult=bias_mult if k.endswith(".bias") else 1.0,
                           weight_decay=0.0 if k.endswith(".bias") else wd) for k, p in params.items()]
            if a.optimizer == "rmsprop":
                opt = torch.optim.RMSprop(groups, lr=base_lr, alpha=alpha, eps=eps, momentum=momentum,
                                          centered=centered)
            else:
                kind = torch.optim.Adam if a.optimizer == "adam" else torch.optim.AdamW
                opt = kind(groups, lr=base_lr, betas=betas, eps=eps)
        for step in range(a.steps):
            idx = order[step * a.batch:(step + 1) * a.batch]
            x = torch.tensor((images[idx].astype(np.float32) / np.float32(255.0) - mean) / std, device=dev)
            y = torch.tensor(labels[idx].astype(np.int64), device=dev)
            loss = F.cross_entropy(lenet_forward(params, x), y)
            for p in params.values():
                p.grad = None
            loss.backward()
            lr = rate_at(step)
            if opt:
                for g in opt.param_groups:
                    g["lr"] = lr * g["mult"]
                opt.step()
                losses.append(loss.item())
                continue
            with torch.no_grad():
                for k, p in params.items():
                    is_bias = k.endswith(".bias")
                    rate, decay = lr * (bias_mult if is_bias else 1.0), 0.0 if is_bias else wd
                    velocity[k].mul_(momentum).add_(rate * (p.grad + decay * p))
                    p.sub_(velocity[k])
            losses.append(loss.item())
        return losses

    ref = train_torch(params, velocity, False)
    nudged = train_torch(params, velocity, True)
    floor = max(abs(u - v) / max(abs(v), 1e-12) for u, v in zip(nudged, ref))
    print(f"noise floor: PyTorch against itself with one weight moved by one ulp differs by up to {floor:.3e}")
    # The same run with cuDNN free to pick its fastest (still FP32) algorithms: only the
    # order of the sums changes, which is all that separates two correct implementations.
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = False, True
    reordered = train_torch(params, velocity, False)
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = True, False
    drift = [abs(u - v) / max(abs(v), 1e-12) for u, v in zip(reordered, ref)]
    print("noise floor: PyTorch against itself with other cuDNN algorithms differs by up to "
          f"{max(drift):.3e} (steps 1-3: {max(drift[:3]):.1e})")
    worst = 0.0
    for step in range(a.steps):
        lr = rate_at(step)
        ours, theirs = blob_losses[step], ref[step]
        rel = abs(ours - theirs) / max(abs(theirs), 1e-12)
        worst = max(worst, rel)
        print(f"step {step + 1:3d}  lr {blob_lrs[step]:.6f}/{lr:.6f}  blobnet {ours:.7f}  pytorch {theirs:.7f}  rel {rel:.2e}")
    ok = worst < a.tolerance and len(blob_losses) == a.steps
    print(f"worst relative loss difference over {a.steps} steps: {worst:.3e} "
          f"(tolerance {a.tolerance:g}): {'ok' if ok else 'FAILED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
