/* Demo producer: creates a shared buffer, fills it, waits for the consumer's answer
 * and checks it.  Usage: gpushm-producer [NAME [SIZE_MIB]] */
#include "gpushm.h"
#include "pattern.h"

#include <stdlib.h>
#include <unistd.h>

int main(int argc, char **argv)
{
  const char *name = argc > 1 ? argv[1] : "demo";
  uint64_t size = (argc > 2 ? strtoull(argv[2], NULL, 10) : 64) << 20;
  gpushm_t *conn;
  gpushm_buffer_t *buf;
  struct demo_header *h;
  uint64_t *payload, words, bad;
  int r;

  if (size <= sizeof *h) {
    fprintf(stderr, "producer: size must be at least 1 MiB\n");
    return 2;
  }
  if ((r = gpushm_connect(NULL, "gpushm-producer", &conn)) < 0) {
    fprintf(stderr, "producer: %s: %s\n", gpushm_strerror(r), gpushm_last_error_message());
    return 1;
  }
  /* Session lifetime: if the producer dies, the name goes with it. */
  gpushm_create_opts_t opts;
  gpushm_create_opts_init(&opts);
  opts.lifetime = GPUSHM_LIFETIME_SESSION;
  opts.mode = 0644;
  if ((r = gpushm_buffer_create(conn, name, size, &opts, &buf)) < 0) {
    fprintf(stderr, "producer: create %s: %s: %s\n", name, gpushm_strerror(r),
            gpushm_last_error_message());
    return 1;
  }
  h = gpushm_buffer_ptr(buf);
  payload = (uint64_t *)(h + 1);
  words = (size - sizeof *h) / sizeof *payload;
  h->words = words;
  demo_fill(payload, words, 1);
  __atomic_store_n(&h->state, DEMO_PRODUCED, __ATOMIC_RELEASE);
  printf("producer: '%s' (id %llu): %llu MiB written, waiting for the consumer\n", name,
         (unsigned long long)gpushm_buffer_id(buf), (unsigned long long)(size >> 20));
  fflush(stdout);

  if (demo_wait_state(h, DEMO_CONSUMED, 60) < 0) {
    fprintf(stderr, "producer: no consumer within 60 s\n");
    return 1;
  }
  bad = demo_verify(payload, words, 2);
  if (bad != words) {
    fprintf(stderr, "producer: consumer's data wrong at word %llu\n", (unsigned long long)bad);
    return 1;
  }
  printf("producer: consumer's answer verified (%llu words)\n", (unsigned long long)words);
  gpushm_buffer_close(buf);
  gpushm_disconnect(conn);
  return 0;
}
