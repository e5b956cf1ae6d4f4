/* SPDX-License-Identifier: MIT */
#include "config.h"
#include "textfile.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

static int fail(char *err, size_t errlen, const char *what, const char *path)
{
  snprintf(err, errlen, "%s %s: %s", what, path, strerror(errno));
  return -1;
}

/* Opens dir one component at a time, each relative to the last and with O_NOFOLLOW, so
 * that a symbolic link anywhere on the way is refused, not only as its last component: a
 * directory above whose owner swaps a subdirectory for a link (to a root-only place)
 * cannot lead root's writes there, before or during the walk.  ".." is refused too (it
 * would climb out of what was walked).  Returns the fd, or -1 with err set. */
static int open_dir_nofollow(const char *dir, char *err, size_t errlen)
{
  char copy[4096], *save = NULL;
  int fd;

  if (strlen(dir) >= sizeof copy) {
    snprintf(err, errlen, "directory name too long: %s", dir);
    return -1;
  }
  memcpy(copy, dir, strlen(dir) + 1);
  if ((fd = open(dir[0] == '/' ? "/" : ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
    return fail(err, errlen, "opening the directory", dir[0] == '/' ? "/" : ".");
  for (char *part = strtok_r(copy, "/", &save); part; part = strtok_r(NULL, "/", &save)) {
    int next;
    if (strcmp(part, ".") == 0)
      continue;
    if (strcmp(part, "..") == 0) {
      snprintf(err, errlen, "%s: give the directory without '..'", dir);
      close(fd);
      return -1;
    }
    next = openat(fd, part, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (next < 0) {
      int e = errno;
      struct stat st;
      if (fstatat(fd, part, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode))
        snprintf(err, errlen, "opening the directory %s: its component '%s' is a symbolic "
                 "link, which is not followed (give the path it leads to)", dir, part);
      else
        snprintf(err, errlen, "opening the directory %s: '%s': %s", dir, part, strerror(e));
      close(fd);
      return -1;
    }
    close(fd);
    fd = next;
  }
  return fd;
}

int textfile_begin(struct textfile *tf, const char *path, char *err, size_t errlen)
{
  const char *slash = strrchr(path, '/');
  char dir[4096];
  struct stat st;

  tf->dir_fd = tf->fd = -1;
  snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash == path ? 1 : slash - path) : 1,
           slash ? path : ".");
  snprintf(tf->name, sizeof tf->name, "%s", slash ? slash + 1 : path);
  if (!tf->name[0] || tf->name[0] == '.' || strlen(slash ? slash + 1 : path) >= sizeof tf->name) {
    snprintf(err, errlen, "bad file name in %s", path);
    return -1;
  }
  if ((tf->dir_fd = open_dir_nofollow(dir, err, errlen)) < 0)
    return -1;
  if (fstat(tf->dir_fd, &st) < 0) {
    fail(err, errlen, "fstat", dir);
    textfile_abort(tf);
    return -1;
  }
  if ((st.st_mode & S_IWOTH) || ((st.st_mode & S_IWGRP) && st.st_gid != 0)) {
    snprintf(err, errlen, "%s is writable by %s: anyone there could swap the file under "
             "readers; use a directory only its owner (and root) may write", dir,
             st.st_mode & S_IWOTH ? "every user" : "its group");
    textfile_abort(tf);
    return -1;
  }
  for (int tries = 0; tries < 16 && tf->fd < 0; tries++) {
    unsigned char r[6];
    static const char set[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    char suffix[7];
    if (getrandom(r, sizeof r, 0) != (ssize_t)sizeof r) {
      fail(err, errlen, "getrandom for a name in", dir);
      textfile_abort(tf);
      return -1;
    }
    for (int i = 0; i < 6; i++)
      suffix[i] = set[r[i] % (sizeof set - 1)];
    suffix[6] = '\0';
    snprintf(tf->tmp, sizeof tf->tmp, ".%s.%s", tf->name, suffix);
    /* O_EXCL | O_NOFOLLOW: a new file of this process's, never one a link points at */
    tf->fd = openat(tf->dir_fd, tf->tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                    0600);
    if (tf->fd < 0 && errno != EEXIST) {
      fail(err, errlen, "creating a temporary file in", dir);
      textfile_abort(tf);
      return -1;
    }
  }
  if (tf->fd < 0) {
    snprintf(err, errlen, "no free temporary name in %s", dir);
    textfile_abort(tf);
    return -1;
  }
  return 0;
}

int textfile_commit(struct textfile *tf, char *err, size_t errlen)
{
  struct stat ours, named;

  /* Through the fd, never the name: whatever now sits at the temporary's name, it is
   * this file that becomes readable to node_exporter's user, and nothing else. */
  if (fchmod(tf->fd, 0644) < 0 || fsync(tf->fd) < 0 || fstat(tf->fd, &ours) < 0) {
    fail(err, errlen, "finishing", tf->tmp);
    textfile_abort(tf);
    return -1;
  }
  /* The directory's owner can still swap the name before the rename; that only ever
   * puts its own file in place, but say so instead of claiming success. */
  if (fstatat(tf->dir_fd, tf->tmp, &named, AT_SYMLINK_NOFOLLOW) < 0 ||
      named.st_ino != ours.st_ino || named.st_dev != ours.st_dev) {
    snprintf(err, errlen, "%s was replaced by someone else before it was renamed; %s is "
             "left as it was", tf->tmp, tf->name);
    close(tf->fd);
    tf->fd = -1; /* not unlinked: the name is not ours any more */
    textfile_abort(tf);
    return -1;
  }
  if (renameat(tf->dir_fd, tf->tmp, tf->dir_fd, tf->name) < 0) {
    fail(err, errlen, "renaming over", tf->name);
    textfile_abort(tf);
    return -1;
  }
  close(tf->fd);
  close(tf->dir_fd);
  tf->fd = tf->dir_fd = -1;
  return 0;
}

void textfile_abort(struct textfile *tf)
{
  if (tf->fd >= 0) {
    close(tf->fd);
    unlinkat(tf->dir_fd, tf->tmp, 0);
  }
  if (tf->dir_fd >= 0)
    close(tf->dir_fd);
  tf->fd = tf->dir_fd = -1;
}
