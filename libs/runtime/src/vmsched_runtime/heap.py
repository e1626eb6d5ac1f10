"""What a service keeps from its startup, kept out of the garbage collector's way."""

from __future__ import annotations

import gc


def freeze_startup_objects() -> None:
    """Collect once, then move everything that survived startup (the imported libraries' modules,
    classes and schemas, the connections) into the permanent generation.

    A service lives as long as these objects, yet every full collection walked all of them: 60 to
    290 ms with the event loop stopped, in every service, a few times a minute under load, which
    set the tail of a VM's latency (docs/performance.md). Objects made afterwards are collected as
    before; only the frozen ones are no longer examined (see ``gc.freeze``)."""
    gc.collect()
    gc.freeze()
