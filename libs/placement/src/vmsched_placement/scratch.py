"""Reusable work arrays of fleet length for the engine's hot path."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

BoolArray = npt.NDArray[np.bool_]
FloatArray = npt.NDArray[np.float64]


class Scratch:
    """Reusable work arrays of fleet length, so a decision allocates nothing in its hot path.

    Contents are meaningless between uses; whatever a decision writes here is only valid until
    the next decision on the same fleet (a fleet is used by one thread at a time).
    """

    __slots__ = ("eligible", "floats", "ineligible", "size")

    def __init__(self, size: int) -> None:
        self.size = size
        self.eligible: BoolArray = np.empty(size, dtype=np.bool_)
        self.ineligible: BoolArray = np.empty(size, dtype=np.bool_)
        self.floats: tuple[FloatArray, ...] = tuple(np.empty(size, dtype=np.float64) for _ in range(4))
