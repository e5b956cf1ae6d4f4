/* SPDX-License-Identifier: MIT */
/* Handles and mappings: a reopen through the same connection costs no round trip and
 * no second daemon reference; names are re-resolved after an unlink; another connection
 * of the process gets a handle and a reference of its own on the same mapping (one
 * round trip, no second mapping), so what happens to one connection leaves the other's
 * handles alone; concurrent threads keep the counts straight. */
#include "config.h"
#include "harness.h"

#include <pthread.h>
#include <string.h>
#include <time.h>

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
    /* c1's own handle; c2's handle of its own, on the same mapping */
    CHECK(w->conn == gpushm_buffer_connection(w->expected) ? b == w->expected
                                                           : b != w->expected);
    CHECK(gpushm_buffer_ptr(b) == gpushm_buffer_ptr(w->expected));
    CHECK_OK(gpushm_buffer_close(b));
  }
  return NULL;
}

/* Opens and closes "cold" through its own connection while others do the same, for a
 * while: no handle keeps the mapping between them, so one thread's close (not the
 * mapping's last user) races another's last close, which frees the mapping.  The window
 * is a few instructions wide: it takes some 10^5 closes to hit it (the benchmark's
 * 64 clients did, 26 times a run), hence time rather than a count. */
static void *cold_hammer(void *arg)
{
  gpushm_t *conn = arg;
  struct timespec start, now;

  clock_gettime(CLOCK_MONOTONIC, &start);
  do {
    gpushm_buffer_t *b;
    for (int i = 0; i < 100; i++) {
      CHECK_OK(gpushm_buffer_open(conn, "cold", 0, &b));
      CHECK_OK(gpushm_buffer_close(b));
    }
    clock_gettime(CLOCK_MONOTONIC, &now);
  } while (now.tv_sec - start.tv_sec < 3);
  CHECK_OK(gpushm_ping(conn)); /* after its one-way closes */
  return NULL;
}

/* The daemon's id of the connection named name. */
static uint32_t client_named(gpushm_t *conn, const char *name)
{
  gpushm_client_list_t *list;
  uint32_t id = 0;

  CHECK_OK(gpushm_clients(conn, &list));
  for (size_t i = 0; i < gpushm_client_list_count(list); i++)
    if (strcmp(gpushm_client_info_name(gpushm_client_list_get(list, i)), name) == 0)
      id = gpushm_client_info_client_id(gpushm_client_list_get(list, i));
  gpushm_client_list_free(list);
  CHECK(id != 0);
  return id;
}

