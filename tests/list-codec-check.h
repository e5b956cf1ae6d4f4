/* What test-list-codec and fuzz-list-codec both check: that list_codec_unpack_reply()
 * reads a body exactly as protobuf-c does.  Static functions: each includer gets its
 * own copy (the fuzz target is built with other flags). */
#ifndef GPUSHM_LIST_CODEC_CHECK_H
#define GPUSHM_LIST_CODEC_CHECK_H

#include "gpushm.pb-c.h"
#include "list_codec.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* An arena as the library's lists use one: frees do nothing, everything goes at once. */
struct check_arena {
  ProtobufCAllocator alloc;
  void **blocks;
  size_t n, cap;
};

static void *check_arena_alloc(void *data, size_t size)
{
  struct check_arena *a = data;
  void *p;

  if (a->n == a->cap) {
    size_t cap = a->cap ? 2 * a->cap : 64;
    void **grown = realloc(a->blocks, cap * sizeof *grown);
    if (!grown)
      return NULL;
    a->blocks = grown;
    a->cap = cap;
  }
  if ((p = malloc(size ? size : 1)))
    a->blocks[a->n++] = p;
  return p;
}

static void check_arena_free(void *data, void *p)
{
  (void)data;
  (void)p;
}

static void check_arena_init(struct check_arena *a)
{
  memset(a, 0, sizeof *a);
  a->alloc.alloc = check_arena_alloc;
  a->alloc.free = check_arena_free;
  a->alloc.allocator_data = a;
}

static void check_arena_clear(struct check_arena *a)
{
  while (a->n)
    free(a->blocks[--a->n]);
  free(a->blocks);
  a->blocks = NULL;
  a->cap = 0;
}

static bool check_same_string(const char *a, const char *b)
{
  return strcmp(a ? a : "", b ? b : "") == 0;
}

/* Every field either side knows; *why names the first difference. */
static bool check_same_info(const Gpushm__BufferInfo *a, const Gpushm__BufferInfo *b,
                            const char **why)
{
#define SAME(f)                                                                          \
  do {                                                                                   \
    if (a->f != b->f) {                                                                  \
      *why = #f;                                                                         \
      return false;                                                                      \
    }                                                                                    \
  } while (0)
  SAME(id); SAME(size); SAME(backend); SAME(device); SAME(owner_uid); SAME(owner_gid);
  SAME(mode); SAME(lifetime); SAME(refs); SAME(my_refs); SAME(created_unix_ms);
  SAME(creator_pid); SAME(holders_total); SAME(n_holders); SAME(allocated);
  SAME(segment_id); SAME(device_uuid.len); SAME(metadata.len);
  if (!a->linked != !b->linked || !a->sync != !b->sync) {
    *why = "linked or sync";
    return false;
  }
  if (!check_same_string(a->name, b->name)) {
    *why = "name";
    return false;
  }
  if (a->device_uuid.len && memcmp(a->device_uuid.data, b->device_uuid.data, a->device_uuid.len)) {
    *why = "device_uuid";
    return false;
  }
  if (a->metadata.len && memcmp(a->metadata.data, b->metadata.data, a->metadata.len)) {
    *why = "metadata";
    return false;
  }
  for (size_t i = 0; i < a->n_holders; i++) {
    const Gpushm__Holder *x = a->holders[i], *y = b->holders[i];
    if (x->client_id != y->client_id || x->pid != y->pid || x->uid != y->uid ||
        x->refs != y->refs) {
      *why = "holders";
      return false;
    }
  }
  return true;
#undef SAME
}

static bool check_same_reply(const Gpushm__Reply *a, const Gpushm__Reply *b, const char **why)
{
  if (a->request_id != b->request_id || a->status != b->status) {
    *why = "request_id or status";
    return false;
  }
  if (!check_same_string(a->message, b->message)) {
    *why = "message";
    return false;
  }
  if (a->body_case != b->body_case) {
    *why = "body_case";
    return false;
  }
  if (a->body_case != GPUSHM__REPLY__BODY_LIST)
    return true;
  if (a->list->n_buffers != b->list->n_buffers || !a->list->more != !b->list->more) {
    *why = "n_buffers or more";
    return false;
  }
  for (size_t i = 0; i < a->list->n_buffers; i++)
    if (!check_same_info(a->list->buffers[i], b->list->buffers[i], why))
      return false;
  return true;
}

/* Decodes body both ways; true if both refuse it or both read the same.  On false,
 * *why says what differed. */
static bool check_decode_alike(const uint8_t *body, size_t len, const char **why)
{
  struct check_arena arena;
  Gpushm__Reply *fast, *slow;
  bool same;

  check_arena_init(&arena);
  fast = list_codec_unpack_reply(&arena.alloc, len, body);
  slow = gpushm__reply__unpack(NULL, len, body);
  if (!fast || !slow) {
    same = !fast && !slow;
    *why = fast ? "list_codec accepted what protobuf-c refuses"
                : slow ? "list_codec refused what protobuf-c accepts" : "";
  } else {
    same = check_same_reply(fast, slow, why);
  }
  /* The peek that sends a walk's next request early must agree with the full decode
   * wherever both answer: request id, last entry's id, more.  (Where they disagree, or
   * the peek passes a page the decode refuses, the walk fails and the connection is
   * closed: never a wrong page.) */
  {
    uint64_t request_id, last_id;
    bool more;
    if (same && slow && list_codec_peek_page(body, len, &request_id, &last_id, &more)) {
      const Gpushm__ListReply *l = slow && slow->body_case == GPUSHM__REPLY__BODY_LIST ? slow->list : NULL;
      if (!l || slow->status != 0 || request_id != slow->request_id || !more != !l->more ||
          last_id != (l->n_buffers ? l->buffers[l->n_buffers - 1]->id : 0)) {
        same = false;
        *why = "list_codec_peek_page differs from the decode";
      }
    }
  }
  if (slow)
    gpushm__reply__free_unpacked(slow, NULL);
  check_arena_clear(&arena);
  return same;
}

#endif
