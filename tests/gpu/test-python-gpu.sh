#!/bin/sh
# SPDX-License-Identifier: MIT
# The Python package on a real GPU, with PyTorch and CuPy (the CI half, on the fake
# driver, is tests/python/test-python.sh):
#  - it installs with pip into a fresh virtualenv, offline (pip install --no-index);
#  - C producer -> PyTorch and CuPy consumers (DLPack and the CUDA array interface),
#    PyTorch producer -> C consumer, bundles, the data checked on the GPU;
#  - a tensor keeps its buffer after the Python handle is closed, and the daemon's
#    references drop to 0 once the tensor goes;
#  - acquire/release orders a consumer's stream after a producer's in another process,
#    and a control run without acquire shows the check can fail;
#  - a weight set: a CUDA state dict published (copied in, and written in place in
#    gpushm tensors), loaded by an engine in another process with one device copy (load_state_dict) and with none (assign=True: the parameters
#    are the set's memory, the model's outputs the same), generation 1 whole for its
#    holder after 2 is published, the engine following 2 without a copy, and engines
#    copying 2 (in several buffers) into parameters of their own with copy_into();
#  - hand-off latency of fresh 1 MiB tensors through gpushm from Python, printed beside
#    torch.multiprocessing's in the same run.
# Exit 77 only without a GPU.  The Python used is the first of $GPUSHM_TEST_PYTHON,
# python3, /usr/bin/python3 that imports torch and cupy with CUDA; none is a failure.
[ -e /dev/nvidiactl ] || { echo "no NVIDIA GPU here"; exit 77; }
set -eu
b=${GPUSHM_TEST_BUILDDIR:?}
src=$(cd "$(dirname "$0")/../.." && pwd)
fail() { echo "FAIL: $*" >&2; exit 1; }  # stderr: also from inside $(...)

. "$src/tests/gpu/find-python.sh"
find_gpu_python "torch, cupy"
echo "# python: $py, $("$py" -c 'import sys, torch, cupy; print(sys.version.split()[0], "torch", torch.__version__, "cupy", cupy.__version__)')"

dir=$(mktemp -d /tmp/gpushm-pygpu.XXXXXX)
chmod 755 "$dir"
daemon=""
cleanup() {
  [ -z "$daemon" ] || { kill "$daemon" 2>/dev/null; wait "$daemon" 2>/dev/null || true; }
  rm -rf "$dir"
}
trap cleanup EXIT
export GPUSHM_SOCKET="$dir/gpushmd.sock"
export GPUSHM_LIBRARY="$b/client/.libs/libgpushm.so.1"
"${GPUSHMD:-$b/daemon/gpushmd}" --socket "$GPUSHM_SOCKET" --socket-group none --socket-mode 0666 --log-level warn --default-backend cuda-fd &
daemon=$!
i=0
until "$b/ctl/gpushmctl" ping >/dev/null 2>&1; do
  i=$((i + 1)); [ $i -lt 500 ] || fail "gpushmd did not start"; sleep 0.02
done

# --- the package, installed as users install it: offline, into a fresh virtualenv
# (with the system's site packages: torch and cupy are not to be installed again); where
# this Python cannot make one (Debian without python3-venv), into a directory of its own
if "$py" -m venv --system-site-packages "$dir/venv" > "$dir/venv.log" 2>&1; then
  # Where $py is itself a virtualenv's (torch's often is), --system-site-packages reaches
  # only the base interpreter's: its own site directory is named in a .pth file, after
  # the new one's, so that the gpushm installed here is the one imported.
  purelib='import sysconfig; print(sysconfig.get_paths()["purelib"])'
  "$py" -c "$purelib" > "$("$dir/venv/bin/python" -c "$purelib")/zz-parent-site.pth"
  "$dir/venv/bin/python" -m pip install --no-index --no-deps "$src/python" > "$dir/pip.log" 2>&1 ||
    { cat "$dir/pip.log"; fail "pip install --no-index ./python (virtualenv)"; }
  py=$dir/venv/bin/python
  where="a fresh virtualenv"
else
  "$py" -m pip install --no-index --no-deps --target "$dir/site" "$src/python" > "$dir/pip.log" 2>&1 ||
    { cat "$dir/venv.log" "$dir/pip.log"; fail "pip install --no-index ./python"; }
  export PYTHONPATH="$dir/site"
  where="$dir/site (no virtualenv: $(tail -n 1 "$dir/venv.log"))"
