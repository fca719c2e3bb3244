"""Loaded only by the fault suite's processes that run with a skewed clock (tests/faults/cluster.py
`skewed`): libfaketime 0.9.10 with FAKETIME_DONT_FAKE_MONOTONIC=1 fails the clock_nanosleep that
Python's time.sleep uses (EINVAL), so time.sleep waits in select() instead."""

import select
import time


def _sleep(seconds: float) -> None:
    if seconds < 0:
        raise ValueError("sleep length must be non-negative")
    select.select([], [], [], seconds)


time.sleep = _sleep
