/* SPDX-License-Identifier: MIT */
/* gpushmctl's number formatting: what snprintf would print, without its format parsing
 * or its floating point (a 100k-row listing formats some 500k numbers, and snprintf
 * was a quarter of its time).  Each writes into buf and returns it. */
#ifndef GPUSHMCTL_FORMAT_H
#define GPUSHMCTL_FORMAT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* "%" PRIu64; buf has 21 bytes. */
const char *format_decimal(uint64_t v, char *buf);

/* "%04o"; buf has 12 bytes. */
const char *format_mode(uint32_t mode, char *buf);

/* Bytes in binary units, "1.5 MiB", "12 KiB", "512 B" (exact: the byte count alone),
 * rounded as printf's "%.1f"/"%.0f" round the quotient (to nearest, ties to even). */
const char *format_size(uint64_t bytes, bool exact, char *buf, size_t len);

/* An age as "42s", "5m", "3h07m" or "2d04h". */
const char *format_age(uint64_t ms, char *buf, size_t len);

/* GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx, as nvidia-smi, CUDA_VISIBLE_DEVICES and
 * NVIDIA's DCGM exporter spell it (MIG- for a MIG instance), so that gpushm's metrics
 * join theirs on it. */
#define CTL_UUID_TEXT_LEN 41
const char *ctl_uuid_text(const uint8_t u[16], bool mig, char *buf, size_t len);
/* A MIG instance, by the name the driver gives it. */
bool ctl_is_mig(const char *device_name);

#endif