int main(void)
{
  gpushm_t *c1, *c2;
  gpushm_buffer_t *buf, *again, *by_id, *ro, *fresh, *hot, *other, *other_again;
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

  /* Another connection of this process: a handle and a daemon reference of its own
   * (one round trip), on the same mapping (the same memory, not mapped again); then
   * reopens through it are cached too. */
  before = requests(c1);
  CHECK_OK(gpushm_buffer_open(c2, "cached", 0, &other));
  CHECK(other != buf && gpushm_buffer_ptr(other) == gpushm_buffer_ptr(buf));
  CHECK(gpushm_buffer_connection(other) == c2 && gpushm_buffer_connection(buf) == c1);
  /* the open and the stats call (and, unordered with them, c2's one-way notice that it
   * does not map the segment again: c1's mapping of it serves) */
  {
    uint64_t n = requests(c1) - before;
    CHECK(n >= 2 && n <= 3);
  }
  CHECK(my_refs(c2, "cached") == 1 && my_refs(c1, "cached") == 1);
  before = requests(c1);
  CHECK_OK(gpushm_buffer_open(c2, "cached", 0, &other_again));
  CHECK(other_again == other && requests(c1) == before + 1);

  /* A different access mode is a separate mapping and reference. */
  CHECK_OK(gpushm_buffer_open(c1, "cached", GPUSHM_OPEN_READONLY, &ro));
  CHECK(ro != buf && my_refs(c1, "cached") == 2);

  /* Two of c1's three opens of buf closed, and both of c2's: still mapped (by c1's
   * handle), still referenced by c1, no longer by c2. */
  CHECK_OK(gpushm_buffer_close(by_id));
  CHECK_OK(gpushm_buffer_close(again));
  CHECK_OK(gpushm_buffer_close(other_again));
  CHECK_OK(gpushm_buffer_close(other));
  CHECK(my_refs(c1, "cached") == 2 && my_refs(c2, "cached") == 0);
  CHECK(((volatile char *)gpushm_buffer_ptr(buf))[0] == 0);

  /* Unlink + recreate under the same name elsewhere: the name is re-resolved, and
   * the old handle keeps its own (now unlinked) buffer. */
  old_id = gpushm_buffer_id(buf);
  CHECK_OK(gpushm_unlink(c2, "cached"));
  CHECK_OK(gpushm_buffer_create(c2, "cached", 8192, NULL, &fresh));
  CHECK(gpushm_buffer_id(fresh) != old_id);
  CHECK_OK(gpushm_buffer_open(c1, "cached", 0, &again));
  CHECK(gpushm_buffer_id(again) == gpushm_buffer_id(fresh) && gpushm_buffer_size(again) == 8192);
  CHECK(again != fresh && gpushm_buffer_ptr(again) == gpushm_buffer_ptr(fresh));
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

  /* Closes racing a mapping's last close (a close read the freed mapping's id once, and
   * the daemon kept that connection's reference until it ended): every connection's
   * references are back to none (ASan would also report the read). */
  {
    enum { N = 64 };
    pthread_t threads[N];
    gpushm_t *conns[N];
    gpushm_buffer_t *cold;
    CHECK_OK(gpushm_buffer_create(c1, "cold", 4096, NULL, &cold));
    CHECK_OK(gpushm_buffer_close(cold));
    for (int i = 0; i < N; i++) {
      conns[i] = daemon_connect(&d);
      CHECK(pthread_create(&threads[i], NULL, cold_hammer, conns[i]) == 0);
    }
    for (int i = 0; i < N; i++)
      CHECK(pthread_join(threads[i], NULL) == 0);
    for (int i = 0; i < N; i++) {
      CHECK(my_refs(conns[i], "cold") == 0);
      gpushm_disconnect(conns[i]);
    }
    CHECK_OK(gpushm_unlink(c1, "cold"));
  }

  /* An admin's disconnect of one connection leaves the other's handles alone: c2's
   * handle keeps its mapping and its reference, reopens and closes as before. */
  {
    gpushm_t *victim, *admin = daemon_connect(&d);
    gpushm_buffer_t *mine, *theirs, *mine_again, *refused;
    CHECK_OK(gpushm_connect(d.socket, "cache-victim", &victim));
    CHECK_OK(gpushm_buffer_create(victim, "shared", 4096, NULL, &theirs));
    memset(gpushm_buffer_ptr(theirs), 0x5a, 4096);
    CHECK_OK(gpushm_buffer_open(c2, "shared", 0, &mine));
    CHECK(mine != theirs && gpushm_buffer_ptr(mine) == gpushm_buffer_ptr(theirs));
    CHECK_OK(gpushm_client_disconnect(admin, client_named(admin, "cache-victim")));
    CHECK(my_refs(c2, "shared") == 1);
    CHECK(((volatile unsigned char *)gpushm_buffer_ptr(mine))[4095] == 0x5a);
    CHECK_OK(gpushm_buffer_open(c2, "shared", 0, &mine_again));
    CHECK(mine_again == mine);
    CHECK_OK(gpushm_buffer_close(mine_again));
    CHECK(gpushm_buffer_open(victim, "shared", GPUSHM_OPEN_READONLY, &refused) < 0);
    CHECK_OK(gpushm_buffer_close(mine)); /* c2's reference, released through c2 */
    CHECK(my_refs(c2, "shared") == 0);
    gpushm_buffer_close(theirs); /* its connection is gone: nothing to release */
    gpushm_disconnect(victim);
    CHECK_OK(gpushm_unlink(admin, "shared"));
    gpushm_disconnect(admin);
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
