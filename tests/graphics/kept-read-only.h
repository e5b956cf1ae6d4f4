/* SPDX-License-Identifier: MIT */
/* Whether a read-only open of registered memory came read-only in the kernel's eyes:
 * a memfd (Mesa's exports) must, NVIDIA memory cannot.  Asserts what a holder of the
 * memfd's fd cannot do, as a hostile reader would try it. */
#ifndef GPUSHM_TESTS_KEPT_READ_ONLY_H
#define GPUSHM_TESTS_KEPT_READ_ONLY_H

#include "harness.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gpushm-graphics.h>

/* 1: a memfd, kept read-only (the caller reopens read-write to import it into Mesa);
 * 0: NVIDIA memory, which imports read-only as it is. */
static inline int kept_read_only(gpushm_buffer_t *b)
{
  gpushm_memory_info_t info = { .size = sizeof info };
  char path[64];
  struct stat st;
  void *p;
  int fd, again;

  CHECK_OK(gpushm_buffer_memory_info(b, &info));
  CHECK(info.access & GPUSHM_OPEN_READONLY);
  CHECK_OK(gpushm_buffer_memory_fd(b, &fd));
  CHECK(fstat(fd, &st) == 0);
  if (!S_ISREG(st.st_mode)) {
    CHECK(!(info.flags & GPUSHM_EXTERNAL_READ_ONLY_FD));
    close(fd);
    return 0;
  }
  CHECK((info.flags & GPUSHM_EXTERNAL_READ_ONLY_FD) && (fcntl(fd, F_GETFL) & O_ACCMODE) == O_RDONLY);
  CHECK((st.st_mode & 07777) == 0400);
  p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  CHECK(p == MAP_FAILED && errno == EACCES);
  snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
  if (getuid() != st.st_uid) {
    again = open(path, O_RDWR | O_CLOEXEC);
    CHECK(again < 0 && errno == EACCES);
  }
  close(fd);
  return 1;
}

#endif
