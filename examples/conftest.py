"""The example suite runs JAX on four CPU devices, so that the sharded example has a device per
shard; the flag must be set before JAX is imported, which a conftest is early enough for."""

from __future__ import annotations

import os

FLAG = "--xla_force_host_platform_device_count=4"
if FLAG.split("=")[0] not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {FLAG}".strip()
