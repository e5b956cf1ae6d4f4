/* SPDX-License-Identifier: MIT */
/* Writes the fuzz targets' seed corpora, built from valid frames of the real message
 * types, so that fuzzing starts from conversations that get deep into the daemon and
 * the library instead of dying in the frame checks:
 *
 *   make-corpus DIR    ->  DIR/daemon/<seed> (fuzz-daemon), DIR/client/<seed> (fuzz-client)
 *
 * Formats: fuzz-format.h.  The seeds are written afresh for every fuzzing run (by
 * scripts/fuzz), never kept in git, so they follow the schema as it changes. */
#include "config.h"
#include "fuzz-format.h"
#include "gpushm.h"
#include "gpushm.pb-c.h"
#include "wire.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define SEED_MAX (256u * 1024u)

struct seed {
  uint8_t data[SEED_MAX];
  size_t len;
  uint64_t next_id; /* request ids in daemon seeds */
};

static struct seed s;
static const char *out_dir;
static unsigned n_written;
static uint8_t frame[WIRE_FRAME_MAX];

static void die(const char *what)
{
  fprintf(stderr, "make-corpus: %s: %s\n", what, strerror(errno));
  exit(1);
}

static void put(const void *bytes, size_t len)
{
  if (s.len + len > SEED_MAX) {
    fprintf(stderr, "make-corpus: seed too large\n");
    exit(1);
  }
  memcpy(s.data + s.len, bytes, len);
  s.len += len;
}

static void put_byte(unsigned b)
{
  uint8_t byte = (uint8_t)b;
  put(&byte, 1);
}

static void put_u16(size_t v)
{
  put_byte(v & 0xff);
  put_byte(v >> 8);
}

static void begin(void)
{
  s.len = 0;
  s.next_id = 0;
}

static void finish(const char *kind, const char *name)
{
  char path[4096];
  FILE *f;

  snprintf(path, sizeof path, "%s/%s/%s", out_dir, kind, name);
  if (!(f = fopen(path, "wb")) || fwrite(s.data, 1, s.len, f) != s.len || fclose(f) != 0)
    die(path);
  n_written++;
}

/* Packs msg as a whole frame (raw) or as the body alone (the target adds the header). */
static size_t pack(const ProtobufCMessage *msg, uint16_t type, bool raw, unsigned n_fds)
{
  long len;

  if (raw) {
    if ((len = wire_encode(frame, type, msg, n_fds)) < 0) {
      fprintf(stderr, "make-corpus: message too large\n");
      exit(1);
    }
    return (size_t)len;
  }
  if (protobuf_c_message_get_packed_size(msg) > GPUSHM_LIMIT_FRAME_BODY) {
    fprintf(stderr, "make-corpus: message too large\n");
    exit(1);
  }
  return protobuf_c_message_pack(msg, frame);
}

/* ---- fuzz-daemon seeds ------------------------------------------------------------ */

/* One record: sel's FUZZ_D_HEADER decides whether the request goes as a body or a
 * whole frame. */
static void d_send(unsigned sel, Gpushm__Request *req)
{
  size_t len;

  req->request_id = ++s.next_id;
  len = pack(&req->base, WIRE_TYPE_REQUEST, !(sel & FUZZ_D_HEADER), 0);
  put_byte(sel);
  put_u16(len);
  put(frame, len);
}

/* register_memory of the memfd the harness sends with it (FDS 1): a buffer, or a linear
 * image when image is set. */
static void d_register(unsigned sel, const char *name, uint64_t size, uint64_t allocation,
                       uint32_t mode, bool image)
{
  static uint8_t uuid[16];
  Gpushm__Request req = GPUSHM__REQUEST__INIT;
  Gpushm__RegisterRequest body = GPUSHM__REGISTER_REQUEST__INIT;
  Gpushm__ExternalMemory mem = GPUSHM__EXTERNAL_MEMORY__INIT;
  Gpushm__ImageDesc desc = GPUSHM__IMAGE_DESC__INIT;

  mem.allocation_size = allocation;
  mem.device_uuid.data = uuid;
  mem.device_uuid.len = sizeof uuid;
  mem.driver_uuid.data = uuid;
  mem.driver_uuid.len = sizeof uuid;
  mem.driver_info = "fuzz";
  body.name = (char *)name;
  body.size = size;
  body.mode = mode;
  body.memory = &mem;
  if (image) {
    desc.format = 3; /* rgba8-unorm */
    desc.width = 64;
    desc.height = 64;
    desc.depth = 1;
    desc.mip_levels = 1;
    desc.array_layers = 1;
    body.image = &desc;
  }
  req.body_case = GPUSHM__REQUEST__BODY_REGISTER_MEMORY;
  req.register_memory = &body;
  d_send(sel | (1u << FUZZ_D_FDS_SHIFT), &req);
}

static void d_raw(unsigned sel, const void *bytes, size_t len)
{
  put_byte(sel);
  put_u16(len);
  put(bytes, len);
}

#define H FUZZ_D_HEADER

/* A hello of a connection named name that offers features. */
static void d_hello_as(unsigned sel, const char *name, uint64_t features)
{
  Gpushm__Request req = GPUSHM__REQUEST__INIT;
  Gpushm__Hello body = GPUSHM__HELLO__INIT;
  body.protocol_version = GPUSHM_PROTOCOL_VERSION;
  body.client_name = (char *)name;
  body.features = features;
  req.body_case = GPUSHM__REQUEST__BODY_HELLO;
  req.hello = &body;
  d_send(sel, &req);
}

static void d_hello(unsigned sel)
{
  d_hello_as(sel, (sel & FUZZ_D_CONN) ? "consumer" : "producer", 0);
}

struct create_spec {
  const char *name;
  uint64_t size;
  uint32_t mode;
  int lifetime;
  bool open_existing, sync;
  int backend;
  int kind; /* Gpushm__Kind; 0: none named */
  uint32_t ring_slots;
};

static void d_create(unsigned sel, struct create_spec spec)
{
  Gpushm__Request req = GPUSHM__REQUEST__INIT;
  Gpushm__CreateRequest body = GPUSHM__CREATE_REQUEST__INIT;
  body.name = (char *)spec.name;
  body.size = spec.size;
  body.mode = spec.mode;
  body.lifetime = (Gpushm__Lifetime)spec.lifetime;
  body.open_existing = spec.open_existing;
  body.sync = spec.sync;
  body.backend = (Gpushm__Backend)spec.backend;
  body.kind = (Gpushm__Kind)spec.kind;
  body.ring_slots = spec.ring_slots;
  req.body_case = GPUSHM__REQUEST__BODY_CREATE;
  req.create = &body;
  d_send(sel, &req);
}

static void d_open(unsigned sel, const char *name, uint64_t id, bool read_only, bool event)
{
  Gpushm__Request req = GPUSHM__REQUEST__INIT;
  Gpushm__OpenRequest body = GPUSHM__OPEN_REQUEST__INIT;
  if (name) {
    body.key_case = GPUSHM__OPEN_REQUEST__KEY_NAME;
    body.name = (char *)name;
  } else {
    body.key_case = GPUSHM__OPEN_REQUEST__KEY_ID;
    body.id = id;
  }
  body.read_only = read_only;
  body.event = event;
  req.body_case = GPUSHM__REQUEST__BODY_OPEN;
  req.open = &body;
  d_send(sel, &req);
}

