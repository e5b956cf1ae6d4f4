/* SPDX-License-Identifier: MIT */
/* Every limit gpushm enforces, named in one place.  Each has a test that crosses it. */
#ifndef GPUSHM_LIMITS_H
#define GPUSHM_LIMITS_H

/* Wire. A frame is one SOCK_SEQPACKET datagram: header + protobuf body.  The receive
 * buffer has this fixed size, so an oversized frame is detected (MSG_TRUNC) without
 * ever allocating for it. */
#define GPUSHM_LIMIT_FRAME_BODY        (64u * 1024u)
/* It is also what bounds a page of the buffer (and client) list: a reply carries as
 * many entries as fit (fewer only when the request's max_entries asks for fewer), not
 * a fixed count, so that short entries do not cost extra round trips.  Entries take the
 * frame less this many bytes, kept for the reply's envelope around them (request id,
 * status, body tag and length, the "more" flag); clients page on with after_id. */
#define GPUSHM_LIMIT_REPLY_ENVELOPE    64u
/* The protocol never needs more than one fd per message; a little headroom lets a
 * peer that sends too many be told so instead of having its fds silently dropped. */
#define GPUSHM_LIMIT_FDS_PER_FRAME     4u

/* Pipelined opens and creates a connection may have out, unanswered, at once
 * (gpushm_buffer_open_start(), GPUSHM_PENDING_MAX): enough to cover a round trip with
 * the work of the hand-offs in flight; few enough that their replies always fit the
 * socket's buffer, and the daemon's queue for a client that stopped reading
 * (GPUSHM_DEFAULT_MAX_QUEUED_FRAMES) is never what holds them. */
#define GPUSHM_LIMIT_PENDING_PER_CONN  16u

/* How long a client may spin on its socket for a reply ($GPUSHM_POLL_US), and gpushmd
 * on its loop after a request (--busy-poll), before sleeping: a window that covers a
 * request's round trip many times over; past it a wake-up's few microseconds no longer
 * matter, and a busy CPU held longer only takes from the work. */
#define GPUSHM_LIMIT_POLL_US           10000u

/* How long an open may wait for its name to be made (gpushm_open_opts_t.wait_ms,
 * OpenRequest.wait_ms): an hour, past which a consumer should say what it waits for
 * again (and a wait that long is a bug more often than a plan). */
#define GPUSHM_LIMIT_OPEN_WAIT_MS      3600000u

/* Names: 1..127 bytes of [A-Za-z0-9._-], not starting with '.' or '-'. */
#define GPUSHM_LIMIT_NAME_LEN          127u
/* Free-form client name sent in Hello (shown by admin tools). */
#define GPUSHM_LIMIT_CLIENT_NAME_LEN   64u

/* Metadata a buffer may carry (set at create, immutable, sent with every open): room
 * for a tensor manifest, small enough that an open reply and a list page of such
 * buffers stay within one frame. */
#define GPUSHM_LIMIT_METADATA          4096u

/* Holders shown per buffer in list/show replies; the total count is always given. */
#define GPUSHM_LIMIT_HOLDERS_LISTED    128u

/* GPUs one daemon (and one client process) uses; more are ignored with a warning. */
#define GPUSHM_LIMIT_DEVICES           32u

/* References one connection may hold on one buffer (guards the counter). */
#define GPUSHM_LIMIT_REFS_PER_HOLDING  (1u << 20)

/* Opens of one buffer a process may take with gpushm_buffer_ref() at once (one per
 * tensor made from it, gpushm-dlpack.h): guards the counter, far past what a program
 * keeps (a view in every slot of a list of a million). */
#define GPUSHM_LIMIT_BUFFER_REFS       (1u << 20)

/* Images (docs/graphics.md): extents, mip levels and layers, as Vulkan guarantees
 * every device supports at least (maxImageDimension2D 4096 is the floor; 16384 is what
 * desktop GPUs and lavapipe offer), and the row pitch a linear image may ask for. */
#define GPUSHM_LIMIT_IMAGE_DIM         16384u
#define GPUSHM_LIMIT_IMAGE_DEPTH       2048u
#define GPUSHM_LIMIT_IMAGE_LAYERS      2048u
#define GPUSHM_LIMIT_IMAGE_LEVELS      15u  /* a full chain of 16384 */
#define GPUSHM_LIMIT_IMAGE_ROW_PITCH   (16384u * 16u)
/* What rows of a linear image default to being aligned to: CUDA's texture pitch
 * alignment and Vulkan's optimal buffer copy row pitch divide it on the GPUs measured. */
#define GPUSHM_IMAGE_ROW_ALIGN         256u

/* How long gpushmctl doctor waits for its child probing the Vulkan and GL drivers
 * (GPUSHM_DOCTOR_GRAPHICS_TIMEOUT_MS in the environment overrides it): lavapipe takes
 * ~0.2 s, a hung driver would take for ever. */
