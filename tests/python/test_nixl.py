# SPDX-License-Identifier: MIT
"""gpushm.nixl without NIXL: the UCX_PROTO_INFO tables it reads (lines as UCX 1.23 wrote
them on the H200 and on a CPU host), which lanes it refuses, the descriptors it builds
from Buffer.export() and what it refuses to register.  NIXL moving the memory:
tests/nixl/nixl-check.py (tests/gpu/test-nixl.sh on the GPU, .ci/run on host memory)."""
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
                               "ranges": [[b.id, 0], [b.id, 4096]]}}
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
agent.route = "auto"
mine = gpushm.connect().create({name + "-nobody"!r}, 4096, backend="host", lifetime="session")
descs = gnixl._descriptors([mine])
shared, private = {gnixl.describe([shared])!r}, {gnixl.describe([private])!r}

def route(op, remote):
    return agent._open_route(op, remote, mine, descs, "DRAM")

got = route("READ", shared)
assert got is not None and got[0][0].readonly and got[0][0].id == shared["gpushm"]["ranges"][0][0]
got[0][0].close()
assert route("WRITE", shared) is None, "a 0644 buffer opened for writing"
assert route("READ", private) is None and route("WRITE", private) is None, "a 0600 buffer opened"
elsewhere = dict(shared, gpushm=dict(shared["gpushm"], instance=shared["gpushm"]["instance"] ^ 1))
assert route("READ", elsewhere) is None, "another daemon's id opened here"
agent.route = "nixl"
assert route("READ", shared) is None, "route='nixl' took the gpushm route"
agent.route = "auto"
for bad in ([[1]], [["1", 0]], [[1, -1]], [[1, 0], [1, 0]], "1"):
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


def test_agent_without_nixl(monkeypatch):
    monkeypatch.setattr(gnixl.importlib, "import_module",
                        lambda n: (_ for _ in ()).throw(ImportError(f"No module named {n!r}")))
    with pytest.raises(gpushm.Unsupported, match="pip install nixl-cu13"):
        gnixl.Agent("a")
