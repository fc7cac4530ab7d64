"""The recorded Disque bus traffic (tests/fixtures/disque_wire/bus), parsed independently of
the codec under test: messages.txt's decoded text and hex, and the raw TCP payloads of
capture.pcap, so the tests compare the codec against both."""

from __future__ import annotations

import ast
import re
import struct
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

BUS = Path(__file__).resolve().parents[1] / "fixtures" / "disque_wire" / "bus"

_START = re.compile(
    r"^#(\d+) \[\s*[\d.]+\] (\w+)\s+(.+?)\s+\((\w) -> (\w)\)\s+stream offset (\d+)$"
)
_HEADER = re.compile(r"totlen=(\d+) ver=(\d+) notused0=(\d+) type=(\d+) \((\w+)\) count=(\d+)")
_SENDER = re.compile(r"sender=([0-9a-f]{40}) ")
_FLAGS = re.compile(r"port=(\d+) flags=(\d+) .*state=(\d+) .*mflags=([0-9a-f]{6})")
_GOSSIP_NAME = re.compile(r"gossip\[\d+\] @\d+: nodename=([0-9a-f]{40})")
_GOSSIP_TIMES = re.compile(r"ping_sent=(\d+) pong_received=(\d+)")
_GOSSIP_ADDR = re.compile(r"ip='([^']*)' port=(\d+) flags=(\d+) .*notused1=(\d+) notused2=(\d+)")
_HEX = re.compile(r"^\s+[0-9a-f]{4}: ([0-9a-f]+)$")
# "@196    1  state:4 ...  state=0 (wait-repl), gc_retry=0" and the like, in the job dump.
_JOB_FIELD = re.compile(r"^\s+@\d+\s+\d+\s+(.+?)\s{2,}(\S.*)$")


@dataclass
class Recorded:
    """One message as messages.txt describes it."""

    number: int
    type_name: str
    direction: str  # "37973 (A outbound) -> 52002 (B bus port)"
    source: str  # node letter
    target: str
    offset: int  # stream offset within its TCP connection
    totlen: int = 0
    ver: int = 0
    type: int = -1
    count: int = 0
    sender: bytes = b""
    port: int = 0
    flags: int = 0
    state: int = 0
    mflags: bytes = b""
    gossip: list[dict[str, object]] = field(default_factory=list)
    about: bytes = b""  # FAIL
    job_id: bytes = b""
    aux: int | None = None
    numjobs: int | None = None
    datasize: int | None = None
    jobs: list[dict[str, str]] = field(default_factory=list)
    qname: bytes | None = None
    hex: str = ""

    @property
    def raw(self) -> bytes:
        return bytes.fromhex(self.hex)


def _parse_line(message: Recorded, line: str) -> None:
    if m := _HEADER.search(line):
        message.totlen, message.ver, _, message.type, _, message.count = (
            int(m[1]),
            int(m[2]),
            m[3],
            int(m[4]),
            m[5],
            int(m[6]),
        )
    elif m := _SENDER.search(line):
        message.sender = m[1].encode()
    elif m := _FLAGS.search(line):
        message.port, message.flags, message.state = int(m[1]), int(m[2]), int(m[3])
        message.mflags = bytes.fromhex(m[4])
    elif m := _GOSSIP_NAME.search(line):
        message.gossip.append({"nodename": m[1].encode()})
    elif m := _GOSSIP_TIMES.search(line):
        message.gossip[-1].update(ping_sent=int(m[1]), pong_received=int(m[2]))
    elif m := _GOSSIP_ADDR.search(line):
        message.gossip[-1].update(
            ip=m[1].encode(),
            port=int(m[2]),
            flags=int(m[3]),
            notused1=int(m[4]),
            notused2=int(m[5]),
        )
    else:
        _parse_payload_line(message, line)


