# SPDX-License-Identifier: MIT
"""One NIXL agent in a process of its own, driven by JSON lines on stdin (one reply line
each on stdout): what tests/nixl/nixl-check.py and tests/bench/bench-nixl.py run two or
more of, as engines on two nodes would be.  Every reply is {"ok": ...} or
{"error": class, "message": text}.

Memory is gpushm buffers by name ("create", "open"), weight-set generations ("publish",
"open_weights"), or, for the baseline, PyTorch's own cudaMalloc memory ("torch").  Data
is written and checked by a seeded pattern ("fill", "check"), on the GPU for device
memory (PyTorch), with NumPy for host memory.
"""
import base64
import ctypes
import json
import os
import sys
import time
import traceback

import gpushm
import gpushm.nixl as gnixl

conn = gpushm.connect(None, f"nixl-worker-{os.getpid()}")
agent = None
buffers = {}   # name -> gpushm.Buffer, or ("torch", tensor)
sets = {}      # name -> gpushm.WeightSet
regs = {}      # name -> Registration
_torch = None


def torch():
    global _torch
    if _torch is None:
        import torch as t
        _torch = t
    return _torch


def array(name):
    """A writable array of the whole buffer: a CUDA uint8 tensor or a NumPy array."""
    b = buffers[name]
    if isinstance(b, tuple):
        return b[1]
    if b.is_device:
        return torch().from_dlpack(b.view("uint8"))
    import numpy
    return numpy.asarray(b.view("uint8"))


def pattern(n, seed, on_gpu):
    """n bytes of (index * 131 + seed) mod 251: a shifted copy or a wrong seed differs."""
    if on_gpu:
        t = torch()
        i = t.arange(n, dtype=t.int64, device="cuda")
        return ((i * 131 + seed) % 251).to(t.uint8)
    import numpy
    i = numpy.arange(n, dtype=numpy.int64)
    return ((i * 131 + seed) % 251).astype(numpy.uint8)


def is_gpu(name):
    b = buffers[name]
    return isinstance(b, tuple) or b.is_device


def exportable(b):
    """What UCX's cuda_ipc asks the driver of memory it registers
    (uct_cuda_ipc_mem_add_reg): the handle types the allocation allows, and whether a
    POSIX fd of it can be exported here, as UCX's pidfd_getfd path would."""
    cu = ctypes.CDLL("libcuda.so.1")
    ctx, dev = ctypes.c_void_p(), ctypes.c_int()
    assert cu.cuDeviceGet(ctypes.byref(dev), b.device) == 0
    assert cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) == 0
    assert cu.cuCtxSetCurrent(ctx) == 0
    ptr = ctypes.c_uint64(b.ptr)
    allowed, legacy = ctypes.c_uint64(0), ctypes.c_uint64(0)
    r_allowed = cu.cuPointerGetAttribute(ctypes.byref(allowed), 14, ptr)  # ALLOWED_HANDLE_TYPES
    r_legacy = cu.cuPointerGetAttribute(ctypes.byref(legacy), 10, ptr)   # IS_LEGACY_..._CAPABLE
    handle, fd = ctypes.c_uint64(0), ctypes.c_int(-1)
    r_retain = cu.cuMemRetainAllocationHandle(ctypes.byref(handle), ctypes.c_void_p(b.ptr))
    r_export = None
    if r_retain == 0:
        r_export = cu.cuMemExportToShareableHandle(ctypes.byref(fd), handle, 1,  # POSIX fd
                                                   ctypes.c_ulonglong(0))
        cu.cuMemRelease(handle)
        if fd.value >= 0:
            os.close(fd.value)
    return {"allowed_rc": r_allowed, "allowed": allowed.value, "legacy_rc": r_legacy,
            "legacy": legacy.value, "retain_rc": r_retain, "export_rc": r_export}


