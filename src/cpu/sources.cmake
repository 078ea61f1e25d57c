# Sources of the cpu backend (paths relative to src/). The GEMM kernel is built once per ISA
# with its own flags and chosen at run time (cpu/gemm.cpp), so one binary runs on any host of its
# target: on x86-64 it uses AVX-512 or AVX2 where present (SSE2 otherwise), on AArch64 NEON;
# other targets get the portable build.
set(GDN_CPU_SOURCES
  cpu/cpu_backend.cpp
  cpu/thread_pool.cpp
  cpu/chunk_plan.cpp
  cpu/chunk_core.cpp
  cpu/state_io.cpp
  cpu/chunk_vector.cpp
  cpu/token_forward.cpp
  cpu/token_block.cpp
  cpu/token_rows.cpp
  cpu/chunk_forward.cpp
  cpu/chunk_backward.cpp
  cpu/backward_steps.cpp
  cpu/backward_schedule.cpp
  cpu/gemm.cpp
  cpu/typed_rows.cpp)
# No code here reads floating-point exception flags. Without this, GCC keeps every loop with a
# comparison-select (clamps, NaN tests, min/max) scalar inside target_clones functions: under
# trapping math it will not if-convert them for a target chosen per function.
set_property(SOURCE ${GDN_CPU_SOURCES} APPEND PROPERTY COMPILE_OPTIONS -fno-trapping-math)
if(CMAKE_SYSTEM_PROCESSOR MATCHES "x86_64|AMD64|amd64")
  list(APPEND GDN_CPU_SOURCES cpu/gemm_sse2.cpp cpu/gemm_avx2.cpp cpu/gemm_avx512.cpp cpu/typed_rows_x86.cpp)
  set_source_files_properties(cpu/gemm_avx2.cpp PROPERTIES COMPILE_OPTIONS "-mavx2;-mfma")
  set_source_files_properties(cpu/gemm_avx512.cpp PROPERTIES COMPILE_OPTIONS "-mavx512f;-mavx512vl;-mfma")
elseif(CMAKE_SYSTEM_PROCESSOR MATCHES "aarch64|arm64|ARM64")
  list(APPEND GDN_CPU_SOURCES cpu/gemm_neon.cpp cpu/gemm_generic.cpp)
else()
  list(APPEND GDN_CPU_SOURCES cpu/gemm_generic.cpp)
endif()
