/* SPDX-License-Identifier: MIT */
/* Escaping what gpushmctl prints.  Every string it did not write itself -- client
 * names, /proc/PID/comm (any process may set its own to any bytes but NUL), NSS user
 * names, buffer names, the daemon's version, request types, device names, metric names
 * and error messages -- goes out through text() or the table (terminal), json_string()
 * (--json) or prom_label() (--prometheus).  Names are not trusted to be what the daemon
 * validates: the socket may be anyone's. */
#include "config.h"
#include "escape.h"

#include <inttypes.h>
#include <langinfo.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <wchar.h>
/* Every string gpushmctl did not write itself -- client names, /proc/PID/comm (any
 * process may set its own to any bytes but NUL), NSS user names, buffer names, the
 * daemon's version, request types, device names and error messages -- goes out through
 * text() or the table (terminal), json_string() (--json) or prom_label() (--prometheus).
 * Names are not trusted to be what the daemon validates: the socket may be anyone's. */

static bool utf8_locale; /* LC_CTYPE's charset is UTF-8: see text_escape() */

void escape_init(void)
{
  utf8_locale = strcmp(nl_langinfo(CODESET), "UTF-8") == 0;
}

void *xalloc(void *p)
{
  if (!p) {
    perror("gpushmctl");
    exit(EXIT_FAILED);
  }
  return p;
}

/* The well-formed UTF-8 sequence at s (Unicode table 3-7: no overlongs, surrogates or
 * code points past U+10FFFF): returns its length and sets *cp.  Otherwise returns 0 and
 * sets *bad to the length of its maximal ill-formed subpart, at least 1: the unit
 * Unicode recommends replacing with one U+FFFD, as WHATWG decoders and Python's
 * errors="replace" do, so json_string() agrees with them.  A NUL ends any sequence,
 * so this never reads past the string. */
size_t utf8_next(const unsigned char *s, uint32_t *cp, size_t *bad)
{
  unsigned char lo = 0x80, hi = 0xbf;
  uint32_t v;
  size_t n;

  if (s[0] < 0x80) {
    *cp = s[0];
    return 1;
  } else if (s[0] >= 0xc2 && s[0] <= 0xdf) {
    n = 2, v = s[0] & 0x1fu;
  } else if (s[0] >= 0xe0 && s[0] <= 0xef) {
    n = 3, v = s[0] & 0x0fu;
    if (s[0] == 0xe0)
      lo = 0xa0; /* overlong below */
    else if (s[0] == 0xed)
      hi = 0x9f; /* surrogates above */
  } else if (s[0] >= 0xf0 && s[0] <= 0xf4) {
    n = 4, v = s[0] & 0x07u;
    if (s[0] == 0xf0)
      lo = 0x90;
    else if (s[0] == 0xf4)
      hi = 0x8f; /* past U+10FFFF above */
  } else {
    *bad = 1;
    return 0;
  }
  for (size_t i = 1; i < n; i++, lo = 0x80, hi = 0xbf) {
    if (s[i] < lo || s[i] > hi) {
      *bad = i;
      return 0;
    }
    v = v << 6 | (s[i] & 0x3fu);
  }
  *cp = v;
  return n;
}

/* Valid, printable by most definitions, and still escaped everywhere:
 * - C1 controls: terminals that honour them read U+009B as CSI, U+009D as OSC;
 * - bidi embeddings, overrides and isolates (U+202A-U+202E, U+2066-U+2069) and the
 *   marks U+200E, U+200F, U+061C: they reorder the text around them, so a row (a pid,
 *   the next column) can read as something it is not;
 * - invisible characters with no place in a name, which hide text or make one name look
 *   like another: soft hyphen, U+180E, zero width space, U+2060-U+2064 and the
 *   deprecated format controls U+206A-U+206F, U+FEFF, the interlinear annotation
 *   controls U+FFF9-U+FFFB, and the tag characters U+E0000-U+E007F (invisible
 *   ASCII look-alikes used to smuggle text);
 * - the line and paragraph separators U+2028, U+2029, line breaks to some viewers.
 * ZWNJ and ZWJ (U+200C, U+200D) pass: Persian and the Indic scripts need them in
 * ordinary words and emoji sequences use them; look-alike names in general
 * (homoglyphs) are beyond what escaping can fix. */
static bool hostile_code_point(uint32_t cp)
{
  return (cp >= 0x80 && cp <= 0x9f) || cp == 0xad || cp == 0x61c || cp == 0x180e ||
         cp == 0x200b || cp == 0x200e || cp == 0x200f || (cp >= 0x2028 && cp <= 0x202e) ||
         (cp >= 0x2060 && cp <= 0x206f) || cp == 0xfeff || (cp >= 0xfff9 && cp <= 0xfffb) ||
         (cp >= 0xe0000 && cp <= 0xe007f);
}

