/* The process-wide open cache: a reopen costs no round trip and no second daemon
 * reference; names are re-resolved after an unlink; connections share the cache;
 * concurrent threads keep the counts straight. */
#include "config.h"
#include "harness.h"

#include <pthread.h>
#include <string.h>

static struct test_daemon d;

static uint32_t my_refs(gpushm_t *conn, const char *name)
{
  const gpushm_buffer_info_t *info = find_buffer(conn, name);
  CHECK(info);
  return gpushm_buffer_info_my_refs(info);
}

static uint64_t requests(gpushm_t *conn)
{
  gpushm_stats_t *s;
  uint64_t n;
  CHECK_OK(gpushm_stats(conn, &s));
  n = gpushm_stats_requests(s);
  gpushm_stats_free(s);
  return n;
}

/* c2's last close is one-way: c1, another connection, sees it once the daemon has read
 * it (docs/segments.md, one-way releases) */
static int hot_unheld(const struct test_daemon *daemon, void *conn)
{
  const gpushm_buffer_info_t *info = find_buffer(conn, "hot");
  (void)daemon;
  CHECK(info);
  return gpushm_buffer_info_refs(info) == 0;
}

static int one_client(const struct test_daemon *daemon, void *conn)
{
  gpushm_stats_t *s;
  int one;
  (void)daemon;
  CHECK_OK(gpushm_stats(conn, &s));
  one = gpushm_stats_clients(s) == 1;
  gpushm_stats_free(s);
  return one;
}

struct worker {
  gpushm_t *conn;
  gpushm_buffer_t *expected;
};

static void *hammer(void *arg)
{
  struct worker *w = arg;
  for (int i = 0; i < 2000; i++) {
    gpushm_buffer_t *b;
    CHECK_OK(gpushm_buffer_open(w->conn, "hot", 0, &b));
    CHECK(b == w->expected);
    CHECK_OK(gpushm_buffer_close(b));
  }
  return NULL;
}

int main(void)
{
  gpushm_t *c1, *c2;
  gpushm_buffer_t *buf, *again, *by_id, *ro, *fresh, *hot;
  const gpushm_buffer_info_t *info;
  uint64_t before, old_id;

  daemon_start(&d, NULL);
  c1 = daemon_connect(&d);
  c2 = daemon_connect(&d);

  CHECK_OK(gpushm_buffer_create(c1, "cached", 4096, NULL, &buf));
  CHECK(my_refs(c1, "cached") == 1);

  /* Reopen by name and by id: the same handle, no request reaches the daemon. */
  before = requests(c1);
  CHECK_OK(gpushm_buffer_open(c1, "cached", 0, &again));
  CHECK_OK(gpushm_buffer_open_id(c1, gpushm_buffer_id(buf), 0, &by_id));
  CHECK(requests(c1) == before + 1); /* only the stats call itself */
  CHECK(again == buf && by_id == buf);
  CHECK(my_refs(c1, "cached") == 1);

  /* Another connection of this process shares the cache too. */
  before = requests(c1);
  CHECK_OK(gpushm_buffer_open(c2, "cached", 0, &again));
  CHECK(again == buf);
  CHECK(requests(c1) == before + 1);
  CHECK(my_refs(c2, "cached") == 0);

  /* A different access mode is a separate mapping and reference. */
  CHECK_OK(gpushm_buffer_open(c1, "cached", GPUSHM_OPEN_READONLY, &ro));
  CHECK(ro != buf && my_refs(c1, "cached") == 2);

  /* Three of the four opens of buf closed: still mapped, still referenced. */
  CHECK_OK(gpushm_buffer_close(by_id));
  CHECK_OK(gpushm_buffer_close(again));
  CHECK_OK(gpushm_buffer_close(again));
  CHECK(my_refs(c1, "cached") == 2);
  CHECK(((volatile char *)gpushm_buffer_ptr(buf))[0] == 0);

  /* Unlink + recreate under the same name elsewhere: the name is re-resolved, and
   * the old handle keeps its own (now unlinked) buffer. */
  old_id = gpushm_buffer_id(buf);
  CHECK_OK(gpushm_unlink(c2, "cached"));
  CHECK_OK(gpushm_buffer_create(c2, "cached", 8192, NULL, &fresh));
  CHECK(gpushm_buffer_id(fresh) != old_id);
  CHECK_OK(gpushm_buffer_open(c1, "cached", 0, &again));
  CHECK(again == fresh && gpushm_buffer_size(again) == 8192);
  CHECK_OK(gpushm_buffer_close(again));
  /* the unlinked one cannot be reopened by id: no new holders after unlink */
  CHECK_OK(gpushm_buffer_close(ro));
  CHECK_OK(gpushm_buffer_close(buf));
  CHECK_ERR(gpushm_buffer_open_id(c1, old_id, 0, &again), GPUSHM_E_NOENT);
  CHECK_OK(gpushm_buffer_close(fresh));

  /* Eight threads opening and closing one buffer through two connections. */
  {
    pthread_t threads[8];
    struct worker workers[8];
    CHECK_OK(gpushm_buffer_create(c1, "hot", 4096, NULL, &hot));
    for (int i = 0; i < 8; i++) {
      workers[i] = (struct worker){ i % 2 ? c2 : c1, hot };
      CHECK(pthread_create(&threads[i], NULL, hammer, &workers[i]) == 0);
    }
    for (int i = 0; i < 8; i++)
      CHECK(pthread_join(threads[i], NULL) == 0);
    CHECK(my_refs(c1, "hot") == 1);
    CHECK_OK(gpushm_buffer_close(hot));
    CHECK(my_refs(c1, "hot") == 0);
  }

  /* The connection lives on while a buffer opened through it is open. */
  CHECK_OK(gpushm_buffer_open(c2, "hot", 0, &hot));
  gpushm_disconnect(c2);
  CHECK(my_refs(c1, "hot") == 0);
  CHECK((info = find_buffer(c1, "hot")) && gpushm_buffer_info_refs(info) == 1);
  CHECK_OK(gpushm_buffer_close(hot)); /* releases through c2, then closes it */
  CHECK(wait_until(hot_unheld, &d, c1));
  CHECK(wait_until(one_client, &d, c1)); /* c2's socket closed with its last buffer */
  gpushm_disconnect(c1);
  daemon_stop(&d);
  return 0;
}
