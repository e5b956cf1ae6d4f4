/* SPDX-License-Identifier: MIT */
/* The library's last-error record (error.c) and sized option structs (opts.c). */
#ifndef GPUSHM_CLIENT_ERROR_H
#define GPUSHM_CLIENT_ERROR_H

#include <stddef.h>

/* Reads a caller's sized option struct (its first member: uint32_t size) into known, the
 * library's own layout of known_size bytes, which holds the defaults; min_size is the
 * first published layout's size.  what names the struct in error messages. */
int client_copy_opts(void *known, size_t known_size, const void *user, size_t min_size,
                     const char *what);

/* Records the detail for gpushm_last_error_message() and returns err. */
int client_error(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void client_clear_error(void);
/* The system error behind the last one recorded (after client_error(), which clears it). */
void client_set_errno(int err);
/* The thread's last error, kept across calls that would reset it (a close in a deleter
 * or a free function, which must not change what the caller's failed call said). */
struct client_saved_error {
  char text[512];
  int err;
};
void client_save_error(struct client_saved_error *saved);
void client_restore_error(const struct client_saved_error *saved);

#endif
