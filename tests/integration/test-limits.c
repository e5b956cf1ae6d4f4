/* SPDX-License-Identifier: MIT */
/* Each named limit, crossed against a real daemon: name length, buffers and bytes
 * per uid, clients, list paging (pages cut by the frame, not by a count), holders
 * listed. */
#include "config.h"
#include "harness.h"
#include "gpushm_limits.h"
#include "raw.h"

#include <stdbool.h>
#include <string.h>
#include <unistd.h>

static void test_name_length(void)
{
  struct test_daemon d = { 0 };
  char name[GPUSHM_LIMIT_NAME_LEN + 2];
  gpushm_buffer_t *b;
  gpushm_t *conn;

  daemon_start(&d, NULL);
  conn = daemon_connect(&d);
  memset(name, 'n', sizeof name);
  name[GPUSHM_LIMIT_NAME_LEN] = '\0';
  CHECK_OK(gpushm_buffer_create(conn, name, 1, NULL, &b));
  CHECK(strcmp(gpushm_buffer_name(b), name) == 0);
  CHECK_OK(gpushm_buffer_close(b));
  CHECK_OK(gpushm_unlink(conn, name));
  name[GPUSHM_LIMIT_NAME_LEN] = 'n';
  name[GPUSHM_LIMIT_NAME_LEN + 1] = '\0';
  CHECK_ERR(gpushm_buffer_create(conn, name, 1, NULL, &b), GPUSHM_E_NAME);
  gpushm_disconnect(conn);
  daemon_stop(&d);
}

static void test_quotas(void)
{
  struct test_daemon d = { 0 };
  gpushm_buffer_t *b[4];
  gpushm_t *conn;

  daemon_start(&d, "--max-buffers-per-uid", "3", "--max-bytes-per-uid", "1M", NULL);
  conn = daemon_connect(&d);
  CHECK_OK(gpushm_buffer_create(conn, "q0", 512 * 1024, NULL, &b[0]));
  CHECK_OK(gpushm_buffer_create(conn, "q1", 256 * 1024, NULL, &b[1]));
  /* bytes: 768 KiB used, 256 KiB + 1 does not fit, 256 KiB does */
  CHECK_ERR(gpushm_buffer_create(conn, "q2", 256 * 1024 + 1, NULL, &b[2]), GPUSHM_E_LIMIT);
  CHECK(strstr(gpushm_last_error_message(), "bytes") != NULL);
  CHECK_OK(gpushm_buffer_create(conn, "q2", 256 * 1024, NULL, &b[2]));
  /* count: a fourth buffer, however small, is refused */
  CHECK_ERR(gpushm_buffer_create(conn, "q3", 1, NULL, &b[3]), GPUSHM_E_LIMIT);
  CHECK(strstr(gpushm_last_error_message(), "buffers") != NULL);
  /* freeing one (unlink + last close) gives its share back */
  CHECK_OK(gpushm_unlink(conn, "q1"));
  CHECK_ERR(gpushm_buffer_create(conn, "q3", 1, NULL, &b[3]), GPUSHM_E_LIMIT); /* still held */
  CHECK_OK(gpushm_buffer_close(b[1]));
  CHECK_OK(gpushm_buffer_create(conn, "q3", 4096, NULL, &b[3]));
  for (int i = 0; i < 4; i++)
    if (i != 1)
      CHECK_OK(gpushm_buffer_close(b[i]));
  gpushm_disconnect(conn);
  daemon_stop(&d);
}

/* More buffers than one page holds, with names and holders big enough (~300 bytes an
 * entry) that the byte budget, not only the entry count, has to cut pages: by count
 * 700 entries take 3 pages, by bytes at least 4. */
