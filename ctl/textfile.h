/* SPDX-License-Identifier: MIT */
/* A file replaced whole in a directory another user may own (node_exporter's textfile
 * directory belongs to prometheus, gpushm-textfile runs as root): nothing is ever
 * written or chmod-ed through a name, only through fds this process opened, so links
 * planted in the directory lead nowhere. */
#ifndef GPUSHMCTL_TEXTFILE_H
#define GPUSHMCTL_TEXTFILE_H

#include <stddef.h>

struct textfile {
  int dir_fd;
  int fd;           /* the temporary file, open for writing */
  char tmp[300];    /* its name in the directory: .NAME.XXXXXX (never *.prom) */
  char name[256];
};

/* Opens path's directory component by component, following no symbolic link anywhere
 * on the way (refusing one, or a directory every user, or a group other than root's,
 * may write) and creates a new temporary file in it.  0, or -1 with err set.  The
 * directory may belong to another user (node_exporter's): that user can replace the
 * file between writes, in a directory that is theirs. */
int textfile_begin(struct textfile *tf, const char *path, char *err, size_t errlen);
/* Makes the temporary file readable by all and renames it over the name: 0, or -1 with
 * err set and the temporary removed. */
int textfile_commit(struct textfile *tf, char *err, size_t errlen);
/* Removes the temporary file; the old one stays as it was. */
void textfile_abort(struct textfile *tf);

#endif
