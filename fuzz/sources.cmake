# The fuzz targets' logic, shared by the libFuzzer binaries (fuzz/CMakeLists.txt) and the corpus
# replay test (tests/reliability). Paths relative to fuzz/.
set(GDN_FUZZ_API_SOURCES arena.cpp call.cpp spec_oracle.cpp api_target.cpp)
set(GDN_FUZZ_GGUF_SOURCES gguf_target.cpp)
