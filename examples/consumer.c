/* SPDX-License-Identifier: MIT */
/* Demo consumer: opens the producer's buffer by name, checks every word, answers with
 * its own pattern.  Usage: gpushm-consumer [NAME] */
#include <gpushm.h>

#include "args.h"
#include "pattern.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

static void die(const char *what, int r)
{
  fprintf(stderr, "consumer: %s: %s: %s\n", what, gpushm_strerror(r), gpushm_last_error_message());
  exit(1);
}

static const char usage[] =
  "usage: gpushm-consumer [NAME]\n"
  "  Opens the buffer NAME (default demo) that gpushm-producer NAME made, waits for it\n"
  "  to be written, checks every word and answers with a pattern of its own, which the\n"
  "  producer checks.  Start the producer first.  Success prints\n"
  "  'consumer: 'NAME': N words of host|device memory verified, answering', exit 0.\n";

int main(int argc, char **argv)
{
  example_args("gpushm-consumer", argc, argv, 1, usage);
  const char *name = argc > 1 ? argv[1] : "demo";
  struct timespec pause = { 0, 10000000 };
  char state_name[160];
  gpushm_t *conn;
  gpushm_buffer_t *buf = NULL, *state = NULL;
  struct demo_header *h;
  int64_t bad;
  int r;

  if (strlen(name) > 100) {
    fprintf(stderr, "consumer: a name of at most 100 bytes, please\n");
    return 2;
  }
  if ((r = gpushm_connect(NULL, "gpushm-consumer", &conn)) < 0)
    die("connect", r);
  snprintf(state_name, sizeof state_name, "%s.state", name);
  /* The producer may not have created them yet. */
  for (int i = 0; i < 3000 && (r = gpushm_buffer_open(conn, state_name, 0, &state)) == GPUSHM_E_NOENT; i++)
    nanosleep(&pause, NULL);
  if (r < 0)
    die("open hand-shake buffer", r);
  h = gpushm_buffer_ptr(state);
  if (demo_wait_state(h, DEMO_PRODUCED, 60) < 0) {
    fprintf(stderr, "consumer: producer never finished writing\n");
    return 1;
  }
  if ((r = gpushm_buffer_open(conn, name, 0, &buf)) < 0)
    die("open", r);
  if (devmem_attach(buf) < 0) {
    fprintf(stderr, "consumer: cannot reach the buffer's device\n");
    return 1;
  }
  bad = demo_verify(buf, h->words, 1);
  if (bad != (int64_t)h->words) {
    fprintf(stderr, "consumer: wrong data at word %lld\n", (long long)bad);
    return 1;
  }
  printf("consumer: '%s': %llu words of %s verified, answering\n", name,
         (unsigned long long)h->words, devmem_where(buf));
  if (demo_fill(buf, h->words, 2) < 0) {
    fprintf(stderr, "consumer: cannot write the answer\n");
    return 1;
  }
  __atomic_store_n(&h->state, DEMO_CONSUMED, __ATOMIC_RELEASE);
  if ((r = gpushm_buffer_close(buf)) < 0)
    die("close", r);
  if ((r = gpushm_buffer_close(state)) < 0)
    die("close hand-shake buffer", r);
  gpushm_disconnect(conn);
  return 0;
}
