"""Sharing JAX's jit post-hook: the one callback its C++ dispatch makes on the fast path.

`jax.jit`'s C++ fast path runs a cached executable without returning to Python, then calls the
callable in the `post_hook` config state with `(jitted function, args, kwargs, outputs)`
(jaxlib/pjit.cc, `PjitFunction::Call`; jax/_src/api.py, `_post_hook_state`). JAX itself puts its
NaN check there while `jax_debug_nans` or `jax_debug_infs` is on, and takes it out again with
`set_global(None)` or `set_local(None)`. So the slot is shared: every subscriber is called, then
whatever hook JAX itself set, and JAX's own updates go through a stand-in for its state object so
they never drop the subscribers.

A thread's own value shadows the global one, and JAX leaves one behind: every `with
config.debug_nans(False)` (which `core.jaxpr_as_fun` enters, so differentiating some programs does)
calls `_update_debug_special_thread_local`, which sets the thread's post-hook to None, and nothing
unsets it (jax/_src/api.py). From then on the fast path calls no global hook on that thread. So a
subscriber also joins the value JAX left on the subscribing thread; a hook installed after such a
program ran would otherwise see no run on the fast path.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from . import internals

PostHook = Callable[[Any, tuple[Any, ...], dict[str, Any], Any], None]


class _StateStandIn:
    """Stands for JAX's `_post_hook_state` in `jax._src.api`, where JAX's debug-NaN updaters look it up."""

    def __init__(self, slot: PostHookSlot, real: Any) -> None:
        self._slot = slot
        self._real = real

    def set_global(self, hook: Any) -> None:
        self._slot.jax_global = hook
        self._slot.refresh()

    def set_local(self, hook: Any) -> None:
        self._slot.jax_local.hook = hook
        self._real.set_local(self._slot.chain_with(hook))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


class PostHookSlot:
    """The post-hook of one JAX process, shared by the captures that subscribe to it."""

    def __init__(self, api: Any) -> None:
        self._api = api
        self._real = api._post_hook_state
        self.jax_global: Any = self._real.get_global()
        self.jax_local = threading.local()
        self._unset = internals.unset_marker()
        self._subscribers: list[PostHook] = []

    def subscribe(self, hook: PostHook) -> None:
        if not self._subscribers:  # JAX's own hooks, as JAX last set them while nobody shared the slot
            self.jax_global = self._real.get_global()
            self._api._post_hook_state = _StateStandIn(self, self._real)
            local = self._real.get_local() if self._unset is not None else None
            if self._unset is not None and local is not self._unset:
                self.jax_local.hook = local  # this thread's own value, None where a debug_nans(False) left it
        self._subscribers.append(hook)
        self.refresh()

    def unsubscribe(self, hook: PostHook) -> None:
        if hook in self._subscribers:
            self._subscribers.remove(hook)
        if not self._subscribers:
            self._api._post_hook_state = self._real
            if hasattr(self.jax_local, "hook"):  # this thread's value back as JAX set it
                self._real.set_local(self.jax_local.hook)
        self.refresh()

    def refresh(self) -> None:
        """Set the global hook: the only subscriber itself where nothing else shares the slot (the
        common case costs one call), else a chain."""
        if len(self._subscribers) == 1 and self.jax_global is None:
            self._real.set_global(self._subscribers[0])
        else:
            self._real.set_global(self.chain_with(self.jax_global))
        if self._subscribers and hasattr(self.jax_local, "hook"):  # a thread value JAX set shadows the global
            alone = len(self._subscribers) == 1 and self.jax_local.hook is None
            self._real.set_local(self._subscribers[0] if alone else self.chain_with(self.jax_local.hook))

    def chain_with(self, jax_hook: Any) -> Any:
        """A hook that calls every current subscriber, then `jax_hook` (None: nothing more)."""
        if not self._subscribers:
            return jax_hook
        subscribers = self._subscribers

        def chained(function: Any, args: tuple[Any, ...], kwargs: dict[str, Any], outputs: Any) -> None:
            for subscriber in list(subscribers):
                subscriber(function, args, kwargs, outputs)
            if jax_hook is not None:
                jax_hook(function, args, kwargs, outputs)

        return chained


_slot: PostHookSlot | None = None


def post_hook_slot() -> PostHookSlot | None:
    """The process's slot, made on first use; None where this JAX has no post-hook state."""
    global _slot
    if _slot is None:
        try:
            api = internals.post_hook_module()
        except ImportError:
            return None
        state = getattr(api, "_post_hook_state", None)
        if state is None or not all(
            hasattr(state, name) for name in ("get_global", "set_global", "get_local", "set_local")
        ):
            return None
        _slot = PostHookSlot(api)
    return _slot
