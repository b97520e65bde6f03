"""`python -m benchmarks.bench_oracle --sequences 5000`: random allocation sequences run on
TensorFlow's real BFC allocator and replayed through the model's pool (see `bfc_oracle`); prints how
many agree, what was compared, and the first disagreements. Exit 1 on any disagreement."""

from __future__ import annotations

import argparse
import random
import time

from .bfc_oracle import Group, MiB, build_group, compare_group, run_on_tensorflow, side_by_side, summarize

SEVEN_THEN_LARGER = [100 * MiB] * 7 + [-1, -2, -3, -4] + [200 * MiB] + [-1] * 4
"""The README's fragmentation case: 100 MiB seven times, every other freed, then 200 MiB."""


def readme_case() -> int:
    """Print the README's case on the allocator and in the model, event by event."""
    results = run_on_tensorflow([Group(limit, [SEVEN_THEN_LARGER]) for limit in (1024, 768, 760)])
    for result in results:
        regions = ", ".join(f"{size / MiB:g}" for _, size in result["regions"])
        print(f"limit {result['limit_mb']} MiB, regions (MiB): {regions}")
        print(
            f"  {'event':<34} {'in use (allocator / model)':>28} {'reserved (model)':>17} {'fragmentation (allocator / model)':>36}"
        )
        for what, in_use, model_in_use, reserved, fragmentation, model_fragmentation, _, _ in side_by_side(result):
            real = f"{in_use / MiB:.2f}" if in_use >= 0 else "-"
            print(
                f"  {what:<34} {real + ' / ' + format(model_in_use / MiB, '.2f'):>28} {reserved / MiB:>17.2f} {format(fragmentation, 'g') + ' / ' + format(model_fragmentation, 'g'):>36}"
            )
    agree = all(not compare_group(result).disagreements for result in results)
    print("every figure agrees" if agree else "DISAGREEMENT: run the oracle test for details")
    return 0 if agree else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_oracle", description=__doc__)
    parser.add_argument("--sequences", type=int, default=5000, help="how many sequences (default 5000)")
    parser.add_argument(
        "--per-group", type=int, default=5, help="sequences run one after another on one allocator (default 5)"
    )
    parser.add_argument("--parallel", type=int, default=16, help="allocators (forked processes) at once (default 16)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--readme",
        action="store_true",
        help="the README's fragmentation case under 1024, 768 and 760 MiB, side by side",
    )
    args = parser.parse_args(argv)
    if args.readme:
        return readme_case()
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