static void d_close(unsigned sel, uint64_t id)
{
  Gpushm__Request req = GPUSHM__REQUEST__INIT;
  Gpushm__CloseRequest body = GPUSHM__CLOSE_REQUEST__INIT;
  body.id = id;
  req.body_case = GPUSHM__REQUEST__BODY_CLOSE;
  req.close = &body;
  d_send(sel, &req);
}

static void d_unlink(unsigned sel, const char *name)
{
  Gpushm__Request req = GPUSHM__REQUEST__INIT;
  Gpushm__UnlinkRequest body = GPUSHM__UNLINK_REQUEST__INIT;
  body.name = (char *)name;
  req.body_case = GPUSHM__REQUEST__BODY_UNLINK;
  req.unlink = &body;
  d_send(sel, &req);
}

static void d_list(unsigned sel, uint64_t after_id, uint32_t max_entries, bool all)
{
  Gpushm__Request req = GPUSHM__REQUEST__INIT;
  Gpushm__ListRequest body = GPUSHM__LIST_REQUEST__INIT;
  body.after_id = after_id;
  body.max_entries = max_entries;
  body.all = all;
  req.body_case = GPUSHM__REQUEST__BODY_LIST;
  req.list = &body;
  d_send(sel, &req);
}

static void d_stats(unsigned sel)
{
  Gpushm__Request req = GPUSHM__REQUEST__INIT;
  Gpushm__StatsRequest body = GPUSHM__STATS_REQUEST__INIT;
  req.body_case = GPUSHM__REQUEST__BODY_STATS;
  req.stats = &body;
  d_send(sel, &req);
}

static void d_ping(unsigned sel)
{
  Gpushm__Request req = GPUSHM__REQUEST__INIT;
  Gpushm__PingRequest body = GPUSHM__PING_REQUEST__INIT;
  req.body_case = GPUSHM__REQUEST__BODY_PING;
  req.ping = &body;
  d_send(sel, &req);
}

static void d_clients(unsigned sel, uint32_t after_id)
{
  Gpushm__Request req = GPUSHM__REQUEST__INIT;
  Gpushm__ClientsRequest body = GPUSHM__CLIENTS_REQUEST__INIT;
  body.after_id = after_id;
  req.body_case = GPUSHM__REQUEST__BODY_CLIENTS;
  req.clients = &body;
  d_send(sel, &req);
}

