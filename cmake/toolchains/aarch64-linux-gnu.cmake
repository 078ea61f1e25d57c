# Cross build for 64-bit Arm Linux with Debian's cross compiler (g++-aarch64-linux-gnu), whose
# target libraries live in /usr/aarch64-linux-gnu. Tests run under qemu-user: CTest and
# gtest_discover_tests prefix every target executable with CMAKE_CROSSCOMPILING_EMULATOR.
#   cmake -S . -B build-aarch64 --toolchain cmake/toolchains/aarch64-linux-gnu.cmake ...
# scripts/test-aarch64.sh does all of it (packages, GoogleTest for the target, the tests).
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)

set(GDN_AARCH64_TRIPLE aarch64-linux-gnu)
set(CMAKE_C_COMPILER ${GDN_AARCH64_TRIPLE}-gcc)
set(CMAKE_CXX_COMPILER ${GDN_AARCH64_TRIPLE}-g++)

# Headers, libraries and CMake packages come from the target's tree only (a package built for the
# target elsewhere is given by its <Package>_DIR, e.g. -DGTest_DIR=...), programs from the build
# machine: nothing of the host's x86-64 packages can be picked up.
set(CMAKE_FIND_ROOT_PATH /usr/${GDN_AARCH64_TRIPLE})
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)

# qemu-user runs the target's programs; -L points its loader at the target's libc and libstdc++.
find_program(GDN_QEMU_AARCH64 NAMES qemu-aarch64 qemu-aarch64-static)
if(GDN_QEMU_AARCH64)
  set(CMAKE_CROSSCOMPILING_EMULATOR ${GDN_QEMU_AARCH64} -L /usr/${GDN_AARCH64_TRIPLE})
endif()
