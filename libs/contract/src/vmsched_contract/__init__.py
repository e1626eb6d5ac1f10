"""vmsched's public contract: what its HTTP API and its messages look like, as pydantic models.

One definition, read by every side: the API serves these models, the client library
(``vmsched_client``) parses its answers with them, the services and the agent SDK exchange the
messages. Its only dependency is pydantic, so a client or an agent installs none of the services'
stack (tests/unit/test_lean_imports.py).
"""
