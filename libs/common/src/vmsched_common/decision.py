"""The decision record, defined in :mod:`vmsched_contract.decision` (the client library reads it too)."""

from vmsched_contract.decision import *  # noqa: F403
