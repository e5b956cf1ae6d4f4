/* SPDX-License-Identifier: MIT */
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

/* Two messages of one type, field by field as the schema (their descriptor) has them,
 * at every depth: a field added to gpushm.proto is compared without a line here.
 * *why names the first field that differs. */
static bool check_same_message(const ProtobufCMessage *a, const ProtobufCMessage *b,
                               const ProtobufCMessageDescriptor *d, const char **why);

static bool check_same_value(const ProtobufCFieldDescriptor *f, const void *x, const void *y,
                             const char **why)
{
  switch (f->type) {
  case PROTOBUF_C_TYPE_INT32: case PROTOBUF_C_TYPE_SINT32: case PROTOBUF_C_TYPE_SFIXED32:
  case PROTOBUF_C_TYPE_UINT32: case PROTOBUF_C_TYPE_FIXED32: case PROTOBUF_C_TYPE_ENUM:
  case PROTOBUF_C_TYPE_FLOAT:
    return memcmp(x, y, 4) == 0;
  case PROTOBUF_C_TYPE_INT64: case PROTOBUF_C_TYPE_SINT64: case PROTOBUF_C_TYPE_SFIXED64:
  case PROTOBUF_C_TYPE_UINT64: case PROTOBUF_C_TYPE_FIXED64: case PROTOBUF_C_TYPE_DOUBLE:
    return memcmp(x, y, 8) == 0;
  case PROTOBUF_C_TYPE_BOOL:
    return !*(const protobuf_c_boolean *)x == !*(const protobuf_c_boolean *)y;
  case PROTOBUF_C_TYPE_STRING:
    return check_same_string(*(char *const *)x, *(char *const *)y);
  case PROTOBUF_C_TYPE_BYTES: {
    const ProtobufCBinaryData *p = x, *q = y;
    return p->len == q->len && (!p->len || memcmp(p->data, q->data, p->len) == 0);
  }
  case PROTOBUF_C_TYPE_MESSAGE: {
    const ProtobufCMessage *p = *(ProtobufCMessage *const *)x, *q = *(ProtobufCMessage *const *)y;
    if (!p || !q)
      return !p == !q;
    return check_same_message(p, q, f->descriptor, why);
  }
  }
  return false;
}

static size_t check_value_size(const ProtobufCFieldDescriptor *f)
{
  switch (f->type) {
  case PROTOBUF_C_TYPE_INT64: case PROTOBUF_C_TYPE_SINT64: case PROTOBUF_C_TYPE_SFIXED64:
  case PROTOBUF_C_TYPE_UINT64: case PROTOBUF_C_TYPE_FIXED64: case PROTOBUF_C_TYPE_DOUBLE:
    return 8;
  case PROTOBUF_C_TYPE_BOOL: return sizeof(protobuf_c_boolean);
  case PROTOBUF_C_TYPE_STRING: return sizeof(char *);
  case PROTOBUF_C_TYPE_BYTES: return sizeof(ProtobufCBinaryData);
  case PROTOBUF_C_TYPE_MESSAGE: return sizeof(ProtobufCMessage *);
  default: return 4;
  }
}

static bool check_same_message(const ProtobufCMessage *a, const ProtobufCMessage *b,
                               const ProtobufCMessageDescriptor *d, const char **why)
{
  for (unsigned i = 0; i < d->n_fields; i++) {
    const ProtobufCFieldDescriptor *f = &d->fields[i];
    const char *x = (const char *)a + f->offset, *y = (const char *)b + f->offset;
    bool same = true;

    if (f->label == PROTOBUF_C_LABEL_REPEATED) {
      size_t n = *(const size_t *)((const char *)a + f->quantifier_offset);
      size_t size = check_value_size(f);
      if (n != *(const size_t *)((const char *)b + f->quantifier_offset)) {
        same = false;
      } else {
        const char *xs = *(char *const *)x, *ys = *(char *const *)y;
        for (size_t k = 0; k < n && same; k++)
          same = check_same_value(f, xs + k * size, ys + k * size, why);
      }
    } else {
      same = check_same_value(f, x, y, why);
    }
    if (!same) {
      if (f->type != PROTOBUF_C_TYPE_MESSAGE || !*why || !**why)
        *why = f->name;
      return false;
    }
  }
  return true;
}

/* Every field either side knows; *why names the first difference. */
static bool check_same_info(const Gpushm__BufferInfo *a, const Gpushm__BufferInfo *b,
                            const char **why)
{
  *why = "";
  return check_same_message(&a->base, &b->base, &gpushm__buffer_info__descriptor, why);
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
