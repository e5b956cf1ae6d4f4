/* SPDX-License-Identifier: MIT */
/* gpushmctl doctor (doctor.c), on the public libgpushm API only. */
#ifndef GPUSHMCTL_DOCTOR_H
#define GPUSHMCTL_DOCTOR_H

#include <stdint.h>

/* gpushmctl doctor: which backends work for this process against the daemon at
 * socket (NULL: $GPUSHM_SOCKET or the default) and why the others do not.  backend
 * (a gpushm_backend_t; 0: the daemon's default) is the one the exit status is about:
 * 0 it works here, EXIT_FAILED it does not or gpushmd cannot be reached. */
int ctl_doctor(const char *socket, uint32_t backend);

#endif
