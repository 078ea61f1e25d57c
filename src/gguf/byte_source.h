// Where the GGUF reader takes its bytes from: a file (read through a small stdio buffer, skipped
// over with seeks) or a block of memory (tests, fuzzing). Both know their total size, so the reader
// can check every length against the bytes left before it reads or allocates anything.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

namespace gdn::gguf {

class ByteSource {
public:
    virtual ~ByteSource() = default;
    uint64_t size() const { return size_; }
    uint64_t offset() const { return offset_; }
    uint64_t remaining() const { return size_ - offset_; }

    // Both return false when fewer than n bytes are left or the underlying read fails; the caller
    // checks `remaining()` first to say which, so these are the last line of defence.
    bool read(void *dst, uint64_t n);
    bool skip(uint64_t n);

protected:
    virtual bool read_raw(void *dst, uint64_t n) = 0;
    virtual bool skip_raw(uint64_t n) = 0;
    uint64_t size_ = 0;
    uint64_t offset_ = 0;
};

class FileSource final : public ByteSource {
public:
    ~FileSource() override;
    // Opens a regular file for reading; on failure returns false with a message in `error`.
    bool open(const std::string &path, std::string &error);

private:
    bool read_raw(void *dst, uint64_t n) override;
    bool skip_raw(uint64_t n) override;
    std::FILE *file_ = nullptr;
};

class MemorySource final : public ByteSource {
public:
    MemorySource(const void *data, uint64_t size);

private:
    bool read_raw(void *dst, uint64_t n) override;
    bool skip_raw(uint64_t n) override;
    const unsigned char *data_;
};

}  // namespace gdn::gguf
