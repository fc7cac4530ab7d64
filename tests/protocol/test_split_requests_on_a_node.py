"""A real node answers a request the same whether it came in one read or two.

Request elements of a type other than `$` are refused as Redis refuses them (`-ERR
Protocol error: expected '$', got 'X'`, then the connection is closed), and the `+`, `(`
and `=` elements hiredis reads as the string they carry are read so wherever a read cuts
them: the reply never depends on how TCP split the bytes.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.node.helpers import RawClient, wait_until
from tests.servers import NodeProcess, running_node

ECHO = b"*2\r\n$4\r\nECHO\r\n"
INFO = b"INFO stats\r\n"


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    with running_node(Path(tmp_path_factory.mktemp("node"))) as process:
        yield process


def _input_bytes(observer: RawClient) -> int:
    observer.send(INFO)
    text = observer.read_raw().decode()
    return int(text.split("total_net_input_bytes:")[1].split("\r\n")[0])


def reply_to(node: NodeProcess, request: bytes, cut: int | None) -> tuple[bytes, bytes]:
    """The node's reply to `request` sent whole (cut None) or as two reads split at `cut`,
    and its reply to a PING behind it (`closed` when it closed the connection)."""
    with RawClient(node.port) as client, RawClient(node.port) as observer:
        if cut is None:
            client.send(request)
        else:
            # The second part goes once the node has read the first (its input byte
            # count, which the observer's own INFO requests add to, says so).
            before = _input_bytes(observer)
            client.send(request[:cut])
            asked = [0]

            def first_part_read() -> bool:
                asked[0] += 1
                return _input_bytes(observer) >= before + asked[0] * len(INFO) + cut

            wait_until(first_part_read)
            client.send(request[cut:])
        reply = client.read_raw()
        try:
            client.send(b"PING\r\n")
            return reply, client.read_raw()
        except OSError:  # reset by the node, or ConnectionError: closed by it
            return reply, b"closed"


REFUSED = [
    (ECHO + b"%1\r\n$1\r\na\r\n$1\r\nb\r\n", "%"),
    (ECHO + b"~1\r\n$1\r\na\r\n", "~"),
    (ECHO + b"#t\r\n", "#"),
    (ECHO + b",1.5\r\n", ","),
    (ECHO + b":12\r\n", ":"),
    (ECHO + b"_\r\n", "_"),
    (ECHO + b"(12a\r\n", "("),  # not a number: hiredis' "Bad bignum value"
    (ECHO + b"=8\r\ntxtXabcd\r\n", "="),  # no ':' after the format
]


@pytest.mark.parametrize(("request_bytes", "kind"), REFUSED, ids=[kind for _, kind in REFUSED])
def test_a_request_element_of_another_type_gets_redis_error_however_split(
    node: NodeProcess, request_bytes: bytes, kind: str
) -> None:
    expected = (f"-ERR Protocol error: expected '$', got '{kind}'\r\n".encode(), b"closed")
    type_at = len(ECHO)
    for cut in (None, type_at + 1, type_at + 3, len(request_bytes) - 1):
        assert reply_to(node, request_bytes, cut) == expected, cut


LENIENT = [
    (ECHO + b"+" + b"s" * 40 + b"\r\n", b"s" * 40),
    (ECHO + b"(" + b"7" * 40 + b"\r\n", b"7" * 40),
    (ECHO + b"=8\r\ntxt:abcd\r\n", b"abcd"),
]


@pytest.mark.parametrize(
    ("request_bytes", "echoed"), LENIENT, ids=["simple-string", "bignum", "verbatim"]
)
def test_an_element_hiredis_reads_as_a_string_is_read_so_however_split(
    node: NodeProcess, request_bytes: bytes, echoed: bytes
) -> None:
    # Redis refuses these too; hiredis returns them as the bytes a bulk would carry, so a
    # node can't tell them apart in one read and reads them as that string in any split.
    expected = (b"$%d\r\n%s\r\n" % (len(echoed), echoed), b"+PONG\r\n")
    type_at = len(ECHO)
    for cut in (None, type_at + 1, type_at + 5, len(request_bytes) - 1):
        assert reply_to(node, request_bytes, cut) == expected, cut
