/* SPDX-License-Identifier: MIT */
/* The facts of tests/unit/cuda-api-facts.h as the CUDA toolkit's own cuda.h states them
 * (compiled only where configure found the toolkit). */
#include <cuda.h>

#include "cuda-api-facts.h"

const struct cuda_api_fact cuda_api_toolkit_facts[] = { CUDA_API_FACTS };
const size_t cuda_api_toolkit_fact_count =
  sizeof cuda_api_toolkit_facts / sizeof cuda_api_toolkit_facts[0];
