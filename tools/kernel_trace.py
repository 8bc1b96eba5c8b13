#!/usr/bin/env python3
"""Summarises a kernel trace written by tools/kernel_trace.c (make trace).

    tools/kernel_trace.py TRACE.csv... [--marker REGEX] [--skip N] [--steps N] [--top N] [--timeline]
                          [--against BASE.csv] [--spread] [--epochs] [--train REGEX]

Prints, for each file (one per process: a rank of a run on several GPUs each; a file that recorded
no work, such as the supervising process's, is named on stderr and passed over), for the GPU time
it covers: how long the GPU was busy (the union of its kernels,
copies and fills) and idle, and the kernels that took the most time. With --marker, the kernel
whose name matches REGEX (the first of a training step, such as the batch gather) cuts the
timeline into steps; the first --skip steps are left out (warm-up), then up to --steps steps are
measured: the median step, its busy and idle time, the share of NCCL's kernels, each kernel's
median time in a step, and the largest idle gaps of a median step with the kernels on each side;
with --timeline also that step's work in the order it started, each with its start and end (us
from the step's start), its length and its stream, so that what ran beside what shows.

With --against BASE.csv (and --marker), each file's kernels are also set beside the same steps of
BASE (one GPU's trace beside a rank's, the code before a change beside the code after): each
kernel's time a step and mean time a call in both, the kernels whose time a step moved most
first, so that what got slower, or ran more often, shows at once; a step over twice its trace's
median (a plan's timing, an epoch's end) is left out of those sums, and the steps left out counted. With --timeline as well, the
steps are set beside BASE's piece by piece: each piece of work matched by its name, its stream and
its number among that name's pieces on that stream in a step (where the two traces' steps share no
stream, as another process numbers its own: a rank's beside one GPU's run, by its name and its
number among that name's pieces in the step, in the order they started), with its median start
(from the step's start) and length over the measured steps in both, in the order of BASE's step
(then the pieces BASE lacks). Where kernels run side by side, a change moves what runs beside it too; this
shows where in the step the time went.

With --spread (and --marker), the pieces of work (matched as above) whose length falls into two
groups across the measured steps: a pass that is sometimes fast and sometimes slow, as one is
when what runs beside it holds multiprocessors at its start in some steps and not in others. Each
piece's lengths are split at their widest gap (where both groups hold at least two steps and a
twentieth of them, and the gap is at least 1 us and 15% of the median length); each group's count,
median length and median step are printed, the pieces whose slow group lengthens the step most
first, so that what a median step alone hides shows. The two steps' difference is an association:
pieces slow in the same steps (the pass and what held the GPU at its start) share it.

With --epochs (and --marker), every step of the whole trace (--skip and --steps aside) is a
training step where it holds a kernel whose name matches --train (default ^update, the
optimizer's), and each run of training steps between other work (an evaluation's steps) is an
epoch: its steps, their sum, and a step's median, mean, 90th percentile and longest, so that an
epoch slower than the next shows, and whether all its steps or a few long ones made it so.
"""
import bisect
import argparse
import csv
import re
import signal
import statistics
import subprocess
import sys


class EmptyTrace(Exception):
    """A trace without a kernel, copy or fill: the file of a process that opened CUDA and launched
    nothing, as the supervisor of a run on several GPUs does while its ranks work."""


def read(path):
    rows = []
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            try:
                start, end = int(r["start_ns"]), int(r["end_ns"])
            except (KeyError, ValueError):
                sys.exit(f"{path}: not a kernel trace (a line without start_ns and end_ns)")
            name = r["what"] if r["kind"] == "kernel" else r["kind"]
            rows.append((start, end, name, r["stream"]))
    if not rows:
        raise EmptyTrace(f"{path}: no kernels, copies or fills recorded")
    names = demangle(sorted({r[2] for r in rows}))
    rows = sorted((start, end, short(names.get(name, name)), stream) for start, end, name, stream in rows)
    return rows


