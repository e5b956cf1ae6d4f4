# SPDX-License-Identifier: MIT
"""gpushm.nixl without NIXL: the UCX_PROTO_INFO tables it reads (lines as UCX 1.23 wrote
them on the H200 and on a CPU host), which lanes it refuses, the descriptors it builds
from Buffer.export() and what it refuses to register.  NIXL moving the memory:
tests/nixl/nixl-check.py (tests/gpu/test-nixl.sh on the GPU, .ci/run on host memory)."""
import contextlib
import ctypes
import time
import types

import pytest

import gpushm
import gpushm.nixl as gnixl
from conftest import FAKE_CUDA, FAKE_CUDA_EXPECTED, other_user_env, require_built, run_python

LOG = """\
[1795961048.72] [vm:15893:0]   +--------+-------------+-----------------------------------+
[1795961048.72] [vm:15893:0]   | peer self cfg#0                                          |
[1795961048.72] [vm:15893:0]   | remote memory write by ucp_put* from host memory to host |
[1795961048.72] [vm:15893:0]   +--------+-------------+-----------------------------------+
[1795961048.72] [vm:15893:0]   | Range  | Description |              Config               |
[1795961048.72] [vm:15893:0]   +--------+-------------+-----------------------------------+
[1795961048.72] [vm:15893:0]   | 0..inf | zero-copy   | cma/memory                        |
[1795961048.72] [vm:15893:0]   +--------+-------------+-----------------------------------+
[1795961048.95] [vm:15893:0]   | B intra-node cfg#1                                               |
[1795961048.95] [vm:15893:0]   | remote memory read by ucp_get*(multi) into host memory from host |
[1795961048.95] [vm:15893:0]   +--------+-------------+-------------------------------------------+
[1795961048.95] [vm:15893:0]   | Range  | Description |                  Config                   |
[1795961048.95] [vm:15893:0]   | 0..inf | zero-copy   | cma/memory                                |
[1795961048.96] [vm:15893:0]   | B intra-node cfg#2                                             |
[1795961048.96] [vm:15893:0]   | remote memory read by ucp_get*(multi) into cuda/GPU0 from cuda |
[1795961048.96] [vm:15893:0]   | Range  |    Description     |              Config              |
[1795961048.96] [vm:15893:0]   | 0..inf | software emulation | tcp/lo                           |
[1795961048.97] [vm:15893:0]   | B intra-node cfg#2                                              |
[1795961048.97] [vm:15893:0]   | remote memory write by ucp_put* from host memory to cuda/dev[1] |
[1795961048.97] [vm:15893:0]   |   Range    |    Description     |    Config     |
[1795961048.97] [vm:15893:0]   |   0..8K    | short              | cuda_ipc/cuda |
|   8K..inf  | zero-copy          | 50% on rc_mlx5/mlx5_0:1 and 50% on rc_mlx5/mlx5_1:1 |
[1795961048.98] [vm:15893:0]   | B intra-node cfg#2                                    |
[1795961048.98] [vm:15893:0]   | active message by ucp_am_send* from host memory       |
[1795961048.98] [vm:15893:0]   |          0 | short              | tcp/lo        |
"""


def test_parse_proto_info():
    lanes = gnixl.parse_proto_info(LOG)
    assert [(l.op, l.local, l.remote, l.scope, l.low, l.high, l.config) for l in lanes] == [
        ("WRITE", "host", "host", "self", 0, None, "cma/memory"),
        ("READ", "host", "host", "intra-node", 0, None, "cma/memory"),
        ("READ", "cuda", "cuda", "intra-node", 0, None, "tcp/lo"),
        ("WRITE", "host", "cuda", "intra-node", 0, 8 << 10, "cuda_ipc/cuda"),
        ("WRITE", "host", "cuda", "intra-node", 8 << 10, None,
         "50% on rc_mlx5/mlx5_0:1 and 50% on rc_mlx5/mlx5_1:1"),
    ]  # the active-message table is not a transfer's
    assert lanes[4].transports == ("rc_mlx5",)
    assert lanes[3].covers(8192) and not lanes[3].covers(8193)


def test_judge():
    lanes = gnixl.parse_proto_info(LOG)
    assert gnixl.judge(lanes[1]) is None                      # cma between host memory
    assert "tcp: TCP sockets" in gnixl.judge(lanes[2])        # device memory over TCP
    assert gnixl.judge(lanes[3]) is None and gnixl.judge(lanes[4]) is None
    shm_for_device = gnixl.Lane("READ", "cuda", "cuda", "intra-node", 0, None, "copy",
                                "cma/memory")
    assert "host shared-memory copy" in gnixl.judge(shm_for_device)
    unknown = gnixl.Lane("READ", "host", "host", "intra-node", 0, None, "x", "ugni/foo")
    assert "neither a CUDA nor an RDMA" in gnixl.judge(unknown)


