/* SPDX-License-Identifier: MIT */
/* gpushm_memory_info_match(), the one check the Vulkan and GL helpers and doctor share:
 * the same device, the same driver (by UUID, or by the NVIDIA version gpushmd's own
 * memory names), every refusal naming both sides; host memory anywhere.  And
 * gpushm_uuid_text(), the one way a UUID is written. */
#include "config.h"
#include "harness.h"
#include "gpushm-graphics.h"

#include <string.h>

int main(void)
{
  static const uint8_t dev_a[16] = { 0x11 }, dev_b[16] = { 0x22 }, drv_a[16] = { 0xaa },
                       drv_b[16] = { 0xbb }, zero[16];
  gpushm_memory_info_t info = { .size = sizeof info, .handle_type = GPUSHM_EXTERNAL_OPAQUE_FD };
  char why[300], text[GPUSHM_UUID_TEXT_SIZE];
  const uint8_t u[16] = { 0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef,
                          0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef };

  CHECK(strcmp(gpushm_uuid_text(u, text), "01234567-89ab-cdef-0123-456789abcdef") == 0);

  memcpy(info.device_uuid, dev_a, 16);
  memcpy(info.driver_uuid, drv_a, 16);
  snprintf(info.driver_info, sizeof info.driver_info, "Mesa 22.3.6");
  CHECK_OK(gpushm_memory_info_match(&info, dev_a, drv_a, "Mesa 22.3.6", why, sizeof why));
  /* another device: refused, both named */
  CHECK_ERR(gpushm_memory_info_match(&info, dev_b, drv_a, NULL, why, sizeof why),
            GPUSHM_E_UNSUPPORTED);
  CHECK(strstr(why, "11000000-0000") && strstr(why, "22000000-0000") &&
        strstr(gpushm_last_error_message(), "imports only on its own device"));
  /* another driver on the same device */
  CHECK_ERR(gpushm_memory_info_match(&info, dev_a, drv_b, "other", why, sizeof why),
            GPUSHM_E_UNSUPPORTED);
  CHECK(strstr(why, "aa000000-") && strstr(why, "bb000000-") && strstr(why, "other"));
  /* a driver that says no UUID (GL on some drivers): not held against it */
  CHECK_OK(gpushm_memory_info_match(&info, dev_a, zero, NULL, why, sizeof why));
  /* gpushmd's own memory: no driver UUID, the NVIDIA version instead, found in the text */
  memset(info.driver_uuid, 0, 16);
  snprintf(info.driver_info, sizeof info.driver_info, "580.159.04");
  CHECK_OK(gpushm_memory_info_match(&info, dev_a, drv_a, "4.6.0 NVIDIA 580.159.04", why,
                                    sizeof why));
  CHECK_ERR(gpushm_memory_info_match(&info, dev_a, drv_a, "4.6.0 NVIDIA 575.51.03", why,
                                     sizeof why), GPUSHM_E_UNSUPPORTED);
  CHECK(strstr(why, "580.159.04") && strstr(why, "575.51.03"));
  /* memory that names no device imports on any; host memory anywhere */
  memset(info.device_uuid, 0, 16);
  CHECK_OK(gpushm_memory_info_match(&info, dev_b, NULL, "580.159.04", NULL, 0));
  info.handle_type = GPUSHM_EXTERNAL_HOST_POINTER;
  CHECK_OK(gpushm_memory_info_match(&info, dev_b, drv_b, "x", why, sizeof why));
  CHECK_ERR(gpushm_memory_info_match(NULL, dev_b, NULL, NULL, why, sizeof why), GPUSHM_E_INVAL);
  test_log("device, driver UUID and NVIDIA version checked, each refusal naming both sides");
  return 0;
}
