# Sources of the cpu backend (paths relative to src/). The GEMM kernel is built once per ISA
# with its own flags and chosen at run time (cpu/gemm.cpp), so one binary runs on any x86-64 host
# and uses AVX-512 or AVX2 where present.
set(GDN_CPU_SOURCES
  cpu/cpu_backend.cpp
  cpu/thread_pool.cpp
  cpu/chunk_plan.cpp
  cpu/chunk_core.cpp
  cpu/chunk_vector.cpp
  cpu/token_forward.cpp
  cpu/chunk_forward.cpp
  cpu/chunk_backward.cpp
  cpu/gemm.cpp
  cpu/gemm_sse2.cpp)
if(CMAKE_SYSTEM_PROCESSOR MATCHES "x86_64|AMD64|amd64")
  list(APPEND GDN_CPU_SOURCES cpu/gemm_avx2.cpp cpu/gemm_avx512.cpp)
  set_source_files_properties(cpu/gemm_avx2.cpp PROPERTIES COMPILE_OPTIONS "-mavx2;-mfma")
  set_source_files_properties(cpu/gemm_avx512.cpp PROPERTIES COMPILE_OPTIONS "-mavx512f;-mavx512vl;-mfma")
endif()
