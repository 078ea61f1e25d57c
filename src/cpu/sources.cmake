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
  cpu/paced_prefetch.cpp
  cpu/chunk_backward.cpp
  cpu/backward_steps.cpp
  cpu/backward_schedule.cpp
  cpu/gemm.cpp
  cpu/gemm_profile.cpp
  cpu/gemm_bf16.cpp
  cpu/gemm_bf16_generic.cpp
  cpu/typed_rows.cpp)
# No code here reads floating-point exception flags. Without this, GCC keeps every loop with a
# comparison-select (clamps, NaN tests, min/max) scalar inside target_clones functions: under
# trapping math it will not if-convert them for a target chosen per function.
set_property(SOURCE ${GDN_CPU_SOURCES} APPEND PROPERTY COMPILE_OPTIONS -fno-trapping-math)
if(GDN_GEMM_PROFILE)  # gemm() times its calls (cpu/gemm_profile.h)
  set_property(SOURCE cpu/gemm.cpp APPEND PROPERTY COMPILE_DEFINITIONS GDN_GEMM_PROFILE)
endif()
if(CMAKE_SYSTEM_PROCESSOR MATCHES "x86_64|AMD64|amd64")
  list(APPEND GDN_CPU_SOURCES cpu/gemm_sse2.cpp cpu/gemm_avx2.cpp cpu/gemm_avx512.cpp cpu/typed_rows_x86.cpp)
  set_source_files_properties(cpu/gemm_avx2.cpp PROPERTIES COMPILE_OPTIONS "-mavx2;-mfma")
  set_source_files_properties(cpu/gemm_avx512.cpp PROPERTIES COMPILE_OPTIONS "-mavx512f;-mavx512vl;-mfma")
  # The bf16 GEMM kernels (cpu/gemm_bf16.cpp chooses among them from CPUID), where the compiler
  # knows the instructions (GCC 10 / Clang 9 for AVX512_BF16, GCC 11 / Clang 12 for AMX).
  include(CheckCXXCompilerFlag)
  check_cxx_compiler_flag("-mavx512bf16" GDN_COMPILER_AVX512BF16)
  check_cxx_compiler_flag("-mamx-bf16" GDN_COMPILER_AMX_BF16)
  set(GDN_BF16_AVX512_FLAGS "-mavx512f;-mavx512vl;-mavx512bw;-mavx512bf16;-mfma")
  if(GDN_COMPILER_AVX512BF16)
    list(APPEND GDN_CPU_SOURCES cpu/gemm_bf16_avx512.cpp)
    set_source_files_properties(cpu/gemm_bf16_avx512.cpp PROPERTIES COMPILE_OPTIONS "${GDN_BF16_AVX512_FLAGS}")
    set_property(SOURCE cpu/gemm_bf16.cpp APPEND PROPERTY COMPILE_DEFINITIONS GDN_BF16_AVX512)
  endif()
  if(GDN_COMPILER_AMX_BF16)
    list(APPEND GDN_CPU_SOURCES cpu/gemm_bf16_amx.cpp)
    set_source_files_properties(cpu/gemm_bf16_amx.cpp PROPERTIES COMPILE_OPTIONS
                                "${GDN_BF16_AVX512_FLAGS};-mamx-tile;-mamx-bf16")
    set_property(SOURCE cpu/gemm_bf16.cpp APPEND PROPERTY COMPILE_DEFINITIONS GDN_BF16_AMX)
  endif()
elseif(CMAKE_SYSTEM_PROCESSOR MATCHES "aarch64|arm64|ARM64")
  list(APPEND GDN_CPU_SOURCES cpu/gemm_neon.cpp cpu/gemm_generic.cpp)
else()
  list(APPEND GDN_CPU_SOURCES cpu/gemm_generic.cpp)
endif()
