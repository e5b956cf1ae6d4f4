/* SPDX-License-Identifier: MIT */
#include "config.h"
#include "error.h"
#include "gpushm.h"
#include "wire.h"

#include <stdarg.h>
#include <stdio.h>

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
