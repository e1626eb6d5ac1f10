"""vmsched's PostgreSQL adapter, the durable truth: the engine, the tables and their schema upgrades,
one row mapper per table, and the stores that read and write VMs, hosts, drains, plans and reservations."""