fi
INSTALLED="$dir" "$py" -c 'import gpushm, os; assert gpushm.__file__.startswith(os.environ["INSTALLED"]), gpushm.__file__' ||
  fail "the installed gpushm is not the one imported"
echo "# pip install --no-index ./python into $where: ok"
# pip compiled the C speedups where it could (a compiler and Python.h): where it could,
# the installed package must take them, not fall back to ctypes unnoticed
"$py" - <<'EOF' || fail "the installed package's C speedups"
import os, sys, sysconfig, gpushm
on, how = gpushm.speedups()
if os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")) and not on:
    sys.exit(f"Python.h is here, but the installed package takes the ctypes path: {how}")
print(f"# the installed package's C speedups: {'on' if on else 'off'} ({how})")
EOF

ex=$b/examples/python
n=1048576
# --- C producer -> PyTorch consumer (the example), and -> CuPy consumers
"$ex/c-producer" c2py "$n" | grep -q "GPU memory" || fail "c-producer did not write GPU memory"
"$py" "$src/examples/python/torch_consumer.py" c2py "$n" || fail "torch consumer of a C producer"
"$py" - c2py "$n" <<'EOF' || fail "cupy consumers of a C producer"
import sys, cupy, gpushm
name, n = sys.argv[1], int(sys.argv[2])
expected = cupy.arange(n, dtype=cupy.float32) * 0.5
x = cupy.from_dlpack(gpushm.open(name))            # DLPack
assert x.dtype == cupy.float32 and x.shape == (n,) and bool((x == expected).all())
t = gpushm.open(name, readonly=True)
y = cupy.asarray(t)                                  # __cuda_array_interface__
assert y.data.ptr == t.ptr and bool((y == expected).all())
print(f"cupy consumers: {n} floats verified on the GPU (DLPack and CUDA array interface)")
EOF

# --- PyTorch producer (the example) -> C consumer
"$py" "$src/examples/python/torch_producer.py" py2c "$n" || fail "torch producer"
"$ex/c-consumer" py2c || fail "C consumer of a torch producer"
"$b/ctl/gpushmctl" show py2c >/dev/null 2>&1 && fail "c-consumer left py2c linked"

# --- lifetime, bundles, read-only and sync, in one interpreter
"$py" - <<'EOF' || fail "lifetime, bundles, read-only"
import gc, torch, cupy, gpushm

def refs(name):
    gc.collect()
    torch.cuda.synchronize()
    return next((i.refs for i in gpushm.list() if i.name == name), None)

src = torch.randn(1000, 100, device="cuda")
gpushm.share("life", src).close()
assert refs("life") == 0
t = gpushm.open("life")
x = torch.from_dlpack(t)
t.close(); del t
assert refs("life") == 1, "the tensor must keep the buffer after the handle is closed"
assert torch.equal(x, src)                     # still mapped, checked on the GPU
x.mul_(2)
del x
assert refs("life") == 0, "the buffer must be released once the tensor is gone"
t = gpushm.open("life", readonly=True)
c = cupy.asarray(t)                             # CUDA array interface: keeps the Tensor
t.close(); del t
assert refs("life") == 1
assert bool((c == cupy.from_dlpack(src * 2)).all())
del c
assert refs("life") == 0
gpushm.unlink("life")

bundle = {"w": torch.randn(64, 32, device="cuda", dtype=torch.float16),
          "b": torch.arange(10, device="cuda", dtype=torch.int64),
          "h": torch.randn(7, device="cuda", dtype=torch.bfloat16)}
gpushm.share_bundle("bundle", bundle)
got = {k: torch.from_dlpack(v) for k, v in gpushm.open_bundle("bundle").items()}
for k in bundle:
    assert got[k].dtype == bundle[k].dtype and torch.equal(got[k], bundle[k]), k
del got
gpushm.unlink("bundle")
print("lifetime, bundles: ok (daemon references followed the tensors)")

# What PyTorch does with a read-only DLPack 1.0 tensor (printed: a fact about torch)
gpushm.share("ro", torch.ones(4, device="cuda")).close()
try:
    x = torch.from_dlpack(gpushm.open("ro", readonly=True))
    print(f"# torch {torch.__version__} imports read-only DLPack tensors (as writable tensors; "
          f"cuda-fd and host mappings are read-only, legacy cuda-ipc ones are not)")
    del x
except Exception as e:
    print(f"# torch {torch.__version__} refuses read-only DLPack tensors: {type(e).__name__}: {e}")
gpushm.unlink("ro")
EOF

