"""Membership on real `conveyor server` processes on 127.0.0.1: MEET, gossip, FAIL, nodes.conf.

Each node listens on a free client port P and its bus on P + 10000. Waits poll the
nodes' own view (CLUSTER NODES) up to a generous deadline; the times they took are
printed, not asserted.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import redis

from tests.conftest import free_cluster_port
from tests.servers import NodeProcess

NODE_TIMEOUT_MS = 1500


def start(base: Path, index: int, port: int | None = None, *extra: str) -> NodeProcess:
    return NodeProcess(
        base / f"node{index}",
        "--cluster-node-timeout",
        str(NODE_TIMEOUT_MS),
        *extra,
        port=port,
        pick_port=free_cluster_port,
    )


def view(node: NodeProcess) -> dict[int, str]:
    """port -> flags, as CLUSTER NODES on `node` shows them."""
    text = node.client().execute_command("CLUSTER", "NODES").decode()
    result = {}
    for line in text.splitlines():
        words = line.split()
        result[int(words[1].rsplit(":", 1)[1])] = words[2]
    return result


def wait_for(
    check: Callable[[], bool],
    what: str,
    deadline_s: float = 20.0,
    state: Callable[[], str] | None = None,
) -> float:
    started = time.monotonic()
    while time.monotonic() - started < deadline_s:
        if check():
            took = time.monotonic() - started
            print(f"{what}: {took:.2f} s")
            return took
        time.sleep(0.05)
    raise AssertionError(
        f"not reached in {deadline_s} s: {what}" + (f"\n{state()}" if state else "")
    )


def all_healthy(nodes: list[NodeProcess]) -> bool:
    ports = {node.port for node in nodes}
    for node in nodes:
        seen = view(node)
        if set(seen) != ports or any(f not in ("myself", "noflags") for f in seen.values()):
            return False
    return True


def form(base: Path, cluster: list[NodeProcess], count: int, *extra: str) -> None:
    """Start `count` nodes into `cluster`, each MEETing the first, and wait until all
    know all."""
    cluster.extend(start(base, index, None, *extra) for index in range(count))
    for node in cluster[1:]:
        assert (
            node.client().execute_command("CLUSTER", "MEET", "127.0.0.1", cluster[0].port) == b"OK"
        )
    wait_for(lambda: all_healthy(cluster), f"{count} nodes know each other")


def test_meet_one_node_and_all_learn_all(tmp_path: Path, cluster: list[NodeProcess]) -> None:
    form(tmp_path, cluster, 4)
    hub = cluster[0]
    for node in cluster:
        info = node.client().execute_command("CLUSTER", "INFO").decode()
        assert "cluster_known_nodes:4\r\n" in info
        assert "cluster_reachable_nodes:3\r\n" in info
        assert "cluster_size:4\r\n" in info
        hello = node.client().execute_command("HELLO")
        assert hello[0] == 1 and hello[1] == node.client().execute_command("CLUSTER", "MYID")
        entries = {int(entry[2]): entry for entry in hello[2:]}
        assert set(entries) == {n.port for n in cluster}
        assert {entry[1] for entry in entries.values()} == {b"127.0.0.1"}
        assert {entry[3] for entry in entries.values()} == {b"1"}
    # The default replication level follows the cluster: min(3, size).
    client = hub.client()
    job_id = client.execute_command("ADDJOB", "q", "body", "0")
    show = client.execute_command("SHOW", job_id)
    assert show[show.index(b"repl") + 1] == 3
    with pytest.raises(redis.ResponseError, match="NOREPL Not enough reachable nodes"):
        client.execute_command("ADDJOB", "q", "body", "0", "REPLICATE", "5")


def test_two_of_five_killed_are_marked_fail_and_cleared_after_restart(
    tmp_path: Path, cluster: list[NodeProcess]
) -> None:
    form(tmp_path, cluster, 5)
    dead = cluster[3:]
    for node in dead:
        node.process.kill()
        node.stop()
    dead_ports = [node.port for node in dead]

    def marked_fail() -> bool:
        return all(view(node)[port] == "fail" for node in cluster[:3] for port in dead_ports)

    took = wait_for(marked_fail, f"FAIL on the 3 others (node timeout {NODE_TIMEOUT_MS} ms)")
    assert took > NODE_TIMEOUT_MS / 1000 * 0.5  # PFAIL needs the timeout to pass first
    for node in cluster[:3]:
        hello = node.client().execute_command("HELLO")
        priorities = {int(entry[2]): entry[3] for entry in hello[2:]}
        assert [priorities[port] for port in dead_ports] == [b"100", b"100"]
        info = node.client().execute_command("CLUSTER", "INFO").decode()
        assert "cluster_reachable_nodes:2\r\n" in info
    # Restarted on the same data directories, they rejoin from nodes.conf: no MEET.
    cluster[3:] = [start(tmp_path, 3 + i, port) for i, port in enumerate(dead_ports)]
    wait_for(lambda: all_healthy(cluster), "FAIL cleared after the restart")


def test_nodes_conf_keeps_the_cluster_across_a_restart(
    tmp_path: Path, cluster: list[NodeProcess]
) -> None:
    form(tmp_path, cluster, 3)
    assert cluster[1].client().execute_command("CLUSTER", "SAVECONFIG") == b"OK"
    conf = (tmp_path / "node1" / "nodes.conf").read_text().splitlines()
    assert len(conf) == 3 and sum(" myself " in line for line in conf) == 1
    my_id = cluster[1].client().execute_command("CLUSTER", "MYID")
    port = cluster[1].port
    cluster[1].stop()
    cluster[1] = start(tmp_path, 1, port)
    assert cluster[1].client().execute_command("CLUSTER", "MYID") == my_id
    wait_for(lambda: all_healthy(cluster), "the restarted node is back in")

    def linked_again() -> bool:  # its outbound links up again, and both others answered
        client = cluster[1].client()
        text = client.execute_command("CLUSTER", "NODES").decode()
        lines = [line.split() for line in text.splitlines() if "myself" not in line]
        info = client.execute_command("CLUSTER", "INFO").decode()
        received = int(info.split("cluster_stats_messages_received:")[1].split()[0])
        return len(lines) == 2 and all(w[5] == "connected" for w in lines) and received >= 2

    def state() -> str:
        client = cluster[1].client()
        nodes = client.execute_command("CLUSTER", "NODES").decode()
        return nodes + client.execute_command("CLUSTER", "INFO").decode()

    wait_for(linked_again, "the restarted node linked to both others", state=state)


def test_cluster_command_errors(tmp_path: Path, cluster: list[NodeProcess]) -> None:
    cluster.append(start(tmp_path, 0))
    client = cluster[0].client()
    cases = {
        ("MEET", "127.0.0.1", "x"): "Invalid TCP port specified: x",
        ("MEET", "127.0.0.1", "0"): "Invalid node address specified: 127.0.0.1:0",
        ("MEET", "127.0.0.1", "55536"): "Invalid node address specified: 127.0.0.1:55536",
        ("MEET", "not-an-ip", "7711"): "Invalid node address specified: not-an-ip:7711",
        # inet_pton, which Disque parses with, takes no IPv6 zone (Python's ip_address does)
        ("MEET", "::1%eth0", "7711"): "Invalid node address specified: ::1%eth0:7711",
        ("FORGET", "abc"): "Invalid node identifier",
        ("FORGET", "a" * 40): f"Unknown node {'a' * 40}",
        ("RESET", "MEDIUM"): "syntax error",
        ("NOSUCH",): "Wrong CLUSTER subcommand or number of arguments",
    }
    for args, message in cases.items():
        with pytest.raises(redis.ResponseError, match=message):
            client.execute_command("CLUSTER", *args)
    my_id = client.execute_command("CLUSTER", "MYID").decode()
    with pytest.raises(redis.ResponseError, match="can't forget myself"):
        client.execute_command("CLUSTER", "FORGET", my_id)
    assert client.ping()  # the connection survived every error
    assert view(cluster[0]) == {cluster[0].port: "myself"}


def test_forget_drops_the_node_and_reset_drops_all(
    tmp_path: Path, cluster: list[NodeProcess]
) -> None:
    form(tmp_path, cluster, 3)
    victim = cluster[2].client().execute_command("CLUSTER", "MYID").decode()
    assert cluster[0].client().execute_command("CLUSTER", "FORGET", victim) == b"OK"
    time.sleep(2 * NODE_TIMEOUT_MS / 1000)  # gossip from the others must not bring it back
    assert set(view(cluster[0])) == {cluster[0].port, cluster[1].port}
    assert cluster[1].client().execute_command("CLUSTER", "RESET", "SOFT") == b"OK"
    assert view(cluster[1]) == {cluster[1].port: "myself"}


def test_a_bus_port_in_use_is_tried_again_until_free(
    tmp_path: Path, cluster: list[NodeProcess]
) -> None:
    port = free_cluster_port()
    squatter = socket.socket()
    squatter.bind(("127.0.0.1", port + 10000))
    squatter.listen()
    try:
        cluster.append(start(tmp_path, 0, port))
        with pytest.raises(redis.ResponseError, match=r"could not listen on 127\.0\.0\.1:"):
            cluster[0].client().execute_command("CLUSTER", "MEET", "127.0.0.1", "1")
    finally:
        squatter.close()
    cluster.append(start(tmp_path, 1))
    meet = ("CLUSTER", "MEET", "127.0.0.1", cluster[1].port)
    wait_for(lambda: _meets(cluster[0], meet), "the bus listening once the port is free")
    wait_for(lambda: all_healthy(cluster), "2 nodes know each other")


def _meets(node: NodeProcess, meet: tuple[str | int, ...]) -> bool:
    try:
        return node.client().execute_command(*meet) == b"OK"
    except redis.ResponseError:
        return False


@pytest.mark.parametrize("address", ["127.0.0.1:7²", "127.0.0.1:99999999999999999999"])
def test_a_corrupt_nodes_conf_is_not_loaded_and_said_so(tmp_path: Path, address: str) -> None:
    directory = tmp_path / "node0"
    directory.mkdir()
    (directory / "nodes.conf").write_text(
        f"{'1' * 40} :7711 myself 0 0 connected\n{'2' * 40} {address} noflags 0 0 connected\n"
    )
    node = start(tmp_path, 0)
    try:
        assert node.client().ping()
        assert view(node) == {node.port: "myself"}
        assert "not loaded: line 2: bad address" in node.log_path.read_text()
    finally:
        node.stop()


def test_a_nodes_conf_with_bytes_not_utf8_keeps_the_id_and_is_not_loaded(tmp_path: Path) -> None:
    # A damaged byte in another node's line: the node starts under the ID of its `myself`
    # line and says the rest was not loaded, as for any other damage (not a traceback).
    directory = tmp_path / "node0"
    directory.mkdir()
    (directory / "nodes.conf").write_bytes(
        b"1" * 40 + b" :7711 myself 0 0 connected\n" + b"2" * 40 + b" 127.0.0.1:77\xff1 noflags\n"
    )
    node = start(tmp_path, 0)
    try:
        assert node.client().execute_command("CLUSTER", "MYID") == b"1" * 40
        assert view(node) == {node.port: "myself"}
        assert "not loaded: 'utf-8' codec can't decode" in node.log_path.read_text()
    finally:
        node.stop()
