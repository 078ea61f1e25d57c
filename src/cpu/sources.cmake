# Sources of the cpu backend (paths relative to src/).
set(GDN_CPU_SOURCES cpu/cpu_backend.cpp)