def test_host_descriptor_from_export(conn, name):
    b = conn.create(name, 10000, backend="host")
    e = b.export("host-pointer", 4096, 100)
    assert e.type == "host-pointer" and e.fd == -1 and e.length == 100
    assert e.address == b.ptr + 4096 and e.allocation_size >= 10000 and not e.readonly
    d = gnixl.descriptor(b)
    assert (d.address, d.length, d.device, d.mem_type) == (b.ptr, 10000, 0, "DRAM")
    desc = gnixl.describe([b, (b, 4096, 100)])
    assert desc == {"mem_type": "DRAM", "descs": [[b.ptr, 10000, 0], [b.ptr + 4096, 100, 0]],
                    "names": [name, name],
                    "gpushm": {"instance": conn.instance_id,
                               "ranges": [[b.id, 0, b.ptr, 10000],
                                          [b.id, 4096, b.ptr + 4096, 100]]}}
    with pytest.raises(gpushm.InvalidArgument, match="export type"):
        b.export("pointer")
    with pytest.raises(gpushm.Unsupported, match="host memory"):
        b.export("cuda-va")
    with pytest.raises(gpushm.InvalidArgument, match="outside"):
        gnixl.descriptor(b, 9000, 2000)
    b.close()


def test_read_only_open_refused(conn, name):
    b = conn.create(name, 4096, backend="host", mode=0o644)
    r = conn.open(name, readonly=True)
    with pytest.raises(gpushm.PermissionDenied, match="NIXL has no read-only registration"):
        gnixl.descriptor(r)
    # a weight set's buffers are served read-only on purpose
    assert gnixl.descriptor(r, serve_read_only=True).length == 4096
    r.close()
    b.close()


def test_device_buffers(conn, name):
    require_built(FAKE_CUDA or "", "the fake CUDA driver", FAKE_CUDA_EXPECTED)
    b = conn.create(name, 1 << 20, backend="cuda-fd")
    d = gnixl.descriptor(b)
    assert (d.address, d.length, d.device, d.mem_type) == (b.ptr, 1 << 20, 0, "VRAM")
    ipc = conn.create(name + ".ipc", 1 << 20, backend="cuda-ipc")
    with pytest.raises(gpushm.Unsupported, match="legacy CUDA IPC"):
        gnixl.descriptor(ipc)
    with pytest.raises(gpushm.InvalidArgument, match="one memory type"):
        gnixl.describe([b, conn.create(name + ".h", 4096, backend="host")])
    ipc.close()
    b.close()


def test_route_opens_only_what_this_uid_may(conn, name):
    """The "gpushm" route opens a peer's buffers through the initiator's own connection:
    what a peer describes is a request, gpushmd's permissions decide.  As uid 65534,
    given root's buffers' descriptions: a 0644 buffer opens read-only for a READ and not
    at all for a WRITE, a 0600 one never; another daemon's, a route turned off, or
    malformed ranges leave the route alone (None) or are refused."""
    env = other_user_env(65534)
    shared = conn.create(name, 4096, backend="host", mode=0o644)
    private = conn.create(name + "-private", 4096, backend="host")
    try:
        run_python(f"""
import gpushm, gpushm.nixl as gnixl
agent = gnixl.Agent.__new__(gnixl.Agent)   # the route needs no NIXL: nothing moved here
agent._init_route("auto", gnixl.ROUTE_OPENS_MAX)   # opted in (the default is "nixl")
mine = gpushm.connect().create({name + "-nobody"!r}, 4096, backend="host", lifetime="session")
descs = gnixl._descriptors([mine])
shared, private = {gnixl.describe([shared])!r}, {gnixl.describe([private])!r}

def route(op, remote):
    return agent._open_route(op, remote, mine, descs, "DRAM",
                             [tuple(d) for d in remote["descs"]], "peer")

got = route("READ", shared)
assert got is not None and got[0][0].readonly and got[0][0].id == shared["gpushm"]["ranges"][0][0]
# the read-only open the READ keeps is not one a WRITE may use
assert route("WRITE", shared) is None, "a 0644 buffer opened for writing"
assert not got[0][0].closed and len(agent._route_opens) == 1
assert route("READ", private) is None and route("WRITE", private) is None, "a 0600 buffer opened"
elsewhere = dict(shared, gpushm=dict(shared["gpushm"], instance=shared["gpushm"]["instance"] ^ 1))
assert route("READ", elsewhere) is None, "another daemon's id opened here"
agent.route = "nixl"
assert route("READ", shared) is None, "route='nixl' took the gpushm route"
agent.route = "auto"
r = shared["gpushm"]["ranges"][0]
for bad in ([[1]], [r[:2]], [["1"] + r[1:]], [[True] + r[1:]], [r[:1] + [-1] + r[2:]],
            [r, r], "1"):
    try:
        route("READ", dict(shared, gpushm=dict(shared["gpushm"], ranges=bad)))
        raise SystemExit(f"ranges {{bad!r}} taken")
    except gpushm.InvalidArgument:
        pass
print("ok")
""", user=65534, env=env)
    finally:
        private.close()
        shared.close()
        conn.unlink(name + "-private")


