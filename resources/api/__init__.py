"""The resource pool's REST endpoints: pools, resources, and the claim, release, heartbeat, reset
and quarantine actions, by id or by pool and key. Each endpoint calls one service or selector."""
