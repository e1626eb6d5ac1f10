"""vmsched-scheduler: a stateless scheduler replica, which places VMs and chooses migration targets,
claiming their capacity in Redis and committing it to PostgreSQL."""
