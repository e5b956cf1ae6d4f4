/* SPDX-License-Identifier: MIT */
/* C producer for a Python consumer: creates a named buffer whose metadata is the
 * gpushm Python package's manifest (float32[N]), fills it with x[i] = i / 2 and exits;
 * the buffer outlives it (gpushmd owns it).  torch_consumer.py opens it as a tensor.
 * Usage: c-producer [NAME [N]]
 *
 * gpushm-specific lines: connect, options with the manifest, create, disconnect. */
#include "gpushm.h"
#include "devmem.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
  const char *name = argc > 1 ? argv[1] : "py-demo";
  uint64_t n = argc > 2 ? strtoull(argv[2], NULL, 10) : 1u << 20;
  char manifest[256];
  gpushm_create_opts_t opts;
  gpushm_buffer_t *buf;
  gpushm_t *conn;
  float *x = malloc(n * sizeof *x);

  snprintf(manifest, sizeof manifest, "{\"gpushm\":1,\"tensors\":[{\"name\":\"\",\"dtype\":"
           "\"float32\",\"shape\":[%llu],\"offset\":0}]}", (unsigned long long)n);
  for (uint64_t i = 0; x && i < n; i++)
    x[i] = (float)i * 0.5f;

  /* Device memory where gpushmd's default backend is a CUDA one (cuda-fd on GPU hosts). */
  gpushm_connect(NULL, "c-producer", &conn);
  gpushm_create_opts_init(&opts);
  opts.metadata = manifest, opts.metadata_size = (uint32_t)strlen(manifest), opts.mode = 0644;
  int r = gpushm_buffer_create(conn, name, n * sizeof *x, &opts, &buf);
  if (r < 0 || !x || devmem_attach(buf) < 0 || devmem_write(buf, 0, x, n * sizeof *x) < 0) {
    fprintf(stderr, "c-producer: %s: %s\n", gpushm_strerror(r), gpushm_last_error_message());
    return 1;
  }
  printf("c-producer: '%s': %llu floats written to %s\n", name, (unsigned long long)n,
         devmem_where(buf));
  gpushm_disconnect(conn); /* the buffer stays: persistent until unlinked */
  free(x);
  return 0;
}
