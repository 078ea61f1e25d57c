// gdn_version(): the header's macros, the number they pack into, and CMake's project version
// (read from the same macros) agree.
#include <gtest/gtest.h>

#include <string>

#include "gdn/gdn.h"

TEST(Version, StringIsTheHeadersMacrosAndTheProjectVersion) {
    const std::string expected = std::to_string(GDN_VERSION_MAJOR) + "." + std::to_string(GDN_VERSION_MINOR) + "." +
                                 std::to_string(GDN_VERSION_PATCH);
    EXPECT_EQ(gdn_version(), expected);
    EXPECT_EQ(gdn_version(), std::string(GDN_PROJECT_VERSION));
}

TEST(Version, NumberPacksMajorMinorPatch) {
    EXPECT_EQ(gdn_version_number(), GDN_VERSION_NUMBER);
    EXPECT_EQ(gdn_version_number(), GDN_VERSION_MAJOR * 10000 + GDN_VERSION_MINOR * 100 + GDN_VERSION_PATCH);
    EXPECT_LT(GDN_VERSION_MINOR, 100);  // the packing keeps two digits for minor and patch
    EXPECT_LT(GDN_VERSION_PATCH, 100);
}
