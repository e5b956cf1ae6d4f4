/* SPDX-License-Identifier: MIT */
/* Metadata (gpushm_create_opts.metadata): set at create, immutable, in every open reply.
 *  - any bytes (NULs, invalid UTF-8) up to GPUSHM_METADATA_MAX come back byte for byte,
 *    in the creator, in another process (from its open reply), in a list that asks for
 *    them, and not in one that does not;
 *  - the limit is crossed through the library and, past its check, on the wire: both
 *    refused with GPUSHM_E_LIMIT, nothing created;
 *  - an event takes none; a NULL pointer with a size is refused;
 *  - a create that joins an existing buffer gets that buffer's metadata;
 *  - list pages of buffers that carry the most metadata split across frames, every
 *    entry whole;
 *  - gpushm_buffer_describe() says in one call what the accessors say one by one (a
 *    read-only open in another process too), fills no more of an older caller's smaller
 *    struct than its size, and refuses a size too small to hold the id. */
#include "config.h"
#include "gpushm_limits.h"
#include "harness.h"
#include "raw.h"

#include <stdbool.h>
#include <stddef.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static struct test_daemon d;
static uint8_t big[GPUSHM_METADATA_MAX];

static gpushm_buffer_t *create_with(gpushm_t *conn, const char *name, const void *meta,
                                    uint32_t len, unsigned flags)
{
  gpushm_create_opts_t opts;
  gpushm_buffer_t *b;

  gpushm_create_opts_init(&opts);
  opts.metadata = meta;
  opts.metadata_size = len;
  opts.flags = flags;
  CHECK_OK(gpushm_buffer_create(conn, name, 4096, &opts, &b));
  return b;
}

static bool same_metadata(const void *got, size_t len, const void *want, size_t want_len)
{
  return len == want_len && (want_len == 0 ? got == NULL : got && memcmp(got, want, len) == 0);
}

static void test_round_trip(void)
{
  static const uint8_t odd[] = { 0, 0xff, 0xc3, 0x28, '\n', 0 }; /* NULs, invalid UTF-8 */
  gpushm_t *conn = daemon_connect(&d);
  gpushm_buffer_t *b, *plain, *again;
  gpushm_buffer_list_t *list;
  const void *got;
  size_t len;
  pid_t pid;

  CHECK(gpushm_daemon_has(conn, GPUSHM_FEATURE_METADATA));
  b = create_with(conn, "meta-big", big, sizeof big, 0);
  got = gpushm_buffer_metadata(b, &len);
  CHECK(same_metadata(got, len, big, sizeof big));
  plain = create_with(conn, "meta-none", NULL, 0, 0);
  got = gpushm_buffer_metadata(plain, &len);
  CHECK(got == NULL && len == 0);
  CHECK(gpushm_buffer_metadata(NULL, &len) == NULL && len == 0);
  gpushm_buffer_close(create_with(conn, "meta-odd", odd, sizeof odd, 0));

  /* another process has it from its open reply */
  if ((pid = fork()) == 0) {
    gpushm_t *other = daemon_connect(&d);
    gpushm_buffer_t *o;
    CHECK_OK(gpushm_buffer_open(other, "meta-big", GPUSHM_OPEN_READONLY, &o));
    got = gpushm_buffer_metadata(o, &len);
    CHECK(same_metadata(got, len, big, sizeof big));
    CHECK_OK(gpushm_buffer_open(other, "meta-odd", 0, &o));
    got = gpushm_buffer_metadata(o, &len);
    CHECK(same_metadata(got, len, odd, sizeof odd));
    _exit(0);
  }
  check_child(pid);

  /* joining an existing buffer: its metadata, not the request's */
  again = create_with(conn, "meta-odd", "other", 5, GPUSHM_CREATE_OPEN_EXISTING);
  got = gpushm_buffer_metadata(again, &len);
  CHECK(same_metadata(got, len, odd, sizeof odd));
  gpushm_buffer_close(again);

  /* lists carry it only when asked */
  CHECK_OK(gpushm_list(conn, 0, &list));
  for (size_t i = 0; i < gpushm_buffer_list_count(list); i++) {
    got = gpushm_buffer_info_metadata(gpushm_buffer_list_get(list, i), &len);
    CHECK(got == NULL && len == 0);
  }
  gpushm_buffer_list_free(list);
  CHECK_OK(gpushm_list(conn, GPUSHM_LIST_METADATA, &list));
  for (size_t i = 0; i < gpushm_buffer_list_count(list); i++) {
    const gpushm_buffer_info_t *info = gpushm_buffer_list_get(list, i);
    const char *name = gpushm_buffer_info_name(info);
    got = gpushm_buffer_info_metadata(info, &len);
    if (strcmp(name, "meta-big") == 0)
      CHECK(same_metadata(got, len, big, sizeof big));
    else if (strcmp(name, "meta-odd") == 0)
      CHECK(same_metadata(got, len, odd, sizeof odd));
    else
      CHECK(got == NULL && len == 0);
  }
  gpushm_buffer_list_free(list);
  CHECK_ERR(gpushm_list(conn, 0x80, &list), GPUSHM_E_INVAL);

  CHECK_OK(gpushm_buffer_close_unlink(b));
  CHECK_OK(gpushm_buffer_close_unlink(plain));
  CHECK_OK(gpushm_unlink(conn, "meta-odd"));
  gpushm_disconnect(conn);
}

