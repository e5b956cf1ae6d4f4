/* SPDX-License-Identifier: MIT */
/* Hand-coded BufferInfo list pages: see list_codec.h for why.  Field numbers and types
 * are BufferInfo's, Holder's, ListReply's and Reply's in gpushm.proto; proto3 rules:
 * a scalar at its zero value, an empty string or bytes is left out, and int32 and enum
 * values are sign-extended to 64 bits (ten bytes when negative). */
#include "list_codec.h"
#include "pb_varint.h"
#include "wire.h"

#include <errno.h>
#include <stdbool.h>
#include <string.h>


/* ---- packing --------------------------------------------------------------------- */


/* int32 and enums: negative values go on the wire as 64-bit two's complement */
static uint64_t wire_int32(int32_t v)
{
  return (uint64_t)(int64_t)v;
}

/* One walk for both: SIZE_ONLY counts, otherwise writes.  The same code doing both
 * is what keeps the size and the bytes in agreement. */
#define VARINT(field, value)                                                             \
  do {                                                                                   \
    uint64_t v_ = (value);                                                               \
    if (v_) {                                                                            \
      if (p)                                                                             \
        p = pb_put_varint(pb_put_tag(p, (field), PB_WT_VARINT), v_);                              \
      n += pb_tag_size(field) + pb_varint_size(v_);                                            \
    }                                                                                    \
  } while (0)
#define BYTES(field, data, len)                                                          \
  do {                                                                                   \
    size_t l_ = (len);                                                                   \
    if (l_) {                                                                            \
      if (p) {                                                                           \
        p = pb_put_varint(pb_put_tag(p, (field), PB_WT_LEN), l_);                                 \
        memcpy(p, (data), l_);                                                           \
        p += l_;                                                                         \
      }                                                                                  \
      n += pb_tag_size(field) + pb_varint_size(l_) + l_;                                       \
    }                                                                                    \
  } while (0)

#define SUBMESSAGE(field, msg, prefix)                                                 \
  do {                                                                                 \
    if (msg) {                                                                         \
      size_t l_ = prefix##__get_packed_size(msg);                                      \
      if (p) {                                                                         \
        p = pb_put_varint(pb_put_tag(p, (field), PB_WT_LEN), l_);                               \
        p += prefix##__pack(msg, p);                                                   \
      }                                                                                \
      n += pb_tag_size(field) + pb_varint_size(l_) + l_;                                     \
    }                                                                                  \
  } while (0)

static size_t holder_body(uint8_t *p, const Gpushm__Holder *h)
{
  size_t n = 0;

  VARINT(1, h->client_id);
  VARINT(2, h->pid);
  VARINT(3, h->uid);
  VARINT(4, h->refs);
  VARINT(5, h->read_write ? 1 : 0);
  VARINT(6, h->ring_consumer ? 1 : 0);
  return n;
}

/* Writes info's body at p (if p) and returns its size. */
static size_t info_body(uint8_t *p, const Gpushm__BufferInfo *info)
{
  size_t n = 0;

  VARINT(1, info->id);
  BYTES(2, info->name, info->name ? strlen(info->name) : 0);
  VARINT(3, info->size);
  VARINT(4, wire_int32((int32_t)info->backend));
  VARINT(5, wire_int32(info->device));
  VARINT(6, info->owner_uid);
  VARINT(7, info->owner_gid);
  VARINT(8, info->mode);
  VARINT(9, wire_int32((int32_t)info->lifetime));
  VARINT(10, info->linked ? 1 : 0);
  VARINT(11, info->refs);
  VARINT(12, info->my_refs);
  VARINT(13, info->created_unix_ms);
  VARINT(14, info->creator_pid);
  VARINT(15, info->holders_total);
  for (size_t i = 0; i < info->n_holders; i++) {
    /* a repeated message is packed even when empty */
    size_t len = holder_body(NULL, info->holders[i]);
    if (p) {
      p = pb_put_varint(pb_put_tag(p, 16, PB_WT_LEN), len);
      p += holder_body(p, info->holders[i]);
    }
    n += pb_tag_size(16) + pb_varint_size(len) + len;
  }
  VARINT(17, info->allocated);
  BYTES(18, info->device_uuid.data, info->device_uuid.len);
  VARINT(19, info->sync ? 1 : 0);
  VARINT(20, info->segment_id);
  BYTES(21, info->metadata.data, info->metadata.len);
  /* Images and registered memory are few and their descriptions small: protobuf-c packs
   * them (the speed of a long list is in the fields above). */
  SUBMESSAGE(22, info->image, gpushm__image_desc);
  SUBMESSAGE(23, info->external, gpushm__external_memory);
  VARINT(24, wire_int32((int32_t)info->kind));
  SUBMESSAGE(25, info->ring, gpushm__ring_info);
  SUBMESSAGE(26, info->weights, gpushm__weights_info);
  return n;
}