static void daemon_seeds(void)
{
  const unsigned c0 = H, c1 = H | FUZZ_D_CONN;
  char name[16];

  /* Two users share a buffer through its "other" bits; the stranger may read only. */
  begin();
  put_byte(0); /* connection 1: uid 65534 */
  d_hello(c0);
  d_hello(c1);
  d_create(c0, (struct create_spec){ .name = "frames", .size = 4096, .mode = 0644 });
  d_open(c1, "frames", 0, true, false);
  d_open(c1, "frames", 0, false, false);
  d_list(c1, 0, 0, false);
  d_list(c1, 0, 0, true);
  d_stats(c0);
  d_clients(c0, 0);
  d_unlink(c1, "frames");
  d_close(c1, 1);
  d_close(c1, 1);
  d_close(c0, 1);
  d_unlink(c0, "frames");
  d_ping(c0);
  d_ping(c1);
  finish("daemon", "share");

  /* Group access, by id, and a session buffer that goes with its creator. */
  begin();
  put_byte(1); /* connection 1: uid 1001, uid 1000's group */
  d_hello(c0);
  d_hello(c1);
  d_create(c0, (struct create_spec){ .name = "grp", .size = 8192, .mode = 0660 });
  d_open(c1, "grp", 0, false, false);
  d_open(c1, NULL, 1, true, false);
  d_list(c1, 0, 0, false);
  d_close(c1, 1);
  d_close(c1, 1);
  d_create(c1, (struct create_spec){ .name = "sess", .size = 100, .lifetime = 1 });
  d_open(c0, "sess", 0, true, false);
  d_unlink(c0, "grp");
  d_hello(c1 | FUZZ_D_RECONNECT);
  d_list(c0, 0, 0, false);
  d_open(c0, NULL, 2, true, false);
  d_clients(c1, 0);
  finish("daemon", "group-session");

  /* Root sees and removes everyone's buffers. */
  begin();
  put_byte(2 | FUZZ_D_AUTO_HELLO); /* connection 1: root */
  d_create(c0, (struct create_spec){ .name = "p", .size = 4096 });
  d_list(c1, 0, 0, true);
  d_open(c1, "p", 0, false, false);
  d_clients(c1, 0);
  d_unlink(c1, "p");
  d_open(c0, "p", 0, false, false);
  d_list(c0, 0, 0, false);
  d_close(c1, 1);
  d_stats(c1);
  finish("daemon", "root");

  /* An admin by group: may list and unlink, not read. */
  begin();
  put_byte(3 | FUZZ_D_AUTO_HELLO); /* connection 1: uid 1002, the admin group */
  d_create(c0, (struct create_spec){ .name = "x", .size = 1 });
  d_create(c0, (struct create_spec){ .name = "y", .size = 4097, .mode = 0604, .lifetime = 1 });
  d_list(c1, 0, 0, true);
  d_open(c1, "x", 0, true, false);
  d_open(c1, "y", 0, true, false);
  d_unlink(c1, "x");
  d_clients(c1, 0);
  d_stats(c0);
  finish("daemon", "admin-group");

  /* Sync buffers, open-existing, and the backends this daemon lacks. */
  begin();
  put_byte(0);
  d_hello(c0);
  d_hello(c1);
  d_create(c0, (struct create_spec){ .name = "sync", .size = 4096, .mode = 0666, .sync = true });
  d_create(c1, (struct create_spec){ .name = "sync", .size = 4096, .open_existing = true,
                                     .sync = true });
  d_create(c1, (struct create_spec){ .name = "sync", .size = 4096, .open_existing = true });
  d_open(c1, NULL, 1, true, false);
  d_open(c1, "sync", 0, false, true);
  d_create(c0, (struct create_spec){ .name = "ev",
                                     .backend = GPUSHM__BACKEND__BACKEND_CUDA_EVENT });
  d_create(c0, (struct create_spec){ .name = "dev", .size = 1 << 20,
                                     .backend = GPUSHM_BACKEND_CUDA_IPC });
  d_create(c0, (struct create_spec){ .name = "fd", .size = 1 << 20,
                                     .backend = GPUSHM_BACKEND_CUDA_FD });
  d_create(c0, (struct create_spec){ .name = "bad", .size = 1, .backend = 9 });
  d_open(c0, "ev", 0, false, true);
  d_list(c1, 0, 0, false);
  d_close(c1, 1);
  d_close(c1, 1);
  finish("daemon", "sync");

  /* Arguments at and past every limit the registry checks. */
  begin();
  put_byte(FUZZ_D_AUTO_HELLO);
  d_create(c0, (struct create_spec){ .name = "q1", .size = 12 << 10 });
  d_create(c0, (struct create_spec){ .name = "q2", .size = 17ull << 20 });
  d_create(c0, (struct create_spec){ .name = "zero", .size = 0 });
  d_create(c0, (struct create_spec){ .name = "huge", .size = (1ull << 44) + 1 });
  d_create(c0, (struct create_spec){ .name = "mode", .size = 1, .mode = 01777 });
  d_create(c0, (struct create_spec){ .name = "life", .size = 1, .lifetime = 7 });
  d_create(c0, (struct create_spec){ .name = "", .size = 1 });
  d_create(c0, (struct create_spec){ .name = ".hidden", .size = 1 });
  d_create(c0, (struct create_spec){ .name = "-opt", .size = 1 });
  d_create(c0, (struct create_spec){
    .name = "n123456789012345678901234567890123456789012345678901234567890123456789012345678"
            "9012345678901234567890123456789012345678901234567", .size = 1 });
  d_create(c0, (struct create_spec){ .name = "q1", .size = 1 });
  d_open(c0, "nope", 0, false, false);
  d_open(c0, NULL, 99, false, false);
  d_unlink(c0, "nope");
  d_close(c0, 99);
  d_list(c0, 0, 0, false);
  finish("daemon", "limits");

  /* Paging, pipelined requests and a reply queue nobody reads. */
  begin();
  put_byte(FUZZ_D_AUTO_HELLO);
  for (int i = 0; i < 12; i++) {
    snprintf(name, sizeof name, "page%d", i);
    d_create((i & 1) ? c1 : c0, (struct create_spec){ .name = name, .size = 4096, .mode = 0644 });
  }
  d_list(c0, 0, 5, false);
  d_list(c0, 5, 5, false);
  d_list(c1 | FUZZ_D_PIPELINE, 10, 5, false);
  d_clients(c1 | FUZZ_D_PIPELINE, 1);
  d_ping(c0 | FUZZ_D_REPEAT | FUZZ_D_PIPELINE);
  d_list(c0 | FUZZ_D_REPEAT | FUZZ_D_NO_DRAIN, 0, 0, false);
  d_list(c0 | FUZZ_D_REPEAT | FUZZ_D_NO_DRAIN, 0, 0, false);
  d_ping(c1);
  finish("daemon", "paging-pipeline");

  /* A client that stops reading is dropped; the other goes on. */
  begin();
  put_byte(FUZZ_D_AUTO_HELLO);
  for (int i = 0; i < 20; i++) {
    snprintf(name, sizeof name, "slow%d", i);
    d_create(c0, (struct create_spec){ .name = name, .size = 4096 });
  }
  for (int i = 0; i < 8; i++)
    d_list(c0 | FUZZ_D_REPEAT | FUZZ_D_NO_DRAIN, 0, 0, false);
  d_stats(c1);
  finish("daemon", "slow-reader");

  /* Protocol errors, each ending its connection; the harness reconnects. */
  begin();
  put_byte(FUZZ_D_AUTO_HELLO);
  d_raw(FUZZ_D_CONN, "not a gpushm frame", 18);
  d_ping(c0 | (2u << FUZZ_D_FDS_SHIFT));
  d_ping(c1 | (3u << FUZZ_D_FDS_SHIFT));
  d_raw(H, "\x08\x01\x52\x03\x0a\x01", 6); /* a body cut short */
  {
    Gpushm__Request req = GPUSHM__REQUEST__INIT;
    req.body_case = GPUSHM__REQUEST__BODY_PING;
    req.ping = &(Gpushm__PingRequest)GPUSHM__PING_REQUEST__INIT;
    size_t len = pack(&req.base, WIRE_TYPE_REQUEST, false, 0); /* request id 0 */
    d_raw(H | FUZZ_D_CONN, frame, len);
  }
  d_hello(c0);
  {
    Gpushm__Request req = GPUSHM__REQUEST__INIT; /* no body: a newer client's request */
    d_send(c0, &req);
  }
  d_stats(c0);
  finish("daemon", "protocol-errors");

  /* Registered memory (issue 36, item 7): memfds sealed, unsealed and growing, as
   * buffers and as linear images, opened read-only and read-write by the other uid,
   * listed, unlinked.  Bodies only (no FUZZ_D_HEADER): the harness writes the header with
   * the fd it attaches. */
  begin();
  put_byte(0);
  d_hello_as(0, "registrant",
             GPUSHM_FEATURE_SEGMENTS | GPUSHM_FEATURE_GRAPHICS | GPUSHM_FEATURE_IPC_FENCES);
  d_hello_as(FUZZ_D_CONN, "importer",
             GPUSHM_FEATURE_SEGMENTS | GPUSHM_FEATURE_GRAPHICS | GPUSHM_FEATURE_IPC_FENCES);
  d_register(0, "reg-a", 4096, 4096, 0644, false);
  d_register(0, "reg-bb", FUZZ_D_MEMFD_BYTES, FUZZ_D_MEMFD_BYTES, 0666, false);
  d_register(0, "reg-ccc", 16384, FUZZ_D_MEMFD_BYTES, 0644, true);
  d_register(0, "reg-dddd", 1, 4096, 0600, true);
  d_open(c1, "reg-a", 0, true, false);
  d_open(c1, "reg-bb", 0, false, false);
  d_open(c1, "reg-ccc", 0, true, false);
  d_list(c1, 0, 0, true);
  d_unlink(c0, "reg-a");
  d_close(c1, 1);
  d_stats(c1);
  finish("daemon", "register-memfd");

  /* Timelines (0.8): made, opened by the other connection read-only and (wrongly) as a
   * buffer and as an event, promised by both, one with a size and a backend it may not
   * have, a kind the daemon does not know; closed, unlinked. */
  begin();
  put_byte(0);
  d_hello_as(c0, "signaller",
             GPUSHM_FEATURE_SEGMENTS | GPUSHM_FEATURE_PROMISES | GPUSHM_FEATURE_TIMELINES);
  d_hello_as(c1, "waiter",
             GPUSHM_FEATURE_SEGMENTS | GPUSHM_FEATURE_PROMISES | GPUSHM_FEATURE_TIMELINES);
  d_create(c0, (struct create_spec){ .name = "tl", .mode = 0644, .kind = GPUSHM__KIND__KIND_TIMELINE });
  d_create(c0, (struct create_spec){ .name = "tl-sized", .size = 4096, .mode = 0644,
                                     .backend = 1, .kind = GPUSHM__KIND__KIND_TIMELINE });
  d_create(c0, (struct create_spec){ .name = "tl-future", .kind = 77 });
  {
    Gpushm__Request req = GPUSHM__REQUEST__INIT;
    Gpushm__OpenRequest body = GPUSHM__OPEN_REQUEST__INIT;
    body.key_case = GPUSHM__OPEN_REQUEST__KEY_NAME;
    body.name = "tl";
    body.read_only = true;
    body.kind = GPUSHM__KIND__KIND_TIMELINE;
    req.body_case = GPUSHM__REQUEST__BODY_OPEN;
    req.open = &body;
    d_send(c1, &req);
    body.kind = 99;
    d_send(c1, &req);
  }
  d_open(c1, "tl", 0, true, false);
  d_open(c1, "tl", 0, true, true);
  {
    Gpushm__Request req = GPUSHM__REQUEST__INIT;
    Gpushm__PromiseRequest body = GPUSHM__PROMISE_REQUEST__INIT;
    body.id = 1;
    body.upto = 9;
    req.body_case = GPUSHM__REQUEST__BODY_PROMISE;
    req.promise = &body;
    d_send(c0, &req);
    d_send(c1, &req);
    body.upto = 0;
    d_send(c0, &req);
  }
  d_list(c1, 0, 0, true);
  d_close(c1, 1);
  d_unlink(c0, "tl");
  d_close(c0, 1);
  finish("daemon", "timelines");

  /* Semaphore planes (0.8): a registration with the memfd the harness sends (no semaphore:
   * refused), one with a short UUID, one without an fd (no plane yet), by a reader, and
   * for an id the connection does not hold. */
  begin();
  put_byte(0);
  d_hello_as(c0, "minter", GPUSHM_FEATURE_TIMELINES | GPUSHM_FEATURE_SEMAPHORES |
                             GPUSHM_FEATURE_GRAPHICS);
  d_hello_as(c1, "reader", GPUSHM_FEATURE_TIMELINES | GPUSHM_FEATURE_SEMAPHORES |
                             GPUSHM_FEATURE_GRAPHICS);
  d_create(c0, (struct create_spec){ .name = "tl", .mode = 0644,
                                     .kind = GPUSHM__KIND__KIND_TIMELINE });
  {
    Gpushm__Request req = GPUSHM__REQUEST__INIT;
    Gpushm__OpenRequest body = GPUSHM__OPEN_REQUEST__INIT;
    body.key_case = GPUSHM__OPEN_REQUEST__KEY_NAME;
    body.name = "tl";
    body.read_only = true;
    body.kind = GPUSHM__KIND__KIND_TIMELINE;
    req.body_case = GPUSHM__REQUEST__BODY_OPEN;
    req.open = &body;
    d_send(c1, &req);
  }
  {
    static uint8_t uuid[16] = { 0xfa, 0xfa, 0xfa, 0xfa, 0xfa, 0xfa, 0xfa, 0xfa,
                                0xfa, 0xfa, 0xfa, 0xfa, 0xfa, 0xfa, 0xfa, 0 };
    Gpushm__Request req = GPUSHM__REQUEST__INIT;
    Gpushm__SemaphoreRequest body = GPUSHM__SEMAPHORE_REQUEST__INIT;
    body.id = 1;
    body.device_uuid.data = uuid;
    body.device_uuid.len = 16;
    body.to_readers = true;
    req.body_case = GPUSHM__REQUEST__BODY_SEMAPHORE;
    req.semaphore = &body;
    d_send(c0 | (1u << FUZZ_D_FDS_SHIFT), &req);
    body.device_uuid.len = 3;
    d_send(c0 | (1u << FUZZ_D_FDS_SHIFT), &req);
    body.device_uuid.len = 0;
    d_send(c0, &req);
    d_send(c1 | (1u << FUZZ_D_FDS_SHIFT), &req);
    d_send(c1, &req);
    body.id = 42;
    d_send(c1, &req);
  }
  d_close(c1, 1);
  d_unlink(c0, "tl");
  d_close(c0, 1);
  finish("daemon", "semaphores");

  /* Frame rings (0.8): made (and with 1 and 65 slots, and a sync it may not have), opened
   * read-only by the other connection and attached (twice), attached by the producer, a
   * ring request detaching, evicting an id that is no consumer and one that is, and one
   * for an id the connection does not hold; closed, unlinked. */
  begin();
  put_byte(0);
  d_hello_as(c0, "producer", GPUSHM_FEATURE_SEGMENTS | GPUSHM_FEATURE_PROMISES |
                               GPUSHM_FEATURE_TIMELINES | GPUSHM_FEATURE_RINGS);
  d_hello_as(c1, "consumer", GPUSHM_FEATURE_SEGMENTS | GPUSHM_FEATURE_PROMISES |
                               GPUSHM_FEATURE_TIMELINES | GPUSHM_FEATURE_RINGS);
  d_create(c0, (struct create_spec){ .name = "ring", .size = 4096, .mode = 0644, .backend = 1,
                                     .kind = GPUSHM__KIND__KIND_RING, .ring_slots = 3 });
  d_create(c0, (struct create_spec){ .name = "ring-1", .size = 4096, .backend = 1,
                                     .kind = GPUSHM__KIND__KIND_RING, .ring_slots = 1 });
  d_create(c0, (struct create_spec){ .name = "ring-65", .size = 4096, .backend = 1,
                                     .kind = GPUSHM__KIND__KIND_RING, .ring_slots = 65 });
  d_create(c0, (struct create_spec){ .name = "ring-sync", .size = 4096, .backend = 1, .sync = true,
                                     .kind = GPUSHM__KIND__KIND_RING, .ring_slots = 2 });
  {
    Gpushm__Request req = GPUSHM__REQUEST__INIT;
    Gpushm__OpenRequest body = GPUSHM__OPEN_REQUEST__INIT;
    body.key_case = GPUSHM__OPEN_REQUEST__KEY_NAME;
    body.name = "ring";
    body.read_only = true;
    body.kind = GPUSHM__KIND__KIND_RING;
    req.body_case = GPUSHM__REQUEST__BODY_OPEN;
    req.open = &body;
    d_send(c1, &req);
    /* attach, by the ring's id (the first object: 1), twice; and by the producer */
    body.key_case = GPUSHM__OPEN_REQUEST__KEY_ID;
    body.id = 1;
    body.read_only = false;
    body.kind = GPUSHM__KIND__KIND_TIMELINE;
    body.ring_attach = true;
    d_send(c1, &req);
    d_send(c1, &req);
    d_send(c0, &req);
  }
  {
    Gpushm__Request req = GPUSHM__REQUEST__INIT;
    Gpushm__RingRequest body = GPUSHM__RING_REQUEST__INIT;
    req.body_case = GPUSHM__REQUEST__BODY_RING;
    req.ring = &body;
    body.id = 1;
    body.evict = 77;
    d_send(c0, &req);
    body.evict = 2; /* the done timeline the attach made */
    d_send(c0, &req);
    d_send(c1, &req); /* a consumer may not evict */
    body.evict = 0;
    body.detach = true;
    d_send(c1, &req);
    body.id = 99;
    d_send(c1, &req);
  }
  d_list(c1, 0, 0, true);
  d_close(c1, 1);
  d_unlink(c0, "ring");
  d_close(c0, 1);
  finish("daemon", "rings");

  /* Rings' consumers' ready planes (0.8): a consumer's registration with the memfd the
   * harness sends (no semaphore: refused) and without a UUID, its own plane asked for
   * (none), a producer registering and asking for a consumer's (by its done timeline's
   * id, and one no consumer has), a reader that does not consume asking. */
  begin();
  put_byte(0);
  d_hello_as(c0, "producer", GPUSHM_FEATURE_SEGMENTS | GPUSHM_FEATURE_PROMISES |
                               GPUSHM_FEATURE_TIMELINES | GPUSHM_FEATURE_RINGS |
                               GPUSHM_FEATURE_SEMAPHORES | GPUSHM_FEATURE_GRAPHICS);
  d_hello_as(c1, "consumer", GPUSHM_FEATURE_SEGMENTS | GPUSHM_FEATURE_PROMISES |
                               GPUSHM_FEATURE_TIMELINES | GPUSHM_FEATURE_RINGS |
                               GPUSHM_FEATURE_SEMAPHORES | GPUSHM_FEATURE_GRAPHICS);
  d_create(c0, (struct create_spec){ .name = "ring", .size = 4096, .mode = 0644, .backend = 1,
                                     .kind = GPUSHM__KIND__KIND_RING, .ring_slots = 2 });
  {
    static uint8_t uuid[16] = { 0xfa, 0xfa, 0xfa, 0xfa, 0xfa, 0xfa, 0xfa, 0xfa,
                                0xfa, 0xfa, 0xfa, 0xfa, 0xfa, 0xfa, 0xfa, 0 };
    Gpushm__Request req = GPUSHM__REQUEST__INIT;
    Gpushm__OpenRequest body = GPUSHM__OPEN_REQUEST__INIT;
    Gpushm__SemaphoreRequest sem = GPUSHM__SEMAPHORE_REQUEST__INIT;
    body.key_case = GPUSHM__OPEN_REQUEST__KEY_NAME;
    body.name = "ring";
    body.read_only = true;
    body.kind = GPUSHM__KIND__KIND_RING;
    req.body_case = GPUSHM__REQUEST__BODY_OPEN;
    req.open = &body;
    d_send(c1, &req);
    sem.id = 1; /* before it consumes: a reader */
    req.body_case = GPUSHM__REQUEST__BODY_SEMAPHORE;
    req.semaphore = &sem;
    d_send(c1, &req);
    body.key_case = GPUSHM__OPEN_REQUEST__KEY_ID;
    body.id = 1;
    body.read_only = false;
    body.kind = GPUSHM__KIND__KIND_TIMELINE;
    body.ring_attach = true;
    req.body_case = GPUSHM__REQUEST__BODY_OPEN;
    req.open = &body;
    d_send(c1, &req);
    req.body_case = GPUSHM__REQUEST__BODY_SEMAPHORE;
    req.semaphore = &sem;
    d_send(c1, &req); /* its own: none yet */
    sem.device_uuid.data = uuid;
    sem.device_uuid.len = 16;
    d_send(c1 | (1u << FUZZ_D_FDS_SHIFT), &req);
    sem.device_uuid.len = 0;
    d_send(c1 | (1u << FUZZ_D_FDS_SHIFT), &req);
    sem.consumer = 2; /* the done timeline the attach made */
    d_send(c1, &req);
    d_send(c0, &req);
    sem.consumer = 77;
    d_send(c0, &req);
    sem.consumer = 0;
    sem.device_uuid.len = 16;
    d_send(c0 | (1u << FUZZ_D_FDS_SHIFT), &req);
    sem.id = 2; /* the done timeline itself */
    d_send(c1 | (1u << FUZZ_D_FDS_SHIFT), &req);
  }
  d_close(c1, 1);
  d_unlink(c0, "ring");
  d_close(c0, 1);
  finish("daemon", "ring-planes");

  /* Before hello, a second hello, a version the daemon does not speak. */
  begin();
  put_byte(0);
  d_ping(c0);
  d_hello(c1);
  d_hello(c1);
  {
    Gpushm__Request req = GPUSHM__REQUEST__INIT;
    Gpushm__Hello body = GPUSHM__HELLO__INIT;
    body.protocol_version = 99;
    body.client_name = "future";
    req.body_case = GPUSHM__REQUEST__BODY_HELLO;
    req.hello = &body;
    d_send(c0 | FUZZ_D_RECONNECT, &req);
    body.protocol_version = GPUSHM_PROTOCOL_VERSION;
    body.client_name = "a-client-name-longer-than-the-sixty-four-bytes-the-daemon-accepts!";
    d_send(c0 | FUZZ_D_RECONNECT, &req);
  }
  d_list(c1, 0, 0, false);
  finish("daemon", "hello-order");

  /* The same conversation as whole frames, headers and all. */
  begin();
  put_byte(0);
  d_hello(0);
  d_hello(FUZZ_D_CONN);
  d_create(0, (struct create_spec){ .name = "raw", .size = 4096, .mode = 0644 });
  d_open(FUZZ_D_CONN, "raw", 0, true, false);
  d_list(FUZZ_D_CONN, 0, 0, false);
  d_stats(0);
  d_clients(0, 0);
  d_ping(FUZZ_D_CONN);
  d_close(FUZZ_D_CONN, 1);
  d_unlink(0, "raw");
  finish("daemon", "raw-frames");
}

