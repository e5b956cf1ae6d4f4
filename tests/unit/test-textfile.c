/* SPDX-License-Identifier: MIT */
/* gpushmctl stats --textfile (ctl/textfile.c), as gpushm-textfile runs it as root into a
 * directory another user owns (issue 29, item 4): what is written shows whole or not at
 * all, never under a *.prom name early; a link the directory's owner plants at the
 * temporary's name or the final one leads nowhere (a root-only file stays as it was, its
 * mode too); a directory every user, or a group other than root's, may write is refused,
 * and so is a directory that is a link. */
#include "config.h"
#include "harness.h"
#include "textfile.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char top[256], dir[300], secret[300], path[400];

static void put(const char *file, const char *text, mode_t mode)
{
  int fd = open(file, O_WRONLY | O_CREAT | O_TRUNC, mode);
  CHECK(fd >= 0 && write(fd, text, strlen(text)) == (ssize_t)strlen(text));
  CHECK(fchmod(fd, mode) == 0);
  close(fd);
}

static int holds(const char *file, const char *text)
{
  char buf[256] = "";
  int fd = open(file, O_RDONLY | O_NOFOLLOW);
  ssize_t n = fd >= 0 ? read(fd, buf, sizeof buf - 1) : -1;
  if (fd >= 0)
    close(fd);
  return n >= 0 && (buf[n] = '\0', strcmp(buf, text) == 0);
}

/* Names in dir: how many, and the one that is not m.prom (the temporary). */
static int entries(char *other, size_t len)
{
  DIR *d = opendir(dir);
  struct dirent *e;
  int n = 0;
  CHECK(d != NULL);
  while ((e = readdir(d))) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
      continue;
    n++;
    if (strcmp(e->d_name, "m.prom") && other)
      snprintf(other, len, "%s", e->d_name);
  }
  closedir(d);
  return n;
}

int main(void)
{
  struct textfile tf;
  char err[512], tmp[256], tmp_path[600], link_path[400];
  struct stat st;
  size_t n;

  snprintf(top, sizeof top, "/tmp/gpushm-textfile-unit.XXXXXX");
  CHECK(mkdtemp(top) != NULL && chmod(top, 0755) == 0);
  snprintf(dir, sizeof dir, "%s/node-exporter", top);
  snprintf(secret, sizeof secret, "%s/secret", top);
  snprintf(path, sizeof path, "%s/m.prom", dir);
  CHECK(mkdir(dir, 0755) == 0);
  /* owned by another user, as Debian's belongs to prometheus (as root only) */
  if (geteuid() == 0)
    CHECK(chown(dir, 65534, 65534) == 0);
  put(secret, "root's own", 0600);
  put(path, "old", 0644);

  /* whole or not at all, and no *.prom temporary */
  CHECK(textfile_begin(&tf, path, err, sizeof err) == 0);
  CHECK(entries(tmp, sizeof tmp) == 2 && tmp[0] == '.' &&
        strcmp(tmp + strlen(tmp) - 5, ".prom") != 0);
  CHECK(write(tf.fd, "ne", 2) == 2);
  CHECK(holds(path, "old"));
  CHECK(write(tf.fd, "w", 1) == 1);
  CHECK(textfile_commit(&tf, err, sizeof err) == 0);
  CHECK(holds(path, "new") && stat(path, &st) == 0 && (st.st_mode & 07777) == 0644);
  CHECK(entries(NULL, 0) == 1);

  /* given up: the old file stays, the temporary goes */
  CHECK(textfile_begin(&tf, path, err, sizeof err) == 0);
  CHECK(write(tf.fd, "half", 4) == 4);
  textfile_abort(&tf);
  CHECK(holds(path, "new") && entries(NULL, 0) == 1);

  /* the directory's owner swaps the temporary for a link to a root-only file */
  CHECK(textfile_begin(&tf, path, err, sizeof err) == 0);
  CHECK(entries(tmp, sizeof tmp) == 2);
  snprintf(tmp_path, sizeof tmp_path, "%s/%s", dir, tmp);
  CHECK(unlink(tmp_path) == 0 && symlink(secret, tmp_path) == 0);
  CHECK(write(tf.fd, "evil", 4) == 4);
  CHECK(textfile_commit(&tf, err, sizeof err) < 0 && strstr(err, "replaced by someone else"));
  CHECK(holds(secret, "root's own") && stat(secret, &st) == 0 && (st.st_mode & 07777) == 0600);
  CHECK(holds(path, "new"));
  CHECK(unlink(tmp_path) == 0);

  /* ...or plants a link at the final name: it is replaced, not written through */
  CHECK(unlink(path) == 0 && symlink(secret, path) == 0);
  CHECK(textfile_begin(&tf, path, err, sizeof err) == 0);
  CHECK(write(tf.fd, "fresh", 5) == 5);
  CHECK(textfile_commit(&tf, err, sizeof err) == 0);
  CHECK(lstat(path, &st) == 0 && S_ISREG(st.st_mode) && holds(path, "fresh"));
  CHECK(holds(secret, "root's own") && stat(secret, &st) == 0 && (st.st_mode & 07777) == 0600);

  /* directories others may write, and a directory that is a link, are refused */
  CHECK(chmod(dir, 0777) == 0);
  CHECK(textfile_begin(&tf, path, err, sizeof err) < 0 && strstr(err, "writable by every user"));
  CHECK(chmod(dir, 01777) == 0);
  CHECK(textfile_begin(&tf, path, err, sizeof err) < 0 && strstr(err, "writable by every user"));
  if (geteuid() == 0) {
    CHECK(chmod(dir, 0775) == 0);
    CHECK(textfile_begin(&tf, path, err, sizeof err) < 0 && strstr(err, "writable by its group"));
    CHECK(chown(dir, 65534, 0) == 0); /* root's group may */
    CHECK(textfile_begin(&tf, path, err, sizeof err) == 0);
    textfile_abort(&tf);
  }
  CHECK(chmod(dir, 0755) == 0);
  snprintf(link_path, sizeof link_path, "%s/linked", top);
  CHECK(symlink(dir, link_path) == 0);
  snprintf(tmp_path, sizeof tmp_path, "%s/m.prom", link_path);
  CHECK(textfile_begin(&tf, tmp_path, err, sizeof err) < 0 && strstr(err, "opening the directory"));
  CHECK(textfile_begin(&tf, "/nonexistent/m.prom", err, sizeof err) < 0);
  n = entries(NULL, 0);
  CHECK(n == 1);

  snprintf(tmp_path, sizeof tmp_path, "rm -rf '%s'", top);
  CHECK(system(tmp_path) == 0);
  test_log("textfile: whole or nothing; links planted at either name lead nowhere; writable "
           "and linked directories refused");
  return 0;
}
