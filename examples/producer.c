/* SPDX-License-Identifier: MIT */
/* Demo producer: creates a shared buffer — with the daemon's default backend (GPU
 * memory as POSIX-fd capabilities when gpushmd is started with --default-backend
 * cuda-fd and has a GPU), else in host memory — fills it, waits for the consumer's
 * answer and checks it.  With "host" it needs no GPU and no CUDA driver, nor does the
 * consumer then (README.md).
 * Usage: gpushm-producer [NAME [SIZE_MIB [auto|host|cuda-fd|cuda-ipc [MODE]]]]
 * MODE (octal, default 0644) is the buffers' permission bits: 0666 lets a consumer of
 * another uid answer (it opens them read-write). */
#include <gpushm.h>

#include "args.h"
#include "pattern.h"

#include <stdlib.h>
#include <string.h>

static void die(const char *what, int r)
{
  fprintf(stderr, "producer: %s: %s: %s\n", what, gpushm_strerror(r), gpushm_last_error_message());
  exit(1);
}

static const char usage[] =
  "usage: gpushm-producer [NAME [SIZE_MIB [auto|host|cuda-fd|cuda-ipc [MODE]]]]\n"
  "  Creates the buffer NAME (default demo) of SIZE_MIB MiB (default 64) through gpushmd\n"
  "  ($GPUSHM_SOCKET, else /run/gpushm/gpushmd.sock), fills it and waits up to 60 s for\n"
  "  gpushm-consumer NAME in another process to check it and answer; then checks the\n"
  "  answer.  BACKEND auto takes gpushmd's default (host memory where it has no GPU);\n"
  "  MODE is the octal permission bits (default 0644; 0666 lets another uid answer).\n"
  "  Success ends with 'producer: consumer's answer verified (N words)', exit 0.\n";

int main(int argc, char **argv)
{
  example_args("gpushm-producer", argc, argv, 4, usage);
  const char *name = argc > 1 ? argv[1] : "demo";
  uint64_t size = (argc > 2 ? strtoull(argv[2], NULL, 10) : 64) << 20;
  const char *backend = argc > 3 ? argv[3] : "auto";
  unsigned long mode = argc > 4 ? strtoul(argv[4], NULL, 8) : 0644;
  char state_name[160];
  gpushm_t *conn;
  gpushm_buffer_t *buf, *state;
  gpushm_create_opts_t opts;
  struct demo_header *h;
  uint64_t words = size / 8;
  int64_t bad;
  int r;

  if (size == 0 || strlen(name) > 100 || mode == 0 || mode > 0777) {
    fprintf(stderr, "producer: need a size of at least 1 MiB, a name of at most 100 bytes and "
            "an octal mode of at most 0777\n");
    return 2;
  }
  if ((r = gpushm_connect(NULL, "gpushm-producer", &conn)) < 0)
    die("connect", r);
  /* Session lifetime: if the producer dies, the names go with it. */
  gpushm_create_opts_init(&opts);
  opts.backend = GPUSHM_BACKEND_HOST; /* the hand-shake is read by the CPU */
  opts.lifetime = GPUSHM_LIFETIME_SESSION;
  opts.mode = (uint32_t)mode;
  snprintf(state_name, sizeof state_name, "%s.state", name);
  if ((r = gpushm_buffer_create(conn, state_name, sizeof *h, &opts, &state)) < 0)
    die("create hand-shake buffer", r);
  h = gpushm_buffer_ptr(state);

  opts.backend = strcmp(backend, "host") == 0       ? GPUSHM_BACKEND_HOST
                 : strcmp(backend, "cuda-fd") == 0  ? GPUSHM_BACKEND_CUDA_FD
                 : strcmp(backend, "cuda-ipc") == 0 ? GPUSHM_BACKEND_CUDA_IPC
                                                    : GPUSHM_BACKEND_DEFAULT;
  r = gpushm_buffer_create(conn, name, size, &opts, &buf);
  if (r == GPUSHM_E_UNSUPPORTED && strcmp(backend, "auto") == 0) {
    printf("producer: no GPU through gpushmd (%s); using host memory\n",
           gpushm_last_error_message());
    opts.backend = GPUSHM_BACKEND_HOST;
    r = gpushm_buffer_create(conn, name, size, &opts, &buf);
  }
  if (r < 0)
    die("create", r);
  if (devmem_attach(buf) < 0 || demo_fill(buf, words, 1) < 0) {
    fprintf(stderr, "producer: cannot write the buffer\n");
    return 1;
  }
  h->words = words;
  __atomic_store_n(&h->state, DEMO_PRODUCED, __ATOMIC_RELEASE);
  printf("producer: '%s' (id %llu): %llu MiB of %s written, waiting for the consumer\n", name,
         (unsigned long long)gpushm_buffer_id(buf), (unsigned long long)(size >> 20),
         devmem_where(buf));
  fflush(stdout);

  if (demo_wait_state(h, DEMO_CONSUMED, 60) < 0) {
    fprintf(stderr, "producer: no consumer within 60 s\n");
    return 1;
  }
  bad = demo_verify(buf, words, 2);
  if (bad != (int64_t)words) {
    fprintf(stderr, "producer: consumer's data wrong at word %lld\n", (long long)bad);
    return 1;
  }
  printf("producer: consumer's answer verified (%llu words)\n", (unsigned long long)words);
  if ((r = gpushm_buffer_close(buf)) < 0)
    die("close", r);
  if ((r = gpushm_buffer_close(state)) < 0)
    die("close hand-shake buffer", r);
  gpushm_disconnect(conn);
  return 0;
}
