/* SPDX-License-Identifier: MIT */
#include "config.h"
#include "error.h"
#include "gpushm.h"
#include "protocol.h"
#include "wire.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* The public header spells the protocol's vocabulary (proto/protocol.h) for applications;
 * the daemon speaks the protocol's.  They must agree, value for value. */
#define SAME_ERROR_(name, num, text) \
  _Static_assert((int)GPUSHM_E_##name == (int)PROTO_E_##name, "GPUSHM_E_" #name);
PROTO_ERRNO_MAP(SAME_ERROR_)
#undef SAME_ERROR_
_Static_assert((int)GPUSHM_BACKEND_DEFAULT == (int)PROTO_BACKEND_DEFAULT &&
               (int)GPUSHM_BACKEND_HOST == (int)PROTO_BACKEND_HOST &&
               (int)GPUSHM_BACKEND_CUDA_IPC == (int)PROTO_BACKEND_CUDA_IPC &&
               (int)GPUSHM_BACKEND_CUDA_FD == (int)PROTO_BACKEND_CUDA_FD &&
               (int)GPUSHM_BACKEND_CUDA_FABRIC == (int)PROTO_BACKEND_CUDA_FABRIC &&
               (int)GPUSHM_BACKEND_EXTERNAL == (int)PROTO_BACKEND_EXTERNAL,
               "one numbering of backends");
_Static_assert((int)GPUSHM_LIFETIME_PERSISTENT == (int)PROTO_LIFETIME_PERSISTENT &&
               (int)GPUSHM_LIFETIME_SESSION == (int)PROTO_LIFETIME_SESSION,
               "one numbering of lifetimes");
_Static_assert(GPUSHM_FEATURE_DISCONNECT == PROTO_FEATURE_DISCONNECT &&
               GPUSHM_FEATURE_FDSTORE == PROTO_FEATURE_FDSTORE &&
               GPUSHM_FEATURE_SEGMENTS == PROTO_FEATURE_SEGMENTS &&
               GPUSHM_FEATURE_ONEWAY == PROTO_FEATURE_ONEWAY &&
               GPUSHM_FEATURE_METADATA == PROTO_FEATURE_METADATA &&
               GPUSHM_FEATURE_GRAPHICS == PROTO_FEATURE_GRAPHICS &&
               GPUSHM_FEATURE_STRICT_MODE == PROTO_FEATURE_STRICT_MODE &&
               GPUSHM_FEATURE_IPC_FENCES == PROTO_FEATURE_IPC_FENCES &&
               GPUSHM_FEATURE_PROMISES == PROTO_FEATURE_PROMISES &&
               GPUSHM_FEATURE_TIMELINES == PROTO_FEATURE_TIMELINES &&
               GPUSHM_FEATURE_RINGS == PROTO_FEATURE_RINGS &&
               GPUSHM_FEATURE_SEMAPHORES == PROTO_FEATURE_SEMAPHORES &&
               GPUSHM_FEATURE_WEIGHTS == PROTO_FEATURE_WEIGHTS &&
               GPUSHM_FEATURE_OPEN_WAIT == PROTO_FEATURE_OPEN_WAIT &&
               GPUSHM_FEATURE_CREATE_GROUP == PROTO_FEATURE_CREATE_GROUP, "one set of features");

/* Room for a driver's words and what to do about them. */
static __thread char last_error[512];
static __thread int last_errno;

int client_error(int err, const char *fmt, ...)
{
  va_list ap;
  last_errno = 0;
  va_start(ap, fmt);
  vsnprintf(last_error, sizeof last_error, fmt, ap);
  va_end(ap);
  return err;
}

void client_clear_error(void)
{
  last_error[0] = '\0';
  last_errno = 0;
}

void client_set_errno(int err)
{
  last_errno = err;
}

const char *gpushm_last_error_message(void)
{
  return last_error;
}

int gpushm_last_error_errno(void)
{
  return last_errno;
}

const char *gpushm_strerror(int err)
{
  switch (err) {
  case GPUSHM_OK:
    return "success";
#define GPUSHM_STRERROR_CASE_(name, num, text) \
  case GPUSHM_E_##name:                        \
    return text;
    GPUSHM_ERRNO_MAP(GPUSHM_STRERROR_CASE_)
#undef GPUSHM_STRERROR_CASE_
  default:
    return "unknown error";
  }
}

unsigned gpushm_version(void)
{
  return GPUSHM_VERSION_HEX;
}

const char *gpushm_version_string(void)
{
  return PACKAGE_VERSION;
}

const char *gpushm_backend_name(int backend)
{
  return wire_backend_name(backend);
}

int gpushm_backend_from_name(const char *name)
{
  return wire_backend_value(name);
}

void client_save_error(struct client_saved_error *saved)
{
  snprintf(saved->text, sizeof saved->text, "%s", last_error);
  saved->err = last_errno;
}

void client_restore_error(const struct client_saved_error *saved)
{
  snprintf(last_error, sizeof last_error, "%s", saved->text);
  last_errno = saved->err;
}
