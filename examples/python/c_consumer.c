/* SPDX-License-Identifier: MIT */
/* C consumer of a Python producer's tensor: opens the buffer torch_producer.py shared,
 * prints its manifest, checks x[i] = i / 2 (float32) over the whole buffer and removes
 * the name.  Usage: c-consumer [NAME]
 *
 * gpushm-specific lines: connect, open, metadata, size, close_unlink. */
#include <gpushm.h>

#include "../args.h"
#include "../devmem.h"

#include <stdio.h>
#include <stdlib.h>

static int fail(const char *what, int r)
{
  fprintf(stderr, "c-consumer: %s: %s: %s\n", what, gpushm_strerror(r), gpushm_last_error_message());
  return 1;
}

static const char usage[] =
  "usage: c-consumer [NAME]\n"
  "  Opens the buffer NAME (default py-demo) that torch_producer.py NAME shared, prints\n"
  "  its manifest, checks x[i] = i / 2 over all of it and removes the name.  Success\n"
  "  prints 'c-consumer: N floats verified', exit 0.\n";

int main(int argc, char **argv)
{
  example_args("c-consumer", argc, argv, 1, usage);
  const char *name = argc > 1 ? argv[1] : "py-demo";
  const char *manifest;
  gpushm_buffer_t *buf;
  gpushm_t *conn;
  size_t len = 0;
  uint64_t n;
  float *x;
  int r;

  if ((r = gpushm_connect(NULL, "c-consumer", &conn)) < 0)
    return fail("connect", r);
  if ((r = gpushm_buffer_open(conn, name, 0, &buf)) < 0)
    return fail(name, r);
  /* NULL: no metadata at all, a buffer not shared by the Python package */
  if (!(manifest = gpushm_buffer_metadata(buf, &len)))
    manifest = "(none)", len = 6;
  printf("c-consumer: '%s' on %s, manifest %.*s\n", name, devmem_where(buf), (int)len, manifest);
  n = gpushm_buffer_size(buf) / sizeof *x;
  if (!(x = malloc(n * sizeof *x)) || devmem_attach(buf) < 0 ||
      devmem_read(buf, 0, x, n * sizeof *x) < 0) {
    fprintf(stderr, "c-consumer: cannot read %llu floats\n", (unsigned long long)n);
    return 1;
  }
  for (uint64_t i = 0; i < n; i++) {
    if (x[i] != (float)i * 0.5f) {
      fprintf(stderr, "c-consumer: x[%llu] = %g, expected %g\n", (unsigned long long)i, x[i],
              (float)i * 0.5f);
      return 1;
    }
  }
  printf("c-consumer: %llu floats verified\n", (unsigned long long)n);
  free(x);
  /* The hand-off is done: the name goes, then the memory.  The connection ends with the
   * process (the close is sent before the call returns). */
  if ((r = gpushm_buffer_close_unlink(buf)) < 0)
    return fail("close and unlink", r);
  return 0;
}
