/* SPDX-License-Identifier: MIT */
/* Input formats of the libFuzzer targets, shared with the seed generator
 * (make-corpus.c) so that the seeds always parse the way the targets read them.
 * Both formats are tolerant: any byte string is a valid input, a record that runs
 * past the end is cut short, and unknown bits are ignored. */
#ifndef GPUSHM_FUZZ_FORMAT_H
#define GPUSHM_FUZZ_FORMAT_H

/* ---- fuzz-daemon -------------------------------------------------------------------
 * [flags] then records [sel][len lo][len hi][len bytes], each sent as one datagram
 * from a client's end of a socketpair to a daemon connection. */

/* flags: who the second connection is (the first is always uid 1000, not an admin) */
#define FUZZ_D_IDENTITY_MASK 0x03u /* index into the harness's identity table */
/* flags: the harness sends a valid hello on every (re)connect, so inputs need not */
#define FUZZ_D_AUTO_HELLO 0x04u

/* sel: which of the two connections */
#define FUZZ_D_CONN 0x01u
/* sel: the bytes are a packed Request; the harness prepends a correct header, so
 * mutations reach the protobuf decoder instead of dying in the length check */
#define FUZZ_D_HEADER 0x02u
/* sel: fds sent with the frame (requests carry none, so any is a protocol error) */
#define FUZZ_D_FDS_SHIFT 2
/* 0: none; 1: one memfd (of the kind the record's length picks, modulo 3: sealed against
 * shrinking and growing, unsealed, or one that grows to FUZZ_D_MEMFD_GROWN once sent),
 * what register_memory takes; 2: one /dev/null; 3: over the limit, /dev/null */
#define FUZZ_D_FDS_MASK 0x0cu
#define FUZZ_D_MEMFD_BYTES 65536u
#define FUZZ_D_MEMFD_GROWN (1u << 20)
/* sel: hang this connection up (and let the daemon notice) before sending */
#define FUZZ_D_RECONNECT 0x10u
/* sel: send without running the daemon's loop: the next frames queue up behind it */
#define FUZZ_D_PIPELINE 0x20u
/* sel: leave replies unread, so that the daemon's reply queue fills */
#define FUZZ_D_NO_DRAIN 0x40u
/* sel: send the frame FUZZ_D_REPEAT_COUNT times (more than one loop wakeup handles) */
#define FUZZ_D_REPEAT 0x80u
#define FUZZ_D_REPEAT_COUNT 40u

/* ---- fuzz-client -------------------------------------------------------------------
 * [n_ops][n_ops op bytes] then reply chunks [flags][fds][len lo][len hi][len bytes].
 * The ops are library calls, made in order after gpushm_connect(); a fake daemon
 * answers each request the library sends with the next chunk (the first chunk answers
 * the hello) and hangs up once the chunks are used up. */

#define FUZZ_C_MAX_OPS 31u /* n_ops is taken modulo 32 */

/* op byte: low nibble the call, high nibble its argument */
enum fuzz_client_op {
  FUZZ_C_OP_PING = 0,
  FUZZ_C_OP_OPEN = 1,        /* arg 1: name "b" (else "a"); arg 2: read-only */
  FUZZ_C_OP_OPEN_ID = 2,     /* id 1 + (arg & 3); arg 4: read-only */
  FUZZ_C_OP_CREATE = 3,      /* arg 1: "b"; arg 2: 4096 bytes (else 100); 4: sync; 8: open existing */
  FUZZ_C_OP_CLOSE = 4,       /* closes handle slot arg */
  FUZZ_C_OP_UNLINK = 5,      /* arg 1: "b" */
  FUZZ_C_OP_LIST = 6,        /* arg 1: GPUSHM_LIST_ALL; arg 2: an unknown flag too */
  FUZZ_C_OP_STATS = 7,
  FUZZ_C_OP_CLIENTS = 8,
  FUZZ_C_OP_EVENT = 9,       /* arg 1: create (else open) */
  FUZZ_C_OP_SYNC = 10,       /* slot arg & 7; arg 8: release (else acquire, no waiting) */
  FUZZ_C_OP_TOUCH = 11,      /* reads (and, if writable, writes) slot arg's memory */
  FUZZ_C_OP_RECONNECT = 12,  /* disconnect (open buffers keep the old connection), connect */
  FUZZ_C_OP_ACCESSORS = 13,  /* every getter on slot arg */
  FUZZ_C_OP_CLOSE_ALL = 14,
  FUZZ_C_OP_NOP = 15,
};
#define FUZZ_C_OP(op, arg) ((unsigned char)((op) | ((arg) << 4)))

/* chunk flags */
#define FUZZ_C_RAW 0x01u      /* the bytes are a whole frame: no header, no id added */
#define FUZZ_C_KEEP_ID 0x02u  /* do not append the request's id to the body */
#define FUZZ_C_HANGUP 0x04u   /* close the connection after sending this chunk */
#define FUZZ_C_FD_LIE 0x08u   /* the header claims one fd more than is sent */
/* first bump the status page's unlink generation, as the daemon does when a name goes
 * away: names the library has cached must be resolved again */
#define FUZZ_C_UNLINKED 0x10u

/* chunk fds byte: up to two fds, each of a kind */
enum fuzz_client_fd_kind {
  FUZZ_C_FD_STATUS_PAGE = 0, /* a 4 KiB memfd with the status page magic */
  FUZZ_C_FD_CONTROL = 1,     /* a 4 KiB memfd with the sync control magic */
  FUZZ_C_FD_DATA = 2,        /* a 64 KiB memfd */
  FUZZ_C_FD_DEVNULL = 3,     /* /dev/null: not mappable as shared memory */
};
#define FUZZ_C_FD1_KIND(b) ((b) & 0x03u)
#define FUZZ_C_FD1 0x04u
#define FUZZ_C_FD2_KIND(b) (((b) >> 3) & 0x03u)
#define FUZZ_C_FD2 0x20u
#define FUZZ_C_FDS_READONLY 0x40u /* memfds are sent as O_RDONLY descriptions */
#define FUZZ_C_FDS1(kind) ((unsigned char)(FUZZ_C_FD1 | (kind)))
#define FUZZ_C_FDS2(kind1, kind2) \
  ((unsigned char)(FUZZ_C_FD1 | (kind1) | FUZZ_C_FD2 | ((kind2) << 3)))

#define FUZZ_C_DATA_FD_SIZE (64u * 1024u)

#endif
