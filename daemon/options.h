/* gpushmd's settings: one table serves the command line and the config file, so every
 * option is also a config key of the same name (without the leading dashes). */
#ifndef GPUSHMD_OPTIONS_H
#define GPUSHMD_OPTIONS_H

#include <stdbool.h>
#include <stddef.h>

struct server;

#define GPUSHMD_DEFAULT_CONFIG "/etc/gpushm/gpushmd.conf"

/* Applies one setting; returns 0 or -1 with err saying what is wrong with it. */
int option_apply(struct server *srv, const char *name, const char *value, char *err, size_t errlen);
/* Whether name is a setting that takes a value (for getopt). */
bool option_known(const char *name);
/* Reads "key = value" lines ('#' comments, blank lines allowed).  A missing file is
 * an error only if must_exist.  Errors name the file and line. */
int config_load(struct server *srv, const char *path, bool must_exist, char *err, size_t errlen);

#endif
