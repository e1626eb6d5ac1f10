"""Work arrays of fleet length that decisions reuse, so that the hot path allocates nothing."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from vmsched_placement.fleet import BoolArray, FloatArray


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
