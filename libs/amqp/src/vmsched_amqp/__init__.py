"""vmsched's RabbitMQ adapter: the broker every process builds, the topology declared once, the
event contract, publishing, consuming and dead-lettering messages, and who an agent is on the broker."""
