/* Test helper: opens the named buffers, creates READY_FILE, then holds them until
 * killed.  Usage: hold-buffers READY_FILE NAME... */
#include "gpushm.h"

#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

int main(int argc, char **argv)
{
  gpushm_t *conn;
  gpushm_buffer_t *b;
  int r, fd;

  if (argc < 3)
    return 2;
  if ((r = gpushm_connect(NULL, "hold-buffers", &conn)) < 0) {
    fprintf(stderr, "hold-buffers: %s\n", gpushm_last_error_message());
    return 1;
  }
  for (int i = 2; i < argc; i++) {
    if ((r = gpushm_buffer_open(conn, argv[i], GPUSHM_OPEN_READONLY, &b)) < 0) {
      fprintf(stderr, "hold-buffers: %s: %s\n", argv[i], gpushm_last_error_message());
      return 1;
    }
  }
  if ((fd = open(argv[1], O_CREAT | O_WRONLY, 0644)) < 0)
    return 1;
  close(fd);
  for (;;)
    pause();
}
