"""Job IDs: the exact layout of seed 001 and the reference."""

from __future__ import annotations

import base64
import hashlib
import re

import pytest

from conveyor.core.jobid import JobIdGenerator, id_has_retry, is_valid_id, ttl_digits

NODE_ID = "4c206d18" + "0" * 32
ID_RE = re.compile(rb"^D-4c206d18-[A-Za-z0-9+/]{24}-[0-9a-f]{4}$")


def test_random_part_is_the_seeds_shake128_stream_in_base64() -> None:
    """ID n's 24 characters are the n-th 18 bytes of SHAKE-128(seed || block), block by
    block of 512 IDs: reproducible from the seed, unguessable without it."""
    seed = bytes(range(20))
    generator = JobIdGenerator(NODE_ID, seed)
    ids = [generator.next_id(86400, 300) for _ in range(1030)]

    def block(number: int) -> bytes:
        return hashlib.shake_128(seed + number.to_bytes(8, "little")).digest(18 * 512)

    stream = block(1) + block(2) + block(3)
    for index in (0, 1, 511, 512, 513, 1023, 1024, 1029):  # across block boundaries
        job_id = ids[index]
        assert job_id[11:35] == base64.b64encode(stream[18 * index : 18 * (index + 1)])
        assert ID_RE.match(job_id)
        assert len(job_id) == 40


@pytest.mark.parametrize(
    ("ttl", "retry", "digits"),
    [(86400, 300, 0x05A1), (86400, 0, 0x05A0), (100, 5, 0x0001), (1, 0, 0x0000),
     (60 * 65535 * 2, 1, 0xFFFF), (3600, 30, 0x003D)],
)  # fmt: skip
def test_ttl_digits_are_minutes_odd_with_retries_even_without(
    ttl: int, retry: int, digits: int
) -> None:
    assert ttl_digits(ttl, retry) == digits
    job_id = JobIdGenerator(NODE_ID, b"s").next_id(ttl, retry)
    assert job_id[36:] == b"%04x" % digits
    assert id_has_retry(job_id) == (retry > 0)


@pytest.mark.parametrize(
    "candidate",
    [b"", b"D-4c206d18-Boz8PLppKUdn5wHCQvjz8zQP-05a", b"X-4c206d18-Boz8PLppKUdn5wHCQvjz8zQP-05a1",
     b"D_4c206d18-Boz8PLppKUdn5wHCQvjz8zQP-05a1", b"D-4c206d18_Boz8PLppKUdn5wHCQvjz8zQP-05a1",
     b"D-4c206d18-Boz8PLppKUdn5wHCQvjz8zQP_05a1", b"D-4c206d18-Boz8PLppKUdn5wHCQvjz8zQP-05a1x"],
)  # fmt: skip
def test_malformed_ids_are_rejected(candidate: bytes) -> None:
    assert not is_valid_id(candidate)


def test_ids_are_unique_and_well_formed() -> None:
    generator = JobIdGenerator(NODE_ID, b"seed")
    ids = {generator.next_id(86400, 300) for _ in range(10_000)}
    assert len(ids) == 10_000
    assert all(is_valid_id(job_id) for job_id in ids)


@pytest.mark.parametrize("counts", [(1, 3, 0, 2), (511, 1, 2), (700, 600), (1, 1535, 3)])
def test_a_run_of_ids_is_what_as_many_single_ids_are(counts: tuple[int, ...]) -> None:
    """next_ids (a run of ADDJOBs) makes the IDs next_id would, one by one, across the
    ends of the stream's blocks (512 IDs each), and leaves the generator where they do."""
    together, one_by_one = JobIdGenerator("a" * 40, b"seed"), JobIdGenerator("a" * 40, b"seed")
    for count in counts:
        assert together.next_ids(3600, 30, count) == [
            one_by_one.next_id(3600, 30) for _ in range(count)
        ]
    assert together.next_id(60, 0) == one_by_one.next_id(60, 0)
