"""The compensation app's REST endpoints: dead letters (replay, discard, resolve), bulk replays,
work orders (opened by hand, edited, moved through their transitions) and their runbook runs.
Each endpoint calls one service or selector."""