# --- the docs' Python blocks that need PyTorch or a GPU, as printed (issue 42; the
# others run everywhere: tests/python/test_doc_blocks.py)
"$py" - "$src" <<'EOF' || fail "the docs' GPU Python blocks"
import pathlib, re, subprocess, sys
import gpushm
src = pathlib.Path(sys.argv[1])
pages = [src / "README.md"] + sorted((src / "docs").glob("*.md"))
ran = 0
for page in pages:
    text = page.read_text()
    for m in re.finditer(r"^```python (needs-gpu|needs-torch)\n(.*?)^```", text, re.S | re.M):
        line = text.count("\n", 0, m.start()) + 1
        before = {b.name for b in gpushm.list()}
        p = subprocess.run([sys.executable, "-c", m.group(2)], capture_output=True, text=True,
                           timeout=300)
        assert p.returncode == 0, f"{page.name}:{line} failed:\n{p.stdout}{p.stderr}"
        for b in gpushm.list():  # (each block as on a daemon of its own: names reused)
            if b.name not in before:
                gpushm.unlink(b.name)
        ran += 1
assert ran >= 3, ran
print(f"docs' Python blocks that need PyTorch or a GPU: {ran} ran as printed")
EOF

# --- writes to read-only host tensors never take the interpreter down (issue 42): each
# consumer in a process of its own, and the buffer checked unchanged afterwards from this
# one.  Device memory's writes fault the GPU: tests/gpu/gpu-faults.sh, run last.
"$py" - > "$dir/read-only.txt" 2>&1 <<'EOF' || { cat "$dir/read-only.txt"; fail "writes to read-only tensors"; }
import subprocess, sys, numpy, torch, gpushm

def consumer(code):
    p = subprocess.run([sys.executable, "-c", "import numpy, torch, cupy, gpushm\n" + code],
                       capture_output=True, text=True, timeout=120)
    said = (p.stdout + p.stderr).strip().splitlines()
    assert p.returncode == 0, f"exit {p.returncode} (a signal if negative): {said[-3:]}"
    return said[-1] if said else ""

# host memory: PyTorch ignores the read-only flag; its writes land in a private copy
gpushm.share("ro-host", numpy.full(1 << 20, 7, dtype=numpy.int32), mode=0o644).close()
print("# torch, host:", consumer(
    "r = torch.from_dlpack(gpushm.open('ro-host', readonly=True))\n"
    "r.add_(1)\n"
    "assert int(r[0]) == 8 and int(r[-1]) == 8\n"
    "assert int(numpy.asarray(gpushm.open('ro-host', readonly=True))[0]) == 7\n"
    "print('its writes stayed its own')"))
print("# numpy, host:", consumer(
    "a = numpy.asarray(gpushm.open('ro-host', readonly=True))\n"
    "try:\n    a[0] = 1\nexcept ValueError as e:\n    print(f'raised ValueError: {e}')"))
h = numpy.asarray(gpushm.open("ro-host", readonly=True))
assert (h == 7).all(), "a consumer's write to a read-only open reached the buffer"
del h
gpushm.unlink("ro-host")

EOF
cat "$dir/read-only.txt"

# --- acquire/release across processes on torch streams, with a control run; and the
# same ordering through a timeline (mode "timeline": signal_stream/wait_stream)
cat > "$dir/sync.py" <<'EOF'
import sys, time, torch, gpushm
role, name, mode = sys.argv[1], sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else ""
t = gpushm.open(name)
tl = (gpushm.default_connection().open_timeline(name + "-tl", readonly=role != "producer")
      if mode == "timeline" else None)
x = torch.from_dlpack(t)           # imported before the release: no implicit ordering
if role == "producer":
    # Real work ahead of the write, about a second of it: the control's stale read
    # needs the write still queued when the release is published.
    a = torch.randn(8192, 8192, device="cuda")
    c = torch.empty_like(a)
    # Each kernel's first launch loads its module (CUDA's lazy loading), which waits for
    # the device: a first fill_ after the matmuls would drain them before the release.
    torch.matmul(a, a, out=c)
    torch.empty_like(x).fill_(7)
    torch.cuda.synchronize()
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        for _ in range(60):
            torch.matmul(a, a, out=c)
        x.fill_(7)
    t0 = time.monotonic()
    if tl:
        tl.signal_stream(1, s)       # signalled now; the fence lands after fill_
    else:
        t.buffer.release(s)          # published now; the fence lands after fill_
    busy = not s.query()
    t1 = time.monotonic()
    s.synchronize()
    print(f"# producer: sync method {(tl or t.buffer).sync_method}, release() took "
          f"{(t1 - t0) * 1e3:.1f} ms, the write landed {(time.monotonic() - t1) * 1e3:.0f} ms "
          f"after", file=sys.stderr)
    if not busy:
        sys.exit("producer: its work was done before the release: nothing to order")
