#include "config.h"
#include "sync.h"
#include "gpushm.h"
#include "status_page.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

void sync_release(struct sync_state *s)
{
  if (s->event_backend)
    s->event_backend->release(s->event_backend, &s->event);
  backend_host.release(&backend_host, &s->control);
  s->event_backend = NULL;
}

int sync_alloc(struct sync_state *s, const struct backend *event_backend, int device,
               const char *label, char *err, size_t errlen)
{
  struct sync_control *ctl;
  uint64_t allocated;
  int r;

  memset(s, 0, sizeof *s);
  s->control.fd = s->event.fd = -1;
  r = backend_host.alloc(&backend_host, SYNC_CONTROL_SIZE, -1, label, &s->control, &allocated,
                         err, errlen);
  if (r < 0)
    return r;
  ctl = mmap(NULL, SYNC_CONTROL_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, s->control.fd, 0);
  if (ctl == MAP_FAILED) {
    snprintf(err, errlen, "mapping a control block: %s", strerror(errno));
    sync_release(s);
    return GPUSHM_E_IO;
  }
  ctl->magic = SYNC_CONTROL_MAGIC;
  munmap(ctl, SYNC_CONTROL_SIZE);
  if (!event_backend)
    return 0;
  r = event_backend->alloc(event_backend, 0, device, label, &s->event, &allocated, err, errlen);
  if (r < 0) {
    sync_release(s);
    return r;
  }
  s->event_backend = event_backend;
  return 0;
}

void sync_adopt(struct sync_state *s, const struct backend_mem *control)
{
  memset(s, 0, sizeof *s);
  s->control = *control;
  s->event.fd = -1;
}

int sync_export(struct sync_state *s, bool read_only, int *control_fd, uint8_t event_handle[64],
                size_t *event_handle_len, char *err, size_t errlen)
{
  struct backend_export event = { .fd = -1 };
  int r, fd;

  /* Whoever may write the buffer may publish releases of it; a read-only opener gets
   * a read-only description, so it can neither forge nor rewind the sequence. */
  if ((r = backend_host_export_fd(&s->control, read_only, &fd, err, errlen)) < 0)
    return r;
  *event_handle_len = 0;
  if (s->event_backend) {
    r = s->event_backend->export(s->event_backend, &s->event, false, &event, err, errlen);
    if (r < 0) {
      close(fd);
      return r;
    }
    memcpy(event_handle, event.handle, event.handle_len);
    *event_handle_len = event.handle_len;
  }
  *control_fd = fd;
  return 0;
}
