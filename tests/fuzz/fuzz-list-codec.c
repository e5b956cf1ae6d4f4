/* SPDX-License-Identifier: MIT */
/* libFuzzer target: the library's hand-coded list reply reader against protobuf-c.
 * The input is a reply body.  list_codec_unpack_reply() must refuse what protobuf-c
 * refuses and read everything else exactly as protobuf-c does (tests/list-codec-check.h);
 * ASan and UBSan watch it read past nothing. */
#include "config.h"
#include "list-codec-check.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  const char *why = "";

  if (!check_decode_alike(data, size, &why)) {
    fprintf(stderr, "fuzz-list-codec: list_codec and protobuf-c differ: %s\n", why);
    abort();
  }
  return 0;
}
