/* SPDX-License-Identifier: MIT */
/* gpushmd's settings: one table serves the command line, the config file, the usage
 * text and SIGHUP reloads, so every option is also a config key of the same name
 * (without the leading dashes). */
#ifndef GPUSHMD_OPTIONS_H
#define GPUSHMD_OPTIONS_H

#include <getopt.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "registry/registry.h"
#include "server/server.h"

#define GPUSHMD_DEFAULT_CONFIG "/etc/gpushm/gpushmd.conf"

struct settings {
  struct server_config cfg;
  struct reg_limits limits; /* host budget and per-uid host bytes resolved by settings_resolve */
  bool host_budget_auto;
  bool host_bytes_per_uid_auto;
  bool legacy_ipc_auto;
  /* max-device-bytes-per-uid: a share of each device (percent), else bytes (0: none);
   * device_quota_resolve() turns it into limits.max_device_bytes_per_uid */
  uint32_t device_quota_percent;
  uint64_t device_quota_bytes;
  bool socket_mode_set;     /* else 0660 with a socket group, 0666 without */
  bool socket_group_auto;   /* the group gpushm where it exists and gpushmd is root */
  char socket_group[64];    /* its name, for the start-up log */
  int log_level;            /* enum log_level */
  char host_budget_why[256]; /* how the budget was derived, for the start-up log */
};

/* Built-in defaults ($GPUSHM_SOCKET for the socket). */
void settings_init(struct settings *s);
/* Applies one setting; returns 0 or PROTO_E_INVAL with err saying what is wrong with it. */
int option_apply(struct settings *s, const char *name, const char *value, char *err, size_t errlen);
/* Reads "key = value" lines ('#' comments, blank lines allowed) from a regular file (or
 * /dev/null).  A missing file is an error only if must_exist.  Errors name the file and
 * line. */
int config_load(struct settings *s, const char *path, bool must_exist, char *err, size_t errlen);
/* Turns "auto" values into numbers (the host-memory budget from RAM and cgroups). */
void settings_resolve(struct settings *s);
/* The device-memory quota per uid for each device, given their sizes (bytes, by
 * ordinal; n at most GPUSHM_LIMIT_DEVICES). */
void device_quota_resolve(struct settings *s, const uint64_t *device_bytes, int n);

/* getopt_long's table for every setting plus --config, --help, --version; a setting's
 * index in it is returned as 0 with *longindex set. */
const struct option *options_getopt(void);
/* The long name of a short option (-s, -l), or NULL. */
const char *options_short_name(int c);
void options_usage(FILE *out);

#endif
