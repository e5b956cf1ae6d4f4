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

/* The protocol's vocabulary, which the daemon speaks without the library's public
 * header (include/gpushm.h spells the same values for applications, and the library
 * asserts that they agree: client/error.c).  A reply's status is a PROTO_E_* (0: ok). */
#define PROTO_ERRNO_MAP(XX)                                               \
  XX(INVAL, 1, "invalid argument")                                        \
  XX(NOENT, 2, "no such buffer")                                          \
  XX(EXIST, 3, "buffer already exists")                                   \
  XX(PERM, 4, "permission denied")                                        \
  XX(NOMEM, 5, "out of memory")                                           \
  XX(LIMIT, 6, "limit or quota exceeded")                                 \
  XX(PROTO, 7, "protocol error")                                          \
  XX(VERSION, 8, "protocol version mismatch")                             \
  XX(CONNECT, 9, "cannot connect to gpushmd")                             \
  XX(DISCONNECTED, 10, "connection to gpushmd lost")                      \
  XX(UNSUPPORTED, 11, "operation not supported")                          \
  XX(IO, 12, "system call failed")                                        \
  XX(CUDA, 13, "CUDA driver error")                                       \
  XX(NAME, 14, "invalid buffer name")                                     \
  XX(TIMEOUT, 15, "timed out")                                           \
  XX(LOST, 16, "signaller lost")

enum proto_error {
#define PROTO_ERRNO_ENUM_(name, num, text) PROTO_E_##name = -(num),
  PROTO_ERRNO_MAP(PROTO_ERRNO_ENUM_)
#undef PROTO_ERRNO_ENUM_
};

/* Memory backends, as the wire numbers them (gpushm.proto's Backend; 4 names an event,
 * which has none). */
enum proto_backend {
  PROTO_BACKEND_DEFAULT = 0,
  PROTO_BACKEND_HOST = 1,
  PROTO_BACKEND_CUDA_IPC = 2,
  PROTO_BACKEND_CUDA_FD = 3,
  PROTO_BACKEND_CUDA_FABRIC = 5,
  PROTO_BACKEND_EXTERNAL = 6
};

enum proto_lifetime {
  PROTO_LIFETIME_PERSISTENT = 0,
  PROTO_LIFETIME_SESSION = 1
};

/* What a daemon offers at Hello (HelloReply.features); a library names what it knows. */
#define PROTO_FEATURE_DISCONNECT 0x1ull
#define PROTO_FEATURE_FDSTORE 0x2ull
#define PROTO_FEATURE_SEGMENTS 0x4ull
#define PROTO_FEATURE_ONEWAY 0x8ull
#define PROTO_FEATURE_METADATA 0x10ull
#define PROTO_FEATURE_GRAPHICS 0x20ull
#define PROTO_FEATURE_STRICT_MODE 0x40ull
#define PROTO_FEATURE_IPC_FENCES 0x80ull
#define PROTO_FEATURE_PROMISES 0x100ull
#define PROTO_FEATURE_TIMELINES 0x200ull
#define PROTO_FEATURE_RINGS 0x400ull
#define PROTO_FEATURE_SEMAPHORES 0x800ull
#define PROTO_FEATURE_WEIGHTS 0x1000ull
#define PROTO_FEATURE_OPEN_WAIT 0x2000ull
#define PROTO_FEATURE_CREATE_GROUP 0x4000ull

/* Where the daemon listens unless told otherwise, and the NVIDIA driver's IMEX channels
 * (a process makes or imports fabric memory only if it can open one). */
#define PROTO_DEFAULT_SOCKET "/run/gpushm/gpushmd.sock"
#define PROTO_IMEX_CHANNELS_DIR "/dev/nvidia-caps-imex-channels"

#endif
