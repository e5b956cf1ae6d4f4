/* SPDX-License-Identifier: MIT */
/* connect(2) says ENOENT, ECONNREFUSED or EACCES for causes a user fixes in different
 * ways (nothing running, a path that is not a socket, a stale socket, a group they are
 * not in), so the path is looked at again to tell them apart and name the fix. */
#include "config.h"
#include "connect_error.h"
#include "error.h"
#include "gpushm.h"

#include <errno.h>
#include <grp.h>
#include <libgen.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

/* Room for every supplementary group a process may have (NGROUPS_MAX is 65536 on Linux;
 * a process with more than this many is judged by its primary group alone). */
#define GROUPS_LOOKED_AT 1024

static const char *source_text(enum socket_source source)
{
  switch (source) {
  case SOCKET_FROM_ENV:
    return "from $GPUSHM_SOCKET";
  case SOCKET_DEFAULT:
    return "the default; $GPUSHM_SOCKET is not set";
  default:
    return "as given";
  }
}

static const char *kind_of(mode_t mode)
{
  return S_ISDIR(mode) ? "a directory" : S_ISREG(mode) ? "a regular file" : S_ISFIFO(mode)
         ? "a FIFO" : S_ISCHR(mode) || S_ISBLK(mode) ? "a device node" : "not a socket";
}

static bool in_group(gid_t gid)
{
  gid_t groups[GROUPS_LOOKED_AT];
  int n = getgroups(GROUPS_LOOKED_AT, groups);

  if (getegid() == gid)
    return true;
  for (int i = 0; i < n; i++)
    if (groups[i] == gid)
      return true;
  return false;
}

/* The _r form: a library must not clobber the caller's, or another thread's, result of
 * getgrgid(). */
static const char *group_name(gid_t gid, char *buf, size_t len)
{
  struct group grp, *g = NULL;
  char scratch[4096];

  if (getgrgid_r(gid, &grp, scratch, sizeof scratch, &g) == 0 && g)
    snprintf(buf, len, "%s", g->gr_name);
  else
    snprintf(buf, len, "%u", (unsigned)gid);
  return buf;
}

/* EACCES: the socket's own mode, or a directory on the way this process cannot search. */
static int explain_denied(const char *path, const char *from)
{
  char copy[sizeof ((struct sockaddr_un *)0)->sun_path], group[64];
  struct stat st;

  snprintf(copy, sizeof copy, "%s", path);
  for (char *dir = dirname(copy); strcmp(dir, "/") != 0 && strcmp(dir, ".") != 0;
       dir = dirname(dir))
    if (access(dir, X_OK) != 0 && stat(dir, &st) == 0)
      return client_error(GPUSHM_E_CONNECT, "permission denied: %s (%s): this process (uid %u) "
                          "may not enter directory %s (mode %04o, owner uid %u, group %s): ask "
                          "the administrator, or use a gpushmd of your own (docs/"
                          "troubleshooting.md)", path, from, (unsigned)geteuid(), dir,
                          (unsigned)(st.st_mode & 07777), (unsigned)st.st_uid,
                          group_name(st.st_gid, group, sizeof group));
  if (stat(path, &st) == 0 && !in_group(st.st_gid) && (st.st_mode & S_IWGRP))
    return client_error(GPUSHM_E_CONNECT, "permission denied: %s (%s) is mode %04o, group %s, "
                        "and this process (uid %u) is not in group %s: join it (as root: "
                        "usermod -aG %s USER, then log in again) or ask the administrator",
                        path, from, (unsigned)(st.st_mode & 07777),
                        group_name(st.st_gid, group, sizeof group), (unsigned)geteuid(), group,
                        group);
  if (stat(path, &st) == 0)
    return client_error(GPUSHM_E_CONNECT, "permission denied: %s (%s) is mode %04o, owner uid "
                        "%u, group %s: this process (uid %u) may not write it; ask the "
                        "administrator", path, from, (unsigned)(st.st_mode & 07777),
                        (unsigned)st.st_uid, group_name(st.st_gid, group, sizeof group),
                        (unsigned)geteuid());
  return client_error(GPUSHM_E_CONNECT, "permission denied: %s (%s)", path, from);
}

int client_connect_error(const char *path, enum socket_source source, int err)
{
  const char *from = source_text(source);
  struct stat st;
  int r;

  switch (err) {
  case ENOENT:
    r = client_error(GPUSHM_E_CONNECT, "no gpushmd socket at %s (%s): gpushmd is not running "
                     "there; start it (systemctl start gpushmd.socket, or gpushmd --socket %s) "
                     "or point $GPUSHM_SOCKET at the socket it listens on", path, from, path);
    break;
  case ENOTDIR:
    r = client_error(GPUSHM_E_CONNECT, "%s (%s) cannot be a socket: a part of the path is not "
                     "a directory; set $GPUSHM_SOCKET to gpushmd's socket (%s by default)", path,
                     from, GPUSHM_DEFAULT_SOCKET);
    break;
  case ECONNREFUSED:
    if (lstat(path, &st) == 0 && !S_ISSOCK(st.st_mode))
      r = client_error(GPUSHM_E_CONNECT, "%s (%s) is %s, not gpushmd's socket: set "
                       "$GPUSHM_SOCKET to the socket itself (%s by default)%s", path, from,
                       kind_of(st.st_mode), GPUSHM_DEFAULT_SOCKET,
                       S_ISDIR(st.st_mode) ? ", e.g. a gpushmd.sock inside that directory" : "");
    else
      r = client_error(GPUSHM_E_CONNECT, "nothing listens on %s (%s): a socket left behind by "
                       "a gpushmd that stopped; start gpushmd (systemctl start gpushmd.socket, "
                       "or gpushmd --socket %s), which replaces it", path, from, path);
    break;
  case EACCES:
  case EPERM:
    r = explain_denied(path, from);
    break;
  default:
    r = client_error(GPUSHM_E_CONNECT, "%s (%s): %s", path, from, strerror(err));
    break;
  }
  client_set_errno(err);
  return r;
}
