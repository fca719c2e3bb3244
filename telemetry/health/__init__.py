"""Is RetryOps well: /healthz and /readyz, the processes' heartbeats, the replica and the invariants."""