else:
    s = torch.cuda.Stream()
    print("ready", flush=True)
    deadline = time.monotonic() + 60
    while (tl.sync_state()["counter"] if tl else t.buffer.release_seq) < 1:
        if time.monotonic() > deadline:
            sys.exit("consumer: nothing published within 60 s")
        time.sleep(0.001)
    t0 = time.monotonic()
    with torch.cuda.stream(s):
        if mode == "acquire":
            t.buffer.acquire(s, seq=1, timeout=30)
        elif tl:
            tl.wait_stream(1, s, timeout=30)
        ok = bool(torch.all(x == 7).item())  # a kernel on s reads the buffer
    print(f"# consumer ({mode}): sync method {(tl or t.buffer).sync_method}, read "
          f"{(time.monotonic() - t0) * 1e3:.0f} ms after the release was published",
          file=sys.stderr)
    print("fresh" if ok else "stale", flush=True)
EOF
sync_run() {
  "$py" -c 'import gpushm, torch; gpushm.empty("sync", 1 << 20, "int32", device="cuda:0", sync=True).close()'
  [ "$1" != timeline ] || "$py" -c 'import gpushm; gpushm.default_connection().create_timeline("sync-tl", mode=0o644).close()'
  "$py" "$dir/sync.py" consumer sync "$1" > "$dir/consumer.out" &
  consumer=$!
  i=0; until grep -q ready "$dir/consumer.out" 2>/dev/null; do i=$((i+1)); [ $i -lt 3000 ] || fail "consumer not ready"; sleep 0.01; done
  "$py" "$dir/sync.py" producer sync "$1" || fail "sync producer ($1) failed"
  wait "$consumer" || fail "sync consumer ($1) failed"
  "$b/ctl/gpushmctl" unlink sync >/dev/null
  [ "$1" != timeline ] || "$b/ctl/gpushmctl" unlink sync-tl >/dev/null
  tail -n 1 "$dir/consumer.out"
}
for run in 1 2; do
  [ "$(sync_run acquire)" = fresh ] || fail "acquire run $run: the consumer read before the producer's write"
done
stale=0
for run in 1 2; do
  [ "$(sync_run control)" = stale ] && stale=$((stale + 1))
done
[ "$stale" -gt 0 ] || fail "control runs (no acquire) never read stale data: the ordering check cannot fail here, so it proves nothing"
for run in 1 2; do
  [ "$(sync_run timeline)" = fresh ] || fail "timeline run $run: the consumer read before the producer's write"
done
echo "# acquire/release on torch streams: 2 of 2 runs ordered; through a timeline: 2 of 2 ordered; control without acquire: $stale of 2 stale"

# --- weight sets (docs/weights.md): a trainer's CUDA state dict published, an engine in
# a process of its own loading it (load_state_dict: one device copy) and, after a second
# generation, the first one still whole for the holder that kept it
"$py" - "$dir" <<'EOF' || fail "weight sets: publish"
import sys, torch, gpushm
torch.manual_seed(1)
model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(),
                            torch.nn.Linear(512, 64)).cuda().to(torch.bfloat16)
ws = gpushm.publish_weights("py-model", model.state_dict(), mode=0o600)
assert ws.generation == 1
ws.close()
torch.save({k: v.cpu() for k, v in model.state_dict().items()}, sys.argv[1] + "/expected.pt")
# in place: the trainer's tensors allocated from gpushm, written there, published as they
# are (no copy)
inplace = {k: gpushm.empty(f"py-inplace-{i}", tuple(v.shape), "bfloat16", device="cuda:0")
           for i, (k, v) in enumerate(model.state_dict().items())}
for k, v in model.state_dict().items():
    torch.from_dlpack(inplace[k]).copy_(v)
torch.cuda.synchronize()                        # published once written
ws = gpushm.publish_weights_from("py-inplace", inplace, mode=0o600)
assert ws.generation == 1 and all(ws[k].buffer.id == t.buffer.id for k, t in inplace.items())
ws.close()
EOF
"$py" - "$dir" <<'EOF' || fail "weight sets: an engine loads them"
import sys, torch, gpushm
def net():
    return torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(),
                               torch.nn.Linear(512, 64)).cuda().to(torch.bfloat16)
