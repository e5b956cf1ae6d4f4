/* Demo consumer: opens the producer's buffer by name, checks every word, answers with
 * its own pattern.  Usage: gpushm-consumer [NAME] */
#include "gpushm.h"
#include "pattern.h"

#include <time.h>
#include <unistd.h>

int main(int argc, char **argv)
{
  const char *name = argc > 1 ? argv[1] : "demo";
  struct timespec pause = { 0, 10000000 };
  gpushm_t *conn;
  gpushm_buffer_t *buf = NULL;
  struct demo_header *h;
  uint64_t *payload, bad;
  int r;

  if ((r = gpushm_connect(NULL, "gpushm-consumer", &conn)) < 0) {
    fprintf(stderr, "consumer: %s: %s\n", gpushm_strerror(r), gpushm_last_error_message());
    return 1;
  }
  /* The producer may not have created it yet. */
  for (int i = 0; i < 3000 && (r = gpushm_buffer_open(conn, name, 0, &buf)) == GPUSHM_E_NOENT; i++)
    nanosleep(&pause, NULL);
  if (r < 0) {
    fprintf(stderr, "consumer: open %s: %s: %s\n", name, gpushm_strerror(r),
            gpushm_last_error_message());
    return 1;
  }
  h = gpushm_buffer_ptr(buf);
  payload = (uint64_t *)(h + 1);
  if (demo_wait_state(h, DEMO_PRODUCED, 60) < 0) {
    fprintf(stderr, "consumer: producer never finished writing\n");
    return 1;
  }
  bad = demo_verify(payload, h->words, 1);
  if (bad != h->words) {
    fprintf(stderr, "consumer: wrong data at word %llu\n", (unsigned long long)bad);
    return 1;
  }
  printf("consumer: '%s': %llu words verified, answering\n", name,
         (unsigned long long)h->words);
  demo_fill(payload, h->words, 2);
  __atomic_store_n(&h->state, DEMO_CONSUMED, __ATOMIC_RELEASE);
  gpushm_buffer_close(buf);
  gpushm_disconnect(conn);
  return 0;
}
