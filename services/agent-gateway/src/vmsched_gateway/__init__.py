"""vmsched-gateway: between vmsched and the agents, relaying commands to hosts and folding their
heartbeats and reports back into Redis and PostgreSQL."""