#undef VARINT
#undef BYTES
#undef SUBMESSAGE

size_t list_codec_info_size(const Gpushm__BufferInfo *info)
{
  return info_body(NULL, info);
}

size_t list_codec_entry_size(size_t info_size)
{
  return pb_tag_size(1) + pb_varint_size(info_size) + info_size;
}

uint8_t *list_codec_put_entry(uint8_t *out, const Gpushm__BufferInfo *info, size_t info_size)
{
  out = pb_put_varint(pb_put_tag(out, 1, PB_WT_LEN), info_size);
  return out + info_body(out, info);
}

uint8_t *list_codec_put_more(uint8_t *out, int more)
{
  return more ? pb_put_varint(pb_put_tag(out, 2, PB_WT_VARINT), 1) : out;
}

long list_codec_encode_reply(uint8_t *buf, uint64_t request_id, const uint8_t *page,
                             size_t page_len)
{
  size_t body_len = (request_id ? pb_tag_size(1) + pb_varint_size(request_id) : 0) +
                    pb_tag_size(GPUSHM__REPLY__BODY_LIST) + pb_varint_size(page_len) + page_len;
  struct wire_header h = {
    .magic = WIRE_MAGIC,
    .version = GPUSHM_WIRE_VERSION,
    .type = WIRE_TYPE_REPLY,
    .body_len = (uint32_t)body_len,
    .n_fds = 0,
  };
  uint8_t *p = buf + WIRE_HEADER_SIZE;

  if (body_len > GPUSHM_LIMIT_FRAME_BODY)
    return -EMSGSIZE;
  memcpy(buf, &h, sizeof h);
  if (request_id)
    p = pb_put_varint(pb_put_tag(p, 1, PB_WT_VARINT), request_id);
  p = pb_put_varint(pb_put_tag(p, GPUSHM__REPLY__BODY_LIST, PB_WT_LEN), page_len);
  memcpy(p, page, page_len);
  return (long)(WIRE_HEADER_SIZE + body_len);
}

/* ---- unpacking ------------------------------------------------------------------- */

/* Anything this reader does not take as gpushmd writes it ends the fast path, and
 * protobuf-c reads the body instead: so no rule of protobuf-c's about odd encodings
 * (overlong varints, lengths, wire types, repeated oneofs) needs copying here. */

static inline bool get_varint(struct pb_reader *r, uint64_t *out)
{
  if (r->p < r->end && *r->p < 0x80) {
    *out = *r->p++;
    return true;
  }
  return pb_get_varint_slow(r, out);
}

static bool get_tag(struct pb_reader *r, unsigned *field, unsigned *wire_type)
{
  const uint8_t *start = r->p;
  uint64_t v;

  if (!get_varint(r, &v) || r->p - start > 5 || v >> 3 == 0 || v >> 3 > 0x1fffffff)
    return false;
  *field = (unsigned)(v >> 3);
  *wire_type = (unsigned)(v & 7);
  return true;
}

/* A length-delimited field's contents, as a reader of their own. */
static bool get_len(struct pb_reader *r, struct pb_reader *inner)
{
  const uint8_t *start = r->p;
  uint64_t len;

  if (!get_varint(r, &len) || r->p - start > 5 || len > (uint64_t)(r->end - r->p))
    return false;
  inner->p = r->p;
  inner->end = r->p + len;
  r->p += len;
  return true;
}

/* An unknown field (a newer daemon's) is skipped, as protobuf-c's callers ignore it. */
static bool skip_field(struct pb_reader *r, unsigned wire_type)
{
  struct pb_reader inner;
  uint64_t v;

  switch (wire_type) {
  case PB_WT_VARINT:
    return get_varint(r, &v);
  case PB_WT_FIXED64:
    if (r->end - r->p < 8)
      return false;
    r->p += 8;
    return true;
  case PB_WT_FIXED32:
    if (r->end - r->p < 4)
      return false;
    r->p += 4;
    return true;
  case PB_WT_LEN:
    return get_len(r, &inner);
  default:
    return false;
  }
}

