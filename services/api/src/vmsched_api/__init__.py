"""vmsched-api: the HTTP API (VMs, hosts, policies, identity, what-if), which stores each request and
publishes what it implies."""