/* desc against the accessors, field by field. */
static void check_described(const gpushm_buffer_t *b)
{
  gpushm_buffer_desc_t desc;
  uint32_t uid, gid;
  size_t len;
  const void *meta = gpushm_buffer_metadata(b, &len);

  memset(&desc, 0xa5, sizeof desc);
  desc.size = sizeof desc;
  CHECK_OK(gpushm_buffer_describe(b, &desc));
  CHECK_OK(gpushm_buffer_owner(b, &uid, &gid));
  CHECK(desc.size == sizeof desc && desc.kind == (uint32_t)gpushm_buffer_kind(b));
  CHECK(desc.id == gpushm_buffer_id(b) && desc.bytes == gpushm_buffer_size(b));
  CHECK(desc.ptr == gpushm_buffer_ptr(b) && desc.name == gpushm_buffer_name(b));
  CHECK(desc.metadata == meta && desc.metadata_size == len);
  CHECK(desc.backend == (uint32_t)gpushm_buffer_backend(b));
  CHECK(desc.device == gpushm_buffer_device(b) && desc.map_device == gpushm_buffer_map_device(b));
  CHECK(desc.read_only == (uint32_t)gpushm_buffer_is_readonly(b));
  CHECK(desc.owner_uid == uid && desc.owner_gid == gid);
}

static void test_describe(void)
{
  gpushm_t *conn = daemon_connect(&d);
  gpushm_buffer_t *b = create_with(conn, "meta-describe", "{}", 2, 0), *none;
  unsigned char raw[sizeof(gpushm_buffer_desc_t) + 8];
  gpushm_buffer_desc_t *desc = (gpushm_buffer_desc_t *)raw;
  pid_t pid;

  CHECK(sizeof(gpushm_buffer_desc_t) == GPUSHM_BUFFER_DESC_SIZE_V1);
  check_described(b);
  none = create_with(conn, "meta-describe-none", NULL, 0, 0);
  check_described(none);
  if ((pid = fork()) == 0) {
    gpushm_t *other = daemon_connect(&d);
    gpushm_buffer_t *o;
    CHECK_OK(gpushm_buffer_open(other, "meta-describe", GPUSHM_OPEN_READONLY, &o));
    check_described(o);
    _exit(0);
  }
  check_child(pid);
  /* an older caller's struct that ends after bytes: nothing written past it */
  memset(raw, 0x5a, sizeof raw);
  desc->size = offsetof(gpushm_buffer_desc_t, ptr);
  CHECK_OK(gpushm_buffer_describe(b, desc));
  CHECK(desc->size == offsetof(gpushm_buffer_desc_t, ptr) && desc->id == gpushm_buffer_id(b) &&
        desc->bytes == 4096);
  for (size_t i = offsetof(gpushm_buffer_desc_t, ptr); i < sizeof raw; i++)
    CHECK(raw[i] == 0x5a);
  /* a newer caller's larger one: this library's fields, its size said back */
  desc->size = sizeof raw;
  CHECK_OK(gpushm_buffer_describe(b, desc));
  CHECK(desc->size == sizeof(gpushm_buffer_desc_t) && raw[sizeof raw - 1] == 0x5a);
  desc->size = offsetof(gpushm_buffer_desc_t, bytes) - 1;
  CHECK_ERR(gpushm_buffer_describe(b, desc), GPUSHM_E_INVAL);
  CHECK(strstr(gpushm_last_error_message(), "sizeof(gpushm_buffer_desc_t)") != NULL);
  CHECK_ERR(gpushm_buffer_describe(NULL, desc), GPUSHM_E_INVAL);
  CHECK_ERR(gpushm_buffer_describe(b, NULL), GPUSHM_E_INVAL);
  CHECK_OK(gpushm_buffer_close_unlink(b));
  CHECK_OK(gpushm_buffer_close_unlink(none));
  gpushm_disconnect(conn);
}

