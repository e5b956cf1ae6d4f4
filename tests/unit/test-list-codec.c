/* SPDX-License-Identifier: MIT */
/* list_codec against protobuf-c: for random buffer entries (zero and extreme values,
 * negative ints, names of every length and byte, holders, UUIDs) the hand-packed
 * entry, page and frame are byte for byte protobuf-c's, and the hand unpacker reads
 * protobuf-c's packing (and every truncation, corruption and unknown field of it)
 * exactly as protobuf-c does. */
#include "config.h"
#include "harness.h"
#include "gpushm.pb-c.h"
#include "list-codec-check.h"
#include "wire.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Under valgrind (GPUSHM_TEST_VALGRIND) a tenth: each page is read again for every
 * truncation and corruption of it, which took 50 s of CI's valgrind stage at 300; the
 * plain and sanitizer runs read all 300. */
#define PAGES 300
#define PAGES_UNDER_VALGRIND 30
#define MAX_ENTRIES 40

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint64_t next(void)
{
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}

/* 0 often (proto3 leaves it out), small values, and the extremes */
static uint64_t value(void)
{
  switch (next() % 6) {
  case 0: return 0;
  case 1: return next() % 128;
  case 2: return next() % 70000;
  case 3: return UINT64_MAX;
  case 4: return UINT32_MAX;
  default: return next();
  }
}

/* An entry and what it points to, in one arena emptied with each page. */
struct entry_store {
  Gpushm__BufferInfo info;
};

static struct check_arena page_arena;

static void *page_alloc(size_t size)
{
  void *p = check_arena_alloc(&page_arena, size ? size : 1);
  CHECK(p != NULL);
  memset(p, 0, size ? size : 1);
  return p;
}

static void random_message(ProtobufCMessage *m, const ProtobufCMessageDescriptor *d);

/* A random value for one field (of its type, as the schema says). */
static void random_value(const ProtobufCFieldDescriptor *f, void *at)
{
  switch (f->type) {
  case PROTOBUF_C_TYPE_INT32: case PROTOBUF_C_TYPE_SINT32: case PROTOBUF_C_TYPE_SFIXED32:
  case PROTOBUF_C_TYPE_UINT32: case PROTOBUF_C_TYPE_FIXED32: case PROTOBUF_C_TYPE_ENUM: {
    uint32_t v = (uint32_t)value();
    memcpy(at, &v, 4);
    break;
  }
  case PROTOBUF_C_TYPE_INT64: case PROTOBUF_C_TYPE_SINT64: case PROTOBUF_C_TYPE_SFIXED64:
  case PROTOBUF_C_TYPE_UINT64: case PROTOBUF_C_TYPE_FIXED64: {
    uint64_t v = value();
    memcpy(at, &v, 8);
    break;
  }
  case PROTOBUF_C_TYPE_FLOAT: case PROTOBUF_C_TYPE_DOUBLE:
    CHECK(!"no float fields in a buffer entry"); /* floats are not bit-exact round trips */
    break;
  case PROTOBUF_C_TYPE_BOOL:
    *(protobuf_c_boolean *)at = next() % 2;
    break;
  case PROTOBUF_C_TYPE_STRING: {
    size_t len = next() % 4 == 0 ? 0 : next() % (GPUSHM_LIMIT_NAME_LEN + 1);
    char *text = page_alloc(len + 1);
    for (size_t i = 0; i < len; i++)
      text[i] = (char)(1 + next() % 255); /* any byte but NUL */
    *(char **)at = text;
    break;
  }
  case PROTOBUF_C_TYPE_BYTES: {
    /* now and then the most a buffer's metadata may be */
    size_t len = next() % 3 ? 0 : next() % 20 == 0 ? GPUSHM_LIMIT_METADATA : next() % 200;
    ProtobufCBinaryData *b = at;
    b->data = page_alloc(len);
    b->len = len;
    for (size_t i = 0; i < len; i++)
      b->data[i] = (uint8_t)next();
    break;
  }
  case PROTOBUF_C_TYPE_MESSAGE: {
    const ProtobufCMessageDescriptor *d = f->descriptor;
    ProtobufCMessage *inner = page_alloc(d->sizeof_message);
    random_message(inner, d);
    *(ProtobufCMessage **)at = inner;
    break;
  }
  }
}

/* Every field the schema gives the message, at every depth, set at random (repeated
 * ones a few times, now and then to the limit a page allows): a field added to
 * gpushm.proto is filled without a line here, so a codec that drops it fails. */
static void random_message(ProtobufCMessage *m, const ProtobufCMessageDescriptor *d)
{
  protobuf_c_message_init(d, m);
  for (unsigned i = 0; i < d->n_fields; i++) {
    const ProtobufCFieldDescriptor *f = &d->fields[i];
    char *at = (char *)m + f->offset;

    if (f->label == PROTOBUF_C_LABEL_REPEATED) {
      size_t n = next() % 3 == 0 ? next() % 4 : 0, size = check_value_size(f);
      char *items;
      if (next() % 50 == 0)
        n = GPUSHM_LIMIT_HOLDERS_LISTED;
      items = page_alloc(n * size);
      for (size_t k = 0; k < n; k++)
        random_value(f, items + k * size);
      *(size_t *)((char *)m + f->quantifier_offset) = n;
      *(char **)at = items;
    } else {
      random_value(f, at);
    }
  }
}

