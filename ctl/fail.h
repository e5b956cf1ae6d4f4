/* SPDX-License-Identifier: MIT */
/* How gpushmctl reports a failed library call: one line on stderr, saying it once. */
#ifndef GPUSHMCTL_FAIL_H
#define GPUSHMCTL_FAIL_H

#include <stddef.h>

/* "gpushm_strerror(r): detail", or detail alone where it already says what the former
 * would (unescaped: for a caller that escapes); into buf, which it returns. */
const char *ctl_error_text(int r, const char *detail, char *buf, size_t len);
/* "gpushmctl: WHAT: " and ctl_error_text() of the library's last message, escaped, on
 * stderr; returns EXIT_FAILED. */
int ctl_fail(const char *what, int r);

#endif
