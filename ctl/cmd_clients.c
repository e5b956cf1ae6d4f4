/* SPDX-License-Identifier: MIT */
/* gpushmctl's commands on clients: clients, disconnect. */
#include "config.h"
#include "ctl.h"
#include "doctor.h"
#include "dump.h"
#include "escape.h"
#include "fail.h"
#include "format.h"
#include "textfile.h"
#include "gpushm-admin.h"
#include "gpushm-graphics.h"

#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <langinfo.h>
#include <locale.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>
#include <wchar.h>


int cmd_clients(struct ctl *ctl, int argc, char **argv)
{
  gpushm_client_list_t *clients;
  size_t n;
  int r = gpushm_clients(ctl->conn, &clients);

  if (r < 0)
    return ctl_fail("clients", r);
  n = gpushm_client_list_count(clients);
  if (ctl->json) {
    putchar('[');
    for (size_t i = 0; i < n; i++) {
      const gpushm_client_info_t *c = gpushm_client_list_get(clients, i);
      char comm[32], user[64];
      printf("%s{\"client_id\":%u,\"pid\":%u,\"process\":", i ? "," : "",
             gpushm_client_info_client_id(c), gpushm_client_info_pid(c));
      json_string(process_name(gpushm_client_info_pid(c), comm, sizeof comm));
      printf(",\"uid\":%u,\"user\":", gpushm_client_info_uid(c));
      json_string(user_name(gpushm_client_info_uid(c), user, sizeof user));
      printf(",\"gid\":%u,\"name\":", gpushm_client_info_gid(c));
      json_string(gpushm_client_info_name(c));
      printf(",\"buffers_held\":%u,\"bytes_held\":%" PRIu64 ",\"segments_mapped\":%u,"
             "\"segment_bytes_mapped\":%" PRIu64 ",\"connected_unix_ms\":%" PRIu64
             ",\"admin\":%s}", gpushm_client_info_buffers_held(c), gpushm_client_info_bytes_held(c),
             gpushm_client_info_segments_mapped(c), gpushm_client_info_segment_bytes_mapped(c),
             gpushm_client_info_connected_unix_ms(c),
             gpushm_client_info_admin(c) ? "true" : "false");
    }
    printf("]\n");
  } else {
    struct table t = { .cols = 8 };
    table_add(&t, "ID", "PID", "PROCESS", "USER", "CLIENT", "BUFFERS", "BYTES", "CONNECTED");
    for (size_t i = 0; i < n; i++) {
      const gpushm_client_info_t *c = gpushm_client_list_get(clients, i);
      char id[16], pid[16], comm[32], user[64], held[16], bytes[32], age[32];
      snprintf(id, sizeof id, "%u", gpushm_client_info_client_id(c));
      snprintf(pid, sizeof pid, "%u", gpushm_client_info_pid(c));
      snprintf(held, sizeof held, "%u", gpushm_client_info_buffers_held(c));
      table_add(&t, id, pid, process_name(gpushm_client_info_pid(c), comm, sizeof comm),
                user_name(gpushm_client_info_uid(c), user, sizeof user), gpushm_client_info_name(c),
                held, format_size(gpushm_client_info_bytes_held(c), ctl->bytes, bytes, sizeof bytes),
                format_age(age_ms(gpushm_client_info_connected_unix_ms(c)), age, sizeof age));
    }
    table_print(&t, NULL);
  }
  gpushm_client_list_free(clients);
  return 0;
}


/* Digits only: strtoul would take "-1" (as ULONG_MAX) and " 1". */
static int parse_client_id(const char *arg, uint32_t *id)
{
  char *end;
  unsigned long v;

  if (!isdigit((unsigned char)*arg))
    return -1;
  errno = 0;
  v = strtoul(arg, &end, 10);
  if (*end || errno || v == 0 || v > UINT32_MAX)
    return -1;
  *id = (uint32_t)v;
  return 0;
}

int check_disconnect(struct ctl *ctl, int argc, char **argv)
{
  uint32_t id;
  (void)ctl;
  (void)argc;
  if (parse_client_id(argv[0], &id) == 0)
    return 0;
  fprintf(stderr, "gpushmctl: disconnect: bad client id '%s' (a number from 1, as gpushmctl "
          "clients lists them)\n", argv[0]);
  return EXIT_USAGE;
}

int cmd_disconnect(struct ctl *ctl, int argc, char **argv)
{
  uint32_t id;
  int r;

  (void)argc;
  parse_client_id(argv[0], &id);
  if ((r = gpushm_client_disconnect(ctl->conn, id)) == GPUSHM_E_NOENT) {
    /* others' clients are as invisible as in the listing: say so, not "no such buffer" */
    fprintf(stderr, "gpushmctl: disconnect: no client with id %u among those you may end "
            "(gpushmctl clients lists them)\n", id);
    return EXIT_FAILED;
  }
  if (r < 0)
    return ctl_fail("disconnect", r);
  printf("client %u disconnected: its references are released; host memory nobody else "
         "holds is taken back from that process, device memory it maps stays allocated "
         "until it exits\n", id);
  return 0;
}

