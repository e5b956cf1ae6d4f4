/* SPDX-License-Identifier: MIT */
/* gpushmctl stats --textfile (ctl/textfile.c), as gpushm-textfile runs it as root into a
 * directory another user owns (issue 29, item 4): what is written shows whole or not at
 * all, never under a *.prom name early; a link the directory's owner plants at the
 * temporary's name or the final one leads nowhere (a root-only file stays as it was, its
 * mode too); a directory every user, or a group other than root's, may write is refused,
 * and so is a directory that is a link, or that is reached through one (a component
 * above it that uid 65534 swapped for a link into a root-only directory). */
#include "config.h"
#include "harness.h"
#include "textfile.h"

#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
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
  /* Issue 36, item 6: a link above the last component.  uid 65534's directory holds
   * 'away', which it swaps for a link to a root-only place holding 'textfiles': root's
   * writer must not follow it there. */
  {
    char attacker[400], rootonly[400], target[500], away[500], through[600], planted[700];
    snprintf(attacker, sizeof attacker, "%s/attacker", top);
    snprintf(rootonly, sizeof rootonly, "%s/root-only", top);
    snprintf(target, sizeof target, "%s/textfiles", rootonly);
    snprintf(away, sizeof away, "%s/away", attacker);
    snprintf(through, sizeof through, "%s/textfiles/m.prom", away);
    snprintf(planted, sizeof planted, "%s/m.prom", target);
    CHECK(mkdir(attacker, 0755) == 0 && mkdir(rootonly, 0700) == 0 && mkdir(target, 0755) == 0);
    CHECK(mkdir(away, 0755) == 0);
    if (geteuid() == 0) {
      CHECK(chown(attacker, 65534, 65534) == 0 && chown(away, 65534, 65534) == 0);
    }
    /* the swap, as uid 65534 where this runs as root */
    {
      pid_t pid = fork();
      int status;
      CHECK(pid >= 0);
      if (pid == 0) {
        if (geteuid() == 0 && (setgroups(0, NULL) < 0 || setgid(65534) < 0 || setuid(65534) < 0))
          _exit(2);
        _exit(rmdir(away) == 0 && symlink(rootonly, away) == 0 ? 0 : 1);
      }
      CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    CHECK(textfile_begin(&tf, through, err, sizeof err) < 0 && strstr(err, "symbolic link"));
    CHECK(access(planted, F_OK) < 0);
    {
      DIR *d = opendir(target);
      struct dirent *e;
      int files = 0;
      CHECK(d != NULL);
      while ((e = readdir(d)))
        files += e->d_name[0] != '.' || (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."));
      closedir(d);
      CHECK(files == 0); /* no temporary either */
    }
    snprintf(through, sizeof through, "%s/../node-exporter/m.prom", dir);
    CHECK(textfile_begin(&tf, through, err, sizeof err) < 0 && strstr(err, "'..'"));
  }
  n = entries(NULL, 0);
  CHECK(n == 1);

  snprintf(tmp_path, sizeof tmp_path, "rm -rf '%s'", top);
  CHECK(system(tmp_path) == 0);
  test_log("textfile: whole or nothing; links planted at either name lead nowhere; writable "
           "and linked directories refused, and so are links above them");
  return 0;
}