/* s made safe for a terminal, then padded with spaces to pad columns; malloc'd.
 * Printable ASCII passes, backslash becomes \\, and every byte of a control character,
 * a hostile_code_point(), a code point the locale cannot print, or ill-formed UTF-8
 * becomes \xNN, so the original bytes can be read back exactly.  Other UTF-8 passes
 * only in a UTF-8 locale: anywhere else the terminal may not be UTF-8, where bytes
 * 0x80-0x9f inside valid sequences (U+011B is C4 9B) act as C1 controls, and wcwidth()
 * could not measure the columns, so there all non-ASCII is escaped. */
char *text_escape(const char *s, size_t pad)
{
  const unsigned char *p = (const unsigned char *)s;
  char *out = xalloc(malloc(4 * strlen(s) + pad + 1)), *o = out;
  size_t cols = 0;

  while (*p) {
    uint32_t cp;
    size_t bad, n = utf8_next(p, &cp, &bad);
    if (n == 1 && cp >= 0x20 && cp < 0x7f) {
      if (cp == '\\')
        *o++ = '\\', cols++;
      *o++ = (char)cp, cols++;
    } else if (n > 1 && utf8_locale && !hostile_code_point(cp) && wcwidth((wchar_t)cp) >= 0) {
      memcpy(o, p, n);
      o += n;
      cols += (size_t)wcwidth((wchar_t)cp);
    } else {
      n = n ? n : bad;
      for (size_t i = 0; i < n; i++, cols += 4)
        o += sprintf(o, "\\x%02x", p[i]);
    }
    p += n;
  }
  for (; cols < pad; cols++)
    *o++ = ' ';
  *o = '\0';
  return out;
}

/* The bytes of the longest prefix of text_escape()'s output e that fits in max columns,
 * never splitting an escape or a character; *cols gets its width. */
size_t text_span(const char *e, size_t max, size_t *cols)
{
  size_t at = 0, w = 0;

  while (e[at]) {
    size_t n = 1, cw = 1, bad;
    uint32_t cp;
    if (e[at] == '\\') {
      n = e[at + 1] == 'x' ? 4 : 2;
      cw = n;
    } else if ((unsigned char)e[at] >= 0x80) {
      int x;
      n = utf8_next((const unsigned char *)e + at, &cp, &bad);
      x = n ? wcwidth((wchar_t)cp) : -1;
      n = n ? n : 1; /* text_escape() let through only what wcwidth() measures */
      cw = x > 0 ? (size_t)x : 0;
    }
    if (w + cw > max)
      break;
    w += cw;
    at += n;
  }
  *cols = w;
  return at;
}

/* text_escape()d s for printf's %s.  It lives until eight more calls, plenty for a printf. */
const char *text(const char *s, size_t pad)
{
  static char *ring[8];
  static unsigned next;

  free(ring[next]);
  ring[next] = text_escape(s, pad);
  s = ring[next];
  next = (next + 1) % 8;
  return s;
}

/* s as a JSON string.  JSON is UTF-8 (RFC 8259), so each maximal ill-formed subpart
 * becomes U+FFFD: the same string Go's encoding/json, jq or Python's
 * bytes.decode("utf-8", "replace") make of those bytes, so consumers can match it.
 * U+DC80+byte (Python's surrogateescape) would be reversible, but lone surrogates are
 * rejected by strict parsers; Latin-1 (\u00NN) would pass off bytes as characters that
 * were never there.  Control characters and hostile_code_point()s are \u-escaped, which
 * a parser reads back unchanged, so --json in a terminal is as safe as the tables. */
void json_string(const char *s)
{
  const unsigned char *p = (const unsigned char *)s;

  putchar('"');
  while (*p) {
    uint32_t cp;
    size_t bad, n = utf8_next(p, &cp, &bad);
    if (!n) {
      fputs("\\ufffd", stdout);
      n = bad;
    } else if (cp == '"' || cp == '\\') {
      printf("\\%c", (char)cp);
    } else if (cp < 0x20 || cp == 0x7f || hostile_code_point(cp)) {
      if (cp < 0x10000)
        printf("\\u%04" PRIx32, cp);
      else /* as a surrogate pair */
        printf("\\u%04" PRIx32 "\\u%04" PRIx32, 0xd800 + ((cp - 0x10000) >> 10),
               0xdc00 + ((cp - 0x10000) & 0x3ff));
    } else {
      fwrite(p, 1, n, stdout);
    }
    p += n;
  }
  putchar('"');
}

/* s as a Prometheus label value, between its quotes.  The text format escapes only \\,
 * \" and \n and must be UTF-8; it has no escape for other controls, so those,
 * hostile_code_point()s and ill-formed UTF-8 become U+FFFD, as in json_string(). */
void prom_label(const char *s)
{
  const unsigned char *p = (const unsigned char *)s;

  while (*p) {
    uint32_t cp;
    size_t bad, n = utf8_next(p, &cp, &bad);
    bool valid = n > 0;
    if (!valid)
      n = bad;
    if (valid && (cp == '\\' || cp == '"'))
      printf("\\%c", (char)cp);
    else if (valid && cp == '\n')
      fputs("\\n", stdout);
    else if (!valid || cp < 0x20 || cp == 0x7f || hostile_code_point(cp))
      fputs("\xef\xbf\xbd", stdout);
    else
      fwrite(p, 1, n, stdout);
    p += n;
  }
}

