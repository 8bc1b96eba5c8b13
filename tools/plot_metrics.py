#!/usr/bin/env python3
"""plot_metrics.py LOG.csv [LOG2.csv ...] OUT.png - loss and accuracy curves of blobnet runs.

Reads the CSV metrics logs written by `blobnet train --log FILE [--log-every N]` and draws
two panels against the training step: loss and accuracy. Training curves come from the
per-step rows when a log has them (else from the per-epoch rows); test curves from the
per-epoch rows, as markers joined by a line. Per-step rows hold one batch each, so long runs
are drawn faintly as logged with a moving average on top. Several logs are overlaid, each
labelled with its file name. Needs matplotlib (Debian: python3-matplotlib); where the python3
that runs it lacks matplotlib, it runs again with another python3 on PATH (or /usr/bin/python3)
that has it.
"""
import csv
import os
import subprocess
import sys

HEADER = ["epoch", "step", "lr", "train_loss", "train_acc", "test_loss", "test_acc", "seconds", "images_per_s",
          "val_loss", "val_acc"]
# Logs written before the holdout set existed end at images_per_s.
HEADER_BEFORE_HOLDOUT = HEADER[:9]


def read_log(path):
    """The step rows and the epoch rows of one log, as lists of dicts of floats."""
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    if not rows or rows[0] not in (HEADER, HEADER_BEFORE_HOLDOUT):
        raise ValueError(f"{path}: not a blobnet metrics log (expected the header {','.join(HEADER)})")
    header = rows[0]
    steps, epochs = [], []
    for line, row in enumerate(rows[1:], start=2):
        if len(row) != len(header):
            raise ValueError(f"{path}:{line}: {len(row)} fields, expected {len(header)}")
        values = {key: float(text) if text else None for key, text in zip(header, row)}
        (epochs if values["test_loss"] is not None else steps).append(values)
    return steps, epochs


SMOOTH_FROM = 20  # step rows from which a curve is drawn smoothed


def smooth(values, keep=0.9):
    """Exponential moving average, without the start-up bias toward zero."""
    out, avg, weight = [], 0.0, 0.0
    for v in values:
        avg = keep * avg + (1 - keep) * v
        weight = keep * weight + (1 - keep)
        out.append(avg / weight)
    return out


def other_python_with_matplotlib():
    """A python3 other than this one, on PATH or Debian's, that imports matplotlib; or None."""
    dirs = os.environ.get("PATH", "").split(os.pathsep) + ["/usr/bin"]
    seen = {sys.executable}
    for d in dirs:
        candidate = os.path.join(d or ".", "python3")
        if candidate in seen or not os.access(candidate, os.X_OK):
            continue
        seen.add(candidate)
        check = subprocess.run([candidate, "-c", "import matplotlib"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if check.returncode == 0:
            return candidate
    return None


def import_matplotlib(argv):
    """matplotlib for this interpreter. Without it, runs this script with a python3 that has it
    (once: the environment marks the second run), or says how to get it and exits 1."""
    try:
        import matplotlib

        return matplotlib
    except ImportError:
        pass
    other = None if os.environ.get("BLOBNET_PLOT_RERUN") else other_python_with_matplotlib()
    if other:
        os.environ["BLOBNET_PLOT_RERUN"] = "1"
        os.execv(other, [other, os.path.abspath(__file__)] + argv[1:])
    print(f"plot_metrics.py: error: no python3 here has matplotlib ({sys.executable} lacks it); "
          "install it (Debian: apt-get install python3-matplotlib; or: python3 -m pip install matplotlib)",
          file=sys.stderr)
    sys.exit(1)


def plot(logs, out, matplotlib):
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (loss_ax, acc_ax) = plt.subplots(1, 2, figsize=(10, 4))
    for i, (path, (steps, epochs)) in enumerate(logs):
        name, color = os.path.basename(path), f"C{i % 10}"
        train = steps if steps else epochs
        x = [r["step"] for r in train]
        loss = [r["train_loss"] for r in train]
        acc = [100 * r["train_acc"] for r in train]
        if len(train) >= SMOOTH_FROM:
            # A step row is one batch, so noisy: faint as logged, bold smoothed.
            loss_ax.plot(x, loss, linewidth=0.6, alpha=0.3, color=color)
            acc_ax.plot(x, acc, linewidth=0.6, alpha=0.3, color=color)
            loss, acc = smooth(loss), smooth(acc)
        loss_ax.plot(x, loss, label=f"{name} train", linewidth=1.5, color=color)
        acc_ax.plot(x, acc, label=f"{name} train", linewidth=1.5, color=color)
        if epochs:
            ex = [r["step"] for r in epochs]
            loss_ax.plot(ex, [r["test_loss"] for r in epochs], "o--", label=f"{name} test", color=color)
            acc_ax.plot(ex, [100 * r["test_acc"] for r in epochs], "o--", label=f"{name} test", color=color)
    loss_ax.set(xlabel="step", ylabel="loss", title="loss")
    loss_ax.set_yscale("log")
    acc_ax.set(xlabel="step", ylabel="accuracy (%)", title="accuracy")
    for ax in (loss_ax, acc_ax):
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(out, dpi=80)


def main(argv):
    if len(argv) < 3 or argv[1] in ("-h", "--help"):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    *paths, out = argv[1:]
    try:
        logs = [(path, read_log(path)) for path in paths]
    except (OSError, ValueError) as e:
        print(f"plot_metrics.py: error: {e}", file=sys.stderr)
        return 1
    plot(logs, out, import_matplotlib(argv))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
