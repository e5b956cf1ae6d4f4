/* SPDX-License-Identifier: MIT */
/* Protocol constants, kept beside the schema (gpushm.proto) they version. */
#ifndef GPUSHM_PROTOCOL_H
#define GPUSHM_PROTOCOL_H

/* The frame header's layout (proto/wire.h): changes only if the header itself does. */
#define GPUSHM_WIRE_VERSION 1
/* What the messages mean: Hello carries it; bumped when a request's meaning changes in
 * a way old peers cannot ignore. */
#define GPUSHM_PROTOCOL_VERSION 1
/* The oldest protocol version this side still speaks. */
#define GPUSHM_PROTOCOL_MIN_VERSION 1

#endif
