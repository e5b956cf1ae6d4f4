/* SPDX-License-Identifier: MIT */
/* gpushmctl's escaping of what it did not write itself (escape.c): text() for a
 * terminal, json_string() for --json, prom_label() for --prometheus. */
#ifndef GPUSHMCTL_ESCAPE_H
#define GPUSHMCTL_ESCAPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define EXIT_FAILED 1
#define EXIT_USAGE 2

/* Reads the locale's charset (after setlocale): other UTF-8 than ASCII passes only in a
 * UTF-8 locale. */
void escape_init(void);
/* p, or an exit with EXIT_FAILED and perror's message when it is NULL (out of memory). */
void *xalloc(void *p);
/* The well-formed UTF-8 sequence at s: its length, *cp its code point; or 0, with *bad
 * the length of its maximal ill-formed subpart. */
size_t utf8_next(const unsigned char *s, uint32_t *cp, size_t *bad);
/* s made safe for a terminal, padded to pad columns; malloc'd. */
char *text_escape(const char *s, size_t pad);
/* The same for printf's %s: it lives until eight more calls. */
const char *text(const char *s, size_t pad);
/* The bytes of the longest prefix of text_escape()'s output e that fits in max columns,
 * never splitting an escape or a character; *cols gets its width. */
size_t text_span(const char *e, size_t max, size_t *cols);
/* s as a JSON string, on stdout. */
void json_string(const char *s);
/* s as a Prometheus label value (without the quotes), on stdout. */
void prom_label(const char *s);

#endif
