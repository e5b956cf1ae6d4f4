/* SPDX-License-Identifier: MIT */
#include "config.h"
#include "dump.h"
#include "escape.h"
#include "fail.h"
#include "gpushm-graphics.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "driver.h"

/* Bytes go out a chunk at a time: a device buffer of many GiB is copied to host in
 * pieces, and a chunk is a whole number of hex lines, so only the last line of a dump
 * can be short. */
#define CHUNK (1u << 20)
#define LINE 16u

/* The CUDA driver, for copies out of device memory: the table libgpushm itself uses
 * (cuda/driver.h), loaded only when a device buffer is dumped.  The library imported the
 * memory into its map device's primary context, which is this process's too, so a copy
 * made current there reaches it, as any CUDA code of the application would. */
static struct cuda_driver drv;
static CUdevice attached = -1;

static int device_attach(gpushm_buffer_t *buf, char *err, size_t errlen)
{
  int ordinal = gpushm_buffer_map_device(buf);
  char why[160];
  CUcontext ctx;
  CUdevice dev;
  CUresult r;

  if (cuda_driver_load(&drv, err, errlen) < 0)
    return -1;
  if ((r = CU_CALL(&drv, cuInit, 0)) != CUDA_SUCCESS ||
      (r = CU_CALL(&drv, cuDeviceGet, &dev, ordinal)) != CUDA_SUCCESS ||
      (r = CU_CALL(&drv, cuDevicePrimaryCtxRetain, &ctx, dev)) != CUDA_SUCCESS) {
    snprintf(err, errlen, "device %d: %s", ordinal, cuda_error_text(&drv, r, why, sizeof why));
    return -1;
  }
  attached = dev;
  if ((r = CU_CALL(&drv, cuCtxSetCurrent, ctx)) != CUDA_SUCCESS) {
    snprintf(err, errlen, "device %d: %s", ordinal, cuda_error_text(&drv, r, why, sizeof why));
    return -1;
  }
  return 0;
}

static void device_detach(void)
{
  if (attached >= 0)
    CU_CALL(&drv, cuDevicePrimaryCtxRelease, attached);
  attached = -1;
}

/* The hex layout is xxd -a's, byte for byte, so that what people compare dumps with
 * compares equal: offsets of the buffer, 16 bytes a line in groups of two, printable
 * ASCII beside them; a run of all-zero lines (a fresh GPU buffer is mostly that) keeps
 * its first line and, where the dump ends in it, its last; one line between is shown as
 * itself, more as a single '*'. */
struct hex {
  uint64_t run_start; /* offset of the first line of the current all-zero run */
  uint64_t run;       /* its lines so far */
};

static void hex_line(uint64_t offset, const uint8_t *p, size_t n)
{
  static const char digits[] = "0123456789abcdef";
  char hex[40], ascii[LINE + 1];

  memset(hex, ' ', sizeof hex);
  for (size_t i = 0; i < n; i++) {
    size_t at = i / 2 * 5 + i % 2 * 2;
    hex[at] = digits[p[i] >> 4];
    hex[at + 1] = digits[p[i] & 15];
    ascii[i] = p[i] >= 0x20 && p[i] < 0x7f ? (char)p[i] : '.';
  }
  ascii[n] = '\0';
  printf("%08" PRIx64 ": %.40s %s\n", offset, hex, ascii);
}

static void hex_zero_line(uint64_t offset)
{
  static const uint8_t zeros[LINE];
  hex_line(offset, zeros, LINE);
}

/* The run's lines after its first, before a line that is not all zeros. */
static void hex_end_run(struct hex *h)
{
  if (h->run == 2)
    hex_zero_line(h->run_start + LINE);
  else if (h->run > 2)
    printf("*\n");
  h->run = 0;
}

static void hex_feed(struct hex *h, uint64_t offset, const uint8_t *p, size_t n)
{
  bool zero = n == LINE;

  for (size_t i = 0; zero && i < n; i++)
    zero = !p[i];
  if (!zero) {
    hex_end_run(h);
    hex_line(offset, p, n);
  } else if (h->run++ == 0) {
    h->run_start = offset;
    hex_line(offset, p, n);
  }
}

/* At the end of the dump, a run it ends in shows its last line. */
static void hex_finish(struct hex *h)
{
  if (h->run < 2)
    return;
  if (h->run == 3)
    hex_zero_line(h->run_start + LINE);
  else if (h->run > 3)
    printf("*\n");
  hex_zero_line(h->run_start + (h->run - 1) * LINE);
  h->run = 0;
}

/* What dump cannot show, known from the listing before anything is opened: NULL if it
 * can. */