/* Occurrences of field (any wire type: a wrong one fails later) in a message. */
static bool count_field(struct pb_reader r, unsigned field, size_t *count)
{
  unsigned f, wt;

  *count = 0;
  while (r.p < r.end) {
    if (!get_tag(&r, &f, &wt) || !skip_field(&r, wt))
      return false;
    *count += f == field;
  }
  return true;
}

static void *arena(ProtobufCAllocator *alloc, size_t size)
{
  return alloc->alloc(alloc->allocator_data, size);
}

/* n pointers to n zeroed-by-init structs of size bytes each, in one allocation (the
 * layout protobuf-c's repeated message fields have: an array of pointers) */
static void **ptr_array(ProtobufCAllocator *alloc, size_t n, size_t size)
{
  void **ptrs = arena(alloc, n * (sizeof *ptrs + size));

  for (size_t i = 0; ptrs && i < n; i++)
    ptrs[i] = (char *)(ptrs + n) + i * size;
  return ptrs;
}

static char *get_string(ProtobufCAllocator *alloc, const struct pb_reader *s)
{
  size_t len = (size_t)(s->end - s->p);
  char *str = arena(alloc, len + 1);

  if (str) {
    memcpy(str, s->p, len);
    str[len] = '\0';
  }
  return str;
}

#define EXPECT(wt)                                                                       \
  do {                                                                                   \
    if (wire_type != (wt))                                                               \
      return false;                                                                      \
  } while (0)

static bool get_holder(struct pb_reader r, Gpushm__Holder *h)
{
  unsigned field, wire_type;
  uint64_t v;

  gpushm__holder__init(h);
  while (r.p < r.end) {
    if (!get_tag(&r, &field, &wire_type))
      return false;
    if (field > 6) {
      if (!skip_field(&r, wire_type))
        return false;
      continue;
    }
    EXPECT(PB_WT_VARINT);
    if (!get_varint(&r, &v))
      return false;
    switch (field) {
    case 1: h->client_id = (uint32_t)v; break;
    case 2: h->pid = (uint32_t)v; break;
    case 3: h->uid = (uint32_t)v; break;
    case 4: h->refs = (uint32_t)v; break;
    case 5: h->read_write = v != 0; break;
    case 6: h->ring_consumer = v != 0; break;
    }
  }
  return true;
}

/* A bytes field; a repeated one replaces the earlier, as protobuf-c's does. */
static bool get_bytes(ProtobufCAllocator *alloc, const struct pb_reader *s,
                      ProtobufCBinaryData *out)
{
  out->len = (size_t)(s->end - s->p);
  out->data = NULL;
  if (out->len) {
    if (!(out->data = arena(alloc, out->len)))
      return false;
    memcpy(out->data, s->p, out->len);
  }
  return true;
}

