# Sources of the cuda backend (paths relative to src/), compiled when GDN_WITH_CUDA.
set(GDN_CUDA_SOURCES cuda/cuda_absent.cpp)
find_package(CUDAToolkit REQUIRED)
