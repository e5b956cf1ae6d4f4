/* SPDX-License-Identifier: MIT */
/* Sized option structs: how an option struct grows without breaking binaries. */
#include "config.h"
#include "error.h"
#include "gpushm.h"

#include <stdint.h>

#include <string.h>

/* The convention of Linux's copy_struct_from_user() (openat2(2), clone3(2)): the
 * caller says how big its struct is, in its first member.
 *  - Smaller than the first published layout: no version of the header ever made it
 *    (most often an opts never initialised, size 0): GPUSHM_E_INVAL.
 *  - Up to what this library knows: a caller built against this header or an older
 *    one.  Fields are read only below its size; the rest keep the defaults known
 *    already holds.
 *  - Larger: a caller built against a newer header.  Accepted only if every byte past
 *    what this library knows is zero, that is every newer field left at its default,
 *    meaning "do what older libraries do"; otherwise the caller asks for something this
 *    library would silently ignore: GPUSHM_E_UNSUPPORTED, naming the offset. */
int client_copy_opts(void *known, size_t known_size, const void *user, size_t min_size,
                     const char *what)
{
  uint32_t user_size;

  memcpy(&user_size, user, sizeof user_size);
  if (user_size < min_size)
    return client_error(GPUSHM_E_INVAL, "%s size %u is below the smallest layout (%zu bytes): "
                        "initialise it with its _init() function", what, user_size, min_size);
  for (size_t at = known_size; at < user_size; at++)
    if (((const unsigned char *)user)[at])
      return client_error(GPUSHM_E_UNSUPPORTED, "%s has a non-zero byte at offset %zu, past "
                          "the %zu bytes this library (%s) knows: a field it does not support",
                          what, at, known_size, gpushm_version_string());
  memcpy(known, user, user_size < known_size ? user_size : known_size);
  return 0;
}