#undef H

/* ---- fuzz-client seeds ------------------------------------------------------------ */

static void c_ops(unsigned n, const unsigned char *ops)
{
  put_byte(n);
  put(ops, n);
}

/* A chunk whose body is reply; the target appends the request's id to it. */
static void c_reply(unsigned flags, unsigned fds, Gpushm__Reply *reply)
{
  size_t len = pack(&reply->base, WIRE_TYPE_REPLY, false, 0);
  put_byte(flags);
  put_byte(fds);
  put_u16(len);
  put(frame, len);
}

static void c_hello(void)
{
  static Gpushm__Backend backends[] = { GPUSHM__BACKEND__BACKEND_HOST };
  Gpushm__Reply reply = GPUSHM__REPLY__INIT;
  Gpushm__HelloReply body = GPUSHM__HELLO_REPLY__INIT;

  body.protocol_version = GPUSHM_PROTOCOL_VERSION;
  body.daemon_version = PACKAGE_VERSION;
  body.instance_id = 0x1234567890abcdefull;
  body.n_backends = 1;
  body.backends = backends;
  body.client_id = 1;
  reply.body_case = GPUSHM__REPLY__BODY_HELLO;
  reply.hello = &body;
  c_reply(0, FUZZ_C_FDS1(FUZZ_C_FD_STATUS_PAGE), &reply);
}

