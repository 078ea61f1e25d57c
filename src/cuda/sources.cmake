# Sources of the cuda backend (paths relative to src/), compiled when GDN_WITH_CUDA.
# cmake/cuda.cmake has already enabled CUDA and found the toolkit (CUDA::cudart_static).
set(GDN_CUDA_SOURCES
  cuda/cuda_backend.cu
  cuda/workspace.cu
  cuda/token_forward.cu
  cuda/chunk_forward.cu
  cuda/token_backward.cu
  cuda/chunk_backward.cu
  cuda/state_copy.cu)
