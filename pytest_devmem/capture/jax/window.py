"""What the JAX capture saw in one test window, and what the record keeps of it: per function the
executables it needed and their shapes, per executable whose compile sized it and the buffers at its
peak. The same in any test order. Imports no framework."""

from __future__ import annotations

import dataclasses
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from .executables import ExecutablePlan, defined_by_jax


@dataclass
class JaxWindow:
    """What the capture saw in one test window, for the record."""

    executables: dict[str, int] = field(default_factory=dict)  # name -> runs
    temp_unknown: set[str] = field(default_factory=set)  # executables whose memory analysis failed
    compiled: list[str] = field(default_factory=list)  # executables XLA compiled in the window, by name
    # name -> the distinct programs run (compiled here or found in a cache), by `program_of`
    used: dict[str, dict[object, ExecutablePlan]] = field(default_factory=dict)
    failure: str = ""  # the capture's own error, if one stopped it: the trace is then incomplete
    since: int = 0  # the serial of the first executable read in the window (`Executables.plan`)
    # (name, program) -> the executables of it first run in the window, by serial: each one compiled for it
    fresh: dict[tuple[str, object], set[int]] = field(default_factory=dict)
    # the keys of the target compiler's entries that sized the plans needed, every one: two executables
    # of one CPU program (arguments placed otherwise) are one program in `used`, not for the target
    sized_keys: set[str] = field(default_factory=set)

    def ran(self, plan: ExecutablePlan) -> None:
        """`plan` was needed in the window (run, or refused at its call)."""
        program = program_of(plan)
        self.used.setdefault(plan.label, {})[program] = plan
        if plan.sized_key:
            self.sized_keys.add(plan.sized_key)
        if plan.serial >= self.since:
            self.fresh.setdefault((plan.label, program), set()).add(plan.serial)

    def with_runs(self, runs: Iterable[tuple[ExecutablePlan, int]]) -> JaxWindow:
        """A copy of this window with so many more runs of each plan (the compact steps the recorder
        took, which it counts apart)."""
        merged = dataclasses.replace(
            self,
            executables=dict(self.executables),
            temp_unknown=set(self.temp_unknown),
            used={name: dict(plans) for name, plans in self.used.items()},
            fresh={key: set(ids) for key, ids in self.fresh.items()},
            sized_keys=set(self.sized_keys),
        )
        for plan, count in runs:
            merged.executables[plan.label] = merged.executables.get(plan.label, 0) + count
            merged.ran(plan)
            if not plan.temp_known:
                merged.temp_unknown.add(plan.label)
        return merged

    def needed(self) -> dict[str, int]:
        """Per function, the executables the window needed: each distinct program it ran, compiled in
        it or found in a cache (which depends on what ran before in the process), as often as the
        window made a new executable of it (a function wrapped anew in a loop compiles the same
        program again each time, in any order), or, where more, the compiles it made (an executable
        compiled and never run). The same in any test order."""
        needed = {
            name: sum(max(1, len(self.fresh.get((name, program), ()))) for program in plans)
            for name, plans in self.used.items()
        }
        for name, count in Counter(self.compiled).items():
            needed[name] = max(needed.get(name, 0), count)
        return dict(sorted(needed.items()))

    def functions(self) -> dict[str, dict[str, object]]:
        """Per function the window ran (by executable name, "jit(step)"): the parameters' shapes of
        each distinct executable it needed (`signatures`, whole, sizes in numeric order, then " with
        scale=2.0", the static arguments of the call that compiled it), their paths
        (`arguments`, "params['w']", where JAX's debug info names them), where it is defined
        (`defined_in`, "step at model.py:12"; "" where not known) and whether JAX itself defined it
        (`by_jax`: its eager helpers, `jnp.zeros`' `broadcast_in_dim` and the like, compiled once per
        shape). The same in any test order, as `needed`."""
        found: dict[str, dict[str, object]] = {}
        for name, plans in sorted(self.used.items()):
            defined_in = next((plan.defined_in for plan in plans.values() if plan.defined_in), "")
            arguments = next((plan.argument_names for plan in plans.values() if plan.argument_names), ())
            found[name] = {
                "signatures": sorted(
                    (plan.signature + (f" with {plan.static}" if plan.static else "") for plan in plans.values()),
                    key=_numeric,
                ),
                **({"arguments": list(arguments)} if arguments else {}),
                "defined_in": defined_in,
                "by_jax": bool(defined_in) and defined_by_jax(defined_in),
            }
        return found

    def sizes(self) -> dict[str, dict[str, object]]:
        """Per executable run in the window, where a GPU or TPU sizer was asked for: the compile its
        temp bytes come from, the CPU compile's for comparison, and why where it kept the CPU's."""
        found: dict[str, dict[str, object]] = {}
        for label, used in self.used.items():
            # the plans this window ran, never the last one read under the name: two functions of one
            # name (`<lambda>`), one compiled earlier and found in JAX's cache, are each their own
            plans = sorted(used.values(), key=_in_order)
            plan = next((p for p in plans if p.size_note or p.refused is not None), plans[0])
            found[label] = {
                "sized_for": plan.sized_for,
                **({"cpu_temp_bytes": plan.cpu_temp} if plan.cpu_temp is not None and plan.refused is None else {}),
                **({"note": plan.size_note} if plan.size_note else {}),
                **({"refused": plan.refused} if plan.refused is not None else {}),
            }
        return found

    def buffers(self) -> dict[str, dict[str, object]]:
        """Per executable run in the window: the buffers at its peak (model/buffers.py's JSON, the
        largest kept), or why they are not known."""
        found: dict[str, dict[str, object]] = {}
        for label, used in self.used.items():  # the plans this window ran (see sizes)
            plan = max(
                sorted(used.values(), key=_in_order), key=lambda p: max((size for _, size in p.temps), default=0)
            )
            if plan.buffers is None:
                found[label] = {"unknown": plan.buffers_note}
                continue
            buffers = plan.buffers.top()
            if plan.defined_in and defined_by_jax(plan.defined_in):
                # a helper of JAX's, compiled once per shape: its lines are those of the call that first
                # traced it, in whichever test of the process that was
                buffers = buffers.without_lines()
            found[label] = buffers.to_json()
        return found


def program_of(plan: ExecutablePlan) -> object:
    """What makes an executable distinct: its compiled program, whichever executable object holds it
    (a function wrapped again per call, as `jax.pmap` and equinox's `filter_pmap` do, compiles the
    same program into a new object, and which of the objects a test meets depends on what ran
    before it); the object itself where the backend gives no module text."""
    return plan.program or id(plan)


def _in_order(plan: ExecutablePlan) -> tuple[str, str]:
    """The plans of one name in an order of their own, not of the process's history (which ran first,
    on JAX's fast path or not): by their parameters' shapes."""
    return plan.signature, plan.sized_for


def _numeric(signature: str) -> list[tuple[int, str]]:
    """A signature's sort key with its sizes as numbers: f32[8] before f32[16]."""
    return [(int(part), "") if part.isdigit() else (-1, part) for part in re.split(r"(\d+)", signature)]