class _StubNixl:
    """What transfer() asks of NIXL on the gpushm route: the peer's notification."""

    def __init__(self):
        self.notified = []

    def send_notif(self, peer, msg):
        self.notified.append((peer, msg))

    def remove_remote_agent(self, peer):
        self.notified.append((peer, "removed"))

    def __getattr__(self, name):
        raise AssertionError(f"the gpushm route called NIXL's {name}")


def _stub_agent(route, opens_max=gnixl.ROUTE_OPENS_MAX):
    agent = gnixl.Agent.__new__(gnixl.Agent)
    agent._init_route(route, opens_max)
    agent.nixl, agent.name, agent._registrations = _StubNixl(), "me", []
    return agent


def test_gpushm_route_copies_the_described_range(conn, name):
    """transfer() on the gpushm route, host memory, no NIXL: a READ and a WRITE of a
    block a caller narrowed a description to (as examples/nixl/kv_pool.py does) move
    exactly that block, each way, and notify the peer; what falls outside the
    description, or mixes memory types, or has the route off, is not taken."""
    pool = conn.create(name, 1 << 16, backend="host")
    mine = conn.create(name + "-mine", 4096, backend="host", lifetime="session")
    ctypes_pool = (ctypes.c_uint8 * pool.size).from_address(pool.ptr)
    ctypes_mine = (ctypes.c_uint8 * mine.size).from_address(mine.ptr)
    for i in range(pool.size):
        ctypes_pool[i] = (i * 7 + 3) % 251
    whole = gnixl.describe([pool])
    block = dict(whole, descs=[[whole["descs"][0][0] + 3 * 4096, 4096, 0]])
    agent = _stub_agent("auto")
    x = agent.transfer("READ", [mine], block, "peer", notify=b"read")
    assert (x.route, x.path, x.bytes) == ("gpushm", "memmove (host memory)", 4096)
    assert bytes(ctypes_mine) == bytes(ctypes_pool[3 * 4096:4 * 4096])
    for i in range(4096):
        ctypes_mine[i] = 0xAB
    before = bytes(ctypes_pool)
    x = agent.transfer("WRITE", [mine], block, "peer", notify=b"written")
    after = bytes(ctypes_pool)
    assert after[3 * 4096:4 * 4096] == b"\xab" * 4096
    assert after[:3 * 4096] == before[:3 * 4096] and after[4 * 4096:] == before[4 * 4096:]
    assert agent.nixl.notified == [("peer", b"read"), ("peer", b"written")]
    # past the described range: not the gpushm route (NIXL's, here the stub's refusal)
    outside = dict(whole, descs=[[whole["descs"][0][0] + pool.size - 100, 4096, 0]])
    with pytest.raises(AssertionError, match="called NIXL"):
        agent.transfer("READ", [mine], outside, "peer")
    with pytest.raises(AssertionError, match="called NIXL"):
        _stub_agent("nixl").transfer("READ", [mine], block, "peer")
    mine.close()
    pool.close()


