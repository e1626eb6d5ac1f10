"""vmsched's domain: the entities (a VM, a host, a server group, a reservation) and the rules that
change them (the lifecycle, the fit rule, live migration, drains, groups), pure Python with no I/O."""
