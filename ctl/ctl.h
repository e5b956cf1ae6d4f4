/* SPDX-License-Identifier: MIT */
/* What gpushmctl's commands share: its state, the command table's row, the output
 * helpers (output.c) and each command (cmd_*.c). */
#ifndef GPUSHMCTL_CTL_H
#define GPUSHMCTL_CTL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "dump.h"
#include "gpushm-admin.h"
#include "gpushm-graphics.h"

struct ctl {
  const char *socket;
  bool json, bytes, all, prometheus, session, sync, strict_mode;
  int device;
  uint32_t mode;
  uint32_t backend;
  const char *metadata; /* create --metadata */
  uint32_t format;      /* create-image --format */
  const char *textfile; /* stats --textfile */
  int32_t wait_ms;      /* wait --timeout; GPUSHM_TIMEOUT_INFINITE: none */
  int64_t group;        /* create --group; GPUSHM_GROUP_OF_CREATOR: none */
  struct dump_request dump;
  gpushm_t *conn;
};

struct cmd_entry {
  const char *name;
  const char *alias;   /* an older name that still works, or NULL */
  const char *args;    /* shown in usage */
  const char *summary;
  const char *options; /* long options it accepts, "," separated, for --help */
  int min_args, max_args;
  int (*run)(struct ctl *ctl, int argc, char **argv);
  /* Optional: checks the arguments before connecting (usage errors exit 2 even with
   * no daemon running). */
  int (*check)(struct ctl *ctl, int argc, char **argv);
  /* run connects by itself (doctor: a failed connect is one of its findings). */
  bool connects_itself;
};

/* A table: cells are collected (escaped: any may come from outside), then printed with
 * aligned columns; the last column is cut to fit the terminal when stdout is one.
 * Cells live in one growing buffer with their widths beside them, so that a table of
 * 100k rows costs no allocation per cell and no second measuring pass. */
#define TABLE_MAX_COLS 14
/* A listing of 100k buffers is 1.2M cells: they are kept compact (a cell's width and
 * length fit 16 bits: names are at most 127 bytes, escaped four times that) and rows
 * are written with one stdio call each. */
struct table {
  size_t rows, cap, cols;
  size_t *at; /* per row: its first cell's offset in text (the others follow it) */
  struct table_cell {
    uint16_t width; /* in columns */
    uint16_t bytes; /* in text, without its NUL */
  } *cell;
  char *text;
  size_t len, text_cap;
};

/* output.c: ages against one instant, names looked up once, aligned tables */
uint64_t age_ms(uint64_t since_unix_ms);
const char *user_name(uint32_t uid, char *buf, size_t len);
const char *process_name(uint32_t pid, char *buf, size_t len);
const char *backend_name(gpushm_kind_t kind, gpushm_backend_t backend);
void table_reserve(struct table *t, size_t rows);
void table_add(struct table *t, ...);
void table_print(struct table *t, const size_t *order);

/* cmd_buffers.c: list, events, show, create, create-image, unlink, and what show and
 * stats share (a detached process, a buffer named by name or id) */
int cmd_list(struct ctl *ctl, int argc, char **argv);
int cmd_events(struct ctl *ctl, int argc, char **argv);
void text_detached(struct ctl *ctl, const gpushm_detached_t *d, uint64_t only);
bool arg_is_id(const char *arg, uint64_t *id);
const gpushm_buffer_info_t *find_listed(const gpushm_buffer_list_t *list, const char *arg, bool by_id, uint64_t id);
int cmd_show(struct ctl *ctl, int argc, char **argv);
int parse_size(const char *s, uint64_t *out);
int check_create(struct ctl *ctl, int argc, char **argv);
int cmd_create(struct ctl *ctl, int argc, char **argv);
int check_create_image(struct ctl *ctl, int argc, char **argv);
int cmd_create_image(struct ctl *ctl, int argc, char **argv);
int cmd_unlink(struct ctl *ctl, int argc, char **argv);

/* cmd_clients.c: clients, disconnect */
int cmd_clients(struct ctl *ctl, int argc, char **argv);
int check_disconnect(struct ctl *ctl, int argc, char **argv);
int cmd_disconnect(struct ctl *ctl, int argc, char **argv);

/* cmd_stats.c: stats and its renderers */
int cmd_stats(struct ctl *ctl, int argc, char **argv);


#endif
