/* SPDX-License-Identifier: MIT */
/* C producer for a Python consumer: creates a named buffer whose metadata is the
 * gpushm Python package's manifest (float32[N]), fills it with x[i] = i / 2 and exits;
 * the buffer outlives it (gpushmd owns it).  torch_consumer.py opens it as a tensor.
 * Usage: c-producer [NAME [N]]
 *
 * gpushm-specific lines: connect, options with the manifest, create, disconnect. */
#include <gpushm.h>

#include "../args.h"
#include "../devmem.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(const char *what, int r)
{
  fprintf(stderr, "c-producer: %s: %s: %s\n", what, gpushm_strerror(r), gpushm_last_error_message());
  return 1;
}

static const char usage[] =
  "usage: c-producer [NAME [N]]\n"
  "  Creates the buffer NAME (default py-demo) holding float32[N] (default 1048576)\n"
  "  with the Python package's manifest, writes x[i] = i / 2 and exits; the buffer\n"
  "  stays for torch_consumer.py NAME N.  Success prints\n"
  "  'c-producer: 'NAME': N floats written to host|device memory', exit 0.\n";

int main(int argc, char **argv)
{
  example_args("c-producer", argc, argv, 2, usage);
  const char *name = argc > 1 ? argv[1] : "py-demo";
  uint64_t n = argc > 2 ? strtoull(argv[2], NULL, 10) : 1u << 20;
  char manifest[256];
  gpushm_create_opts_t opts;
  gpushm_buffer_t *buf;
  gpushm_t *conn;
  float *x;
  int r;

  if (n == 0 || !(x = malloc(n * sizeof *x))) {
    fprintf(stderr, "c-producer: cannot hold %llu floats\n", (unsigned long long)n);
    return 1;
  }
  snprintf(manifest, sizeof manifest, "{\"gpushm\":1,\"tensors\":[{\"name\":\"\",\"dtype\":"
           "\"float32\",\"shape\":[%llu],\"offset\":0}]}", (unsigned long long)n);
  for (uint64_t i = 0; i < n; i++)
    x[i] = (float)i * 0.5f;

  if ((r = gpushm_connect(NULL, "c-producer", &conn)) < 0)
    return fail("connect", r);
  /* Device memory where gpushmd's default backend is a CUDA one (cuda-fd on GPU hosts). */
  gpushm_create_opts_init(&opts);
  opts.metadata = manifest, opts.metadata_size = (uint32_t)strlen(manifest), opts.mode = 0644;
  if ((r = gpushm_buffer_create(conn, name, n * sizeof *x, &opts, &buf)) < 0)
    return fail("create", r);
  if (devmem_attach(buf) < 0 || devmem_write(buf, 0, x, n * sizeof *x) < 0) {
    fprintf(stderr, "c-producer: cannot write %llu floats\n", (unsigned long long)n);
    return 1;
  }
  printf("c-producer: '%s': %llu floats written to %s\n", name, (unsigned long long)n,
         devmem_where(buf));
  free(x);
  gpushm_disconnect(conn); /* the buffer stays: persistent until unlinked */
  return 0;
}
