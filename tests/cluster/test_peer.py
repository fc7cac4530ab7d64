"""An outbound bus peer whose address the kernel's connect() cannot even take (a port past
65535 from a peer's header or gossip, a NUL in a host from a corrupt nodes.conf): the
attempt fails like an unreachable peer, and the peer keeps retrying with backoff."""

from __future__ import annotations

import pytest

from conveyor.cluster.messages import NODE_MYSELF, Header, Ping
from conveyor.cluster.transport import Backoff, BusTransport

NAME = b"a" * 40
FAST = Backoff(initial=0.01, maximum=0.02, jitter=0.0)


@pytest.mark.parametrize("address", [("127.0.0.1", 65535 + 10000), ("127.0.0.1\0x", 17711)])
async def test_an_address_connect_refuses_is_a_failed_attempt(address: tuple[str, int]) -> None:
    bus = BusTransport(0, lambda link, message: None, backoff=FAST)
    await bus.start()
    try:
        peer = bus.connect(NAME, address)
        task = peer._task
        assert task is not None
        await task  # raised into nobody before: the peer stayed "connecting" for ever
        assert peer.state == "waiting"
        assert peer.failures == 1
        # Refused, as to any peer we cannot reach.
        assert not bus.send(NAME, Ping(Header(NAME, 7711, NODE_MYSELF)))
    finally:
        await bus.close()
