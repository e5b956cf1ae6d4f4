/* SPDX-License-Identifier: MIT */
/* cuda/cuda_api.h, gpushm's own declaration of the CUDA driver API it uses, against the
 * toolkit's cuda.h: every size, field offset and constant must agree.  Where no toolkit
 * is installed there is nothing to compare with: exit 77, saying so. */
#include "config.h"
#include "cuda_api.h"
#include "harness.h"

#include "cuda-api-facts.h"

#include <string.h>

static const struct cuda_api_fact ours[] = { CUDA_API_FACTS };

int main(void)
{
#ifndef HAVE_CUDA_TOOLKIT_FACTS
  fprintf(stderr, "# no CUDA toolkit headers here (configure looks for nvcc's include/cuda.h): "
          "nothing to compare the %zu facts of cuda/cuda_api.h with\n", sizeof ours / sizeof ours[0]);
  return TEST_SKIP;
#else
  size_t n = sizeof ours / sizeof ours[0], wrong = 0;

  CHECK(cuda_api_toolkit_fact_count == n);
  for (size_t i = 0; i < n; i++) {
    CHECK(strcmp(ours[i].what, cuda_api_toolkit_facts[i].what) == 0);
    if (ours[i].value != cuda_api_toolkit_facts[i].value) {
      fprintf(stderr, "%s: cuda_api.h says %lld, the toolkit's cuda.h %lld\n", ours[i].what,
              ours[i].value, cuda_api_toolkit_facts[i].value);
      wrong++;
    }
  }
  CHECK(wrong == 0);
  fprintf(stderr, "# %zu sizes, offsets and constants of cuda/cuda_api.h match the toolkit's "
          "cuda.h\n", n);
  return 0;
#endif
}