static const char *refusal(const gpushm_buffer_info_t *info)
{
  gpushm_image_desc_t d;

  if (!info)
    return NULL;
  if (gpushm_buffer_info_kind(info) == GPUSHM_KIND_EVENT)
    return "is an event, which holds no memory to dump";
  if (gpushm_buffer_info_image(info, &d) == 0 && d.tiling != GPUSHM_TILING_LINEAR)
    return "is an optimal-tiling image, laid out as the GPU driver chooses: its bytes have "
           "no order to show (dump reads buffers and linear images)";
  return NULL;
}

static int dump_range(gpushm_buffer_t *buf, const struct dump_request *req, uint64_t offset,
                      uint64_t length)
{
  const bool host = gpushm_buffer_backend(buf) == GPUSHM_BACKEND_HOST;
  const char *base = gpushm_buffer_ptr(buf);
  struct hex h = { 0 };
  uint8_t *chunk = NULL;
  char err[256], why[160];
  CUresult r;

  if (!base) {
    fprintf(stderr, "gpushmctl: dump: '%s' is not mapped in this process\n",
            text(gpushm_buffer_name(buf), 0));
    return EXIT_FAILED;
  }
  if (!host && length) {
    if (device_attach(buf, err, sizeof err) < 0) {
      fprintf(stderr, "gpushmctl: dump: no copy out of device memory: %s\n", text(err, 0));
      return EXIT_FAILED;
    }
    chunk = xalloc(malloc(CHUNK));
  }
  for (uint64_t done = 0; done < length;) {
    size_t n = length - done < CHUNK ? (size_t)(length - done) : CHUNK;
    const uint8_t *p = (const uint8_t *)base + offset + done;
    if (!host) {
      if ((r = CU_CALL(&drv, cuMemcpyDtoH, chunk, (CUdeviceptr)(uintptr_t)p, n)) != CUDA_SUCCESS) {
        fprintf(stderr, "gpushmctl: dump: copying bytes %" PRIu64 "-%" PRIu64 " of '%s' to "
                "host memory: %s\n", offset + done, offset + done + n - 1,
                text(gpushm_buffer_name(buf), 0), cuda_error_text(&drv, r, why, sizeof why));
        free(chunk);
        return EXIT_FAILED;
      }
      p = chunk;
    }
    if (req->raw)
      fwrite(p, 1, n, stdout);
    else
      for (size_t i = 0; i < n; i += LINE)
        hex_feed(&h, offset + done + i, p + i, n - i < LINE ? n - i : LINE);
    /* a closed pipe or a full disk: the rest would go nowhere (the exit says why) */
    if (ferror(stdout))
      break;
    done += n;
  }
  if (!req->raw)
    hex_finish(&h);
  free(chunk);
  return 0;
}

int ctl_dump(gpushm_t *conn, const gpushm_buffer_info_t *info, const struct dump_request *req)
{
  const char *no = refusal(info);
  gpushm_open_opts_t opts;
  gpushm_buffer_t *buf;
  uint64_t size, length;
  int r;

  if (no) {
    fprintf(stderr, "gpushmctl: dump: '%s' %s\n", text(gpushm_buffer_info_name(info), 0), no);
    return EXIT_FAILED;
  }
  /* Read-only, through the daemon: the buffer's mode decides, as for any reader. */
  gpushm_open_opts_init(&opts);
  opts.flags = GPUSHM_OPEN_READONLY;
  if ((r = gpushm_buffer_open_ex(conn, req->by_id ? NULL : req->arg, req->by_id ? req->id : 0,
                                 &opts, &buf)) < 0)
    return ctl_fail("dump", r);
  size = gpushm_buffer_size(buf);
  length = req->has_length ? req->length : size - (req->offset < size ? req->offset : size);
  if (req->offset > size) {
    fprintf(stderr, "gpushmctl: dump: offset %" PRIu64 " is past the end of '%s' (%" PRIu64
            " bytes)\n", req->offset, text(gpushm_buffer_name(buf), 0), size);
    r = EXIT_FAILED;
  } else if (length > size - req->offset) {
    fprintf(stderr, "gpushmctl: dump: %" PRIu64 " bytes from offset %" PRIu64 " run past the "
            "end of '%s' (%" PRIu64 " bytes: at most %" PRIu64 " from there)\n", length,
            req->offset, text(gpushm_buffer_name(buf), 0), size, size - req->offset);
    r = EXIT_FAILED;
  } else {
    r = dump_range(buf, req, req->offset, length);
  }
  gpushm_buffer_close(buf);
  device_detach();
  return r;
}