#define GPUSHM_DOCTOR_GRAPHICS_TIMEOUT_MS 10000

/* Dimensions of a tensor made of a buffer (gpushm_buffer_dlpack()); NumPy's own limit
 * before 2.0. */
#define GPUSHM_LIMIT_TENSOR_NDIM       32u

/* Daemon defaults; each can be changed with a gpushmd flag of the same meaning. */
/* The group the packaged socket unit gives the socket (SocketGroup=), which a daemon
 * started by hand as root takes too where it exists (--socket-group auto). */
#define GPUSHM_SOCKET_GROUP "gpushm"
#define GPUSHM_DEFAULT_MAX_CLIENTS         1024u
/* Connections one uid may hold, so that one user cannot take every slot (admins are
 * exempt). */
#define GPUSHM_DEFAULT_MAX_CLIENTS_PER_UID 256u
/* The last max-clients / GPUSHM_LIMIT_NEWCOMER_SLOTS_DIV connections are kept for uids
 * holding fewer than that many / GPUSHM_LIMIT_NEWCOMER_SHARE_DIV (at least 1): a few
 * uids that each fill their per-uid limit cannot lock another uid out (1024 and 256:
 * four uids hold 896, and 128 slots stay for others, 16 per uid). */
#define GPUSHM_LIMIT_NEWCOMER_SLOTS_DIV 8u
#define GPUSHM_LIMIT_NEWCOMER_SHARE_DIV 8u
/* Connections admins (root, --admin-group) may open beyond max-clients: a daemon that
 * is full can still be inspected and repaired. */
#define GPUSHM_LIMIT_ADMIN_RESERVED_CLIENTS 16u
/* A connection that has not sent Hello within this time is closed: silent sockets
 * would otherwise hold client slots for ever. */
#define GPUSHM_DEFAULT_HELLO_TIMEOUT_MS    5000u
/* Host memory (memfd pages are charged to gpushmd's own cgroup) is capped by a
 * budget: by default the smaller of these shares of physical memory and of the
 * tightest cgroup memory limit above the daemon, so that creates fail with
 * GPUSHM_E_NOMEM before the kernel's OOM killer would take the daemon. */
#define GPUSHM_AUTO_BUDGET_PERCENT_OF_RAM    50u
#define GPUSHM_AUTO_BUDGET_PERCENT_OF_CGROUP 75u
/* Host bytes one uid may own by default: this share of the host-memory budget. */
#define GPUSHM_AUTO_HOST_BYTES_PER_UID_PERCENT 50u
/* Device memory one uid may hold on each GPU by default (--max-device-bytes-per-uid
 * auto): half of it, so that one user cannot take a whole GPU from the others. */
#define GPUSHM_AUTO_DEVICE_BYTES_PER_UID_PERCENT 50u
/* Persistent buffers deposited in systemd's fd store (one fd each, host or cuda-fd; two
 * for a host sync buffer); matches FileDescriptorStoreMax= in gpushmd.service.  Beyond
 * it buffers still work but would not survive a restart (logged). */
#define GPUSHM_DEFAULT_FDSTORE_MAX         16384u
/* One line of the settings file. */
#define GPUSHM_LIMIT_CONFIG_LINE           1024u
#define GPUSHM_DEFAULT_MAX_BUFFERS_PER_UID 4096u
#define GPUSHM_DEFAULT_MAX_BYTES_PER_UID   0ull    /* 0: no byte quota */
/* A client whose unsent replies pass either bound has stopped reading: it is dropped. */
#define GPUSHM_DEFAULT_MAX_QUEUED_FRAMES   64u
#define GPUSHM_DEFAULT_MAX_QUEUED_BYTES    (1024u * 1024u)
/* Frames handled for one client per loop wakeup, so one busy client cannot starve others. */
#define GPUSHM_LIMIT_FRAMES_PER_WAKEUP     32u
/* Requests whose cost grows with what gpushmd holds (stats, list, clients) may take,
 * for all non-admins together, this share of the loop's time, in bursts of at most
 * GPUSHM_LIMIT_COSTLY_BURST_US; past it they wait their turn, their connection paused
 * (daemon/server/costly.h).  Admins never wait.  Without it, with 100,000 buffers, one
 * uid's stats flood from 200 connections had root's ping at p50 158 ms (issue 36). */
#define GPUSHM_LIMIT_COSTLY_SHARE_PERCENT  25u
#define GPUSHM_LIMIT_COSTLY_BURST_US       2000u
/* Counting gpushmd's open fds walks /proc/self/fd, thousands of entries with 100,000
 * buffers: a non-admin's stats report the count as it was at most this long ago. */