static void test_refusals(void)
{
  static uint8_t over[GPUSHM_METADATA_MAX + 1];
  gpushm_t *conn = daemon_connect(&d);
  gpushm_create_opts_t opts;
  gpushm_buffer_t *b;
  Gpushm__Request req = GPUSHM__REQUEST__INIT;
  Gpushm__CreateRequest body = GPUSHM__CREATE_REQUEST__INIT;
  Gpushm__Reply *r;
  int sock, status_fd, fds[GPUSHM_LIMIT_FDS_PER_FRAME];
  unsigned n_fds;

  gpushm_create_opts_init(&opts);
  opts.metadata = over;
  opts.metadata_size = sizeof over;
  CHECK_ERR(gpushm_buffer_create(conn, "meta-over", 4096, &opts, &b), GPUSHM_E_LIMIT);
  opts.metadata = NULL;
  opts.metadata_size = 1;
  CHECK_ERR(gpushm_buffer_create(conn, "meta-null", 4096, &opts, &b), GPUSHM_E_INVAL);
  opts.metadata = "e";
  CHECK_ERR(gpushm_event_create(conn, "meta-event", &opts, (gpushm_event_t **)&b),
            GPUSHM_E_INVAL);

  /* the daemon's own check, for clients that skip the library's */
  sock = raw_connect(d.socket);
  CHECK(raw_hello(sock, "raw-metadata", &status_fd) == 0);
  close(status_fd);
  body.name = "meta-over";
  body.size = 4096;
  body.metadata.data = over;
  body.metadata.len = sizeof over;
  req.body_case = GPUSHM__REQUEST__BODY_CREATE;
  req.create = &body;
  CHECK((r = raw_call(sock, &req, fds, &n_fds)) != NULL);
  CHECK(r->status == -GPUSHM_E_LIMIT && n_fds == 0);
  CHECK(strstr(r->message, "4097") != NULL);
  gpushm__reply__free_unpacked(r, NULL);
  body.metadata.len = 3;
  body.size = 0;
  body.backend = GPUSHM__BACKEND__BACKEND_CUDA_EVENT;
  CHECK((r = raw_call(sock, &req, fds, &n_fds)) != NULL);
  CHECK(r->status == -GPUSHM_E_INVAL && n_fds == 0);
  gpushm__reply__free_unpacked(r, NULL);
  close(sock);
  CHECK_ERR(gpushm_buffer_open(conn, "meta-over", 0, &b), GPUSHM_E_NOENT);
  CHECK_OK(gpushm_ping(conn));
  gpushm_disconnect(conn);
}

/* 40 buffers of 4 KiB metadata are some 170 KiB of entries: at least three pages. */
static void test_pages(void)
{
  gpushm_t *conn = daemon_connect(&d);
  gpushm_buffer_t *b[40];
  gpushm_buffer_list_t *list;
  char name[32];
  size_t seen = 0;

  for (int i = 0; i < 40; i++) {
    snprintf(name, sizeof name, "meta-page-%02d", i);
    big[0] = (uint8_t)i;
    b[i] = create_with(conn, name, big, sizeof big, 0);
  }
  CHECK_OK(gpushm_list(conn, GPUSHM_LIST_METADATA, &list));
  for (size_t i = 0; i < gpushm_buffer_list_count(list); i++) {
    const gpushm_buffer_info_t *info = gpushm_buffer_list_get(list, i);
    size_t len;
    const uint8_t *got = gpushm_buffer_info_metadata(info, &len);
    int n;
    if (sscanf(gpushm_buffer_info_name(info), "meta-page-%d", &n) != 1)
      continue;
    big[0] = (uint8_t)n;
    CHECK(same_metadata(got, len, big, sizeof big));
    seen++;
  }
  CHECK(seen == 40);
  gpushm_buffer_list_free(list);
  for (int i = 0; i < 40; i++)
    CHECK_OK(gpushm_buffer_close_unlink(b[i]));
  gpushm_disconnect(conn);
}

int main(void)
{
  for (size_t i = 0; i < sizeof big; i++)
    big[i] = (uint8_t)(i * 31 + 1);
  daemon_start(&d, NULL);
  test_round_trip();
  test_describe();
  test_refusals();
  test_pages();
  daemon_stop(&d);
  return 0;
}
