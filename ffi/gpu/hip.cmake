# ROCm handler: placeholder until the HIP kernels land (issue: GPU kernels).
