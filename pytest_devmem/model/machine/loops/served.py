"""What a loop writes after an event a pool served through its own methods (`any_lanes` at every
event; the inline loops where their pool grows, moves buffers or an action is of no known kind):
the device's and allocator's counters, and the device's fragmentation sample. The inline loops'
common events keep these in line (or in locals), as written for speed."""

from __future__ import annotations

from ..state import AllocatorState, DeviceState


def allocated(allocator: AllocatorState, in_use: int, held: int, rounded: int, index: int) -> None:
    """An allocation of `rounded` bytes that the allocator's pool served at event `index`, its bytes
    in use and held having been `in_use` and `held` before: the device's chunks, what the pool took
    from the device, and the allocator's and device's bytes in use, with their peaks."""
    device, pool = allocator.device, allocator.pool
    assert pool is not None
    device.chunks += pool.bytes_in_use - in_use
    if device.chunks > device.peak_chunks:
        device.peak_chunks = device.chunks
    grew = pool.pool_bytes + pool.bytes_reserved - held
    if grew:
        device.held += grew
        now_held = held + grew
        if not allocator.took:
            allocator.took = now_held
        if now_held > allocator.peak_held:
            allocator.peak_held = now_held
        if device.held > device.peak_held:
            device.peak_held = device.held
    allocator.in_use += rounded
    if allocator.in_use > allocator.peak_in_use:
        allocator.peak_in_use = allocator.in_use
    device.in_use += rounded
    if device.in_use > device.peak_in_use:
        device.peak_in_use = device.in_use
        device.peak_event = index
        device.pending = True
        device.fragmentation_at_peak = device.fragmentation()


def sampled(device: DeviceState, fragmentation: float, index: int, step: float) -> float:
    """The device's fragmentation after event `index`: its worst so far, and a map owed at each
    `step` up (at most 1/FRAGMENTATION_STEP maps a device); the fragmentation."""
    device.sampled = fragmentation
    if device.worst_fragmentation is None or fragmentation > device.worst_fragmentation:
        device.worst_fragmentation, device.worst_event = fragmentation, index
        if fragmentation >= device.mapped + step:
            device.fragmented, device.mapped = True, fragmentation
    return fragmentation
