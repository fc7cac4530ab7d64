"""The first thing a user does: add a job and get it back."""

from __future__ import annotations

import redis


def test_addjob_then_getjob_round_trip(r: redis.Redis) -> None:
    job_id = r.execute_command("ADDJOB", "q", "hello", "0")
    assert isinstance(job_id, bytes) and len(job_id) == 40
    assert r.execute_command("GETJOB", "FROM", "q") == [[b"q", job_id, b"hello"]]
    assert r.execute_command("ACKJOB", job_id) == 1
    assert r.execute_command("SHOW", job_id) is None
