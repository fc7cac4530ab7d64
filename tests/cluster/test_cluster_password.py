"""cluster-password on real processes: every bus frame sealed with an HMAC; a node with
another password, or none, cannot join, and says why in its peers' logs. Plus the
reader's refusals, on bytes."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from conveyor.cluster.codec import encode
from conveyor.cluster.framing import FrameReader, mac_key, seal
from conveyor.cluster.layout import BusProtocolError
from conveyor.cluster.messages import NODE_MYSELF, GotJob, Header
from tests.cluster.test_cluster_nodes import all_healthy, start, view, wait_for
from tests.cluster.test_replication import holders
from tests.servers import NodeProcess

FRAME = encode(GotJob(Header(b"a" * 40, 7711, NODE_MYSELF), b"D-" + b"0" * 38))


def test_sealed_frames_pass_and_others_are_refused() -> None:
    key = mac_key("s3cret")
    reader = FrameReader(key=key)
    sealed = seal(FRAME, key)
    assert len(sealed) == len(FRAME) + 32
    assert reader.feed(sealed[:100]) == []  # waits for the frame and its MAC
    assert reader.feed(sealed[100:] + sealed) == [FRAME, FRAME]
    for wrong in (seal(FRAME, mac_key("other")), FRAME + FRAME):
        with pytest.raises(BusProtocolError, match="bad MAC: the sender has another"):
            FrameReader(key=key).feed(wrong)
    # A node without a password reads the MAC as the next header: refused at once.
    with pytest.raises(BusProtocolError, match="bad signature"):
        FrameReader().feed(sealed)


def test_only_nodes_with_the_password_form_a_cluster(
    tmp_path: Path, cluster: list[NodeProcess]
) -> None:
    for index, password in enumerate(("s3cret", "s3cret", "wrong")):
        cluster.append(start(tmp_path, index, None, "--cluster-password", password))
    cluster.append(start(tmp_path, 3))  # none
    first, second, wrong, none = cluster
    for node in (second, wrong, none):
        node.client().execute_command("CLUSTER", "MEET", "127.0.0.1", first.port)
    wait_for(lambda: all_healthy([first, second]), "the two with the password")
    job_id = first.client().execute_command("ADDJOB", "q", "x", "5000", "REPLICATE", "2")
    assert holders([first, second], job_id) == 2
    time.sleep(2.0)  # handshakes of the others time out (node timeout 1.5 s)
    assert set(view(first)) == {first.port, second.port}
    assert set(view(wrong)) <= {wrong.port, first.port}  # at most its own handshake
    assert "myself" in view(wrong)[wrong.port]
    log = first.log_path.read_text()
    assert "bad MAC: the sender has another cluster-password, or none" in log