static void c_status(int status, const char *message)
{
  Gpushm__Reply reply = GPUSHM__REPLY__INIT;
  reply.status = status;
  reply.message = (char *)message;
  c_reply(0, 0, &reply);
}

static void c_ping(void)
{
  Gpushm__Reply reply = GPUSHM__REPLY__INIT;
  Gpushm__PingReply body = GPUSHM__PING_REPLY__INIT;
  reply.body_case = GPUSHM__REPLY__BODY_PING;
  reply.ping = &body;
  c_reply(0, 0, &reply);
}

static void fill_info(Gpushm__BufferInfo *info, uint64_t id, const char *name, uint64_t size,
                      int backend)
{
  gpushm__buffer_info__init(info);
  info->id = id;
  info->name = (char *)name;
  info->size = size;
  info->allocated = (size + 4095) / 4096 * 4096;
  info->backend = (Gpushm__Backend)backend;
  info->device = backend == GPUSHM_BACKEND_HOST ? -1 : 0;
  info->owner_uid = 1000;
  info->owner_gid = 1000;
  info->mode = 0640;
  info->linked = true;
  info->refs = 1;
  info->my_refs = 1;
  info->created_unix_ms = 1700000000000ull;
  info->creator_pid = 4711;
  info->holders_total = 1;
}

struct open_spec {
  uint64_t id;
  const char *name;
  uint64_t size;
  int backend;
  bool read_only, created, sync;
  unsigned fds; /* the fds byte, when not the ones the reply implies */
};

static void c_open(struct open_spec spec)
{
  static uint8_t handle[64] = { 1, 2, 3 }, uuid[16] = { 0x42 };
  Gpushm__Reply reply = GPUSHM__REPLY__INIT;
  Gpushm__OpenReply body = GPUSHM__OPEN_REPLY__INIT;
  Gpushm__BufferInfo info;
  unsigned fds = 0;
  int backend = spec.backend ? spec.backend : GPUSHM_BACKEND_HOST;

  fill_info(&info, spec.id, spec.name, spec.size, backend);
  info.sync = spec.sync;
  body.info = &info;
  body.created = spec.created;
  body.read_only = spec.read_only;
  body.has_control = spec.sync;
  if (backend != GPUSHM_BACKEND_HOST) {
    body.ipc_handle.data = handle;
    body.ipc_handle.len = sizeof handle;
    info.device_uuid.data = uuid;
    info.device_uuid.len = sizeof uuid;
  }
  if (backend == GPUSHM_BACKEND_HOST)
    fds = spec.sync ? FUZZ_C_FDS2(FUZZ_C_FD_DATA, FUZZ_C_FD_CONTROL) : FUZZ_C_FDS1(FUZZ_C_FD_DATA);
  else if (spec.sync)
    fds = FUZZ_C_FDS1(FUZZ_C_FD_CONTROL);
  if (spec.fds)
    fds = spec.fds;
  if (spec.read_only)
    fds |= FUZZ_C_FDS_READONLY;
  reply.body_case = GPUSHM__REPLY__BODY_OPEN;
  reply.open = &body;
  c_reply(0, fds, &reply);
}

