#include "gguf/byte_source.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>
#include <system_error>

namespace gdn::gguf {

bool ByteSource::read(void *dst, uint64_t n) {
    if (n > remaining() || !read_raw(dst, n)) return false;
    offset_ += n;
    return true;
}

bool ByteSource::skip(uint64_t n) {
    if (n > remaining() || !skip_raw(n)) return false;
    offset_ += n;
    return true;
}

FileSource::~FileSource() {
    if (file_) std::fclose(file_);
}

bool FileSource::open(const std::string &path, std::string &error) {
    std::error_code ec;
    const auto status = std::filesystem::status(path, ec);
    if (ec || !std::filesystem::exists(status)) {
        error = path + ": no such file";
        return false;
    }
    if (!std::filesystem::is_regular_file(status)) {
        error = path + ": not a regular file";
        return false;
    }
    const uintmax_t file_size = std::filesystem::file_size(path, ec);
    if (ec) {
        error = path + ": cannot read its size: " + ec.message();
        return false;
    }
    file_ = std::fopen(path.c_str(), "rb");
    if (!file_) {
        error = path + ": cannot open: " + std::strerror(errno);
        return false;
    }
    size_ = static_cast<uint64_t>(file_size);
    offset_ = 0;
    return true;
}

bool FileSource::read_raw(void *dst, uint64_t n) {
    return n == 0 || std::fread(dst, 1, static_cast<size_t>(n), file_) == n;
}

bool FileSource::skip_raw(uint64_t n) {
    // Short skips (the strings of a tokenizer's vocabulary, a quarter of a million of them) are
    // read through the stdio buffer: a seek each would cost a system call each.
    constexpr uint64_t kReadThrough = 4096;
    if (n <= kReadThrough) {
        char scratch[kReadThrough];
        return n == 0 || std::fread(scratch, 1, static_cast<size_t>(n), file_) == n;
    }
    // The caller checked n <= remaining() <= file size, and off_t is 64-bit on the platforms we
    // build for, so n fits; a seek past a concurrently truncated end shows up at the next read.
    if (n > static_cast<uint64_t>(std::numeric_limits<off_t>::max())) return false;
    return fseeko(file_, static_cast<off_t>(n), SEEK_CUR) == 0;
}

MemorySource::MemorySource(const void *data, uint64_t size) : data_(static_cast<const unsigned char *>(data)) {
    size_ = data ? size : 0;
}

bool MemorySource::read_raw(void *dst, uint64_t n) {
    if (n) std::memcpy(dst, data_ + offset_, static_cast<size_t>(n));
    return true;
}

bool MemorySource::skip_raw(uint64_t) { return true; }

}  // namespace gdn::gguf
