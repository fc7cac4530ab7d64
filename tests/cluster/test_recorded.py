"""Every message of a live 3-node C Disque 1.0-rc1 cluster decodes to what messages.txt
says and encodes back to the recorded bytes; the pcap's streams split into the same frames."""

from __future__ import annotations

import ast
import json
from collections import Counter

import pytest

from conveyor.cluster.codec import FrameReader, decode, encode
from conveyor.cluster.messages import (
    GOSSIP_CLASSES,
    JOB_ID_CLASSES,
    JOBS_CLASSES,
    QUEUE_OP_CLASSES,
    Fail,
    GossipEntry,
    Message,
    MessageType,
    message_type,
)
from conveyor.core.codec import JobRecord

from .recording import BUS, Recorded, pcap_payloads, recorded_messages, recorded_streams

MESSAGES = recorded_messages()
NODES = {
    letter: node["id"].encode()
    for letter, node in json.loads((BUS / "nodes.json").read_text()).items()
}
PORTS = {
    letter: node["client_port"]
    for letter, node in json.loads((BUS / "nodes.json").read_text()).items()
}


def test_the_recording_holds_all_238_messages_of_all_16_types() -> None:
    assert len(MESSAGES) == 238
    assert [m.number for m in MESSAGES] == list(range(1, 239))
    assert {m.type for m in MESSAGES} == set(range(16))


def _check_header(message: Message, rec: Recorded) -> None:
    header = message.header
    assert message_type(message) == MessageType(rec.type)
    assert MessageType(rec.type).name == rec.type_name
    assert header.sender == rec.sender == NODES[rec.source]
    assert header.port == rec.port == PORTS[rec.source]
    assert (header.flags, header.state, header.ver) == (rec.flags, rec.state, rec.ver)
    assert bytes([header.mflags, header.mflags1, header.mflags2]) == rec.mflags
    assert header.myip == header.notused1 == b"" and header.notused0 == 0


def _check_gossip(entries: tuple[GossipEntry, ...], rec: Recorded) -> None:
    assert len(entries) == rec.count == len(rec.gossip)
    assert [entry._asdict() for entry in entries] == rec.gossip
    for entry in entries:
        assert entry.address == entry.ip.decode() == "127.0.0.1"


def _check_job(job: JobRecord, text: dict[str, str]) -> None:
    assert job.id.decode() == text["id[40]"]
    state_text = text["state:4 (low nibble) | gc_retry:4 (high nibble)"]
    assert state_text.startswith(f"state={job.state} ") and state_text.endswith(
        f"gc_retry={job.gc_retry}"
    )
    assert text["flags (u8)"].startswith(f"{job.flags} ")
    assert int(text["repl (u16 LE)"]) == job.repl
    assert text["etime (u32 LE)"].split()[0] == str(job.etime)
    assert text["ctime (u64 LE)"].split()[0] == str(job.ctime)
    assert int(text["delay (u32 LE, seconds)"]) == job.delay
    assert int(text["retry (u32 LE, seconds)"]) == job.retry
    assert int(text["nacks (u16 LE)"]) == job.nacks
    assert int(text["additional deliveries (u16 LE)"]) == job.additional_deliveries
    assert ast.literal_eval(text["queue name bytes"]) == job.queue
    assert ast.literal_eval(text["body bytes"]) == job.body
    assert int(text["node count (u32 LE)"]) == len(job.nodes)
    for i, node in enumerate(job.nodes):
        assert text[f"node name {i} [40]"].split()[0].encode() == node


def _check_payload(message: Message, rec: Recorded) -> None:
    if isinstance(message, GOSSIP_CLASSES):
        _check_gossip(message.gossip, rec)
        return
    assert rec.count == 0
    if isinstance(message, Fail):
        assert message.nodename == rec.about
    elif isinstance(message, JOB_ID_CLASSES):
        assert (message.id, message.aux) == (rec.job_id, rec.aux)
    elif isinstance(message, JOBS_CLASSES):
        assert len(message.jobs) == rec.numjobs == len(rec.jobs)
        assert rec.datasize == rec.totlen - 152
        for job, text in zip(message.jobs, rec.jobs, strict=True):
            _check_job(job, text)
    else:
        assert isinstance(message, QUEUE_OP_CLASSES)
        assert (message.qname, message.aux) == (rec.qname, rec.aux)


@pytest.mark.parametrize("rec", MESSAGES, ids=lambda rec: f"{rec.number}-{rec.type_name}")
def test_recorded_message_decodes_as_described_and_encodes_back(rec: Recorded) -> None:
    raw = rec.raw
    assert len(raw) == rec.totlen
    message = decode(raw)
    _check_header(message, rec)
    _check_payload(message, rec)
    assert encode(message) == raw


def test_byte_exact_round_trips_per_type() -> None:
    exact = Counter(m.type_name for m in MESSAGES if encode(decode(m.raw)) == m.raw)
    expected = Counter(m.type_name for m in MESSAGES)
    assert exact == expected
    assert expected == {
        "PING": 81,
        "PONG": 84,
        "MEET": 3,
        "FAIL": 1,
        "REPLJOB": 9,
        "GOTJOB": 8,
        "ENQUEUE": 1,
        "QUEUED": 16,
        "SETACK": 4,
        "WILLQUEUE": 14,
        "GOTACK": 4,
        "DELJOB": 5,
        "NEEDJOBS": 3,
        "YOURJOBS": 1,
        "WORKING": 2,
        "PAUSE": 2,
    }


def test_messages_txt_hex_is_the_pcap_payload() -> None:
    # Rebuilt from the decoded text and taken from the raw capture, the same streams.
    assert sorted(data for _, data in recorded_streams()) == sorted(
        data for _, data in pcap_payloads()
    )


@pytest.mark.parametrize("chunk", [1, 7, 144, 1500, 1 << 20])
def test_frame_reader_splits_every_captured_stream_into_the_recorded_frames(chunk: int) -> None:
    expected = Counter(m.raw for m in MESSAGES)
    frames: Counter[bytes] = Counter()
    for _, stream in pcap_payloads():
        reader = FrameReader()
        for start in range(0, len(stream), chunk):
            for frame in reader.feed(stream[start : start + chunk]):
                frames[frame] += 1
        assert reader.buffered == 0
    assert frames == expected


def test_header_flags_show_leaving_and_gossip_shows_the_dead_node_failing() -> None:
    # NOTES.md 4 and 12: the sender's own word carries MYSELF (4) and LEAVING (128);
    # gossip about the killed, leaving C goes PFAIL|LEAVING then FAIL|LEAVING.
    flags = {decode(m.raw).header.flags for m in MESSAGES}
    assert flags == {4, 132}
    gossip_flags = {
        entry.flags
        for m in MESSAGES
        if isinstance(message := decode(m.raw), GOSSIP_CLASSES)
        for entry in message.gossip
    }
    assert {129, 130} <= gossip_flags and not any(f & 4 for f in gossip_flags)