static void test_list_paging(void)
{
  enum { N = 700, HOLDING = 13 };
  struct test_daemon d = { 0 };
  gpushm_t *conns[HOLDING], *lister;
  /* static: the forked holders exit holding it, and no register keeps a heap copy
   * reachable for valgrind's leak check there */
  static gpushm_buffer_t *bufs[N];
  gpushm_buffer_list_t *list;
  gpushm_stats_t *s1, *s2;
  char name[GPUSHM_LIMIT_NAME_LEN + 1];
  int ready[2], done[2];
  pid_t holders[HOLDING];

  daemon_start(&d, NULL);
  memset(name, 'x', GPUSHM_LIMIT_NAME_LEN);
  name[GPUSHM_LIMIT_NAME_LEN] = '\0';
  conns[0] = daemon_connect(&d);
  for (int i = 0; i < N; i++) {
    snprintf(name, 8, "%05d", i);
    name[5] = 'x';
    CHECK_OK(gpushm_buffer_create(conns[0], name, 1, NULL, &bufs[i]));
  }
  /* other processes hold every buffer too (one process maps each buffer once) */
  CHECK(pipe(ready) == 0 && pipe(done) == 0);
  for (int h = 1; h < HOLDING; h++) {
    holders[h] = fork();
    CHECK(holders[h] >= 0);
    if (holders[h] == 0) {
      gpushm_t *mine = daemon_connect(&d);
      gpushm_buffer_t *b;
      char c;
      close(done[1]);
      for (int i = 0; i < N; i++) {
        snprintf(name, 8, "%05d", i);
        name[5] = 'x';
        CHECK_OK(gpushm_buffer_open(mine, name, 0, &b));
      }
      CHECK(write(ready[1], "r", 1) == 1);
      CHECK(read(done[0], &c, 1) == 0);
      _exit(0);
    }
  }
  for (int h = 1; h < HOLDING; h++) {
    char c;
    CHECK(read(ready[0], &c, 1) == 1);
  }

  lister = daemon_connect(&d);
  CHECK_OK(gpushm_stats(lister, &s1));
  CHECK_OK(gpushm_list(lister, 0, &list));
  CHECK_OK(gpushm_stats(lister, &s2));
  CHECK(gpushm_buffer_list_count(list) == N);
  for (size_t i = 0; i < N; i++) {
    const gpushm_buffer_info_t *info = gpushm_buffer_list_get(list, i);
    CHECK(gpushm_buffer_info_id(info) == gpushm_buffer_id(bufs[i]));
    CHECK(strlen(gpushm_buffer_info_name(info)) == GPUSHM_LIMIT_NAME_LEN);
    CHECK(gpushm_buffer_info_holder_count(info) == HOLDING &&
          gpushm_buffer_info_refs(info) == HOLDING);
  }
  test_log("listing %d buffers took %llu list requests", N,
           (unsigned long long)(gpushm_stats_requests(s2) - gpushm_stats_requests(s1) - 1));
  CHECK(gpushm_stats_requests(s2) - gpushm_stats_requests(s1) - 1 >= 4);
  gpushm_stats_free(s1);
  gpushm_stats_free(s2);
  gpushm_buffer_list_free(list);

  close(done[1]);
  for (int h = 1; h < HOLDING; h++)
    check_child(holders[h]);
  for (int i = 0; i < N; i++)
    CHECK_OK(gpushm_buffer_close(bufs[i]));
  gpushm_disconnect(lister);
  gpushm_disconnect(conns[0]);
  daemon_stop(&d);
}

/* The bytes an entry takes in a list reply: its tag, its length and itself. */
static size_t entry_size(const Gpushm__BufferInfo *info)
{
  size_t n = gpushm__buffer_info__get_packed_size(info), len = n;
  do
    n++;
  while ((len >>= 7) != 0);
  return n + 1;
}

/* A list page is as full as the frame allows, whatever its entry count: short entries
 * make pages of far more than the 256 that once capped them, long ones (127-byte names)
 * fewer, and every entry comes exactly once, in id order, across pages. */
static void test_list_pages_by_frame(void)
{
  enum { N = 3000, LONG_EVERY = 7 };
  const size_t budget = GPUSHM_LIMIT_FRAME_BODY - GPUSHM_LIMIT_REPLY_ENVELOPE;
  struct test_daemon d = { 0 };
  static uint64_t ids[N];
  char name[GPUSHM_LIMIT_NAME_LEN + 1];
  gpushm_buffer_list_t *list;
  gpushm_t *conn;
  uint64_t after_id = 0;
  size_t seen = 0, pages = 0, biggest = 0, prev_sum = 0;
  Gpushm__Reply *prev = NULL;
  int sock, status_fd;
  bool more = true;

  daemon_start(&d, NULL);
  conn = daemon_connect(&d);
  for (int i = 0; i < N; i++) {
    gpushm_buffer_t *b;
    snprintf(name, sizeof name, "p%05d", i);
    if (i % LONG_EVERY == 0) {
      memset(name + 6, 'y', GPUSHM_LIMIT_NAME_LEN - 6);
      name[GPUSHM_LIMIT_NAME_LEN] = '\0';
    }
    CHECK_OK(gpushm_buffer_create(conn, name, 1, NULL, &b)); /* persistent: outlives close */
    ids[i] = gpushm_buffer_id(b);
    CHECK(i == 0 || ids[i] > ids[i - 1]);
    CHECK_OK(gpushm_buffer_close(b));
  }

  /* the library: every buffer once, in id order */
  CHECK_OK(gpushm_list(conn, 0, &list));
  CHECK(gpushm_buffer_list_count(list) == N);
  for (size_t i = 0; i < N; i++) {
    const gpushm_buffer_info_t *info = gpushm_buffer_list_get(list, i);
    CHECK(gpushm_buffer_info_id(info) == ids[i]);
    CHECK(strlen(gpushm_buffer_info_name(info)) == (i % LONG_EVERY ? 6 : GPUSHM_LIMIT_NAME_LEN));
  }
  gpushm_buffer_list_free(list);

  /* the wire, page by page */
  sock = raw_connect(d.socket);
  CHECK(raw_hello(sock, "pages", &status_fd) == 0);
  close(status_fd);
  while (more) {
    Gpushm__Request req = GPUSHM__REQUEST__INIT;
    Gpushm__ListRequest body = GPUSHM__LIST_REQUEST__INIT;
    int fds[GPUSHM_LIMIT_FDS_PER_FRAME];
    unsigned n_fds;
    Gpushm__Reply *reply;
    const Gpushm__ListReply *page;
    size_t sum = 0;

    body.after_id = after_id;
    req.body_case = GPUSHM__REQUEST__BODY_LIST;
    req.list = &body;
    CHECK((reply = raw_call(sock, &req, fds, &n_fds)) != NULL);
    CHECK(reply->status == 0 && n_fds == 0);
    CHECK(reply->body_case == GPUSHM__REPLY__BODY_LIST && (page = reply->list));
    CHECK(gpushm__reply__get_packed_size(reply) <= GPUSHM_LIMIT_FRAME_BODY);
    CHECK(page->n_buffers > 0);
    for (size_t i = 0; i < page->n_buffers; i++, seen++) {
      CHECK(seen < N && page->buffers[i]->id == ids[seen]);
      sum += entry_size(page->buffers[i]);
    }
    CHECK(sum <= budget);
    /* the previous page ended only because this page's first entry did not fit */
    if (prev)
      CHECK(prev_sum + entry_size(page->buffers[0]) > budget);
    if (page->n_buffers > biggest)
      biggest = page->n_buffers;
    after_id = page->buffers[page->n_buffers - 1]->id;
    more = page->more;
    pages++;
    if (prev)
      gpushm__reply__free_unpacked(prev, NULL);
    prev = reply;
    prev_sum = sum;
  }
  gpushm__reply__free_unpacked(prev, NULL);
  CHECK(seen == N);
  test_log("%d buffers in %zu pages, the largest %zu entries", N, pages, biggest);
  CHECK(biggest > 256 && pages < N / 256);

  /* max_entries still lowers a page */
  {
    Gpushm__Request req = GPUSHM__REQUEST__INIT;
    Gpushm__ListRequest body = GPUSHM__LIST_REQUEST__INIT;
    int fds[GPUSHM_LIMIT_FDS_PER_FRAME];
    unsigned n_fds;
    Gpushm__Reply *reply;

    body.after_id = ids[9];
    body.max_entries = 5;
    req.body_case = GPUSHM__REQUEST__BODY_LIST;
    req.list = &body;
    CHECK((reply = raw_call(sock, &req, fds, &n_fds)) != NULL);
    CHECK(reply->status == 0 && reply->list && reply->list->n_buffers == 5 && reply->list->more);
    CHECK(reply->list->buffers[0]->id == ids[10] && reply->list->buffers[4]->id == ids[14]);
    gpushm__reply__free_unpacked(reply, NULL);
  }
  close(sock);
  gpushm_disconnect(conn);
  daemon_stop(&d);
}