#define GPUSHM_LIMIT_OPEN_FDS_AGE_MS       1000u
/* Warnings one connection can cause per request (refusals, failed one-way requests)
 * are logged at most this many per interval; the rest are counted and one line says how
 * many (at the first warning after the interval, or when the connection ends).  A
 * client looping on a refused request would otherwise flood the journal, and push out
 * what other clients' lines say.  Lines that end a connection are always logged. */
#define GPUSHM_LIMIT_CLIENT_WARNINGS_PER_INTERVAL 10u
#define GPUSHM_LIMIT_CLIENT_WARNING_INTERVAL_MS   10000u
/* The same for all connections together, lines that end a connection included: a uid
 * holding many connections, or reconnecting in a loop, gets no more than this per
 * interval either.  The rest are counted, and one line says how many (at the first
 * client warning after the interval, or when gpushmd stops). */
#define GPUSHM_LIMIT_ALL_CLIENT_WARNINGS_PER_INTERVAL 200u
/* Pause before accepting again after EMFILE/ENFILE, instead of spinning on the listen fd. */
#define GPUSHM_ACCEPT_BACKOFF_MS           100u
/* The last close of a cuda-fd sync buffer waits this long, at most, for this process's
 * queued fence operations (its last release's write, its acquires' waits) to pass
 * before it unmaps the buffer they target; past it, the mapping is kept for the life of
 * the process, since unmapping under them would fault every context of the process. */
#define GPUSHM_FENCE_DRAIN_TIMEOUT_MS      10000u

/* Releases of a sync buffer whose publishers its control block remembers (the size of
 * an array in the block's layout, proto/shm_layout.h; each slot names its release, so
 * two builds that disagree on it only fail to find each other's).  When a releaser
 * dies with its fence write queued, gpushmd finds its release if it is among the last
 * this many published. */
#define GPUSHM_LIMIT_RELEASERS_KEPT           8u

/* How long gpushmd waits, at most, for the signals published before a dead promiser's
 * promise to land (other processes' queued fence writes) before it breaks the promise
 * anyway: raising first would let those writes lower the fence again behind it. */
#define GPUSHM_PROMISE_BREAK_WAIT_MS          10000u
/* A promise made to the previous daemon is broken as a persistent buffer comes back,
 * once earlier releases have landed, or after this long regardless: it is start-up. */
#define GPUSHM_PROMISE_ADOPT_WAIT_MS          1000u
/* How soon it looks again meanwhile, first; each look after waits twice as long, up to
 * the second: a break that waits costs the daemon's loop a read of the fence a look. */
#define GPUSHM_PROMISE_BREAK_RETRY_MS         2u
#define GPUSHM_PROMISE_BREAK_RETRY_MAX_MS     100u
/* Breaks waiting at once, and of them those of one uid's promisers; past either, a
 * break is done without waiting (and logged so): one uid cannot make others' wait go. */
#define GPUSHM_LIMIT_PENDING_BREAKS           1024u
#define GPUSHM_LIMIT_PENDING_BREAKS_PER_UID   64u

/* Live processes whose connection ended while they held buffers (they may still map
 * them: stats lists them) tracked at once, each with a pidfd; more are counted only.
 * Stats lists the first DETACHED_LISTED, each with its first DETACHED_BUFFERS_LISTED
 * buffers (and totals). */
#define GPUSHM_LIMIT_DETACHED_PROCESSES       256u
#define GPUSHM_LIMIT_DETACHED_LISTED          32u
#define GPUSHM_LIMIT_DETACHED_BUFFERS_LISTED  4u
/* One uid cannot take every slot: at most this many of its processes are tracked. */
#define GPUSHM_LIMIT_DETACHED_PER_UID         32u
/* Buffers remembered per process (ids, for the memory freed since); the rest count in
 * its totals only.  Bounds the daemon's memory and each stats request's work. */
#define GPUSHM_LIMIT_DETACHED_BUFFERS_KEPT    1024u
/* A stats reply is one frame at most for readers before 0.8.  With every device,
 * backend, request type and detached process in use it can be larger (about 66 KiB at
 * 32 devices): then it travels as a sealed memfd of at most this many bytes to a
 * library that takes one (StatsRequest.reply_in_memfd), which refuses a larger one. */
#define GPUSHM_LIMIT_STATS_REPLY              (4u * 1024u * 1024u)
/* Where pidfd_open is missing (kernels before 5.3, valgrind), how often such processes
 * are checked for having exited; a pid reused within that time keeps its entry. */
#define GPUSHM_DETACHED_SWEEP_MS              1000u

/* Segments (docs/segments.md).  Buffers up to the carve limit of their memory are slots
 * of a shared allocation of their permission class; larger ones (and sync buffers, and
 * persistent buffers kept in systemd's fd store) get an allocation of their own.  Slots
 * come in sizes a quarter octave apart (at most 25% rounding), 4 KiB at least. */
