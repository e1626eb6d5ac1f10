"""The cursor of a list served by creation time (``GET /v1/vms``, ``GET /v1/rebalance/plans``): the
(created_at, id) of the row a page ends at, opaque to the caller."""

from __future__ import annotations

import base64
import uuid
from datetime import datetime
from uuid import UUID


def encode_cursor(created_at: datetime, row_id: UUID) -> str:
    return base64.urlsafe_b64encode(f"{created_at.isoformat()}|{row_id}".encode()).decode()


def decode_cursor(cursor: str) -> tuple[datetime, UUID]:
    """Raises ValueError for a cursor this API did not hand out."""
    try:
        stamp, row_id = base64.urlsafe_b64decode(cursor.encode()).decode().split("|")
        return datetime.fromisoformat(stamp), uuid.UUID(row_id)
    except Exception as error:
        raise ValueError("not a cursor from a previous page") from error
