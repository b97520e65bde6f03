"""`python -m benchmarks.bench_oracle --sequences 5000`: random allocation sequences run on
TensorFlow's real BFC allocator and replayed through the model's pool (see `bfc_oracle`); prints how
many agree, what was compared, and the first disagreements. Exit 1 on any disagreement."""

from __future__ import annotations

import argparse
import random
import time

from .bfc_oracle import build_group, compare_group, run_on_tensorflow, summarize


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_oracle", description=__doc__)
    parser.add_argument("--sequences", type=int, default=5000, help="how many sequences (default 5000)")
    parser.add_argument("--per-group", type=int, default=5, help="sequences run one after another on one allocator (default 5)")
    parser.add_argument("--parallel", type=int, default=16, help="allocators (forked processes) at once (default 16)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.sequences < 1 or args.per_group < 1 or args.parallel < 1:
        parser.error("--sequences, --per-group and --parallel must be positive")
    rng = random.Random(args.seed)
    groups, left = [], args.sequences
    while left > 0:
        groups.append(build_group(rng.randint, min(args.per_group, left)))
        left -= len(groups[-1].sequences)
    started = time.perf_counter()
    results = [compare_group(result) for result in run_on_tensorflow(groups, parallel=args.parallel)]
    print(summarize(results))
    print(f"  ({len(groups)} allocators, {time.perf_counter() - started:.0f} s)")
    return 0 if all(not r.disagreements for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
