/* gpushmctl's modules: the command table and output helpers (gpushmctl.c), doctor
 * (doctor.c).  All of it on the public libgpushm API only. */
#ifndef GPUSHMCTL_CTL_H
#define GPUSHMCTL_CTL_H

#include <stddef.h>
#include <stdint.h>

#define EXIT_FAILED 1
#define EXIT_USAGE 2

/* s made safe for a terminal (escapes, see gpushmctl.c), padded to pad columns; lives
 * until eight more calls. */
const char *ctl_text(const char *s, size_t pad);

/* gpushmctl doctor: which backends work for this process against the daemon at
 * socket (NULL: $GPUSHM_SOCKET or the default) and why the others do not.  backend
 * (a gpushm_backend_t; 0: the daemon's default) is the one the exit status is about:
 * 0 it works here, EXIT_FAILED it does not or gpushmd cannot be reached. */
int ctl_doctor(const char *socket, uint32_t backend);

#endif
