"""Stage 2, correlate: GPU work to its API call to its NVTX range and op, and what names mean."""
