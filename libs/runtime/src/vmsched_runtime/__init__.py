"""What every vmsched process wires up at start, whatever servers it talks to: its settings, logs,
traces, metrics, command line and micro-batches (no broker, database or Redis client)."""
