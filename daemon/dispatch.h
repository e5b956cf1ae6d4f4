#ifndef GPUSHMD_DISPATCH_H
#define GPUSHMD_DISPATCH_H

#include "gpushm.pb-c.h"

struct conn;

/* Handles one decoded request and sends its reply (or ends the client). */
void dispatch_request(struct conn *c, const Gpushm__Request *req);

#endif