/* A buffer with more holders than a list entry shows: the total is still exact. */
static void test_holders_listed(void)
{
  enum { HOLDERS = GPUSHM_LIMIT_HOLDERS_LISTED + 2 };
  static char popular[GPUSHM_LIMIT_NAME_LEN + 1];
  struct test_daemon d = { 0 };
  gpushm_t *conn;
  gpushm_buffer_t *b;
  gpushm_buffer_list_t *list;
  const gpushm_buffer_info_t *info;
  int ready[2], done[2];
  pid_t pids[HOLDERS];

  daemon_start(&d, NULL);
  conn = daemon_connect(&d);
  /* the longest name too: the largest entry a list page can hold */
  memset(popular, 'p', GPUSHM_LIMIT_NAME_LEN);
  popular[GPUSHM_LIMIT_NAME_LEN] = '\0';
  CHECK_OK(gpushm_buffer_create(conn, popular, 1, NULL, &b));
  CHECK(pipe(ready) == 0 && pipe(done) == 0);
  for (int i = 1; i < HOLDERS; i++) {
    pids[i] = fork();
    CHECK(pids[i] >= 0);
    if (pids[i] == 0) {
      gpushm_t *mine = daemon_connect(&d);
      gpushm_buffer_t *mb;
      char c;
      close(done[1]);
      CHECK_OK(gpushm_buffer_open(mine, popular, 0, &mb));
      CHECK(write(ready[1], "r", 1) == 1);
      CHECK(read(done[0], &c, 1) == 0);
      _exit(0);
    }
  }
  for (int i = 1; i < HOLDERS; i++) {
    char c;
    CHECK(read(ready[0], &c, 1) == 1);
  }
  CHECK_OK(gpushm_list(conn, 0, &list));
  CHECK(gpushm_buffer_list_count(list) == 1 && (info = gpushm_buffer_list_get(list, 0)));
  CHECK(gpushm_buffer_info_holders_total(info) == HOLDERS &&
        gpushm_buffer_info_refs(info) == HOLDERS);
  CHECK(gpushm_buffer_info_holder_count(info) == GPUSHM_LIMIT_HOLDERS_LISTED);
  gpushm_buffer_list_free(list);
  close(done[1]);
  for (int i = 1; i < HOLDERS; i++)
    check_child(pids[i]);
  CHECK_OK(gpushm_buffer_close(b));
  gpushm_disconnect(conn);
  daemon_stop(&d);
}

int main(void)
{
  test_name_length();
  test_quotas();
  test_list_paging();
  test_list_pages_by_frame();
  test_holders_listed();
  return 0;
}
