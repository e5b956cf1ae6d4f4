/* SPDX-License-Identifier: MIT */
/* A create that names its buffer's group (gpushm_create_opts_t.group): a member of a
 * team group shares with the team without sg; a uid that is not in the group cannot
 * give it a buffer (uid 65534 naming root's group is refused), nor does a group's
 * buffer share a segment with the creator's others (a member who may map the one must
 * not read the rest); members outside the mode's reach see nothing.  Needs root to act
 * as other uids and groups; skips otherwise. */
#include "config.h"
#include "harness.h"

#include <grp.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define TEAM 65500     /* a group no account has as its primary */
#define CREATOR 65530  /* in TEAM */
#define MEMBER 65531   /* in TEAM */
#define STRANGER 65534 /* not */

static struct test_daemon d;
/* Root's connection, made before the forks: reachable from the children, which inherit
 * it and leave it alone. */
static gpushm_t *root;

/* A child of uid and primary gid uid, in the supplementary groups given (n of them). */
static pid_t fork_in(uid_t uid, const gid_t *groups, size_t n)
{
  pid_t pid = fork();

  CHECK(pid >= 0);
  if (pid == 0) {
    CHECK(setgroups(n, groups) == 0);
    CHECK(setgid(uid) == 0);
    CHECK(setuid(uid) == 0);
  }
  return pid;
}

static gpushm_buffer_t *create_in(gpushm_t *conn, const char *name, int64_t group,
                                  uint32_t mode, int *r)
{
  gpushm_create_opts_t opts;
  gpushm_buffer_t *b = NULL;

  gpushm_create_opts_init(&opts);
  opts.mode = mode;
  opts.group = group;
  *r = gpushm_buffer_create(conn, name, 4096, &opts, &b);
  return b;
}

static const gpushm_buffer_info_t *info_of(gpushm_t *conn, const char *name)
{
  return find_buffer(conn, name);
}

int main(void)
{
  static const gid_t team[] = { TEAM };
  pid_t pid;
  int r;

  if (geteuid() != 0) {
    test_log("needs root to act as other uids and groups; skipping");
    return TEST_SKIP;
  }
  daemon_start(&d, NULL);
  root = daemon_connect(&d);
  CHECK(gpushm_daemon_has(root, GPUSHM_FEATURE_CREATE_GROUP));

  /* the creator, in TEAM: a team buffer (group-readable), and one of its own beside it
   * of the same mode (its primary group's), which must not share the team's segment */
  pid = fork_in(CREATOR, team, 1);
  if (pid == 0) {
    gpushm_t *conn = daemon_connect(&d);
    gpushm_buffer_t *b = create_in(conn, "team-weights", TEAM, 0640, &r);
    CHECK_OK(r);
    strcpy(gpushm_buffer_ptr(b), "for the team");
    CHECK(gpushm_buffer_info_owner_gid(info_of(conn, "team-weights")) == TEAM);
    CHECK_OK(gpushm_buffer_close(b)); /* (persistent: it stays) */
    b = create_in(conn, "creators-own", GPUSHM_GROUP_OF_CREATOR, 0640, &r);
    CHECK_OK(r);
    strcpy(gpushm_buffer_ptr(b), "not for the team");
    CHECK_OK(gpushm_buffer_close(b));
    CHECK(gpushm_buffer_info_owner_gid(info_of(conn, "creators-own")) == CREATOR);
    /* a group it is not in: refused, saying why */
    CHECK(create_in(conn, "roots-group", 0, 0640, &r) == NULL && r == GPUSHM_E_PERM);
    CHECK(strstr(gpushm_last_error_message(), "is not in group 0") != NULL);
    CHECK(create_in(conn, "bad-group", (int64_t)UINT32_MAX, 0640, &r) == NULL &&
          r == GPUSHM_E_INVAL);
    gpushm_disconnect(conn);
    _exit(0);
  }
  check_child(pid);
  CHECK(gpushm_buffer_info_segment_id(info_of(root, "team-weights")) !=
        gpushm_buffer_info_segment_id(info_of(root, "creators-own")));

  /* a member reads the team's buffer; the creator's own one is not its to see */
  pid = fork_in(MEMBER, team, 1);
  if (pid == 0) {
    gpushm_t *conn = daemon_connect(&d);
    gpushm_buffer_t *ro, *b;
    CHECK_OK(gpushm_buffer_open(conn, "team-weights", GPUSHM_OPEN_READONLY, &ro));
    CHECK(strcmp(gpushm_buffer_ptr(ro), "for the team") == 0);
    CHECK_ERR(gpushm_buffer_open(conn, "team-weights", 0, &b), GPUSHM_E_PERM);
    CHECK_ERR(gpushm_buffer_open(conn, "creators-own", GPUSHM_OPEN_READONLY, &b),
              GPUSHM_E_NOENT);
    CHECK_OK(gpushm_buffer_close(ro));
    gpushm_disconnect(conn);
    _exit(0);
  }
  check_child(pid);

  /* the stranger: cannot give a buffer root's group or the team's, nor read the team's */
  pid = fork_in(STRANGER, NULL, 0);
  if (pid == 0) {
    gpushm_t *conn = daemon_connect(&d);
    gpushm_buffer_t *b;
    CHECK(create_in(conn, "steal-root", 0, 0660, &r) == NULL && r == GPUSHM_E_PERM);
    CHECK(create_in(conn, "steal-team", TEAM, 0660, &r) == NULL && r == GPUSHM_E_PERM);
    CHECK_ERR(gpushm_buffer_open(conn, "team-weights", GPUSHM_OPEN_READONLY, &b),
              GPUSHM_E_NOENT);
    gpushm_disconnect(conn);
    _exit(0);
  }
  check_child(pid);
  CHECK(info_of(root, "steal-root") == NULL && info_of(root, "steal-team") == NULL);

  /* root may name any group */
  {
    gpushm_buffer_t *b = create_in(root, "roots-for-team", TEAM, 0640, &r);
    CHECK_OK(r);
    CHECK(gpushm_buffer_info_owner_gid(info_of(root, "roots-for-team")) == TEAM);
    CHECK_OK(gpushm_buffer_close_unlink(b));
  }
  CHECK_OK(gpushm_unlink(root, "team-weights"));
  CHECK_OK(gpushm_unlink(root, "creators-own"));
  gpushm_disconnect(root);
  daemon_stop(&d);
  return 0;
}