def _parse_payload_line(message: Recorded, line: str) -> None:
    stripped = line.strip()
    if m := _HEX.match(line):
        message.hex += m[1]
    elif m := re.match(r"about nodename=([0-9a-f]{40})", stripped):
        message.about = m[1].encode()
    elif m := re.match(r"job id=(\S{40})$", stripped):
        message.job_id = m[1].encode()
    elif m := re.match(r"aux=(\d+) ", stripped):
        message.aux = int(m[1])
    elif m := re.match(r"numjobs=(\d+) .*datasize=(\d+) ", stripped):
        message.numjobs, message.datasize = int(m[1]), int(m[2])
    elif m := re.match(r"qnamelen=\d+ .*qname=(b'.*') \(@\d+\)$", stripped):
        message.qname = ast.literal_eval(m[1])
    elif stripped.startswith("job["):
        message.jobs.append({})
    elif (m := _JOB_FIELD.match(line)) and message.jobs:
        message.jobs[-1][m[1]] = m[2]


@cache
def recorded_messages() -> tuple[Recorded, ...]:
    """All messages of messages.txt, in file order."""
    messages: list[Recorded] = []
    current: Recorded | None = None
    for line in (BUS / "messages.txt").read_text().splitlines():
        if m := _START.match(line):
            current = Recorded(int(m[1]), m[2], m[3], m[4], m[5], int(m[6]))
            messages.append(current)
        elif line.startswith(">>>") or line.startswith("Directions"):
            current = None
        elif current is not None and line.strip():
            _parse_line(current, line)
    return tuple(messages)


def recorded_streams() -> list[tuple[str, bytes]]:
    """Each TCP connection's bus byte stream, rebuilt from messages.txt (a new connection
    starts wherever a direction's stream offset goes back to 0)."""
    streams: dict[str, list[tuple[str, bytearray]]] = {}
    for message in recorded_messages():
        runs = streams.setdefault(message.direction, [])
        if message.offset == 0:
            runs.append((message.direction, bytearray()))
        _, data = runs[-1]
        assert len(data) == message.offset, f"#{message.number}: stream offset mismatch"
        data += message.raw
    return [(name, bytes(data)) for runs in streams.values() for name, data in runs]


def pcap_payloads() -> list[tuple[str, bytes]]:
    """TCP payload bytes per connection direction, straight from capture.pcap.

    A plain pcap of Ethernet/IPv4/TCP on loopback with no loss (messages.txt reports no
    gaps or retransmissions), so segments in capture order, split at each SYN, give the
    streams. Keyed by "srcport->dstport#n", n counting SYNs on that 4-tuple.
    """
    data = (BUS / "capture.pcap").read_bytes()
    magic, _, _, _, _, _, linktype = struct.unpack_from("<IHHiIII", data, 0)
    assert magic == 0xA1B2C3D4 and linktype == 1
    streams: dict[str, bytearray] = {}
    generation: dict[tuple[int, int], int] = {}
    pos = 24
    while pos < len(data):
        _, _, caplen, _ = struct.unpack_from("<IIII", data, pos)
        packet = data[pos + 16 : pos + 16 + caplen]
        pos += 16 + caplen
        if struct.unpack_from(">H", packet, 12)[0] != 0x0800 or packet[23] != 6:
            continue
        ip_len = (packet[14] & 0x0F) * 4
        total = struct.unpack_from(">H", packet, 16)[0]
        tcp = packet[14 + ip_len : 14 + total]
        sport, dport = struct.unpack_from(">HH", tcp, 0)
        if tcp[13] & 0x02:  # SYN: a new connection on this 4-tuple
            generation[(sport, dport)] = generation.get((sport, dport), 0) + 1
        payload = tcp[(tcp[12] >> 4) * 4 :]
        if payload:
            key = f"{sport}->{dport}#{generation.get((sport, dport), 0)}"
            streams.setdefault(key, bytearray()).extend(payload)
    return [(key, bytes(value)) for key, value in streams.items()]