def do(cmd):
    global agent
    op = cmd["op"]
    if op == "agent":
        agent = gnixl.Agent(cmd["name"], route=cmd.get("route", "auto"))
        return {"seconds": agent.start_seconds, "pid": os.getpid()}
    if op == "create":
        b = conn.create(cmd["name"], cmd["size"], backend=cmd.get("backend", "default"),
                        lifetime=cmd.get("lifetime", "session"), mode=cmd.get("mode", 0o600))
        buffers[cmd["name"]] = b
        return {"backend": b.backend, "device": b.device}
    if op == "open":
        t0 = time.perf_counter()
        b = conn.open(cmd["name"], readonly=cmd.get("readonly", False))
        buffers[cmd["name"]] = b
        return {"backend": b.backend, "seconds": time.perf_counter() - t0}
    if op == "exportable":
        return exportable(buffers[cmd["name"]])
    if op == "torch":
        t = torch()
        buffers[cmd["name"]] = ("torch", t.empty(cmd["size"], dtype=t.uint8, device="cuda"))
        return {}
    if op == "fill":
        a = array(cmd["name"])
        a[:] = pattern(a.shape[0], cmd["seed"], is_gpu(cmd["name"]))
        if is_gpu(cmd["name"]):
            torch().cuda.synchronize()
        return {}
    if op == "check":
        a = array(cmd["name"])
        want = pattern(a.shape[0], cmd["seed"], is_gpu(cmd["name"]))
        if is_gpu(cmd["name"]):
            bad = int((a != want).sum().item())
        else:
            bad = int((a != want).sum())
        return {"bad": bad}
    if op == "register":
        t0 = time.perf_counter()
        items = [buffers[n] for n in cmd["names"]]
        if cmd.get("raw"):
            # straight to NIXL, past gpushm.nixl's refusals: what UCX itself does with it
            mem = "VRAM" if items[0].is_device else "DRAM"
            handle = agent.nixl.register_memory(
                [(b.ptr, b.size, max(b.device, 0), "") for b in items], mem)
            regs[cmd["as"]] = ("raw", handle)
            return {"seconds": time.perf_counter() - t0, "descs": len(items)}
        if any(isinstance(b, tuple) for b in items):
            handle = agent.nixl.register_memory([b[1] for b in items])
            regs[cmd["as"]] = ("torch", handle)
            return {"seconds": time.perf_counter() - t0, "descs": len(items)}
        r = agent.register(*items)
        regs[cmd["as"]] = r
        return {"seconds": r.seconds, "descs": len(r.descriptors)}
    if op == "deregister":
        r = regs.pop(cmd["as"])
        if isinstance(r, tuple):
            agent.nixl.deregister_memory(r[1])
        else:
            agent.deregister(r)
        return {}
    if op == "metadata":
        return {"md": base64.b64encode(agent.metadata()).decode()}
    if op == "add_peer":
        t0 = time.perf_counter()
        name = agent.add_peer(base64.b64decode(cmd["md"]))
        return {"peer": name, "seconds": time.perf_counter() - t0}
    if op == "remove_peer":
        agent.remove_peer(cmd["peer"])
        return {}
    if op == "describe":
        items = [buffers[n] for n in cmd["names"]]
        if cmd.get("raw"):
            return {"desc": {"mem_type": "VRAM" if items[0].is_device else "DRAM",
                             "descs": [[b.ptr, b.size, max(b.device, 0)] for b in items]}}
        if any(isinstance(b, tuple) for b in items):
            return {"desc": {"mem_type": "VRAM",
                             "descs": [[b[1].data_ptr(), b[1].numel(), b[1].device.index]
                                       for b in items]}}
        return {"desc": gnixl.describe(items)}
    if op == "publish":
        # a weight set of count tensors of size bytes each, in one buffer of this
        # connection's, laid out back to back and filled with the pattern of seed
        count, size = cmd["count"], cmd["tensor_bytes"]
        b = conn.create(cmd["name"] + ".0", count * size, backend=cmd.get("backend", "default"))
        buffers[b.name] = b
        a = array(b.name)
        a[:] = pattern(a.shape[0], cmd["seed"], b.is_device)
        if b.is_device:
            torch().cuda.synchronize()
        t0 = time.perf_counter()
        views = {f"layer.{i}.w": b.view("uint8", size, offset=i * size) for i in range(count)}
        ws = conn.publish_weights_from(cmd["name"], views)
        for v in views.values():
            v.close()
        sets[cmd["name"]] = ws
        return {"generation": ws.generation, "seconds": time.perf_counter() - t0}
    if op == "open_weights":
        ws = conn.open_weights(cmd["name"])
        sets[cmd["name"]] = ws
        return {"tensors": len(ws), "buffers": [(b.name, b.size) for b in ws.buffers()]}
    if op == "register_weights":
        r = agent.register_weights(sets[cmd["name"]])
        regs[cmd["as"]] = r
        return {"seconds": r.seconds, "descs": len(r.descriptors)}
    if op == "describe_weights":
        return {"desc": gnixl.describe_weights(sets[cmd["name"]])}
    if op == "transfer":
        local = [buffers[n] for n in cmd["local"]]
        times, setups, walls, lanes = [], [], [], []
        for _ in range(cmd.get("repeat", 1)):
            t0 = time.perf_counter()
            try:
                if cmd.get("raw") or any(isinstance(b, tuple) for b in local):
                    x = transfer_raw(cmd, local)
                else:
                    x = agent.transfer(cmd["kind"], local, cmd["remote"], cmd["peer"],
                                       notify=cmd.get("notify", "").encode())
            except gnixl.TransportError as e:
                if not cmd.get("report_refusal") or e.transfer is None:
                    raise
                # the data moved, over a path gpushm.nixl refuses: say which, and how fast
                x = e.transfer
                refused = str(e)
            else:
                refused = None
            walls.append(time.perf_counter() - t0)
            times.append(x.seconds)
            setups.append(x.setup_seconds)
            lanes = [f"{lane.config} ({lane.description}, {lane.scope})" for lane in x.lanes]
        return {"seconds": times, "setup_seconds": setups, "wall_seconds": walls,
                "bytes": x.bytes, "lanes": lanes,
                "transports": list(x.transports), "refused": refused, "route": x.route,
                "path": x.path}
    if op == "notifs":
        deadline = time.time() + cmd.get("timeout", 10)
        got = []
        while time.time() < deadline:
            for msgs in agent.nixl.get_new_notifs().values():
                got += [m.decode() for m in msgs]
            if cmd["want"] in got:
                break
            time.sleep(0.001)
        return {"notifs": got}
    if op == "close":
        b = buffers.pop(cmd["name"])
        if not isinstance(b, tuple):
            b.close()
        return {}
    if op == "exit":
        if agent is not None:
            agent.close()
        return {}
    raise ValueError(f"unknown op {op!r}")


