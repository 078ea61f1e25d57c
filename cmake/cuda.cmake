# Decides whether the CUDA backend is built (GDN_CUDA = AUTO | ON | OFF) and sets
# GDN_WITH_CUDA. Architectures: CMAKE_CUDA_ARCHITECTURES (e.g. -DCMAKE_CUDA_ARCHITECTURES=90),
# by default every one of Ampere (80, 86), Ada (89), Hopper (90) and Blackwell consumer (120)
# that the toolkit knows.
set(GDN_WITH_CUDA OFF)
set(GDN_CUDA_WHY "GDN_CUDA=OFF")  # why it is not built, for the summary
if(NOT GDN_CUDA STREQUAL "OFF")
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    # cudaLaunchKernelEx and sm_90 came with CUDA 11.8; checked before enable_language, which an
    # older nvcc could fail on the default architectures.
    execute_process(COMMAND ${CMAKE_CUDA_COMPILER} --version OUTPUT_VARIABLE _gdn_nvcc_banner ERROR_QUIET)
    string(REGEX MATCH "release ([0-9]+\\.[0-9]+)" _gdn_nvcc_match "${_gdn_nvcc_banner}")
    if(CMAKE_MATCH_1 AND CMAKE_MATCH_1 VERSION_LESS 11.8)
      if(GDN_CUDA STREQUAL "ON")
        message(FATAL_ERROR "GDN_CUDA=ON needs CUDA 11.8 or newer; nvcc is ${CMAKE_MATCH_1}")
      endif()
      set(GDN_CUDA_WHY "nvcc ${CMAKE_MATCH_1} is older than 11.8")
      message(STATUS "gdn: CUDA backend OFF (${GDN_CUDA_WHY})")
      return()
    endif()
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      execute_process(COMMAND ${CMAKE_CUDA_COMPILER} --list-gpu-arch OUTPUT_VARIABLE _gdn_arches ERROR_QUIET)
      set(_gdn_default_arches "")
      foreach(_arch 80 86 89 90 120)
        if(_gdn_arches MATCHES "compute_${_arch}")
          list(APPEND _gdn_default_arches ${_arch})
        endif()
      endforeach()
      if(NOT _gdn_default_arches)  # an nvcc too old to list its targets
        set(_gdn_default_arches 80 86 89 90)
      endif()
      set(CMAKE_CUDA_ARCHITECTURES ${_gdn_default_arches} CACHE STRING "CUDA architectures of the cuda backend")
    endif()
    enable_language(CUDA)
    set(CMAKE_CUDA_STANDARD 17)
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    # -lineinfo: compute-sanitizer and ncu report source lines; no cost in the generated code.
    # -Xcompiler=-fvisibility=hidden: as the C++ sources, only the C API leaves libgdn.
    string(APPEND CMAKE_CUDA_FLAGS " -lineinfo -Xcompiler=-fvisibility=hidden")
    # At the top level so that CUDA::cudart_static is visible to every directory (tests too).
    find_package(CUDAToolkit REQUIRED)
    set(GDN_WITH_CUDA ON)
    message(STATUS "gdn: CUDA backend ON, architectures ${CMAKE_CUDA_ARCHITECTURES}")
  elseif(GDN_CUDA STREQUAL "ON")
    message(FATAL_ERROR "GDN_CUDA=ON but no CUDA compiler was found")
  else()
    set(GDN_CUDA_WHY "no nvcc found")
    message(STATUS "gdn: CUDA backend OFF (no nvcc found)")
  endif()
endif()