static void c_list(uint64_t first_id, unsigned n, bool more)
{
  Gpushm__Reply reply = GPUSHM__REPLY__INIT;
  Gpushm__ListReply body = GPUSHM__LIST_REPLY__INIT;
  Gpushm__BufferInfo infos[4], *ptrs[4];
  Gpushm__Holder holders[2], *holder_ptrs[2];
  static const char *const names[] = { "a", "b", "frames", "weights" };

  for (unsigned h = 0; h < 2; h++) {
    gpushm__holder__init(&holders[h]);
    holders[h].client_id = h + 1;
    holders[h].pid = 100 + h;
    holders[h].uid = 1000;
    holders[h].refs = h + 1;
    holder_ptrs[h] = &holders[h];
  }
  for (unsigned i = 0; i < n && i < 4; i++) {
    /* the fourth is an event: no memory, the wire's event backend */
    fill_info(&infos[i], first_id + i, names[i], i == 3 ? 0 : 4096u << i,
              i == 3 ? GPUSHM__BACKEND__BACKEND_CUDA_EVENT : GPUSHM_BACKEND_HOST);
    infos[i].n_holders = i % 3;
    infos[i].holders = holder_ptrs;
    infos[i].holders_total = i % 3;
    ptrs[i] = &infos[i];
  }
  body.n_buffers = n;
  body.buffers = ptrs;
  body.more = more;
  reply.body_case = GPUSHM__REPLY__BODY_LIST;
  reply.list = &body;
  c_reply(0, 0, &reply);
}

static void c_stats(void)
{
  static uint8_t uuid[16] = { 0xaa, 0xbb };
  Gpushm__Reply reply = GPUSHM__REPLY__INIT;
  Gpushm__StatsReply body = GPUSHM__STATS_REPLY__INIT;
  Gpushm__Device dev = GPUSHM__DEVICE__INIT, *devs[] = { &dev };
  Gpushm__RequestCount counts[2], *count_ptrs[2];
  Gpushm__Usage usage = GPUSHM__USAGE__INIT, events = GPUSHM__USAGE__INIT;
  Gpushm__Usage *usage_ptrs[] = { &usage, &events };
  static const char *const types[] = { "hello", "create" };

  dev.ordinal = 0;
  dev.name = "Fuzz GPU";
  dev.uuid.data = uuid;
  dev.uuid.len = sizeof uuid;
  dev.total_memory = 80ull << 30;
  for (unsigned i = 0; i < 2; i++) {
    gpushm__request_count__init(&counts[i]);
    counts[i].type = (char *)types[i];
    counts[i].count = 10 + i;
    counts[i].errors = i;
    count_ptrs[i] = &counts[i];
  }
  usage.backend = GPUSHM__BACKEND__BACKEND_HOST;
  usage.device = -1;
  usage.buffers = 3;
  usage.bytes = 3 << 12;
  events.backend = GPUSHM__BACKEND__BACKEND_CUDA_EVENT;
  events.device = 0;
  events.buffers = 1;
  body.daemon_version = PACKAGE_VERSION;
  body.instance_id = 0x1234567890abcdefull;
  body.uptime_ms = 1000;
  body.clients = 2;
  body.buffers = 3;
  body.buffers_linked = 3;
  body.bytes_allocated = 3 << 12;
  body.requests = 21;
  body.open_fds = 12;
  body.next_buffer_id = 4;
  body.n_devices = 1;
  body.devices = devs;
  body.n_requests_by_type = 2;
  body.requests_by_type = count_ptrs;
  body.n_usage = 2;
  body.usage = usage_ptrs;
  reply.body_case = GPUSHM__REPLY__BODY_STATS;
  reply.stats = &body;
  c_reply(0, 0, &reply);
}

static void c_clients(uint32_t first_id, unsigned n, bool more)
{
  Gpushm__Reply reply = GPUSHM__REPLY__INIT;
  Gpushm__ClientsReply body = GPUSHM__CLIENTS_REPLY__INIT;
  Gpushm__ClientInfo infos[3], *ptrs[3];

  for (unsigned i = 0; i < n && i < 3; i++) {
    gpushm__client_info__init(&infos[i]);
    infos[i].client_id = first_id + i;
    infos[i].pid = 200 + i;
    infos[i].uid = 1000;
    infos[i].gid = 1000;
    infos[i].name = i ? "consumer" : "producer";
    infos[i].connected_unix_ms = 1700000000000ull;
    infos[i].buffers_held = i;
    infos[i].bytes_held = 4096u * i;
    ptrs[i] = &infos[i];
  }
  body.n_clients = n;
  body.clients = ptrs;
  body.more = more;
  reply.body_case = GPUSHM__REPLY__BODY_CLIENTS;
  reply.clients = &body;
  c_reply(0, 0, &reply);
}

#define OP FUZZ_C_OP

