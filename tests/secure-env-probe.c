/* SPDX-License-Identifier: MIT */
/* What libgpushm makes of its environment, for test-secure-env.sh, which runs this as a
 * setuid-root program and as a plain one: whether it connects to the daemon at argv[1]
 * (trusting $GPUSHM_DAEMON_UID or not), which socket it would use without one
 * ($GPUSHM_SOCKET), and which "libcuda" it loaded ($GPUSHM_CUDA_LIBRARY: the first
 * device's name says whose it is). */
#include "gpushm.h"
#include "gpushm-admin.h"

#include <stdio.h>

int main(int argc, char **argv)
{
  gpushm_local_device_list_t *list;
  gpushm_t *conn;
  int r;

  if (argc != 2) {
    fprintf(stderr, "usage: secure-env-probe SOCKET\n");
    return 2;
  }
  r = gpushm_connect(argv[1], "secure-env-probe", &conn);
  printf("connect %d %s\n", r, r ? gpushm_last_error_message() : "");
  if (r == 0)
    gpushm_disconnect(conn);
  r = gpushm_connect(NULL, "secure-env-probe", &conn);
  printf("default-socket %d %s\n", r, r ? gpushm_last_error_message() : "");
  if (r == 0)
    gpushm_disconnect(conn);
  r = gpushm_local_devices(&list);
  if (r == 0 && gpushm_local_device_list_count(list) > 0)
    printf("device0 %s\n", gpushm_local_device_name(gpushm_local_device_list_get(list, 0)));
  else
    printf("device0 none (%d)\n", r);
  if (r == 0)
    gpushm_local_device_list_free(list);
  return 0;
}
