"""The checks a measured test must pass beyond its own assertions, as pure functions: each takes
the test's record and returns the failure text, or None. The plugin applies them in order (limit,
replayed OOM, frameworks sharing the device, baseline) and records what they found. No pytest here."""

from __future__ import annotations

from typing import Mapping, Sequence

from .baseline import BaselineStore, compare, contributors_of, metrics_of
from ..model.device import DEFAULT_COMPUTE_CAPABILITY, Device
from .record import TestRecord
from ..model.regime import Regime
from .tolerance import Tolerance


def replay_oom_verdict(record: TestRecord, device: Device) -> str | None:
    """The failure when the test's trace does not fit its regime's pool on the session's device."""
    message = (record.trace or {}).get("out_of_memory")
    if not message:
        return None
    return f"would run out of device memory under regime {record.regime} on {device.name} (its trace replayed):\n{message}"


def sharing_verdict(record: TestRecord, frameworks: Sequence[str], regime: Regime | None, device: Device, context_bytes: int, environ: Mapping[str, str]) -> str | None:
    """Simulate `frameworks` on one device, each with its own events from the test's trace, started
    in the order they first allocated; `record.sharing` keeps the simulation. On a real GPU the
    frameworks really ran together, so only a real OOM fails, with the model's advice."""
    if not frameworks:
        return None
    from ..model.sharing import Participant, check_sharing, jax_setup_from_env, tensorflow_setup_from_env

    events = list(record.trace_events or [])
    tensorflow_limit = regime.tensorflow_memory_limit(device.capacity) if regime is not None else None
    participants = []
    for name in frameworks:
        setup = jax_setup_from_env(environ) if name == "jax" else tensorflow_setup_from_env(environ, tensorflow_limit)
        participants.append(Participant(setup, tuple(e for e in events if e.source == name)))
    capability = getattr(device, "compute_capability", DEFAULT_COMPUTE_CAPABILITY)[0]
    verdict = check_sharing(device.capacity, participants, device.name, capability, context_bytes, environ)
    record.sharing = verdict.to_json()
    if getattr(device, "index", None) is not None:
        return verdict.real_oom_message() if record.oom else None
    return None if verdict.fits else verdict.message()


def baseline_verdict(record: TestRecord, store: BaselineStore, tolerance: Tolerance, *, update: bool, strict: bool) -> str | None:
    """Compare a measured record with its baseline (kept in `record.baseline`); the failure text, or
    None where it may pass. Updating never fails; strict fails a test that has no baseline."""
    if record.peak_bytes_in_use is None:
        return None  # nothing measured this test: nothing to compare
    entry = store.get(record.test_id, record.regime)
    comparison = compare(entry, record.test_id, record.regime, metrics_of(record), tolerance, contributors_of(record))
    record.baseline = comparison.to_json()
    if update:
        return None
    if comparison.status == "regressed":
        return comparison.failure_message()
    if comparison.status in ("new", "not baselined") and strict:
        why = f" ({comparison.reason})" if comparison.reason else ""
        return f"no baseline for {record.test_id} under regime {record.regime} on {store.device_class}{why} (--devmem-strict); record one with --devmem-update"
    return None
