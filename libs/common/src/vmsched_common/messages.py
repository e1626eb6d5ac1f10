"""The message models, defined in :mod:`vmsched_contract.messages` (pydantic only, so the agent SDK
and the client library need none of the services' stack); the services import them from here too."""

from vmsched_contract.messages import *  # noqa: F403