static void client_seeds(void)
{
  /* The admin calls. */
  begin();
  c_ops(4, (const unsigned char[]){ OP(FUZZ_C_OP_PING, 0), OP(FUZZ_C_OP_STATS, 0),
                                    OP(FUZZ_C_OP_LIST, 0), OP(FUZZ_C_OP_CLIENTS, 0) });
  c_hello();
  c_ping();
  c_stats();
  c_list(1, 3, false);
  c_clients(1, 2, false);
  finish("client", "admin");

  /* Create, use, close. */
  begin();
  c_ops(4, (const unsigned char[]){ OP(FUZZ_C_OP_CREATE, 2), OP(FUZZ_C_OP_TOUCH, 0),
                                    OP(FUZZ_C_OP_ACCESSORS, 0), OP(FUZZ_C_OP_CLOSE, 0) });
  c_hello();
  c_open((struct open_spec){ .id = 1, .name = "a", .size = 4096, .created = true });
  c_status(0, "");
  finish("client", "create");

  /* Read-only open, a cache hit, the same buffer by id read-write. */
  begin();
  c_ops(6, (const unsigned char[]){ OP(FUZZ_C_OP_OPEN, 2), OP(FUZZ_C_OP_OPEN, 2),
                                    OP(FUZZ_C_OP_OPEN_ID, 0), OP(FUZZ_C_OP_TOUCH, 0),
                                    OP(FUZZ_C_OP_TOUCH, 2), OP(FUZZ_C_OP_CLOSE_ALL, 0) });
  c_hello();
  c_open((struct open_spec){ .id = 1, .name = "a", .size = 100, .read_only = true });
  c_open((struct open_spec){ .id = 1, .name = "a", .size = 100 });
  c_status(0, "");
  c_status(0, "");
  finish("client", "open-cache");

  /* A sync buffer: release, acquire. */
  begin();
  c_ops(5, (const unsigned char[]){ OP(FUZZ_C_OP_CREATE, 6), OP(FUZZ_C_OP_SYNC, 8),
                                    OP(FUZZ_C_OP_SYNC, 1), OP(FUZZ_C_OP_ACCESSORS, 0),
                                    OP(FUZZ_C_OP_CLOSE, 0) });
  c_hello();
  c_open((struct open_spec){ .id = 7, .name = "a", .size = 4096, .created = true, .sync = true });
  c_status(0, "");
  finish("client", "sync");

  /* Paged listings. */
  begin();
  c_ops(2, (const unsigned char[]){ OP(FUZZ_C_OP_LIST, 1), OP(FUZZ_C_OP_CLIENTS, 0) });
  c_hello();
  c_list(1, 4, true);
  c_list(5, 2, false);
  c_clients(1, 3, true);
  c_clients(4, 1, false);
  finish("client", "paging");

  /* Admin replies that lie: the wrong body for the request (GPUSHM_E_PROTO), a list
   * page that does not move past the last one (the walk ends). */
  begin();
  c_ops(4, (const unsigned char[]){ OP(FUZZ_C_OP_LIST, 0), OP(FUZZ_C_OP_STATS, 0),
                                    OP(FUZZ_C_OP_CLIENTS, 0), OP(FUZZ_C_OP_LIST, 0) });
  c_hello();
  c_stats();
  c_list(1, 1, false);
  c_list(1, 1, false);
  c_list(1, 2, true);
  c_list(1, 2, true);
  finish("client", "admin-lies");

  /* Errors, then the daemon's last word (request id 0) ends the connection. */
  begin();
  c_ops(4, (const unsigned char[]){ OP(FUZZ_C_OP_OPEN, 1), OP(FUZZ_C_OP_UNLINK, 0),
                                    OP(FUZZ_C_OP_PING, 0), OP(FUZZ_C_OP_PING, 0) });
  c_hello();
  c_status(-GPUSHM_E_NOENT, "no buffer named 'b'");
  c_status(-GPUSHM_E_PERM, "'a' belongs to uid 0");
  {
    Gpushm__Reply reply = GPUSHM__REPLY__INIT;
    reply.status = -GPUSHM_E_PROTO;
    reply.message = "malformed request body";
    size_t len = pack(&reply.base, WIRE_TYPE_REPLY, false, 0);
    put_byte(FUZZ_C_KEEP_ID | FUZZ_C_HANGUP);
    put_byte(0);
    put_u16(len);
    put(frame, len);
  }
  finish("client", "errors");

  /* A buffer keeps its connection across a reconnect. */
  begin();
  c_ops(5, (const unsigned char[]){ OP(FUZZ_C_OP_OPEN, 0), OP(FUZZ_C_OP_RECONNECT, 0),
                                    OP(FUZZ_C_OP_PING, 0), OP(FUZZ_C_OP_OPEN, 1),
                                    OP(FUZZ_C_OP_CLOSE_ALL, 0) });
  c_hello();
  c_open((struct open_spec){ .id = 1, .name = "a", .size = 4096 });
  c_hello();
  c_ping();
  c_open((struct open_spec){ .id = 2, .name = "b", .size = 64 << 10 });
  c_status(0, "");
  c_status(0, "");
  finish("client", "reconnect");

  /* Device buffers and events: the import fails (no driver), the reference goes back. */
  begin();
  c_ops(3, (const unsigned char[]){ OP(FUZZ_C_OP_OPEN, 0), OP(FUZZ_C_OP_EVENT, 1),
                                    OP(FUZZ_C_OP_EVENT, 0) });
  c_hello();
  c_open((struct open_spec){ .id = 1, .name = "a", .size = 2 << 20,
                             .backend = GPUSHM_BACKEND_CUDA_IPC });
  c_status(0, "");
  c_open((struct open_spec){ .id = 2, .name = "b", .created = true,
                             .backend = GPUSHM__BACKEND__BACKEND_CUDA_EVENT });
  c_status(0, "");
  c_status(-GPUSHM_E_UNSUPPORTED, "unsupported: cuda-ipc backend unavailable");
  finish("client", "cuda");

  /* Replies that lie: a buffer larger than its memory, fds missing or extra. */
  begin();
  c_ops(4, (const unsigned char[]){ OP(FUZZ_C_OP_OPEN, 0), OP(FUZZ_C_OP_OPEN, 1),
                                    OP(FUZZ_C_OP_CREATE, 4), OP(FUZZ_C_OP_PING, 0) });
  c_hello();
  c_open((struct open_spec){ .id = 1, .name = "a", .size = 1 << 20 });
  c_status(0, "");
  c_open((struct open_spec){ .id = 2, .name = "b", .size = 4096, .sync = true });
  c_status(0, "");
  c_open((struct open_spec){ .id = 3, .name = "a", .size = 100 });
  c_status(0, "");
  c_ping();
  finish("client", "lies");

  /* A name unlinked meanwhile (the status page says so) is resolved again, and the
   * answer joins the handle already open. */
  begin();
  c_ops(5, (const unsigned char[]){ OP(FUZZ_C_OP_OPEN, 2), OP(FUZZ_C_OP_PING, 0),
                                    OP(FUZZ_C_OP_OPEN, 2), OP(FUZZ_C_OP_OPEN, 2),
                                    OP(FUZZ_C_OP_CLOSE_ALL, 0) });
  c_hello();
  c_open((struct open_spec){ .id = 1, .name = "a", .size = 4096, .read_only = true });
  {
    Gpushm__Reply reply = GPUSHM__REPLY__INIT;
    Gpushm__PingReply body = GPUSHM__PING_REPLY__INIT;
    reply.body_case = GPUSHM__REPLY__BODY_PING;
    reply.ping = &body;
    c_reply(FUZZ_C_UNLINKED, 0, &reply);
  }
  c_open((struct open_spec){ .id = 1, .name = "a", .size = 4096, .read_only = true });
  c_status(0, "");
  c_status(0, "");
  finish("client", "unlinked-name");

  /* Sync buffers whose control block is not one, or missing. */
  begin();
  c_ops(3, (const unsigned char[]){ OP(FUZZ_C_OP_CREATE, 6), OP(FUZZ_C_OP_CREATE, 7),
                                    OP(FUZZ_C_OP_OPEN, 0) });
  c_hello();
  c_open((struct open_spec){ .id = 1, .name = "a", .size = 4096, .created = true, .sync = true,
                             .fds = FUZZ_C_FDS2(FUZZ_C_FD_DATA, FUZZ_C_FD_DATA) });
  c_status(0, "");
  c_open((struct open_spec){ .id = 2, .name = "b", .size = 4096, .created = true, .sync = true,
                             .fds = FUZZ_C_FDS2(FUZZ_C_FD_DATA, FUZZ_C_FD_DEVNULL) });
  c_status(0, "");
  c_open((struct open_spec){ .id = 3, .name = "a", .size = 4096, .sync = true,
                             .fds = FUZZ_C_FDS1(FUZZ_C_FD_DATA) });
  c_status(0, "");
  finish("client", "bad-control");

  /* Statuses the protocol never uses (it sends positive error numbers): they must
   * still fail the call, never pass for success. */
  begin();
  c_ops(3, (const unsigned char[]){ OP(FUZZ_C_OP_OPEN, 0), OP(FUZZ_C_OP_PING, 0),
                                    OP(FUZZ_C_OP_UNLINK, 0) });
  c_hello();
  c_status(GPUSHM_E_NOENT, "negative status");
  c_status(-1000, "negative status");
  c_status(INT32_MIN, "the most negative status");
  finish("client", "negative-status");

  /* Whole frames with the ids the library will use. */
  begin();
  c_ops(1, (const unsigned char[]){ OP(FUZZ_C_OP_PING, 0) });
  {
    static Gpushm__Backend backends[] = { GPUSHM__BACKEND__BACKEND_HOST };
    Gpushm__Reply reply = GPUSHM__REPLY__INIT;
    Gpushm__HelloReply hello = GPUSHM__HELLO_REPLY__INIT;
    Gpushm__PingReply ping = GPUSHM__PING_REPLY__INIT;
    size_t len;

    hello.protocol_version = GPUSHM_PROTOCOL_VERSION;
    hello.daemon_version = PACKAGE_VERSION;
    hello.instance_id = 1;
    hello.n_backends = 1;
    hello.backends = backends;
    reply.request_id = 1;
    reply.body_case = GPUSHM__REPLY__BODY_HELLO;
    reply.hello = &hello;
    len = pack(&reply.base, WIRE_TYPE_REPLY, true, 1);
    put_byte(FUZZ_C_RAW);
    put_byte(FUZZ_C_FDS1(FUZZ_C_FD_STATUS_PAGE));
    put_u16(len);
    put(frame, len);
    reply.request_id = 2;
    reply.body_case = GPUSHM__REPLY__BODY_PING;
    reply.ping = &ping;
    len = pack(&reply.base, WIRE_TYPE_REPLY, true, 0);
    put_byte(FUZZ_C_RAW);
    put_byte(0);
    put_u16(len);
    put(frame, len);
  }
  finish("client", "raw-frames");
}