engine, trainer = net(), net()
expected = torch.load(sys.argv[1] + "/expected.pt")
with gpushm.open_weights("py-model") as ws:
    assert ws.generation == 1 and set(ws.keys()) == set(expected)
    engine.load_state_dict(ws.to_torch())          # one device copy per tensor
    held = ws.tensors()                             # views: the generation stays held
    # no copy: the parameters become the set's memory (PyTorch's assign=True)
    mapped = net()
    mapped.load_state_dict(ws.to_torch(), assign=True)
    for k, p in mapped.state_dict().items():
        assert p.data_ptr() == ws[k].ptr, f"{k} was copied"
x = torch.randn(8, 256, device="cuda", dtype=torch.bfloat16)
assert torch.equal(mapped(x), engine(x))            # the same weights, read in place
ws2 = gpushm.publish_weights("py-model", trainer.state_dict(), mode=0o600, after=1,
                             bucket=256 * 1024)  # several buffers: copied one after another
assert ws2.generation == 2 and len({ws2[k].buffer.id for k in ws2}) > 1
for k, v in expected.items():
    assert torch.equal(engine.state_dict()[k].cpu(), v), k
    assert torch.equal(torch.from_dlpack(held[k]).cpu(), v), k   # generation 1, unchanged
with gpushm.open_weights("py-model") as ws:
    assert ws.generation == 2
    for k, v in trainer.state_dict().items():
        assert torch.equal(torch.from_dlpack(ws[k]), v), k
# an engine that keeps its own parameters: one device copy each, on PyTorch's current
# stream and on one of its own (the close waits for the copies before unmapping)
copied, side_copied, side = net(), net(), torch.cuda.Stream()
with gpushm.open_weights("py-model") as ws:
    ws.copy_into(copied)
    ws.copy_into(side_copied, stream=side)
side.synchronize()
assert torch.equal(copied(x), trainer(x)) and torch.equal(side_copied(x), trainer(x))
for k, p in copied.state_dict().items():
    assert p.data_ptr() != ws2[k].ptr, k
with gpushm.open_weights("py-inplace") as ws:                      # written in place
    for k, v in expected.items():
        assert torch.equal(torch.from_dlpack(ws[k]).cpu(), v), k
gpushm.unlink("py-inplace")
for i in range(len(expected)):
    gpushm.unlink(f"py-inplace-{i}")
with gpushm.open_weights("py-model") as ws:                        # follow without a copy
    mapped.load_state_dict(ws.to_torch(), assign=True)
assert torch.equal(mapped(x), trainer(x))
ws2.close()
del held, mapped
gpushm.unlink("py-model")
print(f"weight sets: a {len(expected)}-tensor bf16 state dict published on the GPU, loaded "
      f"by an engine in another process (one copy, and none: assign=True); generation 1 "
      f"whole for its holder after 2; copy_into() of 2, in buckets, on two streams")
EOF

# --- pipelined creates and opens of device memory, read through PyTorch
"$py" - <<'EOF' || fail "pipelined creates and opens"
import torch, gpushm
starts = [gpushm.empty_start(f"py-pipe-{i}", (256, 4), "float32", device="cuda") for i in range(8)]
made = [p.finish() for p in reversed(starts)][::-1]
for i, t in enumerate(made):
    assert t.device == "cuda:0" and t.shape == (256, 4)
    torch.from_dlpack(t).fill_(i)
torch.cuda.synchronize()
opens = [gpushm.open_start(f"py-pipe-{i}", device="cuda") for i in range(8)]
for i in reversed(range(8)):
    t = opens[i].finish()
    assert bool((torch.from_dlpack(t) == i).all()), i
    t.close()
for t in made:
    t.buffer.close_unlink()
print(f"pipelined: 8 device tensors created and opened ahead, checked through PyTorch "
      f"({'C speedups' if gpushm.speedups()[0] else 'ctypes'})")
EOF

# --- hand-off latency, beside torch.multiprocessing in the same run (printed)
"$py" "$src/tests/bench/python-handoff.py" || fail "python-handoff"
"$py" "$src/tests/bench/torch-handoff.py" --rounds 1000 || fail "torch-handoff"

kill "$daemon"; wait "$daemon" || fail "gpushmd did not exit cleanly"; daemon=""
echo "test-python-gpu: OK"
