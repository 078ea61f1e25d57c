// Temporary files for the GGUF tests: one per test, removed when the test ends.
#pragma once

#include <gtest/gtest.h>

#include <unistd.h>

#include <cctype>
#include <filesystem>
#include <string>
#include <vector>

#include "gguf_writer.h"

namespace gdn::gguf::testing {

class TempFile {
public:
    explicit TempFile(const std::string &suffix = ".gguf") {
        const auto *info = ::testing::UnitTest::GetInstance()->current_test_info();
        std::string stem = std::string(info->test_suite_name()) + "_" + info->name();
        for (char &c : stem)
            if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
        path_ = (std::filesystem::temp_directory_path() / ("gdn_" + stem + "_" + std::to_string(::getpid()) + suffix))
                    .string();
    }
    ~TempFile() {
        std::error_code ec;
        std::filesystem::remove(path_, ec);
    }
    const std::string &path() const { return path_; }
    void write(const std::vector<uint8_t> &bytes) const { ASSERT_TRUE(GgufWriter::write_bytes(path_, bytes)); }

private:
    std::string path_;
};

}  // namespace gdn::gguf::testing