static bool get_info(ProtobufCAllocator *alloc, struct pb_reader r, Gpushm__BufferInfo *info)
{
  unsigned field, wire_type;
  size_t n_holders = 0;
  uint64_t v;

  gpushm__buffer_info__init(info);
  while (r.p < r.end) {
    const uint8_t *field_start = r.p;
    struct pb_reader s;

    if (!get_tag(&r, &field, &wire_type))
      return false;
    switch (field) {
    case 2:
      EXPECT(PB_WT_LEN);
      if (!get_len(&r, &s) || !(info->name = get_string(alloc, &s)))
        return false;
      continue;
    case 16:
      EXPECT(PB_WT_LEN);
      /* most buffers in a long list have no holder: counted only when one comes */
      if (!info->holders) {
        struct pb_reader rest = { field_start, r.end };
        if (!count_field(rest, 16, &n_holders) ||
            !(info->holders = (Gpushm__Holder **)ptr_array(alloc, n_holders,
                                                           sizeof **info->holders)))
          return false;
      }
      if (info->n_holders == n_holders || !get_len(&r, &s) ||
          !get_holder(s, info->holders[info->n_holders++]))
        return false;
      continue;
    case 18:
    case 21:
      EXPECT(PB_WT_LEN);
      if (!get_len(&r, &s) ||
          !get_bytes(alloc, &s, field == 18 ? &info->device_uuid : &info->metadata))
        return false;
      continue;
    case 22:
      EXPECT(PB_WT_LEN);
      /* a second one of 22, 23, 25 or 26 is merged into the first: protobuf-c's business */
      if (info->image || !get_len(&r, &s) ||
          !(info->image = gpushm__image_desc__unpack(alloc, (size_t)(s.end - s.p), s.p)))
        return false;
      continue;
    case 23:
      EXPECT(PB_WT_LEN);
      if (info->external || !get_len(&r, &s) ||
          !(info->external =
              gpushm__external_memory__unpack(alloc, (size_t)(s.end - s.p), s.p)))
        return false;
      continue;
    case 25:
      EXPECT(PB_WT_LEN);
      if (info->ring || !get_len(&r, &s) ||
          !(info->ring = gpushm__ring_info__unpack(alloc, (size_t)(s.end - s.p), s.p)))
        return false;
      continue;
    case 26:
      EXPECT(PB_WT_LEN);
      if (info->weights || !get_len(&r, &s) ||
          !(info->weights = gpushm__weights_info__unpack(alloc, (size_t)(s.end - s.p), s.p)))
        return false;
      continue;
    }
    if (field > 24) {
      if (!skip_field(&r, wire_type))
        return false;
      continue;
    }
    EXPECT(PB_WT_VARINT);
    if (!get_varint(&r, &v))
      return false;
    switch (field) {
    case 1: info->id = v; break;
    case 3: info->size = v; break;
    case 4: info->backend = (Gpushm__Backend)(int32_t)(uint32_t)v; break;
    case 24: info->kind = (Gpushm__Kind)(int32_t)(uint32_t)v; break;
    case 5: info->device = (int32_t)(uint32_t)v; break;
    case 6: info->owner_uid = (uint32_t)v; break;
    case 7: info->owner_gid = (uint32_t)v; break;
    case 8: info->mode = (uint32_t)v; break;
    case 9: info->lifetime = (Gpushm__Lifetime)(int32_t)(uint32_t)v; break;
    case 10: info->linked = v != 0; break;
    case 11: info->refs = (uint32_t)v; break;
    case 12: info->my_refs = (uint32_t)v; break;
    case 13: info->created_unix_ms = v; break;
    case 14: info->creator_pid = (uint32_t)v; break;
    case 15: info->holders_total = (uint32_t)v; break;
    case 17: info->allocated = v; break;
    case 19: info->sync = v != 0; break;
    case 20: info->segment_id = v; break;
    }
  }
  return true;
}

static bool get_list(ProtobufCAllocator *alloc, struct pb_reader r, Gpushm__ListReply *list)
{
  unsigned field, wire_type;
  size_t n;
  uint64_t v;

  gpushm__list_reply__init(list);
  if (!count_field(r, 1, &n))
    return false;
  if (n && !(list->buffers = (Gpushm__BufferInfo **)ptr_array(alloc, n, sizeof **list->buffers)))
    return false;
  while (r.p < r.end) {
    struct pb_reader s;

    if (!get_tag(&r, &field, &wire_type))
      return false;
    if (field == 1) {
      EXPECT(PB_WT_LEN);
      if (list->n_buffers == n || !get_len(&r, &s) ||
          !get_info(alloc, s, list->buffers[list->n_buffers++]))
        return false;
    } else if (field == 2) {
      EXPECT(PB_WT_VARINT);
      if (!get_varint(&r, &v))
        return false;
      list->more = v != 0;
    } else if (!skip_field(&r, wire_type)) {
      return false;
    }
  }
  return true;
}

