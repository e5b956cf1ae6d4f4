/* SPDX-License-Identifier: MIT */
/* Mode bits are checked against the peer's kernel-reported credentials.  Needs root
 * to run a client as another uid (nobody); skips otherwise. */
#include "config.h"
#include "harness.h"

#include <grp.h>
#include <pwd.h>
#include <string.h>
#include <unistd.h>

static struct test_daemon d;

static void as_nobody(uid_t uid, gid_t gid, uint64_t root_buffer_id)
{
  gpushm_t *conn;
  gpushm_buffer_t *b;
  const gpushm_buffer_info_t *info;

  CHECK(setgroups(0, NULL) == 0);
  CHECK(setgid(gid) == 0);
  CHECK(setuid(uid) == 0);
  CHECK(getuid() == uid);

  conn = daemon_connect(&d);
  /* 0600 root: neither by name nor by id, and not even told it exists */
  CHECK_ERR(gpushm_buffer_open(conn, "private", GPUSHM_OPEN_READONLY, &b), GPUSHM_E_NOENT);
  CHECK_ERR(gpushm_buffer_open_id(conn, root_buffer_id, GPUSHM_OPEN_READONLY, &b), GPUSHM_E_NOENT);
  /* and not even listed */
  CHECK(find_buffer(conn, "private") == NULL);

  /* 0644: read-only yes, read-write no, unlink no */
  CHECK_OK(gpushm_buffer_open(conn, "public", GPUSHM_OPEN_READONLY, &b));
  CHECK(strcmp(gpushm_buffer_ptr(b), "root wrote this") == 0);
  CHECK_OK(gpushm_buffer_close(b));
  /* what it may see, it is told why it may not have */
  CHECK_ERR(gpushm_buffer_open(conn, "public", 0, &b), GPUSHM_E_PERM);
  CHECK(strstr(gpushm_last_error_message(), "denies read-write access") != NULL);
  CHECK_ERR(gpushm_unlink(conn, "public"), GPUSHM_E_PERM);
  CHECK((info = find_buffer(conn, "public")) && gpushm_buffer_info_owner_uid(info) == 0);

  /* 0666: read-write for everyone; still only the owner unlinks */
  CHECK_OK(gpushm_buffer_open(conn, "world", 0, &b));
  strcpy(gpushm_buffer_ptr(b), "nobody wrote this");
  CHECK_OK(gpushm_buffer_close(b));
  CHECK_ERR(gpushm_unlink(conn, "world"), GPUSHM_E_PERM);

  /* its own buffer belongs to it */
  CHECK_OK(gpushm_buffer_create(conn, "nobodys", 4096, NULL, &b));
  CHECK((info = find_buffer(conn, "nobodys")) && gpushm_buffer_info_owner_uid(info) == uid &&
        gpushm_buffer_info_mode(info) == 0600);
  CHECK_OK(gpushm_buffer_close(b));
  gpushm_disconnect(conn);
  exit(0);
}

int main(void)
{
  struct passwd *nobody = getpwnam("nobody");
  gpushm_t *conn;
  gpushm_buffer_t *priv, *pub, *world, *b;
  gpushm_create_opts_t opts;
  pid_t pid;

  if (geteuid() != 0 || !nobody) {
    test_log("needs root and a 'nobody' user to act as another uid; skipping");
    return TEST_SKIP;
  }
  daemon_start(&d, NULL);
  conn = daemon_connect(&d);
  gpushm_create_opts_init(&opts);
  CHECK_OK(gpushm_buffer_create(conn, "private", 4096, &opts, &priv));
  opts.mode = 0644;
  CHECK_OK(gpushm_buffer_create(conn, "public", 4096, &opts, &pub));
  strcpy(gpushm_buffer_ptr(pub), "root wrote this");
  opts.mode = 0666;
  CHECK_OK(gpushm_buffer_create(conn, "world", 4096, &opts, &world));

  pid = fork();
  CHECK(pid >= 0);
  if (pid == 0)
    as_nobody(nobody->pw_uid, nobody->pw_gid, gpushm_buffer_id(priv));
  check_child(pid);

  CHECK(strcmp(gpushm_buffer_ptr(world), "nobody wrote this") == 0);
  /* root may open and unlink what nobody owns */
  CHECK_OK(gpushm_buffer_open(conn, "nobodys", 0, &b));
  CHECK_OK(gpushm_buffer_close(b));
  CHECK_OK(gpushm_unlink(conn, "nobodys"));
  CHECK_OK(gpushm_buffer_close(priv));
  CHECK_OK(gpushm_buffer_close(pub));
  CHECK_OK(gpushm_buffer_close(world));
  gpushm_disconnect(conn);
  daemon_stop(&d);
  return 0;
}