def demangle(names):
    """CUPTI names kernels as the compiler mangled them; c++filt, where there is one, reads them."""
    mangled = [n for n in names if n.startswith("_Z")]
    if not mangled:
        return {}
    try:
        done = subprocess.run(["c++filt"], input="\n".join(mangled), capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return {}
    plain = done.stdout.split("\n")
    return dict(zip(mangled, plain)) if len(plain) >= len(mangled) else {}


def short(name):
    """A kernel's name without its template arguments and parameter list."""
    depth, out = 0, []
    for ch in name:
        if ch in "<(":
            depth += 1
        elif ch in ">)":
            depth = max(0, depth - 1)
        elif depth == 0:
            out.append(ch)
    s = "".join(out).strip()
    return s.split(" ")[-1] if s else name[:60]


def busy(rows, lo, hi):
    """Time in [lo, hi) covered by at least one interval, and the idle gaps as (length, at)."""
    total, gaps, cur = 0, [], lo
    for start, end, _, _ in rows:
        start, end = max(start, lo), min(end, hi)
        if end <= start:
            continue
        if start > cur:
            gaps.append((start - cur, cur))
        if end > cur:
            total += end - max(start, cur)
            cur = end
    if hi > cur:
        gaps.append((hi - cur, cur))
    return total, gaps


def around(rows, t):
    """The names of the last work to end at or before t and the first to start after it."""
    before = max((r for r in rows if r[1] <= t), key=lambda r: r[1], default=None)
    after = min((r for r in rows if r[0] >= t), key=lambda r: r[0], default=None)
    return (before[2] if before else "-"), (after[2] if after else "-")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("traces", nargs="+", metavar="TRACE")
    ap.add_argument("--marker", help="regular expression of the kernel that starts each step")
    ap.add_argument("--skip", type=int, default=20, help="steps left out at the start (default 20)")
    ap.add_argument("--steps", type=int, default=200, help="steps measured (default 200)")
    ap.add_argument("--top", type=int, default=15, help="kernels listed (default 15)")
    ap.add_argument("--timeline", action="store_true",
                    help="with --marker: a median step's kernels, copies and fills in the order they started")
    ap.add_argument("--against", metavar="BASE",
                    help="with --marker: each kernel's time a step beside the same steps of trace BASE")
    ap.add_argument("--spread", action="store_true",
                    help="with --marker: the pieces of work whose length falls into two groups across the steps")
    ap.add_argument("--epochs", action="store_true",
                    help="with --marker: each run of training steps of the whole trace, its sum and its spread")
    ap.add_argument("--train", default="^update", metavar="REGEX",
                    help="with --epochs: a kernel only training steps hold (default ^update)")
    a = ap.parse_args()
    # A reader that stops early (| head) ends the summary quietly, as other command-line tools do,
    # instead of with a broken pipe's traceback.
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    if a.timeline and not a.marker:
        ap.error("--timeline needs --marker (it lists one step)")
    if a.against and not a.marker:
        ap.error("--against needs --marker (it compares steps)")
    if a.spread and not a.marker:
        ap.error("--spread needs --marker (it compares steps)")
    if a.epochs and not a.marker:
        ap.error("--epochs needs --marker (it cuts the epochs into steps)")
    try:
        base = window(a.against, a) if a.against else None
    except EmptyTrace as e:
        sys.exit(str(e))
    # The files of a run on several GPUs (%p) include the supervisor's, which records nothing:
    # such a file is named and passed over, and the summary fails only when every file is empty.
    done = 0
    for path in a.traces:
        try:
            cut = window(path, a)
        except EmptyTrace as e:
            print(f"{e}: passed over", file=sys.stderr)
            continue
        if done:
            print()
        summarise(path, a, base, cut)
        done += 1
    if not done:
        sys.exit("no trace given recorded any work")


def window(path, a):
    """The measured part of a trace: (the step cuts or None, lo, hi, the work inside [lo, hi))."""
    rows = read(path)
    lo, hi, cuts = rows[0][0], max(r[1] for r in rows), None
    if a.marker:
        pat = re.compile(a.marker)
        cuts = [r[0] for r in rows if pat.search(r[2])]
        cuts = cuts[a.skip:a.skip + a.steps + 1]
        if len(cuts) < 2:
            sys.exit(f"{path}: fewer than {a.skip + 2} kernels match --marker {a.marker}")
        lo, hi = cuts[0], cuts[-1]
    return cuts, lo, hi, [r for r in rows if r[1] > lo and r[0] < hi]


def per_kernel(inside, lo, hi):
    """Each name's time inside [lo, hi) and its number of calls."""
    per = {}
    for start, end, name, _ in inside:
        t = per.setdefault(name, [0, 0])
        t[0] += min(end, hi) - max(start, lo)
        t[1] += 1
    return per


def per_call(total, calls):
    """Mean microseconds a call, or "-" for a kernel the trace does not have."""
    return f"{total / calls / 1e3:.2f}" if calls else "-"


def typical(cuts, inside):
    """Each name's time and calls (per_kernel) over the steps no longer than twice the median step,
    each piece of work counted in the step it starts in, with the number of steps kept and left out:
    a step that holds a plan's timing or an epoch's end would outweigh a hundred others."""
    lengths = [b - a for a, b in zip(cuts, cuts[1:])]
    most = 2 * statistics.median(lengths)
    keep = [length <= most for length in lengths]
    per = {}
    for start, end, name, _ in inside:
        i = bisect.bisect_right(cuts, start) - 1
        if 0 <= i < len(keep) and keep[i]:
            t = per.setdefault(name, [0, 0])
            t[0] += min(end, cuts[-1]) - start
            t[1] += 1
    kept = sum(keep)
    return per, kept, len(keep) - kept


def compare(cuts, inside, base, top):
    """Each kernel's time a step and mean time a call beside base's (window()), largest move first,
    over both traces' typical steps (typical())."""
    per, steps, out = typical(cuts, inside)
    bper, bsteps, bout = typical(base[0], base[3])
    rows = []
    for name in set(per) | set(bper):
        t, n = per.get(name, (0, 0))
        bt, bn = bper.get(name, (0, 0))
        rows.append((t / steps - bt / bsteps, name, bt / bsteps, t / steps, per_call(bt, bn), per_call(t, n)))
    this = sum(t for t, _ in per.values()) / steps
    other = sum(t for t, _ in bper.values()) / bsteps
    print(f"\nagainst the base ({bsteps} steps): kernel time a step {other / 1e3:.1f} -> {this / 1e3:.1f} us")
    if out or bout:
        print(f"(steps over twice their trace's median left out: {out} of {steps + out} here, "
              f"{bout} of {bsteps + bout} in the base)")
    print(f"{'kernel':<48} {'base us':>9} {'us':>9} {'change':>9}  mean us a call")
    for change, name, was, now, mwas, mnow in sorted(rows, key=lambda r: (-abs(r[0]), r[1]))[:top]:
        print(f"{name[:48]:<48} {was / 1e3:9.1f} {now / 1e3:9.1f} {change / 1e3:+9.1f}  {mwas} -> {mnow}")


def pieces(cuts, inside, by_stream=True):
    """Each piece of work of the steps (cuts) by (name, stream, its number among that name's on that
    stream in its step), or without by_stream by (name, None, its number among that name's in its
    step, in the order they started): the (start from the step's start, length, step, stream) of each
    step that has it."""
    out, seen, step = {}, {}, -1
    for start, end, name, stream in inside:
        i = bisect.bisect_right(cuts, start) - 1
        if i < 0 or i >= len(cuts) - 1:
            continue
        if i != step:
            seen, step = {}, i
        where = stream if by_stream else None
        k = seen[name, where] = seen.get((name, where), 0) + 1
        out.setdefault((name, where, k), []).append((start - cuts[i], end - start, i, stream))
    return out


def two_groups(lengths):
    """The threshold that splits lengths at their widest gap, or None where no gap is wide enough
    (--spread's rule: at least two and a twentieth of them on each side, a gap of 1 us and 15% of
    the median or more)."""
    xs = sorted(lengths)
    least = max(2, (len(xs) + 19) // 20)
    wide = max(1e3, 0.15 * statistics.median(xs))
    best = None
    for j in range(least - 1, len(xs) - least):
        gap = xs[j + 1] - xs[j]
        if gap >= wide and (best is None or gap > best[0]):
            best = (gap, (xs[j] + xs[j + 1]) / 2)
    return best[1] if best else None


def spread(cuts, inside, top):
    """The pieces whose length falls into two groups across the steps, the largest step change first."""
    rows = []
    for key, xs in pieces(cuts, inside).items():
        cut = two_groups([x[1] for x in xs])
        if cut is None:
            continue
        groups = [[x for x in xs if x[1] <= cut], [x for x in xs if x[1] > cut]]
        stats = []
        for g in groups:
            step = statistics.median(cuts[x[2] + 1] - cuts[x[2]] for x in g)
            stats.append((len(g), statistics.median(x[1] for x in g) / 1e3, step / 1e3))
        rows.append((stats[1][2] - stats[0][2], key, stats))
    print("\nthe pieces whose length falls into two groups across the steps, each group's median length "
          "and step (us):")
    print(f"{'short':>6} {'length':>8} {'step':>8}  {'long':>6} {'length':>8} {'step':>8} {'change':>8}  "
          f"{'stream':>6}  kernel")
    if not rows:
        print("  none")
    for change, (name, stream, k), ((ns, ls, ss), (nl, ll, sl)) in sorted(rows, key=lambda r: (-r[0], r[1]))[:top]:
        print(f"{ns:6d} {ls:8.1f} {ss:8.1f}  {nl:6d} {ll:8.1f} {sl:8.1f} {change:+8.1f}  {stream:>6}  {name[:50]} {k}")


def compare_steps(cuts, inside, base):
    """The steps beside base's (window()), piece by piece, in the order of base's step."""
    # Another process numbers its streams its own way (a rank of a run on several GPUs beside one
    # GPU's run): where the two steps share no stream, pieces are matched by name and order alone.
    def streams(c, work):
        return {r[3] for r in work if c[0] <= r[0] < c[-1]}

    by_stream = bool(streams(cuts, inside) & streams(base[0], base[3]))
    here, there = pieces(cuts, inside, by_stream), pieces(base[0], base[3], by_stream)

    def med(xs, i):
        return statistics.median(x[i] for x in xs) / 1e3 if xs else None

    def us(v):
        return f"{v:8.1f}" if v is not None else f"{'-':>8}"

    order = sorted(set(here) | set(there), key=lambda k: (k not in there, med(there.get(k) or here[k], 0), k))
    if by_stream:
        print("\nthe steps beside the base's, each piece by its name, stream and number there (median us):")
    else:
        print("\nthe steps beside the base's, each piece by its name and number in the step, the two traces "
              "sharing no stream (median us; the stream this trace ran it on):")
    print(f"{'base at':>8} {'length':>8}  {'at':>8} {'length':>8} {'change':>8}  {'stream':>6}  kernel")
    for key in order:
        b, h = there.get(key), here.get(key)
        bs, bl, hs, hl = med(b, 0), med(b, 1), med(h, 0), med(h, 1)
        change = f"{(hl or 0) - (bl or 0):+8.1f}"
        stream = key[1] if by_stream else (h or b)[0][3]
        print(f"{us(bs)} {us(bl)}  {us(hs)} {us(hl)} {change}  {stream:>6}  {key[0][:50]} {key[2]}")


def epochs(path, a):
    """Each run of training steps (steps cut at --marker over the whole trace that hold a kernel
    matching --train), one line each."""
    rows = read(path)
    mark, train = re.compile(a.marker), re.compile(a.train)
    cuts = [r[0] for r in rows if mark.search(r[2])]
    runs, run = [], []
    for s, e in zip(cuts, cuts[1:]):
        lo = bisect.bisect_left(rows, (s,))
        hi = bisect.bisect_left(rows, (e,))
        if any(train.search(r[2]) for r in rows[lo:hi]):
            run.append(e - s)
        elif run:
            runs.append(run)
            run = []
    if run:
        runs.append(run)
    print(f"\nepochs: runs of steps holding a kernel that matches {a.train} (us a step)")
    for k, steps in enumerate(runs):
        order = sorted(steps)
        p90 = order[max(0, -(-9 * len(order) // 10) - 1)]
        print(f"  epoch {k + 1}: {len(steps)} steps, {sum(steps) / 1e6:.3f} ms; median "
              f"{statistics.median(steps) / 1e3:.1f}, mean {statistics.mean(steps) / 1e3:.1f}, "
              f"90th percentile {p90 / 1e3:.1f}, longest {order[-1] / 1e3:.1f}")
    if not runs:
        print("  none")


def summarise(path, a, base, cut):
    """Prints one file's summary under the options in a (beside base's steps where given), from its
    measured part cut (window())."""
    cuts, lo, hi, inside = cut
    b, _ = busy(inside, lo, hi)
    span = hi - lo
    print(f"{path}: {span / 1e6:.3f} ms, GPU busy {b / 1e6:.3f} ms ({100 * b / span:.1f}%), "
          f"idle {(span - b) / 1e6:.3f} ms")
    per = per_kernel(inside, lo, hi)
    print(f"{'kernel':<48} {'calls':>7} {'total ms':>9} {'mean us':>8}")
    for name, (t, n) in sorted(per.items(), key=lambda kv: -kv[1][0])[: a.top]:
        print(f"{name[:48]:<48} {n:>7} {t / 1e6:>9.3f} {t / n / 1e3:>8.2f}")
    if not a.marker:
        return
    steps = []
    for s, e in zip(cuts, cuts[1:]):
        part = [r for r in inside if r[1] > s and r[0] < e]
        sb, gaps = busy(part, s, e)
        nccl = sum(min(r[1], e) - max(r[0], s) for r in part if "nccl" in r[2].lower())
        steps.append((e - s, sb, nccl, gaps, part, s))
    lengths = [x[0] for x in steps]
    med = statistics.median(lengths)
    busy_med = statistics.median(x[1] for x in steps)
    idle_med = statistics.median(x[0] - x[1] for x in steps)
    nccl_med = statistics.median(x[2] for x in steps)
    print(f"\n{len(steps)} steps: median {med / 1e3:.1f} us (min {min(lengths) / 1e3:.1f}, "
          f"max {max(lengths) / 1e3:.1f}); busy {busy_med / 1e3:.1f} us, idle {idle_med / 1e3:.1f} us, "
          f"NCCL's kernels {nccl_med / 1e3:.1f} us a step")
    typical = min(steps, key=lambda x: abs(x[0] - med))
    length, _, _, gaps, part, s = typical
    print(f"the largest idle gaps of a median step ({length / 1e3:.1f} us), at us from its start:")
    for g, at in sorted(gaps, reverse=True)[:8]:
        before, after = around(inside, at + 1)
        print(f"  {g / 1e3:7.1f} us at {(at - s) / 1e3:7.1f}: after {before[:40]}, before {after[:40]}")
    if a.timeline:
        print("that step's work in the order it started (us from its start):")
        print(f"{'start':>8} {'end':>8} {'length':>8}  {'stream':>6}  kernel")
        for start, end, name, stream in sorted(r for r in part if r[0] >= s):
            at, till, took = (start - s) / 1e3, (end - s) / 1e3, (end - start) / 1e3
            print(f"{at:8.1f} {till:8.1f} {took:8.1f}  {stream:>6}  {name[:60]}")
    if base:
        compare(cuts, inside, base, a.top)
        if a.timeline:
            compare_steps(cuts, inside, base)
    if a.spread:
        spread(cuts, inside, a.top)
    if a.epochs:
        epochs(path, a)


if __name__ == "__main__":
    main()