static void random_entry(struct entry_store *e)
{
  random_message(&e->info.base, &gpushm__buffer_info__descriptor);
}

static struct entry_store entries[MAX_ENTRIES];
static uint8_t page[GPUSHM_LIMIT_FRAME_BODY], fast_frame[WIRE_FRAME_MAX],
  slow_frame[WIRE_FRAME_MAX], scratch[GPUSHM_LIMIT_FRAME_BODY];

static void expect_alike(const uint8_t *body, size_t len, const char *what)
{
  const char *why = "";
  if (!check_decode_alike(body, len, &why)) {
    fprintf(stderr, "%s: list_codec and protobuf-c differ: %s\n", what, why);
    exit(1);
  }
}

/* One random page: packed both ways, then read back both ways, whole and damaged. */
static void one_page(unsigned round)
{
  check_arena_clear(&page_arena);
  check_arena_init(&page_arena);
  Gpushm__Reply reply = GPUSHM__REPLY__INIT;
  Gpushm__ListReply list = GPUSHM__LIST_REPLY__INIT;
  Gpushm__BufferInfo *infos[MAX_ENTRIES];
  size_t n = next() % MAX_ENTRIES, used = 0, len;
  const uint8_t *body;
  long fast_len, slow_len;
  uint8_t *end = page;

  for (size_t i = 0; i < n; i++) {
    size_t info_size, entry_size;
    uint8_t *entry_end;

    random_entry(&entries[i]);
    infos[i] = &entries[i].info;
    info_size = list_codec_info_size(infos[i]);
    CHECK(info_size == gpushm__buffer_info__get_packed_size(infos[i]));
    entry_size = list_codec_entry_size(info_size);
    if (used + entry_size > sizeof page - LIST_CODEC_MORE_SIZE - 64) {
      n = i;
      break;
    }
    entry_end = list_codec_put_entry(end, infos[i], info_size);
    CHECK((size_t)(entry_end - end) == entry_size);
    /* the entry's body is protobuf-c's packing of it */
    CHECK(gpushm__buffer_info__pack(infos[i], scratch) == info_size);
    CHECK(memcmp(entry_end - info_size, scratch, info_size) == 0);
    end = entry_end;
    used += entry_size;
  }
  list.more = next() % 2;
  end = list_codec_put_more(end, list.more);
  list.n_buffers = n;
  list.buffers = infos;
  reply.request_id = round % 5 == 0 ? 0 : value();
  reply.body_case = GPUSHM__REPLY__BODY_LIST;
  reply.list = &list;

  fast_len = list_codec_encode_reply(fast_frame, reply.request_id, page, (size_t)(end - page));
  slow_len = wire_encode(slow_frame, WIRE_TYPE_REPLY, &reply.base, 0);
  CHECK(fast_len > 0 && fast_len == slow_len);
  CHECK(memcmp(fast_frame, slow_frame, (size_t)fast_len) == 0);

  body = fast_frame + WIRE_HEADER_SIZE;
  len = (size_t)fast_len - WIRE_HEADER_SIZE;
  expect_alike(body, len, "a page");
  /* the peek answers for every page the daemon packs (expect_alike checked what) */
  {
    uint64_t request_id, last_id;
    bool more;
    CHECK(list_codec_peek_page(body, len, &request_id, &last_id, &more));
    CHECK(request_id == reply.request_id && more == list.more &&
          last_id == (n ? infos[n - 1]->id : 0));
  }
  /* truncations (most fail, some are shorter valid messages) */
  for (size_t cut = 0; cut < len; cut += 1 + len / 64)
    expect_alike(body, cut, "a truncated page");
  /* corruption: one byte changed at a time */
  for (unsigned k = 0; k < 32 && len; k++) {
    size_t at = next() % len;
    memcpy(scratch, body, len);
    scratch[at] = (uint8_t)next();
    expect_alike(scratch, len, "a corrupted page");
  }
}