#define GPUSHM_LIMIT_CARVE_HOST            (1ull << 20)
#define GPUSHM_LIMIT_CARVE_DEVICE          (32ull << 20)
/* A class's segments of one slot size grow by doubling (each new one holds as many slots
 * as the ones before together), from the smallest allocation to these: few driver calls
 * for a class that creates many buffers, little idle memory for one that creates few.
 * 100k host buffers of 4 KiB fit in 100 memfds. */
#define GPUSHM_LIMIT_SEGMENT_HOST          (4ull << 20)
#define GPUSHM_LIMIT_SEGMENT_DEVICE        (1ull << 30)
#define GPUSHM_SEGMENT_MIN_HOST            (64ull << 10)
/* A freed slot of host memory up to GPUSHM_LIMIT_WARM_SLOT stays committed ("warm"),
 * up to GPUSHM_LIMIT_WARM_BYTES of each segment, while the segment holds a buffer or is
 * mapped: the next create of its size zeroes it with one write, instead of giving its
 * pages back and faulting new ones in, in the creator and in every process that maps
 * the segment (a 4 KiB slot: 0.5 us instead of 8.5 on the CI machine).  The rest of what
 * is freed is given back at once, all of it when the segment is emptied. */
#define GPUSHM_LIMIT_WARM_SLOT             (64ull << 10)
#define GPUSHM_LIMIT_WARM_BYTES            (256ull << 10)
/* Empty segments a class keeps warm (per class, that is per device too), so that a
 * create of a pooled size costs no driver call; the rest is given back at once, all of
 * it when an allocation of the same memory runs out, and at shutdown.  A daemon flag. */
#define GPUSHM_DEFAULT_POOL_BYTES          (256ull << 20)
/* Segments a client process keeps mapped while none of its buffers is open in them,
 * least recently used first out: reopening in one costs no driver call. */
#define GPUSHM_LIMIT_IDLE_SEGMENTS         16u

/* Request latency histograms (gpushmctl stats --prometheus): the upper bounds of their
 * buckets, in nanoseconds, ascending; one more bucket counts what is past the last.
 * From below a ping's handling (a few microseconds) through a create that waits for a
 * device's first context (100-350 ms) to a stuck driver call.  The daemon sends them with
 * its stats, so changing them needs no change in tools. */
#define GPUSHM_LATENCY_BOUNDS_NS                                                          \
  { 5000, 10000, 25000, 50000, 100000, 250000, 500000, 1000000, 2500000, 5000000,         \
    10000000, 25000000, 100000000, 250000000, 1000000000, 2500000000 }
#define GPUSHM_LATENCY_BOUNDS 16u

/* Frame rings (docs/rings.md): slots of one ring, and consumers attached to one at once
 * (each has a done timeline; their ids fill a table in the ring's control block,
 * proto/shm_layout.h).  Each slot starts at a multiple of SLOT_ALIGN bytes into the
 * ring's memory: NVIDIA's largest page, more than Vulkan or GL asks of a buffer bound at
 * an offset (docs/rings.md). */
#define GPUSHM_LIMIT_RING_SLOTS        64u
#define GPUSHM_LIMIT_RING_CONSUMERS    32u
/* Consumers of one uid attached to one ring at once (its owner's are not counted): a
 * uid that may read a ring cannot take every consumer's place in it. */
#define GPUSHM_LIMIT_RING_CONSUMERS_PER_UID 4u
#define GPUSHM_RING_SLOT_ALIGN         (64u * 1024u)

/* Weight sets (docs/weights.md): tensors one generation's manifest names, the bytes of a
 * tensor's name, buffers one generation's tensors lie in (an open's reply lists them
 * all in one frame: ~26 bytes each), the bytes of its sealed manifest (a million
 * tensors with 60-byte names and 4 dimensions take ~100 MB), and generations of one
 * set alive at once (the current one and those still held: a reader that never lets
 * go cannot make a publisher pile up memory without bound). */
#define GPUSHM_LIMIT_WEIGHT_TENSORS      1000000u
#define GPUSHM_LIMIT_WEIGHT_NAME         1024u
#define GPUSHM_LIMIT_WEIGHT_BUFFERS      1024u
#define GPUSHM_LIMIT_WEIGHT_MANIFEST     (256ull << 20)
#define GPUSHM_LIMIT_WEIGHT_GENERATIONS  16u
/* Weight sets one connection follows keeping buffers between generations (a reader's
 * mappings of a recycling publisher's buffers, docs/weights.md#recycling), least
 * recently used out: each costs memory the publisher may have let go of. */
#define GPUSHM_LIMIT_WEIGHT_SETS_KEPT    16u

/* Largest single buffer the protocol accepts (the backend and quotas may refuse less). */
#define GPUSHM_LIMIT_BUFFER_SIZE       (1ull << 44)   /* 16 TiB */

#endif