static bool get_reply(ProtobufCAllocator *alloc, struct pb_reader r, Gpushm__Reply *reply)
{
  unsigned field, wire_type;
  uint64_t v;

  gpushm__reply__init(reply);
  while (r.p < r.end) {
    struct pb_reader s;

    if (!get_tag(&r, &field, &wire_type))
      return false;
    switch (field) {
    case 1:
    case 2:
      EXPECT(PB_WT_VARINT);
      if (!get_varint(&r, &v))
        return false;
      if (field == 1)
        reply->request_id = v;
      else
        reply->status = (int32_t)(uint32_t)v;
      break;
    case 3:
      EXPECT(PB_WT_LEN);
      if (!get_len(&r, &s) || !(reply->message = get_string(alloc, &s)))
        return false;
      break;
    case GPUSHM__REPLY__BODY_LIST:
      EXPECT(PB_WT_LEN);
      /* a second one would be merged into the first: protobuf-c's business */
      if (reply->body_case != GPUSHM__REPLY__BODY__NOT_SET)
        return false;
      if (!(reply->list = arena(alloc, sizeof *reply->list)) || !get_len(&r, &s) ||
          !get_list(alloc, s, reply->list))
        return false;
      reply->body_case = GPUSHM__REPLY__BODY_LIST;
      break;
    case GPUSHM__REPLY__BODY_HELLO:
    case GPUSHM__REPLY__BODY_OPEN:
    case GPUSHM__REPLY__BODY_STATS:
    case GPUSHM__REPLY__BODY_PING:
    case GPUSHM__REPLY__BODY_CLIENTS:
    case GPUSHM__REPLY__BODY_SEMAPHORE:
      return false;
    default:
      if (!skip_field(&r, wire_type))
        return false;
    }
  }
  return true;
}

#undef EXPECT

/* The last entry's id of a ListReply body, and its more flag; false for anything
 * unusual (as get_list: the full decode decides those). */
static bool peek_list(struct pb_reader r, uint64_t *last_id, bool *more)
{
  unsigned field, wire_type;
  uint64_t v;

  while (r.p < r.end) {
    struct pb_reader entry;

    if (!get_tag(&r, &field, &wire_type))
      return false;
    if (field == 1) {
      if (wire_type != PB_WT_LEN)
        return false;
      if (!get_len(&r, &entry))
        return false;
      *last_id = 0; /* an entry without an id has id 0 */
      while (entry.p < entry.end) {
        if (!get_tag(&entry, &field, &wire_type))
          return false;
        if (field != 1) {
          if (!skip_field(&entry, wire_type))
            return false;
          continue;
        }
        if (wire_type != PB_WT_VARINT)
        return false;
        if (!get_varint(&entry, last_id))
          return false;
      }
    } else if (field == 2) {
      if (wire_type != PB_WT_VARINT)
        return false;
      if (!get_varint(&r, &v))
        return false;
      *more = v != 0;
    } else if (!skip_field(&r, wire_type)) {
      return false;
    }
  }
  return true;
}

bool list_codec_peek_page(const uint8_t *body, size_t len, uint64_t *request_id,
                          uint64_t *last_id, bool *more)
{
  struct pb_reader r = { body, body + len }, list = { NULL, NULL };
  unsigned field, wire_type;
  uint64_t v;

  *request_id = *last_id = 0;
  *more = false;
  while (r.p < r.end) {
    if (!get_tag(&r, &field, &wire_type))
      return false;
    if (field == 1 || field == 2) {
      if (wire_type != PB_WT_VARINT)
        return false;
      if (!get_varint(&r, &v) || (field == 2 && v != 0))
        return false;
      if (field == 1)
        *request_id = v;
    } else if (field == GPUSHM__REPLY__BODY_LIST) {
      if (wire_type != PB_WT_LEN)
        return false;
      if (list.p || !get_len(&r, &list))
        return false;
    } else if (field == GPUSHM__REPLY__BODY_HELLO || field == GPUSHM__REPLY__BODY_OPEN ||
               field == GPUSHM__REPLY__BODY_STATS || field == GPUSHM__REPLY__BODY_PING ||
               field == GPUSHM__REPLY__BODY_CLIENTS || field == GPUSHM__REPLY__BODY_SEMAPHORE) {
      /* Another body anywhere in the frame makes it not (only) a list page: protobuf-c
       * keeps the last body it reads, so the peek gives up as get_reply does. */
      return false;
    } else if (!skip_field(&r, wire_type)) {
      return false;
    }
  }
  return list.p && peek_list(list, last_id, more);
}

Gpushm__Reply *list_codec_unpack_reply(ProtobufCAllocator *alloc, size_t len,
                                       const uint8_t *data)
{
  struct pb_reader r = { data, data + len };
  Gpushm__Reply *reply = arena(alloc, sizeof *reply);

  /* What the fast path allocated before giving up stays in the arena until the list
   * is freed: at most one page's worth. */
  if (reply && get_reply(alloc, r, reply))
    return reply;
  return gpushm__reply__unpack(alloc, len, data);
}
