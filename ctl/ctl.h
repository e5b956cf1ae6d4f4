/* gpushmctl's modules: the command table and output helpers (gpushmctl.c), doctor
 * (doctor.c).  All of it on the public libgpushm API only. */
#ifndef GPUSHMCTL_CTL_H
#define GPUSHMCTL_CTL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define EXIT_FAILED 1
#define EXIT_USAGE 2

/* s made safe for a terminal (escapes, see gpushmctl.c), padded to pad columns; lives
 * until eight more calls. */
const char *ctl_text(const char *s, size_t pad);

/* GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx, as nvidia-smi, CUDA_VISIBLE_DEVICES and
 * NVIDIA's DCGM exporter spell it (MIG- for a MIG instance), so that gpushm's metrics
 * join theirs on it. */
#define CTL_UUID_TEXT_LEN 41
const char *ctl_uuid_text(const uint8_t u[16], bool mig, char *buf, size_t len);
/* A MIG instance, by the name the driver gives it. */
bool ctl_is_mig(const char *device_name);

/* gpushmctl doctor: which backends work for this process against the daemon at
 * socket (NULL: $GPUSHM_SOCKET or the default) and why the others do not.  backend
 * (a gpushm_backend_t; 0: the daemon's default) is the one the exit status is about:
 * 0 it works here, EXIT_FAILED it does not or gpushmd cannot be reached. */
int ctl_doctor(const char *socket, uint32_t backend);

#endif