def test_gpushm_route_keeps_its_opens_within_the_limit(conn, name):
    """The gpushm route pays an open once per peer buffer: a second READ of the same
    buffer reuses the first's read-only open, a WRITE takes its own read-write one;
    past route_opens_max the least recently used is closed (the peer's memory let go),
    0 keeps none; remove_peer() and close() close what is kept."""
    pools = [conn.create(f"{name}-{i}", 4096, backend="host") for i in range(3)]
    mine = conn.create(name + "-mine", 4096, backend="host", lifetime="session")
    descs = [gnixl.describe([p]) for p in pools]
    ids = [p.id for p in pools]
    agent = _stub_agent("auto", opens_max=2)
    opens = []
    real_open = type(conn).open

    def counting_open(self, what, **kw):
        opens.append((what, kw.get("readonly")))
        return real_open(self, what, **kw)

    type(conn).open = counting_open
    try:
        agent.transfer("READ", [mine], descs[0], "p")
        agent.transfer("READ", [mine], descs[0], "p")
        assert opens == [(ids[0], True)], opens
        kept = agent._route_opens[("p", ids[0], True)]
        agent.transfer("WRITE", [mine], descs[0], "p")
        assert opens[1:] == [(ids[0], False)] and len(agent._route_opens) == 2
        agent.transfer("READ", [mine], descs[1], "p")     # a third: the oldest goes
        assert kept.closed and len(agent._route_opens) == 2
        assert ("p", ids[0], True) not in agent._route_opens
        agent.transfer("READ", [mine], descs[0], "p")     # opened again when needed
        assert opens[-1] == (ids[0], True) and len(opens) == 4
        # a peer removed: its opens closed, another peer's kept
        agent.transfer("READ", [mine], descs[2], "q")
        held = dict(agent._route_opens)
        agent.remove_peer("p")
        assert [k[0] for k in agent._route_opens] == ["q"]
        assert all(b.closed for k, b in held.items() if k[0] == "p")
        agent.close()
        assert not agent._route_opens and held[("q", ids[2], True)].closed
        none_kept = _stub_agent("auto", opens_max=0)
        x = none_kept.transfer("READ", [mine], descs[1], "p")
        assert x.route == "gpushm" and not none_kept._route_opens
    finally:
        type(conn).open = real_open
    with pytest.raises(gpushm.InvalidArgument, match="route_opens_max"):
        _stub_agent("auto", opens_max=-1)
    # a kept open holds the peer's memory: unlinked and closed by its creator, the
    # buffer is still there for the agent that kept it, and gone after remove_peer
    peer = _stub_agent("auto")
    peer.transfer("READ", [mine], descs[0], "p")
    conn.unlink(f"{name}-0")
    pools[0].close()
    assert any(b.id == ids[0] for b in conn.list(all=True)), "a kept open let go"
    peer.remove_peer("p")
    assert not any(b.id == ids[0] for b in conn.list(all=True)), "kept after remove_peer"
    for p in pools[1:]:
        p.close()
    mine.close()


def test_gpushm_route_never_mixes_memory_types(conn, name):
    require_built(FAKE_CUDA or "", "the fake CUDA driver", FAKE_CUDA_EXPECTED)
    dev = conn.create(name, 1 << 20, backend="cuda-fd")
    host = conn.create(name + "-host", 1 << 20, backend="host", lifetime="session")
    agent = _stub_agent("auto")
    with pytest.raises(AssertionError, match="called NIXL"):
        agent.transfer("READ", [host], gnixl.describe([dev]), "peer")
    assert agent._open_route("READ", gnixl.describe([host]), dev, gnixl._descriptors([dev]),
                             "DRAM", [tuple(gnixl.describe([host])["descs"][0])],
                             "peer") is None
    host.close()
    dev.close()


class _StuckEvent:
    def record(self):
        pass

    def query(self):
        return False


def _stuck_torch():
    """PyTorch as the gpushm route uses it, with copies that never finish."""
    fw = types.ModuleType("torch")
    fw.cuda = types.SimpleNamespace(device=lambda index: contextlib.nullcontext(),
                                    Event=_StuckEvent)
    fw.from_dlpack = lambda view: types.SimpleNamespace(copy_=lambda other: None)
    return fw


def test_gpushm_route_copy_times_out(conn, name, monkeypatch):
    """A device copy on the gpushm route is waited for up to transfer()'s timeout, then
    an Error says so (a stuck copy does not hang the caller); what the copy may still
    use stays open, past route_opens_max, until close()."""
    require_built(FAKE_CUDA or "", "the fake CUDA driver", FAKE_CUDA_EXPECTED)
    pool = conn.create(name, 1 << 20, backend="cuda-fd")
    mine = conn.create(name + "-mine", 1 << 20, backend="cuda-fd", lifetime="session")
    monkeypatch.setattr(gnixl, "_device_copier", _stuck_torch)
    agent = _stub_agent("auto", opens_max=0)
    t0 = time.monotonic()
    with pytest.raises(gpushm.Error, match=r"READ of 1048576 bytes \(gpushm route\) not done "
                                           r"after 0.2 s"):
        agent.transfer("READ", [mine], gnixl.describe([pool]), "peer", timeout=0.2)
    assert 0.2 <= time.monotonic() - t0 < 5
    kept = list(agent._route_opens.values())
    assert len(kept) == 1 and not kept[0].closed, "a buffer a copy may still use was closed"
    agent.close()
    assert kept[0].closed
    mine.close()
    pool.close()


def test_agent_without_nixl(monkeypatch):
    monkeypatch.setattr(gnixl.importlib, "import_module",
                        lambda n: (_ for _ in ()).throw(ImportError(f"No module named {n!r}")))
    with pytest.raises(gpushm.Unsupported, match="pip install nixl-cu13"):
        gnixl.Agent("a")