def transfer_raw(cmd, local):
    """The same transfer straight through NIXL, for PyTorch's memory (the baseline) and
    gpushm buffers past gpushm.nixl's refusals, the lanes read all the same (the baseline
    must take the path it is compared with)."""
    n = agent.nixl
    if isinstance(local[0], tuple):
        descs = [(t.data_ptr(), t.numel(), t.device.index) for _, t in local]
        mem = "VRAM"
    else:
        descs = [(b.ptr, b.size, max(b.device, 0)) for b in local]
        mem = "VRAM" if local[0].is_device else "DRAM"
    remote = n.get_xfer_descs([tuple(d) for d in cmd["remote"]["descs"]],
                              cmd["remote"]["mem_type"])
    h = n.initialize_xfer(cmd["kind"], n.get_xfer_descs(descs, mem), remote, cmd["peer"],
                          cmd.get("notify", "").encode())
    t0 = time.perf_counter()
    state = n.transfer(h)
    while state == "PROC":
        state = n.check_xfer_state(h)
    seconds = time.perf_counter() - t0
    n.release_xfer_handle(h)
    if state != "DONE":
        raise RuntimeError(f"NIXL state {state}")
    size = sum(d[1] for d in descs)
    try:
        lanes = agent.lanes_for(cmd["kind"], mem, cmd["remote"]["mem_type"],
                                max(d[1] for d in descs))
    except gnixl.TransportError as e:
        e.transfer = gnixl.Transfer(cmd["kind"], size, seconds, e.lanes)
        raise
    return gnixl.Transfer(cmd["kind"], size, seconds, tuple(lanes))


def main():
    # NIXL and UCX print to stdout: replies go to a descriptor of their own, the rest
    # to stderr
    replies = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    for line in sys.stdin:
        cmd = json.loads(line)
        try:
            reply = {"ok": do(cmd)}
        except Exception as e:  # noqa: BLE001 - the driver judges every failure
            reply = {"error": type(e).__name__, "message": str(e),
                     "trace": traceback.format_exc(limit=4)}
        replies.write(json.dumps(reply) + "\n")
        replies.flush()
        if cmd.get("op") == "exit":
            break


if __name__ == "__main__":
    main()