/* Fields a newer daemon might add, and bodies that are not plain list pages. */
static void test_unusual_bodies(void)
{
  static const uint8_t error_reply[] = { 0x08, 0x07, 0x10, 0x02, 0x1a, 0x03, 'b', 'a', 'd' };
  /* a page with one entry {id 5, unknown field 30 = varint 9, name "x"} and, in the
   * Reply, unknown field 99 (fixed32) */
  static const uint8_t unknown_fields[] = {
    0x08, 0x01,                               /* request_id 1 */
    0x62, 0x0a,                               /* list, 10 bytes */
    0x0a, 0x08, 0x08, 0x05, 0xf0, 0x01, 0x09, /* entry: id 5, field 30 = 9 */
    0x12, 0x01, 'x',                          /* name "x" */
    0x9d, 0x06, 1, 2, 3, 4,                   /* Reply field 99, fixed32 */
  };
  /* the holder's tag spelt in three bytes (overlong): still field 16 */
  static const uint8_t overlong_tag[] = {
    0x62, 0x08, 0x0a, 0x06, 0x82, 0x81, 0x00, 0x02, 0x08, 0x03,
  };
  /* list twice: protobuf-c merges; the fast path must hand it over */
  static const uint8_t list_twice[] = { 0x62, 0x04, 0x0a, 0x02, 0x08, 0x01,
                                        0x62, 0x04, 0x0a, 0x02, 0x08, 0x02 };
  /* a ping body: not a list */
  static const uint8_t ping[] = { 0x08, 0x01, 0x72, 0x00 };
  /* an empty list followed by an empty stats body (found by fuzz-list-codec):
   * protobuf-c keeps the stats, so the peek must not call it a page; and the reverse */
  static const uint8_t list_then_stats[] = { 0x62, 0x00, 0x6a, 0x00 };
  static const uint8_t stats_then_list[] = { 0x6a, 0x00, 0x62, 0x00 };
  /* an empty list, then a semaphore body (0.8, field 16: found by fuzz-list-codec when it
   * came): a well-formed one protobuf-c keeps, a malformed one it refuses */
  static const uint8_t list_then_semaphore[] = { 0x62, 0x00, 0x82, 0x01, 0x00 };
  static const uint8_t list_then_bad_semaphore[] = { 0x62, 0x00, 0x82, 0x01, 0x01, 0xff };
  /* an entry with each of its submessages twice: protobuf-c merges the two (the weights'
   * repeated buffers, one in each, make two: found by fuzz-list-codec), so the fast path
   * must hand any such entry over */
  static const uint8_t submessage_twice[][14] = {
    { 0x62, 0x0c, 0x0a, 0x0a, 0xd2, 0x01, 0x02, 0x12, 0x00, 0xd2, 0x01, 0x02, 0x12, 0x00 },
    { 0x62, 0x0c, 0x0a, 0x0a, 0xb2, 0x01, 0x02, 0x08, 0x03, 0xb2, 0x01, 0x02, 0x10, 0x04 },
    { 0x62, 0x0c, 0x0a, 0x0a, 0xba, 0x01, 0x02, 0x08, 0x03, 0xba, 0x01, 0x02, 0x10, 0x04 },
    { 0x62, 0x0c, 0x0a, 0x0a, 0xca, 0x01, 0x02, 0x08, 0x03, 0xca, 0x01, 0x02, 0x10, 0x04 },
  };
  uint64_t request_id, last_id;
  bool more;
  struct check_arena arena;
  Gpushm__Reply *r;

  expect_alike(error_reply, sizeof error_reply, "an error reply");
  expect_alike(unknown_fields, sizeof unknown_fields, "unknown fields");
  expect_alike(overlong_tag, sizeof overlong_tag, "an overlong tag");
  expect_alike(list_twice, sizeof list_twice, "list twice");
  expect_alike(ping, sizeof ping, "a ping reply");
  expect_alike(list_then_stats, sizeof list_then_stats, "list, then stats");
  expect_alike(stats_then_list, sizeof stats_then_list, "stats, then list");
  expect_alike(list_then_semaphore, sizeof list_then_semaphore, "list, then a semaphore body");
  expect_alike(list_then_bad_semaphore, sizeof list_then_bad_semaphore,
               "list, then a malformed semaphore body");
  for (size_t i = 0; i < sizeof submessage_twice / sizeof *submessage_twice; i++)
    expect_alike(submessage_twice[i], sizeof submessage_twice[i], "a submessage twice");
  CHECK(!list_codec_peek_page(list_then_semaphore, sizeof list_then_semaphore, &request_id,
                              &last_id, &more));
  CHECK(!list_codec_peek_page(list_then_stats, sizeof list_then_stats, &request_id,
                              &last_id, &more));
  CHECK(!list_codec_peek_page(stats_then_list, sizeof stats_then_list, &request_id,
                              &last_id, &more));
  CHECK(!list_codec_peek_page(ping, sizeof ping, &request_id, &last_id, &more));
  CHECK(list_codec_peek_page(list_twice, 6, &request_id, &last_id, &more) && last_id == 1);

  check_arena_init(&arena);
  r = list_codec_unpack_reply(&arena.alloc, sizeof unknown_fields, unknown_fields);
  CHECK(r && r->body_case == GPUSHM__REPLY__BODY_LIST && r->list->n_buffers == 1);
  CHECK(r->list->buffers[0]->id == 5 && strcmp(r->list->buffers[0]->name, "x") == 0);
  r = list_codec_unpack_reply(&arena.alloc, sizeof error_reply, error_reply);
  CHECK(r && r->status == 2 && strcmp(r->message, "bad") == 0);
  check_arena_clear(&arena);
}

int main(void)
{
  const unsigned pages = getenv("GPUSHM_TEST_VALGRIND") ? PAGES_UNDER_VALGRIND : PAGES;

  for (unsigned round = 0; round < pages; round++)
    one_page(round);
  test_unusual_bodies();
  printf("test-list-codec: %u pages packed and read alike\n", pages);
  return 0;
}
