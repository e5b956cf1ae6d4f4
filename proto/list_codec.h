/* SPDX-License-Identifier: MIT */
/* Buffer-list pages coded by hand, bytes identical to protobuf-c's.
 *
 * A list of 100k buffers is some 250 pages of ~400 BufferInfo entries.  protobuf-c
 * sizes a nested message again at every level it is nested in (the page's Reply,
 * its ListReply, the entry itself: four sizing walks and a packing walk per entry) and
 * unpacks through its generic descriptor machinery; together that was half of the
 * daemon's and the library's CPU time for a list.  These functions do the same work in
 * one walk each way.  The wire format does not change: anything protobuf-c packs, the
 * library decodes, and what the daemon packs here is byte for byte what protobuf-c
 * would (tests/unit/test-list-codec.c, fuzz-list-codec). */
#ifndef GPUSHM_LIST_CODEC_H
#define GPUSHM_LIST_CODEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <protobuf-c/protobuf-c.h>
#include "gpushm.pb-c.h"

/* Packed size of info (its body). */
size_t list_codec_info_size(const Gpushm__BufferInfo *info);

/* Packed size of a ListReply entry of that body size: tag, length and body. */
size_t list_codec_entry_size(size_t info_size);

/* Packs info as an entry of a ListReply (tag, length, body) at out, which has
 * list_codec_entry_size(info_size) bytes; info_size is list_codec_info_size(info).
 * Returns the end. */
uint8_t *list_codec_put_entry(uint8_t *out, const Gpushm__BufferInfo *info, size_t info_size);

/* Ends a ListReply's entries with its "more" field; returns the end (at most
 * LIST_CODEC_MORE_SIZE bytes written). */
#define LIST_CODEC_MORE_SIZE 2u
uint8_t *list_codec_put_more(uint8_t *out, int more);

/* A whole reply frame (header included) to request_id whose body is a ListReply of
 * the packed entries (and "more") in page[0..page_len): what wire_encode() makes of a
 * Reply with such a list.  Returns the frame's length, or -EMSGSIZE past the limit. */
long list_codec_encode_reply(uint8_t *buf, uint64_t request_id, const uint8_t *page,
                             size_t page_len);

/* gpushm__reply__unpack() for replies to list requests: the same result, quicker.  A
 * body that is not a plain list reply as gpushmd packs one (another body, a list field
 * twice, a varint or length protobuf-c might read otherwise) is handed to
 * gpushm__reply__unpack() whole, so what is accepted and how is protobuf-c's.  alloc
 * must be an arena (its free may be a no-op): the result is freed with
 * gpushm__reply__free_unpacked(), which walks it with alloc. */
Gpushm__Reply *list_codec_unpack_reply(ProtobufCAllocator *alloc, size_t len,
                                       const uint8_t *data);

/* Reads only what the next page's request needs from a successful list reply body:
 * its request id, its last entry's id and its more flag.  False for an error reply or
 * anything unusual; the full decode decides then. */
bool list_codec_peek_page(const uint8_t *body, size_t len, uint64_t *request_id,
                          uint64_t *last_id, bool *more);

#endif
