/* SPDX-License-Identifier: MIT */
/* Test helper: opens the named buffers, creates READY_FILE, then holds them until
 * killed.  Usage: hold-buffers READY_FILE NAME...
 * $HOLD_COMM_HEX: first set the process name (comm) to these bytes, given in hex, as a
 * hostile process could (prctl PR_SET_NAME); $HOLD_CLIENT_NAME: the Hello name. */
#include "gpushm.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <unistd.h>

static int set_comm(const char *hex)
{
  char comm[16] = { 0 };
  size_t n = 0;

  for (; hex[0] && hex[1] && n < sizeof comm - 1; hex += 2) {
    unsigned byte;
    if (sscanf(hex, "%2x", &byte) != 1)
      return -1;
    comm[n++] = (char)byte;
  }
  return prctl(PR_SET_NAME, comm, 0, 0, 0);
}

int main(int argc, char **argv)
{
  gpushm_t *conn;
  gpushm_buffer_t *b;
  int r, fd;

  const char *comm_hex = getenv("HOLD_COMM_HEX"), *name = getenv("HOLD_CLIENT_NAME");

  if (argc < 3)
    return 2;
  if (comm_hex && set_comm(comm_hex) < 0) {
    perror("hold-buffers: PR_SET_NAME");
    return 1;
  }
  if ((r = gpushm_connect(NULL, name ? name : "hold-buffers", &conn)) < 0) {
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