#undef OP

static void make_dir(const char *path)
{
  if (mkdir(path, 0755) < 0 && errno != EEXIST)
    die(path);
}

/* ---- fuzz-list-codec seeds: list reply bodies ------------------------------------ */

static void l_body(const char *name, uint64_t first_id, unsigned n, bool more, int status)
{
  Gpushm__Reply reply = GPUSHM__REPLY__INIT;
  Gpushm__ListReply body = GPUSHM__LIST_REPLY__INIT;
  Gpushm__BufferInfo infos[4], *ptrs[4];
  Gpushm__Holder holder = GPUSHM__HOLDER__INIT, *holder_ptr = &holder;
  static uint8_t uuid[16] = { 0x12, 0x34 };
  static const char *const names[] = { "a", "frames", "weights-0", "" };

  holder.client_id = 3;
  holder.pid = 4242;
  holder.uid = 1000;
  holder.refs = 2;
  for (unsigned i = 0; i < n && i < 4; i++) {
    fill_info(&infos[i], first_id + i, names[i], 4096u << i, GPUSHM_BACKEND_HOST);
    infos[i].device = i == 2 ? -1 : (int32_t)i;
    infos[i].n_holders = i == 1;
    infos[i].holders = &holder_ptr;
    if (i == 1) {
      infos[i].device_uuid.data = uuid;
      infos[i].device_uuid.len = sizeof uuid;
    }
    ptrs[i] = &infos[i];
  }
  body.n_buffers = n;
  body.buffers = ptrs;
  body.more = more;
  reply.request_id = first_id;
  if (status) {
    reply.status = status;
    reply.message = "refused";
  } else {
    reply.body_case = GPUSHM__REPLY__BODY_LIST;
    reply.list = &body;
  }
  begin();
  put(frame, pack(&reply.base, WIRE_TYPE_REPLY, false, 0));
  finish("list-codec", name);
}

static void list_codec_seeds(void)
{
  l_body("empty", 1, 0, false, 0);
  l_body("one", 7, 1, false, 0);
  l_body("four-more", 1u << 20, 4, true, 0);
  l_body("error", 9, 0, false, 1);
}

/* ---- fuzz-manifest-codec seeds: buffer sizes, then a weight manifest ---------------- */

static void weight_tensor(Gpushm__WeightTensor *t, const char *name, uint32_t code, uint32_t bits,
                          uint32_t lanes, size_t ndim, int64_t *shape, int64_t *strides,
                          uint32_t buffer, uint64_t offset)
{
  gpushm__weight_tensor__init(t);
  t->name = (char *)name;
  t->dtype_code = code;
  t->dtype_bits = bits;
  t->dtype_lanes = lanes;
  t->n_shape = ndim;
  t->shape = shape;
  t->n_strides = strides ? ndim : 0;
  t->strides = strides;
  t->buffer = buffer;
  t->offset = offset;
}

static void m_seed(const char *name, unsigned n_buffers, Gpushm__WeightTensor **tensors,
                   size_t n)
{
  Gpushm__WeightManifest m = GPUSHM__WEIGHT_MANIFEST__INIT;
  static uint8_t packed[4096];
  size_t len;

  m.version = 1;
  m.n_tensors = n;
  m.tensors = tensors;
  len = gpushm__weight_manifest__get_packed_size(&m);
  if (len > sizeof packed) {
    fprintf(stderr, "make-corpus: manifest seed too large\n");
    exit(1);
  }
  gpushm__weight_manifest__pack(&m, packed);
  begin();
  put_byte(n_buffers);
  for (unsigned b = 0; b < n_buffers; b++)
    for (unsigned k = 0; k < 8; k++)
      put_byte(k == 1 ? 0x10 : 0); /* 4096 bytes each */
  put(packed, len);
  finish("manifest-codec", name);
}

static void manifest_codec_seeds(void)
{
  static int64_t matrix[] = { 4, 8 }, column_major[] = { 1, 4 }, three[] = { 3 },
                 backwards[] = { -1 }, empty[] = { 0, 5 };
  Gpushm__WeightTensor t[5], *p[5];

  weight_tensor(&t[0], "model.embed_tokens.weight", 4, 16, 1, 2, matrix, NULL, 0, 0);
  weight_tensor(&t[1], "model.layers.0.mlp.down_proj.weight", 2, 32, 0, 2, matrix,
                column_major, 1, 256);
  weight_tensor(&t[2], "lm_head.weight", 4, 16, 1, 2, matrix, NULL, 0, 0); /* tied */
  weight_tensor(&t[3], "model.norm.weight", 0, 8, 4, 1, three, backwards, 0, 72);
  weight_tensor(&t[4], "model.layers.0.empty", 2, 32, 1, 2, empty, NULL, 1, 4096);
  for (unsigned i = 0; i < 5; i++)
    p[i] = &t[i];
  m_seed("one", 1, p, 1);
  m_seed("five", 2, p, 5);
  m_seed("no-buffers", 0, p, 2);
  p[1] = &t[2];
  m_seed("tied", 2, p, 2);
}

int main(int argc, char **argv)
{
  char path[4096];

  if (argc != 2) {
    fprintf(stderr, "usage: make-corpus DIR\n");
    return 2;
  }
  out_dir = argv[1];
  make_dir(out_dir);
  snprintf(path, sizeof path, "%s/daemon", out_dir);
  make_dir(path);
  snprintf(path, sizeof path, "%s/client", out_dir);
  make_dir(path);
  snprintf(path, sizeof path, "%s/list-codec", out_dir);
  make_dir(path);
  snprintf(path, sizeof path, "%s/manifest-codec", out_dir);
  make_dir(path);
  daemon_seeds();
  client_seeds();
  list_codec_seeds();
  manifest_codec_seeds();
  printf("make-corpus: %u seeds in %s/{daemon,client,list-codec,manifest-codec}\n", n_written,
         out_dir);
  return 0;
}
