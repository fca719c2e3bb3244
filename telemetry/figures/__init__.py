"""The acceptance figures: computed over a window (selectors), snapshotted for /metrics (models,
services), shown in the console (admin)."""
